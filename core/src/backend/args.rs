//! Kernel arguments that travel together, as one struct each: batch norm's affine
//! parameters, statistics and gradient sums, and an optimizer update's parameter, gradient and step size.
//! Generic over [`Memory`], so a device backend receives device views.

use crate::memory::{Host, Memory};

/// Batch norm's learned scale and shift, one per channel.
#[derive(Clone, Copy, Debug)]
pub struct Affine<'a, M: Memory> {
    pub gamma: M::Slice<'a, f32>,
    pub beta: M::Slice<'a, f32>,
}

/// Running mean and variance, read (evaluation).
#[derive(Clone, Copy, Debug)]
pub struct Running<'a, M: Memory> {
    pub mean: M::Slice<'a, f32>,
    pub var: M::Slice<'a, f32>,
}

/// What follows a convolution in [`ConvKernels::conv2d_norm_act`](super::ConvKernels::conv2d_norm_act):
/// an evaluation-mode batch norm (its parameters, running statistics and settings), then a
/// rectifier if any.
#[derive(Clone, Copy)]
pub struct NormAct<'a, M: Memory> {
    pub p: Affine<'a, M>,
    pub running: Running<'a, M>,
    pub cfg: crate::hyperparams::BatchNormConfig,
    pub rectifier: Option<crate::reference::Rectifier>,
}

impl<'a> NormAct<'a, crate::memory::Host> {
    /// The batch norm as the reference kernels take it.
    pub fn frozen_norm(&self) -> crate::reference::FrozenNorm<'a> {
        let (p, running) = (self.p, self.running);
        let (gamma, beta, mean, var) = (p.gamma, p.beta, running.mean, running.var);
        crate::reference::FrozenNorm { gamma, beta, mean, var, cfg: self.cfg }
    }
}

/// What a training forward pass writes besides its output: the running mean and variance
/// it updates, and the batch mean and inverse standard deviation it saves for the backward
/// pass.
#[derive(Debug)]
pub struct TrainStats<'a, M: Memory> {
    pub running_mean: M::SliceMut<'a, f32>,
    pub running_var: M::SliceMut<'a, f32>,
    pub saved_mean: M::SliceMut<'a, f32>,
    pub saved_invstd: M::SliceMut<'a, f32>,
}

/// A training batch's mean and inverse standard deviation per channel, as the forward pass
/// saved them for the backward pass.
#[derive(Clone, Copy, Debug)]
pub struct Saved<'a, M: Memory> {
    pub mean: M::Slice<'a, f32>,
    pub invstd: M::Slice<'a, f32>,
}

/// A training batch norm's parameter gradients per channel, as `batch_norm_grad_params`
/// made them: `dgamma = Σ dy · x̂` and `dbeta = Σ dy`, the sums its input gradient needs.
#[derive(Clone, Copy, Debug)]
pub struct GradSums<'a, M: Memory> {
    pub dgamma: M::Slice<'a, f32>,
    pub dbeta: M::Slice<'a, f32>,
}

/// A training batch norm's parameter gradients per channel, written.
#[derive(Debug)]
pub struct GradsMut<'a, M: Memory> {
    pub dgamma: M::SliceMut<'a, f32>,
    pub dbeta: M::SliceMut<'a, f32>,
}

/// Where a forward pass saves the mean and inverse standard deviation it normalised with.
#[derive(Debug)]
pub struct SavedMut<'a, M: Memory> {
    pub mean: M::SliceMut<'a, f32>,
    pub invstd: M::SliceMut<'a, f32>,
}

/// One parameter's optimizer update: the parameter, its gradient, the gradient-clipping
/// factor (a one-value tensor; none when not clipped) and the learning rate.
#[derive(Debug)]
pub struct ParamUpdate<'a, M: Memory> {
    pub param: M::SliceMut<'a, f32>,
    pub grad: M::Slice<'a, f32>,
    pub clip_scale: Option<M::Slice<'a, f32>>,
    pub learning_rate: f32,
}

impl ParamUpdate<'_, Host> {
    /// The factor the gradient is scaled by: the clipping factor, or 1 when not clipped.
    pub fn grad_scale(&self) -> f32 {
        self.clip_scale.map_or(1.0, |s| s[0])
    }
}
