//! The op data: the [`Op`] enum a graph node records, the settings its variants carry and
//! its stable wire encoding in `.sprout` files (explicit tags, serde).
//!
//! This module sits below the graph: it knows nothing of recording, gradients or lowering.
//! The variants, tags and payloads come from the one op table (`op_table!`), from which
//! [`crate::ops`] also generates the dispatch of each op to its rules.

use crate::hyperparams::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use crate::quant::{AddRescale, ConcatRescale, MulRescale, QuantParams};
use crate::reference::{Activation, EluParams, GeluParams, HardSigmoidParams, LeakyReluParams};
use core::fmt;

/// Stride, padding and grouping of a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvParams {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub groups: usize,
}

/// The axis two tensors are joined along (never the batch axis, 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConcatParams {
    pub axis: usize,
}

/// Which operand of a concatenation a gradient part belongs to, and the axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConcatGradParams {
    pub axis: usize,
    pub second: bool,
}

/// A reordering of a tensor's axes: axis `i` of the output is axis `perm[i]` of the input.
/// Entries from the tensor's rank on are unused (`perm[i] = i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransposeParams {
    pub perm: [u8; crate::shape::MAX_RANK],
}

/// A run of one axis (never the batch axis, 0) from `start`: the part a slice takes, or
/// where a padding puts its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SliceParams {
    pub axis: usize,
    pub start: usize,
}

/// A pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolParams {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub count_include_pad: bool,
}

/// An int8 residual add: TFLite's precomputed rescaling and the fused clamp.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QAddParams {
    pub rescale: AddRescale,
    /// The output's quantization (the rescale folds it in; the backward pass reads it).
    pub output: QuantParams,
    pub act: (i8, i8),
}

/// An int8 element-wise function through a 256-entry table: the float function the table
/// holds and the quantizations it maps between (the backward pass reads them).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QLutParams {
    pub f: Activation,
    pub input: QuantParams,
    pub output: QuantParams,
}

/// An int8 product: TFLite's precomputed rescaling and both operands' quantizations (the
/// backward pass reads them).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QMulParams {
    pub rescale: MulRescale,
    pub a: QuantParams,
    pub b: QuantParams,
}

/// An int8 concatenation: the axis and each operand's move to the output's quantization.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QConcatParams {
    pub axis: usize,
    pub rescale: ConcatRescale,
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

/// An int8 average pooling window and the zero point of its input (and output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QAvgPoolParams {
    pub pool: PoolParams,
    pub zero_point: i32,
}

/// Rounding a trainable int8 weight: `qas` scales its gradient by `w_scale⁻²`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoundWeightsParams {
    pub qas: bool,
}

/// Rounding a trainable int32 bias in units of `input_scale · w_scale`: `qas` scales its
/// gradient by `(input_scale · w_scale)⁻²`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoundBiasParams {
    pub input_scale: f32,
    pub qas: bool,
}

/// `g'[o, ..] = g[o, ..] · (unit · w_scale[o])^power`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChannelScaleParams {
    pub unit: f32,
    pub power: i8,
}

/// The int8 depthwise layer whose backward pass runs a channel at a time through the clamp
/// of the layer before it (see `crate::passes::chains`): its geometry settings and its
/// input's height and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DepthwiseChainParams {
    pub conv: ConvParams,
    pub input_hw: (usize, usize),
}

/// A decoded op tag this build does not know (a file from a newer sprout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownOpTag {
    pub tag: u32,
}

impl fmt::Display for UnknownOpTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown op tag {}: the file was written by a newer sprout", self.tag)
    }
}

impl core::error::Error for UnknownOpTag {}

/// `$p` in a variant's pattern when the variant has a payload.
macro_rules! bind {
    ($t:ty, $p:pat) => {
        $p
    };
}

/// The payload bound by [`bind`], or `()` for a variant without one.
macro_rules! payload {
    ($p:ident) => {
        ()
    };
    ($p:ident, $t:ty) => {
        $p
    };
}

