//! The operations a graph records: forward ops written by model code, backward ops appended
//! by [`crate::autograd`], and training plumbing (accumulation, clipping, optimizer updates).

use crate::geometry::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use core::fmt;
use core::ops::RangeInclusive;

/// Stride, padding and grouping of a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvParams {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub groups: usize,
}

/// A pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolParams {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub count_include_pad: bool,
}

/// One recorded operation. Operand order is fixed per op and documented on each variant:
/// `inputs → outputs`, with `[state]` for tensors the op reads and writes in place.
///
/// The variant order is part of the `.sprout` format (postcard writes the variant index):
/// add new ops at the end.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    // ---- forward ----
    /// `x[N,K], w[M,K], (b[M]) → y[N,M]`.
    Linear,
    /// `x[N,C,H,W], w[O,C/g,kh,kw], (b[O]) → y[N,O,H',W']`.
    Conv2d(ConvParams),
    /// `x → y`.
    Relu,
    /// `x → y`, clamped to `[0, 6]`.
    Relu6,
    /// `x → y`.
    MaxPool2d(PoolParams),
    /// `x → y`.
    AvgPool2d(PoolParams),
    /// `x[N,C,H,W] → y[N,C]`.
    GlobalAvgPool,
    /// `a, b → y` (same shapes; residual connections).
    Add,
    /// `x, gamma, beta, [running_mean, running_var] → y, saved_mean, saved_invstd`.
    /// Training uses batch statistics and updates the running ones; evaluation uses the running ones.
    BatchNorm2d(BatchNormConfig),
    /// `x, gamma, beta, saved_mean, saved_invstd → y`: training-mode normalisation with the
    /// statistics a forward pass saved (gradient checkpointing recomputes with it).
    BatchNormApply,
    /// `x → y`; identity in evaluation.
    Dropout(DropoutConfig),
    /// `x → y` with the same number of elements (flatten is a reshape).
    Reshape,
    /// `x[N,C] → y[N,C]`, row-wise.
    Softmax,
    /// `logits[N,C], labels[N] (i32) → loss[]`, mean over the batch.
    CrossEntropy,
    /// `pred, target → loss[]`, mean over all elements.
    Mse,
    /// `x → y`: the value passes, the gradient does not.
    Detach,

    // ---- backward (appended by `differentiate`) ----
    /// `dy[N,M], w[M,K] → dx[N,K]`.
    LinearGradInput,
    /// `dy[N,M], x[N,K] → dw[M,K]`.
    LinearGradWeight,
    /// `dy[N,C,...] → db[C]`.
    BiasGrad,
    /// `dy, w → dx`.
    Conv2dGradInput(ConvParams),
    /// `dy, x → dw`.
    Conv2dGradWeight(ConvParams),
    /// `y, dy → dx` (uses the forward output).
    ReluGrad,
    /// `y, dy → dx`.
    Relu6Grad,
    /// `x, dy → dx`.
    MaxPool2dGrad(PoolParams),
    /// `dy → dx`.
    AvgPool2dGrad(PoolParams),
    /// `dy[N,C] → dx[N,C,H,W]`.
    GlobalAvgPoolGrad,
    /// `dy, x, gamma, saved_mean, saved_invstd → dx`.
    BatchNormGradInput,
    /// `dy, x, saved_mean, saved_invstd → dgamma, dbeta`.
    BatchNormGradParams,
    /// `dy → dx`.
    DropoutGrad(DropoutConfig),
    /// `y, dy → dx`.
    SoftmaxGrad,
    /// `logits, labels, dloss → dlogits`.
    CrossEntropyGrad,
    /// `pred, target, dloss → dpred`.
    MseGrad,
    /// `→ y`: fills with a constant (the loss seed, zeroing).
    Fill(f32),

    // ---- training plumbing (appended by the optimizer) ----
    /// `g, [acc]`: `acc += scale · g` (micro-batch gradient accumulation).
    Accumulate(f32),
    /// `g, [sum]`: `sum += Σ g²`.
    SumSquares,
    /// `sum → coef`: global-norm clipping coefficient `min(1, max_norm / ‖g‖)`.
    ClipCoefficient(f32),
    /// `grad, (coef), [param, (momentum)]`.
    SgdUpdate(SgdConfig),
    /// `grad, (coef), [param, m, v]`.
    AdamWUpdate(AdamWConfig),
    /// `[t]`: zero a tensor in place (gradient accumulators after the update that used them).
    Zero,

    // ---- half precision: f16 storage and loss-scaled mixed precision ----
    /// `x → y` of the same shape: f32 to f16 or f16 to f32, as the operand dtypes say.
    Cast,
    /// `g, scale, [found_inf] → unscaled`: `g / scale[0]`; `found_inf` becomes 1 when `g`
    /// holds NaN or infinity.
    UnscaleGradient,
    /// `found_inf, [scale, good_steps]`: dynamic loss scaling. After an overflow the scale
    /// backs off and the parameter updates that follow in the step are skipped.
    UpdateLossScale(LossScaleConfig),
}

