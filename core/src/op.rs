//! The operations a graph records: forward ops written by model code, backward ops appended
//! by [`crate::autograd`], and training plumbing (accumulation, clipping, optimizer updates).

use crate::geometry::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use crate::quant::{AddRescale, QuantParams};
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

/// An int8 convolution: its geometry settings, the quantization of its input and output,
/// and the fused activation's clamp bounds (in output units).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QConvParams {
    pub conv: ConvParams,
    pub input: QuantParams,
    pub output: QuantParams,
    pub act: (i8, i8),
}

/// An int8 dense layer: the quantization of its input and output and the fused clamp.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QLinearParams {
    pub input: QuantParams,
    pub output: QuantParams,
    pub act: (i8, i8),
}

/// An int8 residual add: TFLite's precomputed rescaling and the fused clamp.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QAddParams {
    pub rescale: AddRescale,
    /// The output's quantization (the rescale folds it in; the backward pass reads it).
    pub output: QuantParams,
    pub act: (i8, i8),
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
    // ---- int8 (TFLite's scheme, see `crate::quant`) ----
    /// `x (f32) → y (i8)`.
    Quantize(QuantParams),
    /// `x (i8) → y (f32)`; its gradient passes straight through.
    Dequantize(QuantParams),
    /// `x (i8), w (i8 [O, C/g, kh, kw]), bias (i32 [O]), requant (i32 [O, 2]),
    /// w_scale (f32 [O]) → y (i8)`. `requant` holds each channel's
    /// [`crate::quant::Requantize`]; `w_scale` the weights' scales, read by the backward pass.
    QConv2d(QConvParams),
    /// `x (i8 [N, K]), w (i8 [M, K]), bias (i32 [M]), requant (i32 [M, 2]),
    /// w_scale (f32 [M]) → y (i8 [N, M])`.
    QLinear(QLinearParams),
    /// `a (i8), b (i8) → y (i8)`.
    QAdd(QAddParams),
    /// `x (i8) → y (i8)`, same quantization.
    QMaxPool2d(PoolParams),
    /// `x (i8) → y (i8)`, same quantization (the zero point is the input's).
    QAvgPool2d(PoolParams, i32),
    /// `x (i8 [N, C, H, W]) → y (i8 [N, C])`, same quantization.
    QGlobalAvgPool,
    /// `w̄ (f32), w_scale (f32 [O]) → w (i8)`: a trainable int8 weight kept in integer
    /// units, rounded to `-127..=127` for the forward pass. The gradient passes straight
    /// through, scaled by `w_scale⁻²` with quantization-aware scaling (`qas`).
    RoundWeights { qas: bool },
    /// `b̄ (f32), w_scale (f32 [O]) → b (i32)`: a trainable int32 bias in units of
    /// `input_scale · w_scale`; with `qas` its gradient is scaled by `(input_scale · w_scale)⁻²`.
    RoundBias { input_scale: f32, qas: bool },
    /// `y (i8), dy → dx`: the gradient where `y` lies strictly inside the clamp bounds
    /// `act`, zero where the output saturated (the straight-through estimator of a clamp).
    QClampGrad((i8, i8)),
    /// `w (i8 [O, ...]), w_scale (f32 [O]) → w_real (f32)`.
    DequantizeWeights,
    /// `g (f32 [O, ...]), w_scale (f32 [O]) → g'`: `g'[o, ..] = g[o, ..] · (unit · w_scale[o])^power`.
    ChannelScale { unit: f32, power: i8 },
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
            Op::Quantize(_) => "quantize",
            Op::Dequantize(_) => "dequantize",
            Op::QConv2d(_) => "qconv2d",
            Op::QLinear(_) => "qlinear",
            Op::QAdd(_) => "qadd",
            Op::QMaxPool2d(_) => "qmax_pool2d",
            Op::QAvgPool2d(..) => "qavg_pool2d",
            Op::QGlobalAvgPool => "qglobal_avg_pool",
            Op::RoundWeights { .. } => "round_weights",
            Op::RoundBias { .. } => "round_bias",
            Op::QClampGrad(_) => "qclamp_grad",
            Op::DequantizeWeights => "dequantize_weights",
            Op::ChannelScale { .. } => "channel_scale",
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
            | Op::ClipCoefficient(_)
            | Op::Quantize(_)
            | Op::Dequantize(_)
            | Op::QMaxPool2d(_)
            | Op::QAvgPool2d(..)
            | Op::QGlobalAvgPool => (1..=1, 0..=0, 1..=1),
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
            | Op::SoftmaxGrad
            | Op::QAdd(_)
            | Op::RoundWeights { .. }
            | Op::RoundBias { .. }
            | Op::QClampGrad(_)
            | Op::DequantizeWeights
            | Op::ChannelScale { .. } => (2..=2, 0..=0, 1..=1),
            Op::QConv2d(_) | Op::QLinear(_) => (5..=5, 0..=0, 1..=1),
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