/// Serializes a variant as postcard does: its tag as a varint, then its payload if any.
macro_rules! serialize_variant {
    ($s:ident, $tag:literal, $name:expr) => {
        $s.serialize_unit_variant("Op", $tag, $name)
    };
    ($s:ident, $tag:literal, $name:expr, $p:ident, $t:ty) => {
        $s.serialize_newtype_variant("Op", $tag, $name, $p)
    };
}

/// Reads the (empty) payload of a variant without one.
macro_rules! unit_variant {
    ($v:ident) => {
        serde::de::VariantAccess::unit_variant($v)?
    };
    ($v:ident, $t:ty) => {};
}
pub(crate) use {bind, payload};

/// The op table, the one place an op is declared: `tag => Variant(Payload): Rules` entries,
/// passed to `$callback`. [`op_data`] generates [`Op`] and its wire encoding from it;
/// `crate::ops` generates the dispatch to each op's rules (the `Rules` types live there).
/// A new op is one entry with a new tag: tags are never reused or renumbered.
macro_rules! op_table {
    ($callback:ident) => {
        $callback! {
            // ---- forward ----
            /// `x[N,K], w[M,K], (b[M]) → y[N,M]`.
            0 => Linear: linear::Linear,
            /// `x[N,C,H,W], w[O,C/g,kh,kw], (b[O]) → y[N,O,H',W']`.
            1 => Conv2d(ConvParams): conv2d::Conv2d,
            /// `x → y`.
            2 => Relu: relu::Relu,
            /// `x → y`, clamped to `[0, 6]`.
            3 => Relu6: relu::Relu6,
            /// `x → y`.
            4 => MaxPool2d(PoolParams): pool::MaxPool2d,
            /// `x → y`.
            5 => AvgPool2d(PoolParams): pool::AvgPool2d,
            /// `x[N,C,H,W] → y[N,C]`.
            6 => GlobalAvgPool: pool::GlobalAvgPool,
            /// `a, b → y` (same shapes; residual connections).
            7 => Add: add::Add,
            /// `x, gamma, beta, [running_mean, running_var] → y, saved_mean, saved_invstd`.
            /// Training uses batch statistics and updates the running ones; evaluation uses the running ones.
            8 => BatchNorm2d(BatchNormConfig): batch_norm::BatchNorm2d,
            /// `x, gamma, beta, saved_mean, saved_invstd → y`: training-mode normalisation with the
            /// statistics a forward pass saved (gradient checkpointing recomputes with it).
            9 => BatchNormApply: batch_norm::BatchNormApply,
            /// `x → y`; identity in evaluation.
            10 => Dropout(DropoutConfig): dropout::Dropout,
            /// `x → y` with the same number of elements (flatten is a reshape).
            11 => Reshape: reshape::Reshape,
            /// `x[N, ..., C] → y`, over the last axis.
            12 => Softmax: softmax::Softmax,
            /// `logits[N,C], labels[N] (i32) → loss[]`, mean over the batch.
            13 => CrossEntropy: loss::CrossEntropy,
            /// `pred, target → loss[]`, mean over all elements.
            14 => Mse: loss::Mse,
            /// `x → y`: the value passes, the gradient does not.
            15 => Detach: reshape::Detach,

            // ---- backward (appended by `differentiate`) ----
            /// `dy[N,M], w[M,K] → dx[N,K]`.
            16 => LinearGradInput: linear::LinearGradInput,
            /// `dy[N,M], x[N,K] → dw[M,K]`.
            17 => LinearGradWeight: linear::LinearGradWeight,
            /// `dy[N,C,...] → db[C]`.
            18 => BiasGrad: linear::BiasGrad,
            /// `dy, w → dx`.
            19 => Conv2dGradInput(ConvParams): conv2d::Conv2dGradInput,
            /// `dy, x → dw`.
            20 => Conv2dGradWeight(ConvParams): conv2d::Conv2dGradWeight,
            /// `y, dy → dx` (uses the forward output).
            21 => ReluGrad: relu::ReluGrad,
            /// `y, dy → dx`.
            22 => Relu6Grad: relu::Relu6Grad,
            /// `x, dy → dx`.
            23 => MaxPool2dGrad(PoolParams): pool::MaxPool2dGrad,
            /// `dy → dx`.
            24 => AvgPool2dGrad(PoolParams): pool::AvgPool2dGrad,
            /// `dy[N,C] → dx[N,C,H,W]`.
            25 => GlobalAvgPoolGrad: pool::GlobalAvgPoolGrad,
            /// `dy, x, gamma, saved_mean, saved_invstd → dx`.
            26 => BatchNormGradInput: batch_norm::BatchNormGradInput,
            /// `dy, x, saved_mean, saved_invstd → dgamma, dbeta`.
            27 => BatchNormGradParams: batch_norm::BatchNormGradParams,
            /// `dy → dx`.
            28 => DropoutGrad(DropoutConfig): dropout::DropoutGrad,
            /// `y, dy → dx`.
            29 => SoftmaxGrad: softmax::SoftmaxGrad,
            /// `logits, labels, dloss → dlogits`.
            30 => CrossEntropyGrad: loss::CrossEntropyGrad,
            /// `pred, target, dloss → dpred`.
            31 => MseGrad: loss::MseGrad,
            /// `→ y`: fills with a constant (the loss seed, zeroing).
            32 => Fill(f32): optimizer::Fill,

            // ---- training plumbing (appended by the optimizer) ----
            /// `g, [acc]`: `acc += scale · g` (micro-batch gradient accumulation).
            33 => Accumulate(f32): optimizer::Accumulate,
            /// `g, [sum]`: `sum += Σ g²`.
            34 => SumSquares: optimizer::SumSquares,
            /// `sum → coef`: global-norm clipping coefficient `min(1, max_norm / ‖g‖)`.
            35 => ClipCoefficient(f32): optimizer::ClipCoefficient,
            /// `grad, (coef), [param, (momentum)]`.
            36 => SgdUpdate(SgdConfig): optimizer::SgdUpdate,
            /// `grad, (coef), [param, m, v]`.
            37 => AdamWUpdate(AdamWConfig): optimizer::AdamWUpdate,
            /// `[t]`: zero a tensor in place (gradient accumulators after the update that used them).
            38 => Zero: optimizer::Zero,

            // ---- half precision: f16 storage and loss-scaled mixed precision ----
            /// `x → y` of the same shape: f32 to f16 or f16 to f32, as the operand dtypes say.
            39 => Cast: half::Cast,
            /// `g, scale, [found_inf] → unscaled`: `g / scale[0]`; `found_inf` becomes 1 when `g`
            /// holds NaN or infinity.
            40 => UnscaleGradient: half::UnscaleGradient,
            /// `found_inf, [scale, good_steps]`: dynamic loss scaling. After an overflow the scale
            /// backs off and the parameter updates that follow in the step are skipped.
            41 => UpdateLossScale(LossScaleConfig): half::UpdateLossScale,

            // ---- int8 (TFLite's scheme, see `crate::quant`) ----
            /// `x (f32) → y (i8)`.
            42 => Quantize(QuantParams): int8::quantize::Quantize,
            /// `x (i8) → y (f32)`; its gradient passes straight through.
            43 => Dequantize(QuantParams): int8::quantize::Dequantize,
            /// `x (i8), w (i8 [O, C/g, kh, kw]), bias (i32 [O]), requant (i32 [O, 2]),
            /// w_scale (f32 [O]) → y (i8)`. `requant` holds each channel's
            /// [`crate::quant::Requantize`]; `w_scale` the weights' scales, read by the backward pass.
            44 => QConv2d(QConvParams): int8::layer::QConv2d,
            /// `x (i8 [N, K]), w (i8 [M, K]), bias (i32 [M]), requant (i32 [M, 2]),
            /// w_scale (f32 [M]) → y (i8 [N, M])`.
            45 => QLinear(QLinearParams): int8::layer::QLinear,
            /// `a (i8), b (i8) → y (i8)`.
            46 => QAdd(QAddParams): int8::add::QAdd,
            /// `x (i8) → y (i8)`, same quantization.
            47 => QMaxPool2d(PoolParams): int8::pool::QMaxPool2d,
            /// `x (i8) → y (i8)`, same quantization (the zero point is the input's).
            48 => QAvgPool2d(QAvgPoolParams): int8::pool::QAvgPool2d,
            /// `x (i8 [N, C, H, W]) → y (i8 [N, C])`, same quantization.
            49 => QGlobalAvgPool: int8::pool::QGlobalAvgPool,
            /// `w̄ (f32), w_scale (f32 [O]) → w (i8)`: a trainable int8 weight kept in integer
            /// units, rounded to `-127..=127` for the forward pass. The gradient passes straight
            /// through, scaled by `w_scale⁻²` with quantization-aware scaling (`qas`).
            50 => RoundWeights(RoundWeightsParams): int8::round::RoundWeights,
            /// `b̄ (f32), w_scale (f32 [O]) → b (i32)`: a trainable int32 bias in units of
            /// `input_scale · w_scale`; with `qas` its gradient is scaled by `(input_scale · w_scale)⁻²`.
            51 => RoundBias(RoundBiasParams): int8::round::RoundBias,
            /// `y (i8), dy → dx`: the gradient where `y` lies strictly inside the clamp bounds
            /// `act`, zero where the output saturated (the straight-through estimator of a clamp).
            52 => QClampGrad((i8, i8)): int8::add::QClampGrad,
            /// `w (i8 [O, ...]), w_scale (f32 [O]) → w_real (f32)`.
            53 => DequantizeWeights: int8::quantize::DequantizeWeights,
            /// `g (f32 [O, ...]), w_scale (f32 [O]) → g'`: `g'[o, ..] = g[o, ..] · (unit · w_scale[o])^power`.
            54 => ChannelScale(ChannelScaleParams): int8::round::ChannelScale,

            // ---- pointwise activations and products (their kernels: `crate::reference::pointwise`) ----
            /// `x → y`: `1 / (1 + e^-x)`.
            55 => Sigmoid: sigmoid::Sigmoid,
            /// `x → y`: `clamp(alpha · x + beta, 0, 1)`.
            56 => HardSigmoid(HardSigmoidParams): hard_sigmoid::HardSigmoid,
            /// `x → y`: `x · relu6(x + 3) / 6`.
            57 => HardSwish: hard_swish::HardSwish,
            /// `x → y`: `x` where positive, else `alpha · x`.
            58 => LeakyRelu(LeakyReluParams): leaky_relu::LeakyRelu,
            /// `saved, dy → dx`: the gradient of any of the four above, GELU, SiLU, ELU,
            /// softplus and tanh (`saved`:
            /// their input or output, as the activation's slope needs).
            59 => ActivationGrad(Activation): activation_grad::ActivationGrad,
            /// `a [N, C, ...], b → y`: `b` of `a`'s shape, or one factor per channel.
            60 => Mul: mul::Mul,
            /// `dy, a → db [N, C]`: the gradient of a per-channel factor.
            61 => MulGradFactor: mul::MulGradFactor,
            /// `a, b → y`: `a` and `b` joined along `axis`, their other dimensions equal.
            62 => Concat(ConcatParams): concat::Concat,
            /// `dy → da` or `db`: the part of a concatenation's gradient that is one operand's.
            63 => ConcatGrad(ConcatGradParams): concat::ConcatGrad,
            /// `x (i8) → y (i8)`: a ReLU or ReLU6 alone (after a pooling, say), a clamp to
            /// `(low, high)` in the input's units, which the output keeps.
            64 => QClamp((i8, i8)): int8::add::QClamp,
            /// `x[N, ..., C] → y`: log-softmax over the last axis.
            65 => LogSoftmax: softmax::LogSoftmax,
            /// `y, dy → dx`: its gradient, from the output.
            66 => LogSoftmaxGrad: softmax::LogSoftmaxGrad,
            /// `x (i8), table (i8 [256]) → y (i8)`: sigmoid, hard sigmoid, hard swish,
            /// leaky ReLU, GELU, SiLU, ELU, softplus or tanh in int8, `y = table[x + 128]`, the output in its own quantization.
            67 => QLut(QLutParams): int8::lut::QLut,
            /// `a (i8 [N, C, ...]), b (i8) → y (i8)`: the product, `b` of `a`'s shape or one
            /// factor per channel (squeeze-excitation, `x · sigmoid(x)`).
            68 => QMul(QMulParams): int8::mul::QMul,
            /// `a (i8), b (i8) → y (i8)`: joined along `axis`, each moved to the output's
            /// quantization.
            69 => QConcat(QConcatParams): int8::concat::QConcat,
            /// `x → y`: `x` with its axes reordered, the batch axis first.
            73 => Transpose(TransposeParams): transpose::Transpose,
            /// `x → y`: the run of `axis` from `start` that `y`'s length along it takes.
            74 => Slice(SliceParams): slice::Slice,
            /// `x → y`: zeros along `axis` with `x` from `start` (`y`'s length along it):
            /// asymmetric zero padding, and the gradient of a slice.
            75 => Pad(SliceParams): slice::Pad,
            /// `x → y`: `x` repeated along the axes where it has 1 and `y` more (numpy
            /// broadcasting; never the batch axis).
            76 => Broadcast: broadcast::Broadcast,
            /// `dy → dx`: `dy` summed over the axes a broadcast repeated `dx` along.
            77 => BroadcastGrad: broadcast::BroadcastGrad,
            /// `x → y`: `x · Φ(x)`, exact or the tanh approximation.
            78 => Gelu(GeluParams): gelu::Gelu,
            /// `x [N, ...], gamma [D], beta [D] → y`: layer normalisation (eps) of each run of
            /// the trailing axes holding `D` values.
            79 => LayerNorm(f32): layer_norm::LayerNorm,
            /// `dy, x, gamma → dx`.
            80 => LayerNormGradInput(f32): layer_norm::LayerNormGradInput,
            /// `dy, x → dgamma, dbeta`.
            81 => LayerNormGradParams(f32): layer_norm::LayerNormGradParams,
            /// `dy [N, ..., M] → db [M]`: a dense layer's bias gradient over every row.
            82 => RowBiasGrad: linear::RowBiasGrad,
            /// `dy, x, gamma, saved_mean, saved_invstd, dgamma, dbeta → dx`: the input
            /// gradient from the sums `batch_norm_grad_params` made (`Σ dy · x̂`, `Σ dy`).
            83 => BatchNormGradInputFromSums: batch_norm::BatchNormGradInputFromSums,
            /// `x → y`: `x · sigmoid(x)` (SiLU), an ONNX `Mul(x, Sigmoid(x))` as one op.
            84 => Silu: silu::Silu,
            /// `x → y`: `x` where positive, else `alpha · (e^x − 1)`.
            85 => Elu(EluParams): elu::Elu,
            /// `x → y`: `ln(1 + e^x)` (`x` above 20).
            86 => Softplus: softplus::Softplus,
            /// `x → y`: `tanh(x)`.
            87 => Tanh: tanh::Tanh,
            /// `dy, w (i8), w_scale (f32 [O]) → dx`: a convolution's input gradient through
            /// its int8 weights, each read as `w_scale[o] · w` (no f32 copy of the weights).
            88 => QConv2dGradInput(ConvParams): int8::layer::QConv2dGradInput,
            /// `dy [N, ..., M], w (i8 [M, K]), w_scale (f32 [M]) → dx`: the same for a dense
            /// layer.
            89 => QLinearGradInput: int8::layer::QLinearGradInput,
            /// `y (i8) → mask (i8 [⌈len/8⌉])`: bit `i % 8` of byte `i / 8` set where `y[i]`
            /// lies strictly inside the clamp's bounds (where its gradient passes).
            90 => QClampMask((i8, i8)): int8::mask::QClampMask,
            /// `mask (i8), dy → dx`: `dy` where the clamp's mask bit is set, else 0.
            91 => QMaskGrad: int8::mask::QMaskGrad,
            /// `dy, w (i8 [C, 1, kh, kw]), w_scale (f32 [C]), mask (i8), w_e (i8 [C, K, 1, 1]),
            /// w_e_scale (f32 [C]) → db (f32 [C]), dx (f32 [N, K, H, W])`: an int8 depthwise
            /// layer's input gradient from its clamped output gradient `dy`, stopped by the
            /// clamp mask of the 1x1 layer before it, summed into that layer's bias gradient
            /// (real units) and carried through its weights into its input gradient `dx`, a
            /// channel at a time: no gradient of the `C` hidden channels is stored.
            96 => QDepthwiseChainGrad(DepthwiseChainParams): int8::chain::QDepthwiseChainGrad,
            /// `dy, w (i8), w_scale (f32 [C]), mask (i8) → db (f32 [C])`: the same without the
            /// input gradient of the layer before (any int8 layer; only its bias trains).
            97 => QDepthwiseChainBiasGrad(DepthwiseChainParams): int8::chain::QDepthwiseChainBiasGrad,
            /// `dy, w_p (i8 [P, C, 1, 1]), w_p_scale (f32 [P]), mask_p (i8), w, w_scale, mask,
            /// w_e, w_e_scale → db_p, db, dx, scratch (f32 [out_h · out_w])`: an inverted-residual
            /// block's backward pass from its clamped output gradient `dy`: the 1x1 projection's
            /// input gradient a channel at a time, stopped by the depthwise clamp's mask
            /// `mask_p`, the depthwise bias gradient `db_p`, then as `qdepthwise_chain_grad`.
            98 => QBlockGrad(DepthwiseChainParams): int8::chain::QBlockGrad,
            /// `dy, w_p, w_p_scale, mask_p, w, w_scale, mask → db_p, db, scratch`: the same
            /// without the block's input gradient (the block's input is not trained through).
            99 => QBlockBiasGrad(DepthwiseChainParams): int8::chain::QBlockBiasGrad,
        }
    };
}
pub(crate) use op_table;