impl Op {
    /// The op's name as people write it, used in errors and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Linear => "linear",
            Op::Conv2d(_) => "conv2d",
            Op::Relu => "relu",
            Op::Relu6 => "relu6",
            Op::MaxPool2d(_) => "max_pool2d",
            Op::AvgPool2d(_) => "avg_pool2d",
            Op::GlobalAvgPool => "global_avg_pool",
            Op::Add => "add",
            Op::BatchNorm2d(_) => "batch_norm2d",
            Op::BatchNormApply => "batch_norm_apply",
            Op::Dropout(_) => "dropout",
            Op::Reshape => "reshape",
            Op::Softmax => "softmax",
            Op::CrossEntropy => "cross_entropy",
            Op::Mse => "mse",
            Op::Detach => "detach",
            Op::LinearGradInput => "linear_grad_input",
            Op::LinearGradWeight => "linear_grad_weight",
            Op::BiasGrad => "bias_grad",
            Op::Conv2dGradInput(_) => "conv2d_grad_input",
            Op::Conv2dGradWeight(_) => "conv2d_grad_weight",
            Op::ReluGrad => "relu_grad",
            Op::Relu6Grad => "relu6_grad",
            Op::MaxPool2dGrad(_) => "max_pool2d_grad",
            Op::AvgPool2dGrad(_) => "avg_pool2d_grad",
            Op::GlobalAvgPoolGrad => "global_avg_pool_grad",
            Op::BatchNormGradInput => "batch_norm_grad_input",
            Op::BatchNormGradParams => "batch_norm_grad_params",
            Op::DropoutGrad(_) => "dropout_grad",
            Op::SoftmaxGrad => "softmax_grad",
            Op::CrossEntropyGrad => "cross_entropy_grad",
            Op::MseGrad => "mse_grad",
            Op::Fill(_) => "fill",
            Op::Accumulate(_) => "accumulate",
            Op::SumSquares => "sum_squares",
            Op::ClipCoefficient(_) => "clip_coefficient",
            Op::SgdUpdate(_) => "sgd_update",
            Op::AdamWUpdate(_) => "adamw_update",
            Op::Zero => "zero",
            Op::Cast => "cast",
            Op::UnscaleGradient => "unscale_gradient",
            Op::UpdateLossScale(_) => "update_loss_scale",
        }
    }
}

/// How many operands of each kind a node of an op takes (see each [`Op`] variant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperandCounts {
    pub inputs: RangeInclusive<usize>,
    pub state: RangeInclusive<usize>,
    pub outputs: RangeInclusive<usize>,
}

impl Op {
    /// The operand counts a well-formed node of this op has; decoders check untrusted
    /// nodes against them before anything indexes their operands.
    pub fn operand_counts(&self) -> OperandCounts {
        // (inputs, state, outputs)
        let (inputs, state, outputs) = match self {
            Op::Linear | Op::Conv2d(_) => (2..=3, 0..=0, 1..=1),
            Op::Relu
            | Op::Relu6
            | Op::MaxPool2d(_)
            | Op::AvgPool2d(_)
            | Op::GlobalAvgPool
            | Op::Dropout(_)
            | Op::Reshape
            | Op::Softmax
            | Op::Detach
            | Op::BiasGrad
            | Op::AvgPool2dGrad(_)
            | Op::GlobalAvgPoolGrad
            | Op::DropoutGrad(_)
            | Op::ClipCoefficient(_) => (1..=1, 0..=0, 1..=1),
            Op::Add
            | Op::CrossEntropy
            | Op::Mse
            | Op::LinearGradInput
            | Op::LinearGradWeight
            | Op::Conv2dGradInput(_)
            | Op::Conv2dGradWeight(_)
            | Op::ReluGrad
            | Op::Relu6Grad
            | Op::MaxPool2dGrad(_)
            | Op::SoftmaxGrad => (2..=2, 0..=0, 1..=1),
            Op::CrossEntropyGrad | Op::MseGrad => (3..=3, 0..=0, 1..=1),
            Op::BatchNorm2d(_) => (3..=3, 2..=2, 3..=3),
            Op::BatchNormApply | Op::BatchNormGradInput => (5..=5, 0..=0, 1..=1),
            Op::BatchNormGradParams => (4..=4, 0..=0, 2..=2),
            Op::Fill(_) => (0..=0, 0..=0, 1..=1),
            Op::Accumulate(_) | Op::SumSquares => (1..=1, 1..=1, 0..=0),
            Op::SgdUpdate(_) => (1..=2, 1..=2, 0..=0),
            Op::AdamWUpdate(_) => (1..=2, 3..=3, 0..=0),
            Op::Zero => (0..=0, 1..=1, 0..=0),
            Op::Cast => (1..=1, 0..=0, 1..=1),
            Op::UnscaleGradient => (2..=2, 1..=1, 1..=1),
            Op::UpdateLossScale(_) => (1..=1, 2..=2, 0..=0),
        };
        OperandCounts { inputs, state, outputs }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}
