//! The backend traits: a [`Backend`] names the [`Memory`] it computes in, and implements
//! one trait per kernel family over views of that memory; [`Kernels`] is all of them.
//!
//! No family has default methods. A backend on host memory that does not accelerate a
//! family takes the reference kernels for it by saying so, family by family:
//! `inherit_reference!(MyBackend: Activation, Pool)` (an [`InheritReference`] impl each),
//! and writes out the families it accelerates. A device backend (its own [`Memory`])
//! cannot inherit host kernels, so a missing kernel is a compile error, never a silent
//! fall back to host code.

mod args;
mod families;
mod reference;

pub use crate::memory::{Host, Memory};
pub use args::{
    Affine, GradSums, GradsMut, NormAct, ParamUpdate, Running, Saved, SavedMut, TrainStats,
};
pub use families::{
    ActivationKernels, ConvKernels, DenseKernels, DropoutKernels, HalfKernels,
    Int8GradInputKernels, Int8Kernels, Int8LayerKernels, Int8TrainingKernels, LayerNormKernels,
    LossKernels, LossScaleKernels, NormKernels, OptimizerKernels, PointwiseKernels, PoolKernels,
    VectorKernels,
};

/// A backend: where its tensors live. Its kernels are the family traits.
pub trait Backend {
    type Memory: Memory;
}

/// A kernel input on backend `B`: a shared view of `T` values in `B`'s memory.
pub type In<'a, B, T> = <<B as Backend>::Memory as Memory>::Slice<'a, T>;
/// A kernel output on backend `B`: an exclusive view of `T` values in `B`'s memory.
pub type Out<'a, B, T> = <<B as Backend>::Memory as Memory>::SliceMut<'a, T>;

/// Declares [`Kernels`] as every family trait listed, implemented for every backend that
/// implements them all.
macro_rules! every_family {
    ($(#[$doc:meta])* $($family:ident),+ $(,)?) => {
        $(#[$doc])*
        pub trait Kernels: Backend $(+ $family)+ {}

        impl<B: Backend $(+ $family)+ + ?Sized> Kernels for B {}
    };
}

every_family! {
    /// Every kernel a plan calls: a backend implements each family (or inherits the
    /// reference kernels for it). Slices always have the lengths the kernel's signature
    /// states; backward kernels overwrite their outputs.
    DenseKernels,
    ConvKernels,
    VectorKernels,
    ActivationKernels,
    PointwiseKernels,
    PoolKernels,
    NormKernels,
    LayerNormKernels,
    DropoutKernels,
    LossKernels,
    OptimizerKernels,
    HalfKernels,
    LossScaleKernels,
    Int8Kernels,
    Int8LayerKernels,
    Int8GradInputKernels,
    Int8TrainingKernels,
}

/// The kernel families, as markers for [`InheritReference`].
pub mod family {
    /// [`DenseKernels`](super::DenseKernels).
    pub struct Dense;
    /// [`ConvKernels`](super::ConvKernels).
    pub struct Conv;
    /// [`VectorKernels`](super::VectorKernels).
    pub struct Vector;
    /// [`ActivationKernels`](super::ActivationKernels).
    pub struct Activation;
    /// [`PointwiseKernels`](super::PointwiseKernels).
    pub struct Pointwise;
    /// [`PoolKernels`](super::PoolKernels).
    pub struct Pool;
    /// [`NormKernels`](super::NormKernels).
    pub struct Norm;
    /// [`LayerNormKernels`](super::LayerNormKernels).
    pub struct LayerNorm;
    /// [`DropoutKernels`](super::DropoutKernels).
    pub struct Dropout;
    /// [`LossKernels`](super::LossKernels).
    pub struct Loss;
    /// [`OptimizerKernels`](super::OptimizerKernels).
    pub struct Optimizer;
    /// [`HalfKernels`](super::HalfKernels).
    pub struct Half;
    /// [`LossScaleKernels`](super::LossScaleKernels).
    pub struct LossScale;
    /// [`Int8Kernels`](super::Int8Kernels).
    pub struct Int8;
    /// [`Int8LayerKernels`](super::Int8LayerKernels).
    pub struct Int8Layer;
    /// [`Int8GradInputKernels`](super::Int8GradInputKernels).
    pub struct Int8GradInput;
    /// [`Int8TrainingKernels`](super::Int8TrainingKernels).
    pub struct Int8Training;
}

/// A host-memory backend's choice to run the reference kernels of family `F` (a marker of
/// [`family`]): the family's trait is then implemented by the reference kernels. Written
/// with [`inherit_reference!`](crate::inherit_reference).
pub trait InheritReference<F> {}

/// `inherit_reference!(Backend: Family, ...)`: the backend runs the reference kernels of
/// the named families ([`family`] markers).
#[macro_export]
macro_rules! inherit_reference {
    ($backend:ty: $($family:ident),+ $(,)?) => {
        $(impl $crate::backend::InheritReference<$crate::backend::family::$family> for $backend {})+
    };
}

/// The portable scalar backend: every kernel is the reference kernel. The oracle that other
/// backends are tested against.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

impl Backend for Reference {
    type Memory = Host;
}

inherit_reference!(Reference: Dense, Conv, Vector, Activation, Pointwise, Pool, Norm, LayerNorm, Dropout, Loss,
    Optimizer, Half, LossScale, Int8, Int8Layer, Int8GradInput, Int8Training);
