//! What a tensor is in a graph: its element type, what role it plays in training, and the
//! handle model code holds to it.

/// Element types. Compute kernels work on `F32`; `F16` is a storage type (weights and
/// activations converted by the cast kernels); the integer types carry labels and int8 data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DType {
    F32,
    F16,
    I8,
    I32,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 => 2,
            DType::I8 => 1,
        }
    }
}

/// A Rust type that stores one element of a [`DType`].
pub trait Element: bytemuck::Pod {
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

impl Element for i32 {
    const DTYPE: DType = DType::I32;
}

impl Element for i8 {
    const DTYPE: DType = DType::I8;
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}

/// The part a tensor plays. Roles decide where a tensor lives: frozen parameters in
/// read-only memory (flash), trainable state in its own region, the rest in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Role {
    /// Data fed by the caller each step.
    Input,
    /// Targets fed by the caller each step (class indices or regression targets).
    Label,
    /// A weight that never changes; it may live in flash.
    FrozenParam,
    /// A weight the optimizer updates.
    TrainableParam,
    /// Persistent non-parameter state, such as batch-norm running statistics.
    Buffer,
    /// An intermediate result of the forward pass.
    Activation,
    /// A gradient computed by the backward pass.
    Gradient,
    /// Optimizer memory (momentum, Adam moments) and gradient accumulators.
    OptimizerState,
    /// Short-lived working memory of one kernel (saved batch statistics, norms).
    Scratch,
}

impl Role {
    /// Whether the tensor persists across training steps (and so belongs to the state region).
    pub const fn is_state(self) -> bool {
        matches!(self, Role::TrainableParam | Role::Buffer | Role::OptimizerState)
    }
}

/// A handle to a tensor of one [`crate::graph::Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TensorId(pub u32);

impl TensorId {
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