/// Generates [`Op`] and its stable wire encoding from the op table (the rules column is
/// for [`crate::ops`]).
macro_rules! op_data {
    ($(
        $(#[$attr:meta])*
        $tag:literal => $variant:ident $(($payload:ty))? : $rules:ty,
    )+) => {
        /// One recorded operation. Operand order is fixed per op and documented on each
        /// variant: `inputs → outputs`, with `[state]` for tensors the op reads and writes
        /// in place.
        ///
        /// In `.sprout` files an op is its explicit wire tag (a varint) followed by its
        /// payload: the declaration order does not matter, and a tag is never reused.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum Op {
            $( $(#[$attr])* $variant $(($payload))?, )+
        }

        impl Op {
            /// The op's wire tag in `.sprout` files.
            pub fn tag(&self) -> u32 {
                match *self {
                    $( Op::$variant $((bind!($payload, _)))? => $tag, )+
                }
            }
        }

        // A wire tag names one op forever: two ops sharing one do not compile.
        const _: () = {
            let tags: &[u32] = &[$($tag),+];
            let mut i = 0;
            while i < tags.len() {
                let mut j = i + 1;
                while j < tags.len() {
                    assert!(tags[i] != tags[j], "two ops share a wire tag");
                    j += 1;
                }
                i += 1;
            }
        };

        impl serde::Serialize for Op {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(
                        Op::$variant $((bind!($payload, p)))? =>
                            serialize_variant!(s, $tag, stringify!($variant) $(, p, $payload)?),
                    )+
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for Op {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Tagged;
                impl<'de> serde::de::Visitor<'de> for Tagged {
                    type Value = Op;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("an op: its tag, then its settings")
                    }

                    fn visit_enum<A: serde::de::EnumAccess<'de>>(
                        self,
                        data: A,
                    ) -> Result<Op, A::Error> {
                        let (tag, v) = data.variant::<u32>()?;
                        Ok(match tag {
                            $(
                                $tag => {
                                    unit_variant!(v $(, $payload)?);
                                    Op::$variant $((
                                        serde::de::VariantAccess::newtype_variant::<$payload>(v)?
                                    ))?
                                }
                            )+
                            tag => return Err(serde::de::Error::custom(UnknownOpTag { tag })),
                        })
                    }
                }
                const NAMES: &[&str] = &[$(stringify!($variant)),+];
                d.deserialize_enum("Op", NAMES, Tagged)
            }
        }
    };
}

op_table!(op_data);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_is_its_tag_as_a_varint_then_its_payload() {
        assert_eq!(postcard::to_allocvec(&Op::Linear).unwrap(), [0]);
        assert_eq!(postcard::to_allocvec(&Op::Fill(1.0)).unwrap(), [32, 0, 0, 0x80, 0x3f]);
        let round = Op::RoundBias(RoundBiasParams { input_scale: 2.0, qas: true });
        assert_eq!(postcard::to_allocvec(&round).unwrap(), [51, 0, 0, 0, 0x40, 1]);
        let cases = [
            Op::Conv2d(ConvParams { stride: (1, 2), padding: (0, 1), groups: 3 }),
            Op::QAvgPool2d(QAvgPoolParams {
                pool: PoolParams {
                    kernel: (2, 2),
                    stride: (2, 2),
                    padding: (0, 0),
                    count_include_pad: false,
                },
                zero_point: -3,
            }),
            Op::ChannelScale(ChannelScaleParams { unit: 0.5, power: -2 }),
            Op::UpdateLossScale(LossScaleConfig::default()),
            round,
        ];
        for op in cases {
            let bytes = postcard::to_allocvec(&op).unwrap();
            assert_eq!(u32::from(bytes[0]), op.tag());
            assert_eq!(postcard::from_bytes::<Op>(&bytes).unwrap(), op);
        }
    }

    #[test]
    fn tags_keep_the_order_version_1_files_were_written_in() {
        let tags = [
            (Op::Relu6, 3),
            (Op::Detach, 15),
            (Op::Zero, 38),
            (Op::Cast, 39),
            (Op::Quantize(QuantParams { scale: 1.0, zero_point: 0 }), 42),
            (Op::DequantizeWeights, 53),
            (Op::ChannelScale(ChannelScaleParams { unit: 1.0, power: 1 }), 54),
        ];
        for (op, tag) in tags {
            assert_eq!(op.tag(), tag, "{op}");
        }
    }

    #[test]
    fn an_unknown_tag_is_refused() {
        assert!(postcard::from_bytes::<Op>(&[120]).is_err());
        assert!(postcard::from_bytes::<Op>(&[0x80, 0x01]).is_err());
        use serde::de::value::{Error, U32Deserializer};
        use serde::Deserialize;
        assert_eq!(Op::deserialize(U32Deserializer::<Error>::new(2)), Ok(Op::Relu));
        let err = Op::deserialize(U32Deserializer::<Error>::new(120)).unwrap_err();
        let message = alloc::format!("{err}");
        assert!(message.contains("unknown op tag 120"), "{message}");
        // A payload op without its payload is truncated, not misread.
        assert!(postcard::from_bytes::<Op>(&[1u8]).is_err());
    }
}
