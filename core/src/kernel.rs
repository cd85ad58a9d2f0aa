//! Plan-level kernel calls ([`KernelCall`]): each recorded op resolved to a concrete kernel
//! with its geometry and mode (training or evaluation), and the signature that fixes its
//! operands. The backend traits that run them are [`crate::Kernels`].

use crate::geometry::{
    BroadcastDims, ChannelDims, ConcatDims, Conv2dGeometry, GeometryError, LinearDims, PermuteDims,
    Pool2dGeometry, RowDims, SliceDims,
};
use crate::hyperparams::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use crate::quant::backward::mask_bytes;
use crate::quant::{AddRescale, ConcatRescale, MulRescale, QuantParams};
use crate::reference::{Activation, Rectifier};
use crate::tensor::DType;

/// The most operands one kernel takes (an inverted-residual block's fused backward pass,
/// [`KernelCall::QBlockGrad`]: 9 in, 4 out).
pub const MAX_OPERANDS: usize = 13;

/// Declares [`KernelCall`] with an explicit wire tag per variant, and its tag, names and serde
/// impls from that one list. Every variant's fields are named, so the serde impls can write
/// them in order (postcard: tag varint, then the fields, the shape `derive` gave before).
macro_rules! kernels {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $tag:literal => $variant:ident
                    $( ( $($tf:ident : $tty:ty),+ $(,)? ) )?
                    $( { $($sf:ident : $sty:ty),+ $(,)? } )?
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $(
                $(#[$vmeta])*
                $variant $( ( $($tty),+ ) )? $( { $($sf: $sty),+ } )?,
            )+
        }

        impl $name {
            /// The kernel's wire tag: its number in plans and bundles.
            pub const fn tag(&self) -> u32 {
                match self {
                    $( $name::$variant { .. } => $tag, )+
                }
            }

            /// Every kernel's name as serde knows it, in tag order.
            #[cfg(feature = "serde")]
            const VARIANTS: &'static [&'static str] = &[$(stringify!($variant)),+];
        }

        #[cfg(feature = "serde")]
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(
                        $name::$variant $( ( $($tf),+ ) )? $( { $($sf),+ } )? => serializer
                            .serialize_newtype_variant(
                                stringify!($name),
                                $tag,
                                stringify!($variant),
                                &( $( $($tf,)+ )? $( $($sf,)+ )? ),
                            ),
                    )+
                }
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl<'de> serde::de::Visitor<'de> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                        f.write_str("a kernel")
                    }
                    fn visit_enum<A: serde::de::EnumAccess<'de>>(
                        self,
                        data: A,
                    ) -> Result<$name, A::Error> {
                        use serde::de::VariantAccess;
                        let (tag, variant): (u32, _) = data.variant()?;
                        match tag {
                            $(
                                $tag => {
                                    let ( $( $($tf,)+ )? $( $($sf,)+ )? ):
                                        ( $( $($tty,)+ )? $( $($sty,)+ )? ) =
                                        variant.newtype_variant()?;
                                    Ok($name::$variant $( ( $($tf),+ ) )? $( { $($sf),+ } )?)
                                }
                            )+
                            tag => Err(serde::de::Error::custom(UnknownKernelTag(tag))),
                        }
                    }
                }
                deserializer.deserialize_enum(stringify!($name), $name::VARIANTS, Visitor)
            }
        }
    };
}

/// A plan or bundle names a kernel tag this build does not know (a newer file, or a
/// corrupt one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownKernelTag(pub u32);

impl core::fmt::Display for UnknownKernelTag {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "unknown kernel tag {}: the file needs a newer sprout", self.0)
    }
}

impl core::error::Error for UnknownKernelTag {}

kernels! {
    /// One kernel call of a plan step (not to be confused with [`crate::Kernels`], the
    /// backend trait that runs it). Element-wise kernels carry their element count so every operand's
    /// length is known from the kernel alone. Each variant's number is its wire tag in plans
    /// and device bundles (postcard: the tag as a varint, then the payload), independent of
    /// where it is declared: a new kernel takes the next free number, and no number is reused.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum KernelCall {
        0 => Linear { dims: LinearDims, bias: bool },
        1 => LinearGradInput(dims: LinearDims),
        2 => LinearGradWeight(dims: LinearDims),
        3 => BiasGrad(dims: ChannelDims),
        4 => Conv2d { geometry: Conv2dGeometry, bias: bool },
        5 => Conv2dGradInput(geometry: Conv2dGeometry),
        6 => Conv2dGradWeight(geometry: Conv2dGeometry),
        7 => Relu(len: usize),
        8 => Relu6(len: usize),
        9 => ReluGrad(len: usize),
        10 => Relu6Grad(len: usize),
        /// In-place variants: the output overwrites the input (which dies at this step).
        11 => ReluInPlace(len: usize),
        12 => Relu6InPlace(len: usize),
        /// `y, [dy]`: the gradient overwrites the incoming one.
        13 => ReluGradInPlace(len: usize),
        14 => Relu6GradInPlace(len: usize),
        /// The dropout mask applied in place, forward or backward.
        15 => DropoutInPlace(cfg: DropoutConfig, len: usize),
        16 => MaxPool2d(geometry: Pool2dGeometry),
        17 => MaxPool2dGrad(geometry: Pool2dGeometry),
        18 => AvgPool2d(geometry: Pool2dGeometry),
        19 => AvgPool2dGrad(geometry: Pool2dGeometry),
        20 => GlobalAvgPool(dims: ChannelDims),
        21 => GlobalAvgPoolGrad(dims: ChannelDims),
        22 => Add(len: usize),
        23 => Copy(len: usize),
        24 => BatchNormTrain(dims: ChannelDims, cfg: BatchNormConfig),
        25 => BatchNormEval(dims: ChannelDims, cfg: BatchNormConfig),
        26 => BatchNormApply(dims: ChannelDims),
        /// `gamma, beta, [running_mean, running_var, x → y], saved_mean, saved_invstd`.
        27 => BatchNormTrainInPlace(dims: ChannelDims, cfg: BatchNormConfig),
        /// `gamma, beta, running_mean, running_var, [x → y]`.
        28 => BatchNormEvalInPlace(dims: ChannelDims, cfg: BatchNormConfig),
        29 => BatchNormGradInput(dims: ChannelDims),
        30 => BatchNormGradParams(dims: ChannelDims),
        31 => Dropout(cfg: DropoutConfig, len: usize),
        32 => DropoutGrad(cfg: DropoutConfig, len: usize),
        33 => Softmax(dims: RowDims),
        34 => SoftmaxGrad(dims: RowDims),
        35 => CrossEntropy(dims: RowDims),
        36 => CrossEntropyGrad(dims: RowDims),
        37 => Mse(len: usize),
        38 => MseGrad(len: usize),
        39 => Fill(value: f32, len: usize),
        40 => Accumulate(scale: f32, len: usize),
        41 => SumSquares(len: usize),
        42 => ClipCoefficient(max_norm: f32),
        43 => SgdUpdate { cfg: SgdConfig, len: usize, clipped: bool, momentum: bool },
        44 => AdamWUpdate { cfg: AdamWConfig, len: usize, clipped: bool },
        45 => Zero(len: usize),

        // ---- half precision ----
        /// `x (f32) → y (f16)`.
        46 => CastF32ToF16(len: usize),
        /// `x (f16) → y (f32)`.
        47 => CastF16ToF32(len: usize),
        /// `g, scale, [found_inf] → unscaled`.
        48 => UnscaleGradient(len: usize),
        /// `found_inf, [scale, good_steps]`; tells the executor to skip the parameter updates
        /// after it when `found_inf` is set.
        49 => UpdateLossScale(cfg: LossScaleConfig),
        // ---- int8 ----
        50 => Quantize(params: QuantParams, len: usize),
        51 => Dequantize(params: QuantParams, len: usize),
        /// `x (i8), w (i8), bias (i32), requant (i32 pairs) → y (i8)`.
        52 => QConv2d {
            geometry: Conv2dGeometry,
            input_zero_point: i32,
            output_zero_point: i32,
            act: (i8, i8),
        },
        /// `x (i8), w (i8), bias (i32), requant (i32 pairs) → y (i8)`.
        53 => QLinear {
            dims: LinearDims,
            input_zero_point: i32,
            output_zero_point: i32,
            act: (i8, i8),
        },
        54 => QAdd(rescale: AddRescale, act: (i8, i8), len: usize),
        55 => QMaxPool2d(geometry: Pool2dGeometry),
        56 => QAvgPool2d(geometry: Pool2dGeometry, zero_point: i32),
        57 => QGlobalAvgPool(dims: ChannelDims),
        58 => CopyI8(len: usize),
        /// `w̄ (f32), w_scale → w (i8)`; `dims` sees the weight as `[channels, inner]`.
        59 => RoundWeights(dims: ChannelDims),
        /// `b̄ (f32), w_scale → b (i32)`.
        60 => RoundBias(len: usize),
        61 => QClampGrad(act: (i8, i8), len: usize),
        /// `w (i8), w_scale → w_real (f32)`.
        62 => DequantizeWeights(dims: ChannelDims),
        /// `g, w_scale → g'`.
        63 => ChannelScale { dims: ChannelDims, unit: f32, power: i8 },
        // ---- pointwise activations and products ----
        /// `x → y`.
        64 => Activation(f: Activation, len: usize),
        /// `saved, dy → dx`, `saved` being the input or the output as `f` reads it.
        65 => ActivationGrad(f: Activation, len: usize),
        /// `a [outer, channels, inner], b → y`, `b` of `a`'s size or, `broadcast`, one
        /// factor per `[outer, channels]`.
        66 => Mul { dims: ChannelDims, broadcast: bool },
        /// `dy, a → db [outer, channels]`: the gradient of a broadcast factor.
        67 => MulGradFactor(dims: ChannelDims),
        // ---- joining ----
        /// `a, b → y`: per outer index, `a`'s block then `b`'s.
        68 => Concat(dims: ConcatDims),
        /// `dy → d(part)`: the first or the second part's blocks of `dy`.
        69 => ConcatGrad { dims: ConcatDims, second: bool },
        /// `x (i8) → y (i8)`: a standalone ReLU or ReLU6, a clamp in the input's units.
        70 => QClamp(act: (i8, i8), len: usize),
        // ---- row-wise ----
        /// `x → y`: `x − ln Σ exp x` per row.
        71 => LogSoftmax(dims: RowDims),
        /// `y, dy → dx`: `dy − exp(y) · Σ dy` per row.
        72 => LogSoftmaxGrad(dims: RowDims),
        // ---- int8 tables, products and joins ----
        /// `x (i8), table (i8 [256]) → y (i8)`: `y = table[x + 128]`.
        73 => QLut(len: usize),
        /// `a (i8 [outer, channels, inner]), b (i8) → y (i8)`: the product, `b` of `a`'s size
        /// or, `broadcast`, one factor per `[outer, channels]`.
        74 => QMul { rescale: MulRescale, dims: ChannelDims, broadcast: bool },
        /// `a (i8), b (i8) → y (i8)`: per outer index, `a`'s block then `b`'s, each moved to
        /// the output's quantization.
        75 => QConcat { dims: ConcatDims, rescale: ConcatRescale },
        // ---- layout ----
        /// `x → y`: `x` with its axes reordered (a transpose; its gradient is the inverse).
        79 => Transpose(dims: PermuteDims),
        /// `x → y`: per outer index, a run of `x`'s block (a slice of one axis).
        80 => Slice(dims: SliceDims),
        /// `x → y`: per outer index, zeros with `x`'s block in the run (the converse).
        81 => Pad(dims: SliceDims),
        /// `x → y`: `x` repeated along the axes where it has 1 (numpy broadcasting).
        82 => Broadcast(dims: BroadcastDims),
        /// `dy → dx`: `dy` summed over the axes a broadcast repeated along (its gradient).
        83 => BroadcastGrad(dims: BroadcastDims),
        /// Training with running statistics: `x, gamma, beta, running_mean, running_var → y,
        /// saved_mean, saved_invstd`, normalising by the running statistics (left as they are)
        /// and saving them for the backward pass in the form a batch's are saved.
        84 => BatchNormRunning(dims: ChannelDims, cfg: BatchNormConfig),
        /// `dy, x, gamma, saved_mean, saved_invstd → dx` of [`KernelCall::BatchNormRunning`]:
        /// `dx = gamma · invstd · dy` (the statistics do not depend on `x`).
        85 => BatchNormGradInputRunning(dims: ChannelDims),
        /// `x, gamma, beta → y`: layer normalisation of each row (the trailing axes).
        86 => LayerNorm(dims: RowDims, eps: f32),
        /// `dy, x, gamma → dx` of [`KernelCall::LayerNorm`] (row statistics recomputed).
        87 => LayerNormGradInput(dims: RowDims, eps: f32),
        /// `dy, x → dgamma, dbeta` of [`KernelCall::LayerNorm`].
        88 => LayerNormGradParams(dims: RowDims, eps: f32),
        /// `x (i8) → y (i8)`: [`KernelCall::Slice`] of an int8 tensor (the same quantization).
        89 => SliceI8(dims: SliceDims),
        /// `dy, x, gamma, saved_mean, saved_invstd, dgamma, dbeta → dx` of
        /// [`KernelCall::BatchNormTrain`], from the per-channel sums `dgamma = Σ dy · x̂` and
        /// `dbeta = Σ dy` that [`KernelCall::BatchNormGradParams`] made.
        90 => BatchNormGradInputFromSums(dims: ChannelDims),
        /// `x, gamma, beta, saved_mean, saved_invstd, [dy → dy_gated], dgamma, dbeta`:
        /// [`KernelCall::BatchNormGradParams`] of a batch norm whose output `rectifier`
        /// rectified, from the rectifier's output gradient `dy`, gated in place by the
        /// rectifier's gradient worked out from `x` (a rectifier's in-place gradient and the
        /// parameter gradient after it, folded into one step when the plan is placed).
        96 => BatchNormGradParamsRectified(dims: ChannelDims, rectifier: Rectifier),
        /// `y (i8), [dy]`: [`KernelCall::QClampGrad`] with the gradient overwriting the
        /// incoming one.
        97 => QClampGradInPlace(act: (i8, i8), len: usize),
        /// `dy, w (i8), w_scale → dx`: [`KernelCall::Conv2dGradInput`] through int8 weights,
        /// each read as `w_scale[o] · w`.
        98 => QConv2dGradInput(geometry: Conv2dGeometry),
        /// `dy, w (i8), w_scale → dx`: [`KernelCall::LinearGradInput`] through int8 weights.
        99 => QLinearGradInput(dims: LinearDims),
        /// `x, w, [b], gamma, beta, running_mean, running_var → y`: [`KernelCall::Conv2d`],
        /// then [`KernelCall::BatchNormEval`] of its output with `cfg`, then the `rectifier`
        /// if any, as one step, the output normalised while it is still in cache (a frozen
        /// batch norm's chain, fused when the plan is placed).
        100 => Conv2dNormAct {
            geometry: Conv2dGeometry,
            bias: bool,
            cfg: BatchNormConfig,
            rectifier: Option<Rectifier>,
        },
        /// `y (i8) → mask (i8)`: one bit per clamp output, set where [`KernelCall::QClampGrad`]
        /// passes the gradient (`len` outputs, `len.div_ceil(8)` mask bytes).
        101 => QClampMask(act: (i8, i8), len: usize),
        /// `mask (i8), dy → dx`: [`KernelCall::QClampGrad`] from the clamp's mask.
        102 => QMaskGrad(len: usize),
        /// `mask (i8), [dy]`: [`KernelCall::QMaskGrad`] with the gradient overwriting the
        /// incoming one.
        103 => QMaskGradInPlace(len: usize),
        /// `x → h (f16), y`: [`KernelCall::CastF32ToF16`] of `x` and [`KernelCall::CastF16ToF32`]
        /// of its result as one pass, `y` holding the values of `h` as f32 (a narrowing cast
        /// and the widening right after it, fused when the plan is compiled).
        104 => RoundThroughF16(len: usize),
        /// `[x] → h (f16)`: [`KernelCall::RoundThroughF16`] with `y` written over `x`.
        105 => RoundThroughF16InPlace(len: usize),
        /// `dy, w (i8), w_scale, mask (i8), w_e (i8), w_e_scale → db, dx`: the input gradient
        /// of the int8 depthwise layer `depthwise` (`groups == c_in == c_out`), stopped by the
        /// clamp `mask` of the 1x1 layer before it (`c_in` inputs), into that layer's bias
        /// gradient and input gradient, a channel at a time (`crate::quant::chain`).
        110 => QDepthwiseChainGrad { depthwise: Conv2dGeometry, c_in: usize },
        /// `dy, w (i8), w_scale, mask (i8) → db`: [`KernelCall::QDepthwiseChainGrad`]
        /// without the input gradient of the layer before.
        111 => QDepthwiseChainBiasGrad(depthwise: Conv2dGeometry),
        /// `dy, w_p (i8), w_p_scale, mask_p (i8), w (i8), w_scale, mask (i8), w_e (i8),
        /// w_e_scale → db_depthwise, db, dx, scratch`: an inverted-residual block's backward
        /// pass from its output gradient `dy` (`c_out` channels): the 1x1 projection's input
        /// gradient a channel plane at a time (into `scratch`), stopped by the depthwise
        /// clamp `mask_p`, its bias gradient, then [`KernelCall::QDepthwiseChainGrad`].
        112 => QBlockGrad { depthwise: Conv2dGeometry, c_in: usize, c_out: usize },
        /// `dy, w_p (i8), w_p_scale, mask_p (i8), w (i8), w_scale, mask (i8) → db_depthwise,
        /// db, scratch`: [`KernelCall::QBlockGrad`] without the block's input gradient.
        113 => QBlockBiasGrad { depthwise: Conv2dGeometry, c_out: usize },
        /// `x (f16), gamma, beta, saved_mean, saved_invstd, [dy → dy_gated], dgamma, dbeta`:
        /// [`KernelCall::BatchNormGradParamsRectified`] of a batch norm in f16 storage, its
        /// input `x` read as f16, the rectifier's input rounded to f16 (the widened f16 copy
        /// of the batch norm's output that a mixed-precision step rectifies) and `dy` rounded
        /// to f16 (the gradient's round trip), folded with the rectifier's recomputation and
        /// that round trip when the plan is compiled.
        114 => BatchNormGradParamsRectifiedF16(dims: ChannelDims, rectifier: Rectifier),
        /// `dy, x (f16), gamma, saved_mean, saved_invstd, dgamma, dbeta → dx`:
        /// [`KernelCall::BatchNormGradInputFromSums`] of a batch norm in f16 storage, its
        /// input `x` read as f16 and `dx` rounded to f16 (held as f32): the widening of `x`
        /// and the round trip of `dx` that a mixed-precision step runs around it, folded
        /// into it when the plan is compiled.
        115 => BatchNormGradInputFromSumsF16(dims: ChannelDims),
        /// `x → y, h (f16)`: `y = rectifier(f32(f16(x)))` and `h = f16(y)`: a round trip
        /// through f16 whose f16 copy nothing reads, the rectifier of its result and the
        /// cast of that to f16, as one pass (folded when the plan is compiled).
        116 => RectifyThroughF16(len: usize, rectifier: Rectifier),
        /// `[x] → h (f16)`: [`KernelCall::RectifyThroughF16`] with `y` written over `x`.
        117 => RectifyThroughF16InPlace(len: usize, rectifier: Rectifier),
    }
}

/// How a kernel uses an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    /// Read and written in place (running statistics, parameters, optimizer state).
    Update,
    /// Overwritten.
    Write,
}

/// One operand slot of a kernel: how it is used, its element type and element count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub access: Access,
    pub dtype: DType,
    pub len: usize,
}

/// The operands a kernel expects, in order: reads, then in-place updates, then writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signature {
    pub slots: heapless::Vec<Slot, MAX_OPERANDS>,
}

impl Signature {
    fn slot(mut self, access: Access, dtype: DType, len: usize) -> Self {
        // Every kernel below declares at most MAX_OPERANDS slots.
        let _ = self.slots.push(Slot { access, dtype, len });
        self
    }
    fn read(self, len: usize) -> Self {
        self.slot(Access::Read, DType::F32, len)
    }
    fn read_if(self, yes: bool, len: usize) -> Self {
        if yes {
            self.read(len)
        } else {
            self
        }
    }
    fn update(self, len: usize) -> Self {
        self.slot(Access::Update, DType::F32, len)
    }
    fn write(self, len: usize) -> Self {
        self.slot(Access::Write, DType::F32, len)
    }
    fn labels(self, len: usize) -> Self {
        self.slot(Access::Read, DType::I32, len)
    }
    fn read_as(self, dtype: DType, len: usize) -> Self {
        self.slot(Access::Read, dtype, len)
    }
    fn write_as(self, dtype: DType, len: usize) -> Self {
        self.slot(Access::Write, dtype, len)
    }
    /// An int8 layer's `w, bias, requant` operands for `channels` outputs.
    fn int8_weights(self, weight_len: usize, channels: usize) -> Self {
        self.read_as(DType::I8, weight_len)
            .read_as(DType::I32, channels)
            .read_as(DType::I32, 2 * channels)
    }
}

/// A fused depthwise backward pass's first operands: `dy, w (i8), w_scale, mask (i8)`.
fn depthwise_chain(s: Signature, g: &Conv2dGeometry) -> Signature {
    s.read(g.output_len())
        .read_as(DType::I8, g.weight_len())
        .read(g.c_out)
        .read_as(DType::I8, mask_bytes(g.input_len()))
}

/// A fused block's first operands: `dy, w_p (i8), w_p_scale, mask_p (i8)` of a projection
/// to `c_out` channels, then [`depthwise_chain`]'s but its `dy`.
fn block(s: Signature, g: &Conv2dGeometry, c_out: usize) -> Signature {
    s.read(g.n * c_out * g.out_h * g.out_w)
        .read_as(DType::I8, c_out * g.c_out)
        .read(c_out)
        .read_as(DType::I8, mask_bytes(g.output_len()))
        .read_as(DType::I8, g.weight_len())
        .read(g.c_out)
        .read_as(DType::I8, mask_bytes(g.input_len()))
}

/// A valid depthwise geometry: one input channel per output channel.
fn check_depthwise(g: &Conv2dGeometry) -> Result<(), GeometryError> {
    g.check()?;
    match g.groups == g.c_in && g.c_in == g.c_out {
        true => Ok(()),
        false => Err("a depthwise layer has one group per channel"),
    }
}

impl KernelCall {
    /// The kernel's operands; the executor checks every step against it before running.
    pub fn signature(&self) -> Signature {
        let s = Signature::default();
        match *self {
            KernelCall::Linear { dims: d, bias } => {
                s.read(d.n * d.k).read(d.m * d.k).read_if(bias, d.m).write(d.n * d.m)
            }
            KernelCall::LinearGradInput(d) => s.read(d.n * d.m).read(d.m * d.k).write(d.n * d.k),
            KernelCall::LinearGradWeight(d) => s.read(d.n * d.m).read(d.n * d.k).write(d.m * d.k),
            KernelCall::BiasGrad(d) => s.read(d.len()).write(d.channels),
            KernelCall::Conv2d { geometry: g, bias } => s
                .read(g.input_len())
                .read(g.weight_len())
                .read_if(bias, g.c_out)
                .write(g.output_len()),
            KernelCall::Conv2dNormAct { geometry: g, bias, .. } => {
                let s = s.read(g.input_len()).read(g.weight_len()).read_if(bias, g.c_out);
                s.read(g.c_out).read(g.c_out).read(g.c_out).read(g.c_out).write(g.output_len())
            }
            KernelCall::Conv2dGradInput(g) => {
                s.read(g.output_len()).read(g.weight_len()).write(g.input_len())
            }
            KernelCall::Conv2dGradWeight(g) => {
                s.read(g.output_len()).read(g.input_len()).write(g.weight_len())
            }
            KernelCall::Relu(n)
            | KernelCall::Relu6(n)
            | KernelCall::Copy(n)
            | KernelCall::Dropout(_, n) => s.read(n).write(n),
            KernelCall::DropoutGrad(_, n) => s.read(n).write(n),
            KernelCall::ReluInPlace(n)
            | KernelCall::Relu6InPlace(n)
            | KernelCall::DropoutInPlace(_, n) => s.update(n),
            KernelCall::ReluGradInPlace(n) | KernelCall::Relu6GradInPlace(n) => s.read(n).update(n),
            KernelCall::ReluGrad(n) | KernelCall::Relu6Grad(n) | KernelCall::Add(n) => {
                s.read(n).read(n).write(n)
            }
            KernelCall::MaxPool2d(p) | KernelCall::AvgPool2d(p) => {
                s.read(p.input_len()).write(p.output_len())
            }
            KernelCall::MaxPool2dGrad(p) => {
                s.read(p.input_len()).read(p.output_len()).write(p.input_len())
            }
            KernelCall::AvgPool2dGrad(p) => s.read(p.output_len()).write(p.input_len()),
            KernelCall::GlobalAvgPool(d) => s.read(d.len()).write(d.outer * d.channels),
            KernelCall::GlobalAvgPoolGrad(d) => s.read(d.outer * d.channels).write(d.len()),
            KernelCall::BatchNormTrain(d, _) => {
                let c = d.channels;
                s.read(d.len()).read(c).read(c).update(c).update(c).write(d.len()).write(c).write(c)
            }
            KernelCall::BatchNormEval(d, _) => {
                let c = d.channels;
                s.read(d.len()).read(c).read(c).read(c).read(c).write(d.len())
            }
            KernelCall::BatchNormGradInput(d) | KernelCall::BatchNormGradInputRunning(d) => {
                let c = d.channels;
                s.read(d.len()).read(d.len()).read(c).read(c).read(c).write(d.len())
            }
            KernelCall::BatchNormGradInputFromSums(d) => {
                let c = d.channels;
                let s = s.read(d.len()).read(d.len()).read(c).read(c).read(c);
                s.read(c).read(c).write(d.len())
            }
            KernelCall::BatchNormGradInputFromSumsF16(d) => {
                let (c, s) = (d.channels, s.read(d.len()).slot(Access::Read, DType::F16, d.len()));
                s.read(c).read(c).read(c).read(c).read(c).write(d.len())
            }
            KernelCall::BatchNormRunning(d, _) => {
                let c = d.channels;
                s.read(d.len()).read(c).read(c).read(c).read(c).write(d.len()).write(c).write(c)
            }
            KernelCall::BatchNormApply(d) => {
                let c = d.channels;
                s.read(d.len()).read(c).read(c).read(c).read(c).write(d.len())
            }
            KernelCall::BatchNormTrainInPlace(d, _) => {
                let c = d.channels;
                s.read(c).read(c).update(c).update(c).update(d.len()).write(c).write(c)
            }
            KernelCall::BatchNormEvalInPlace(d, _) => {
                let c = d.channels;
                s.read(c).read(c).read(c).read(c).update(d.len())
            }
            KernelCall::BatchNormGradParams(d) => {
                let c = d.channels;
                s.read(d.len()).read(d.len()).read(c).read(c).write(c).write(c)
            }
            KernelCall::BatchNormGradParamsRectified(d, _) => {
                let c = d.channels;
                let s = s.read(d.len()).read(c).read(c).read(c).read(c).update(d.len());
                s.write(c).write(c)
            }
            KernelCall::BatchNormGradParamsRectifiedF16(d, _) => {
                let (c, s) = (d.channels, s.slot(Access::Read, DType::F16, d.len()));
                let s = s.read(c).read(c).read(c).read(c).update(d.len());
                s.write(c).write(c)
            }
            KernelCall::Softmax(r) | KernelCall::LogSoftmax(r) => {
                s.read(r.rows * r.cols).write(r.rows * r.cols)
            }
            KernelCall::LayerNorm(r, _) => {
                let n = r.rows * r.cols;
                s.read(n).read(r.cols).read(r.cols).write(n)
            }
            KernelCall::LayerNormGradInput(r, _) => {
                let n = r.rows * r.cols;
                s.read(n).read(n).read(r.cols).write(n)
            }
            KernelCall::LayerNormGradParams(r, _) => {
                let n = r.rows * r.cols;
                s.read(n).read(n).write(r.cols).write(r.cols)
            }
            KernelCall::SoftmaxGrad(r) | KernelCall::LogSoftmaxGrad(r) => {
                let n = r.rows * r.cols;
                s.read(n).read(n).write(n)
            }
            KernelCall::CrossEntropy(r) => s.read(r.rows * r.cols).labels(r.rows).write(1),
            KernelCall::CrossEntropyGrad(r) => {
                s.read(r.rows * r.cols).labels(r.rows).read(1).write(r.rows * r.cols)
            }
            KernelCall::Mse(n) => s.read(n).read(n).write(1),
            KernelCall::MseGrad(n) => s.read(n).read(n).read(1).write(n),
            KernelCall::Fill(_, n) => s.write(n),
            KernelCall::Accumulate(_, n) => s.read(n).update(n),
            KernelCall::SumSquares(n) => s.read(n).update(1),
            KernelCall::ClipCoefficient(_) => s.read(1).write(1),
            KernelCall::SgdUpdate { len, clipped, momentum, .. } => {
                let s = s.read(len).read_if(clipped, 1).update(len);
                if momentum {
                    s.update(len)
                } else {
                    s
                }
            }
            KernelCall::AdamWUpdate { len, clipped, .. } => {
                s.read(len).read_if(clipped, 1).update(len).update(len).update(len)
            }
            KernelCall::Zero(n) => s.update(n),
            KernelCall::Quantize(_, n) => s.read(n).write_as(DType::I8, n),
            KernelCall::Dequantize(_, n) => s.read_as(DType::I8, n).write(n),
            KernelCall::QConv2d { geometry: g, .. } => s
                .read_as(DType::I8, g.input_len())
                .int8_weights(g.weight_len(), g.c_out)
                .write_as(DType::I8, g.output_len()),
            KernelCall::QLinear { dims: d, .. } => s
                .read_as(DType::I8, d.n * d.k)
                .int8_weights(d.m * d.k, d.m)
                .write_as(DType::I8, d.n * d.m),
            KernelCall::QAdd(_, _, n) => {
                s.read_as(DType::I8, n).read_as(DType::I8, n).write_as(DType::I8, n)
            }
            KernelCall::QMaxPool2d(p) | KernelCall::QAvgPool2d(p, _) => {
                s.read_as(DType::I8, p.input_len()).write_as(DType::I8, p.output_len())
            }
            KernelCall::QGlobalAvgPool(d) => {
                s.read_as(DType::I8, d.len()).write_as(DType::I8, d.outer * d.channels)
            }
            KernelCall::CopyI8(n) | KernelCall::QClamp(_, n) => {
                s.read_as(DType::I8, n).write_as(DType::I8, n)
            }
            KernelCall::RoundWeights(d) => {
                s.read(d.len()).read(d.channels).write_as(DType::I8, d.len())
            }
            KernelCall::RoundBias(n) => s.read(n).read(n).write_as(DType::I32, n),
            KernelCall::QClampGrad(_, n) => s.read_as(DType::I8, n).read(n).write(n),
            KernelCall::QClampGradInPlace(_, n) => s.read_as(DType::I8, n).update(n),
            KernelCall::QClampMask(_, n) => {
                s.read_as(DType::I8, n).write_as(DType::I8, mask_bytes(n))
            }
            KernelCall::QMaskGrad(n) => s.read_as(DType::I8, mask_bytes(n)).read(n).write(n),
            KernelCall::QMaskGradInPlace(n) => s.read_as(DType::I8, mask_bytes(n)).update(n),
            KernelCall::QConv2dGradInput(g) => s
                .read(g.output_len())
                .read_as(DType::I8, g.weight_len())
                .read(g.c_out)
                .write(g.input_len()),
            KernelCall::QLinearGradInput(d) => {
                s.read(d.n * d.m).read_as(DType::I8, d.m * d.k).read(d.m).write(d.n * d.k)
            }
            KernelCall::QDepthwiseChainGrad { depthwise: g, c_in } => depthwise_chain(s, &g)
                .read_as(DType::I8, g.c_out * c_in)
                .read(g.c_out)
                .write(g.c_out)
                .write(g.n * c_in * g.h * g.w),
            KernelCall::QDepthwiseChainBiasGrad(g) => depthwise_chain(s, &g).write(g.c_out),
            KernelCall::QBlockGrad { depthwise: g, c_in, c_out } => block(s, &g, c_out)
                .read_as(DType::I8, g.c_out * c_in)
                .read(g.c_out)
                .write(g.c_out)
                .write(g.c_out)
                .write(g.n * c_in * g.h * g.w)
                .write(g.out_h * g.out_w),
            KernelCall::QBlockBiasGrad { depthwise: g, c_out } => {
                block(s, &g, c_out).write(g.c_out).write(g.c_out).write(g.out_h * g.out_w)
            }
            KernelCall::DequantizeWeights(d) => {
                s.read_as(DType::I8, d.len()).read(d.channels).write(d.len())
            }
            KernelCall::ChannelScale { dims: d, .. } => {
                s.read(d.len()).read(d.channels).write(d.len())
            }
            KernelCall::CastF32ToF16(n) => s.read(n).slot(Access::Write, DType::F16, n),
            KernelCall::CastF16ToF32(n) => s.slot(Access::Read, DType::F16, n).write(n),
            KernelCall::RoundThroughF16(n) => s.read(n).slot(Access::Write, DType::F16, n).write(n),
            KernelCall::RoundThroughF16InPlace(n) => s.update(n).slot(Access::Write, DType::F16, n),
            KernelCall::RectifyThroughF16(n, _) => {
                s.read(n).write(n).slot(Access::Write, DType::F16, n)
            }
            KernelCall::RectifyThroughF16InPlace(n, _) => {
                s.update(n).slot(Access::Write, DType::F16, n)
            }
            KernelCall::UnscaleGradient(n) => s.read(n).read(1).update(1).write(n),
            KernelCall::UpdateLossScale(_) => s.read(1).update(1).update(1),
            KernelCall::Activation(_, n) => s.read(n).write(n),
            KernelCall::ActivationGrad(_, n) => s.read(n).read(n).write(n),
            KernelCall::Mul { dims: d, broadcast } => {
                let factor = if broadcast { d.outer * d.channels } else { d.len() };
                s.read(d.len()).read(factor).write(d.len())
            }
            KernelCall::MulGradFactor(d) => {
                s.read(d.len()).read(d.len()).write(d.outer * d.channels)
            }
            KernelCall::Concat(d) => {
                s.read(d.part_len(false)).read(d.part_len(true)).write(d.len())
            }
            KernelCall::ConcatGrad { dims: d, second } => s.read(d.len()).write(d.part_len(second)),
            KernelCall::QLut(n) => {
                s.read_as(DType::I8, n).read_as(DType::I8, 256).write_as(DType::I8, n)
            }
            KernelCall::QMul { dims: d, broadcast, .. } => {
                let factor = if broadcast { d.outer * d.channels } else { d.len() };
                s.read_as(DType::I8, d.len())
                    .read_as(DType::I8, factor)
                    .write_as(DType::I8, d.len())
            }
            KernelCall::QConcat { dims: d, .. } => s
                .read_as(DType::I8, d.part_len(false))
                .read_as(DType::I8, d.part_len(true))
                .write_as(DType::I8, d.len()),
            KernelCall::Transpose(d) => s.read(d.len()).write(d.len()),
            KernelCall::Slice(d) => s.read(d.whole_len()).write(d.part_len()),
            KernelCall::SliceI8(d) => {
                s.read_as(DType::I8, d.whole_len()).write_as(DType::I8, d.part_len())
            }
            KernelCall::Pad(d) => s.read(d.part_len()).write(d.whole_len()),
            KernelCall::Broadcast(d) => s.read(d.from_len()).write(d.to_len()),
            KernelCall::BroadcastGrad(d) => s.read(d.to_len()).write(d.from_len()),
        }
    }

    /// Checks the kernel's settings (groups, windows, sizes), so its signature and its loops
    /// stay in range. Element-wise kernels have nothing to check beyond their length.
    pub fn check(&self) -> Result<(), GeometryError> {
        match self {
            KernelCall::Linear { dims, .. }
            | KernelCall::LinearGradInput(dims)
            | KernelCall::QLinearGradInput(dims)
            | KernelCall::LinearGradWeight(dims) => dims.check(),
            KernelCall::Conv2d { geometry, .. }
            | KernelCall::Conv2dNormAct { geometry, .. }
            | KernelCall::Conv2dGradInput(geometry)
            | KernelCall::QConv2dGradInput(geometry)
            | KernelCall::Conv2dGradWeight(geometry)
            | KernelCall::QConv2d { geometry, .. } => geometry.check(),
            KernelCall::QDepthwiseChainGrad { depthwise, c_in } => {
                check_depthwise(depthwise)?;
                let g = depthwise;
                crate::geometry::counts(&[&[g.n, *c_in, g.h, g.w], &[g.c_out, *c_in]])
            }
            KernelCall::QDepthwiseChainBiasGrad(depthwise) => check_depthwise(depthwise),
            KernelCall::QBlockGrad { depthwise: g, c_in, c_out } => {
                check_depthwise(g)?;
                crate::geometry::counts(&[
                    &[g.n, *c_in, g.h, g.w],
                    &[g.c_out, *c_in],
                    &[g.n, *c_out, g.out_h, g.out_w],
                    &[g.c_out, *c_out],
                ])
            }
            KernelCall::QBlockBiasGrad { depthwise: g, c_out } => {
                check_depthwise(g)?;
                crate::geometry::counts(&[&[g.n, *c_out, g.out_h, g.out_w], &[g.c_out, *c_out]])
            }
            KernelCall::QLinear { dims, .. } => dims.check(),
            KernelCall::MaxPool2d(p)
            | KernelCall::MaxPool2dGrad(p)
            | KernelCall::AvgPool2d(p)
            | KernelCall::AvgPool2dGrad(p)
            | KernelCall::QMaxPool2d(p)
            | KernelCall::QAvgPool2d(p, _) => p.check(),
            KernelCall::QGlobalAvgPool(d)
            | KernelCall::RoundWeights(d)
            | KernelCall::DequantizeWeights(d)
            | KernelCall::ChannelScale { dims: d, .. }
            | KernelCall::Mul { dims: d, .. }
            | KernelCall::QMul { dims: d, .. }
            | KernelCall::MulGradFactor(d) => d.check(),
            KernelCall::Concat(d)
            | KernelCall::ConcatGrad { dims: d, .. }
            | KernelCall::QConcat { dims: d, .. } => d.check(),
            KernelCall::Transpose(d) => d.check(),
            KernelCall::Broadcast(d) | KernelCall::BroadcastGrad(d) => d.check(),
            KernelCall::Slice(d) | KernelCall::SliceI8(d) | KernelCall::Pad(d) => d.check(),
            KernelCall::BiasGrad(d)
            | KernelCall::GlobalAvgPool(d)
            | KernelCall::GlobalAvgPoolGrad(d)
            | KernelCall::BatchNormTrain(d, _)
            | KernelCall::BatchNormEval(d, _)
            | KernelCall::BatchNormApply(d)
            | KernelCall::BatchNormTrainInPlace(d, _)
            | KernelCall::BatchNormEvalInPlace(d, _)
            | KernelCall::BatchNormGradInput(d)
            | KernelCall::BatchNormGradParams(d)
            | KernelCall::BatchNormRunning(d, _)
            | KernelCall::BatchNormGradInputRunning(d)
            | KernelCall::BatchNormGradInputFromSums(d)
            | KernelCall::BatchNormGradInputFromSumsF16(d)
            | KernelCall::BatchNormGradParamsRectified(d, _)
            | KernelCall::BatchNormGradParamsRectifiedF16(d, _) => d.check(),
            KernelCall::Softmax(r)
            | KernelCall::SoftmaxGrad(r)
            | KernelCall::LogSoftmax(r)
            | KernelCall::LogSoftmaxGrad(r)
            | KernelCall::CrossEntropy(r)
            | KernelCall::CrossEntropyGrad(r)
            | KernelCall::LayerNorm(r, _)
            | KernelCall::LayerNormGradInput(r, _)
            | KernelCall::LayerNormGradParams(r, _) => r.check(),
            KernelCall::Relu(_)
            | KernelCall::Relu6(_)
            | KernelCall::ReluGrad(_)
            | KernelCall::Relu6Grad(_)
            | KernelCall::ReluInPlace(_)
            | KernelCall::Relu6InPlace(_)
            | KernelCall::ReluGradInPlace(_)
            | KernelCall::Relu6GradInPlace(_)
            | KernelCall::DropoutInPlace(..)
            | KernelCall::Add(_)
            | KernelCall::Copy(_)
            | KernelCall::Dropout(..)
            | KernelCall::DropoutGrad(..)
            | KernelCall::Mse(_)
            | KernelCall::MseGrad(_)
            | KernelCall::Fill(..)
            | KernelCall::Accumulate(..)
            | KernelCall::SumSquares(_)
            | KernelCall::ClipCoefficient(_)
            | KernelCall::SgdUpdate { .. }
            | KernelCall::AdamWUpdate { .. }
            | KernelCall::Zero(_)
            | KernelCall::CastF32ToF16(_)
            | KernelCall::CastF16ToF32(_)
            | KernelCall::RoundThroughF16(_)
            | KernelCall::RoundThroughF16InPlace(_)
            | KernelCall::RectifyThroughF16(..)
            | KernelCall::RectifyThroughF16InPlace(..)
            | KernelCall::UnscaleGradient(_)
            | KernelCall::UpdateLossScale(_)
            | KernelCall::Quantize(..)
            | KernelCall::Dequantize(..)
            | KernelCall::QAdd(..)
            | KernelCall::CopyI8(_)
            | KernelCall::RoundBias(_)
            | KernelCall::QClampGrad(..)
            | KernelCall::QClampGradInPlace(..)
            | KernelCall::QClampMask(..)
            | KernelCall::QMaskGrad(_)
            | KernelCall::QMaskGradInPlace(_)
            | KernelCall::QClamp(..)
            | KernelCall::QLut(_)
            | KernelCall::Activation(..)
            | KernelCall::ActivationGrad(..) => Ok(()),
        }
    }

    /// Floating-point operations of one call, counting a multiply-accumulate as two; a
    /// documented estimate for element-wise and normalisation kernels.
    pub fn flops(&self) -> u64 {
        let flops = match *self {
            KernelCall::Linear { dims: d, .. }
            | KernelCall::LinearGradInput(d)
            | KernelCall::QLinearGradInput(d)
            | KernelCall::LinearGradWeight(d) => 2 * d.n * d.k * d.m,
            KernelCall::Conv2d { geometry: g, .. }
            | KernelCall::Conv2dGradInput(g)
            | KernelCall::QConv2dGradInput(g)
            | KernelCall::Conv2dGradWeight(g) => 2 * g.macs(),
            // The depthwise input gradient and the 1x1 layer's, a multiply-add each.
            KernelCall::QDepthwiseChainGrad { depthwise: g, c_in } => {
                2 * g.macs() + 2 * g.input_len() * c_in
            }
            KernelCall::QDepthwiseChainBiasGrad(g) => 2 * g.macs() + g.input_len(),
            KernelCall::QBlockGrad { depthwise: g, c_in, c_out } => {
                2 * (g.macs() + g.input_len() * c_in + g.output_len() * c_out)
            }
            KernelCall::QBlockBiasGrad { depthwise: g, c_out } => {
                2 * (g.macs() + g.output_len() * c_out) + g.input_len()
            }
            // The batch norm's four operations and the rectifier's one per output.
            KernelCall::Conv2dNormAct { geometry: g, .. } => 2 * g.macs() + 5 * g.output_len(),
            KernelCall::MaxPool2d(p)
            | KernelCall::MaxPool2dGrad(p)
            | KernelCall::AvgPool2d(p)
            | KernelCall::AvgPool2dGrad(p) => p.output_len() * p.kh * p.kw,
            KernelCall::BiasGrad(d)
            | KernelCall::GlobalAvgPool(d)
            | KernelCall::GlobalAvgPoolGrad(d) => d.len(),
            // Mean, variance, normalise (~6 per element); the gradient needs two reductions.
            KernelCall::BatchNormTrain(d, _) | KernelCall::BatchNormTrainInPlace(d, _) => {
                6 * d.len()
            }
            KernelCall::BatchNormEval(d, _)
            | KernelCall::BatchNormEvalInPlace(d, _)
            | KernelCall::BatchNormApply(d)
            | KernelCall::BatchNormRunning(d, _) => 4 * d.len(),
            KernelCall::BatchNormGradInputRunning(d) => 2 * d.len(),
            KernelCall::BatchNormGradInput(d) => 8 * d.len(),
            KernelCall::BatchNormGradInputFromSums(d) => 5 * d.len(),
            // And the rounding of `dx`.
            KernelCall::BatchNormGradInputFromSumsF16(d) => 6 * d.len(),
            KernelCall::BatchNormGradParams(d) => 4 * d.len(),
            KernelCall::BatchNormGradParamsRectified(d, _)
            | KernelCall::BatchNormGradParamsRectifiedF16(d, _) => 9 * d.len(),
            KernelCall::Softmax(r)
            | KernelCall::SoftmaxGrad(r)
            | KernelCall::LogSoftmax(r)
            | KernelCall::LogSoftmaxGrad(r)
            | KernelCall::CrossEntropy(r) => 4 * r.rows * r.cols,
            KernelCall::CrossEntropyGrad(r) => 5 * r.rows * r.cols,
            // Mean, variance, normalise; the gradients recompute the statistics.
            KernelCall::LayerNorm(r, _) => 6 * r.rows * r.cols,
            KernelCall::LayerNormGradInput(r, _) => 12 * r.rows * r.cols,
            KernelCall::LayerNormGradParams(r, _) => 8 * r.rows * r.cols,
            KernelCall::Relu(n)
            | KernelCall::Relu6(n)
            | KernelCall::ReluGrad(n)
            | KernelCall::Relu6Grad(n)
            | KernelCall::ReluInPlace(n)
            | KernelCall::Relu6InPlace(n)
            | KernelCall::ReluGradInPlace(n)
            | KernelCall::Relu6GradInPlace(n)
            | KernelCall::Add(n)
            | KernelCall::Dropout(_, n)
            | KernelCall::DropoutGrad(_, n)
            | KernelCall::DropoutInPlace(_, n) => n,
            KernelCall::Mse(n) | KernelCall::MseGrad(n) => 3 * n,
            KernelCall::Accumulate(_, n) | KernelCall::SumSquares(n) => 2 * n,
            KernelCall::SgdUpdate { len, .. } => 4 * len,
            KernelCall::AdamWUpdate { len, .. } => 12 * len,
            KernelCall::Copy(_)
            | KernelCall::Fill(..)
            | KernelCall::Zero(_)
            | KernelCall::ClipCoefficient(_) => 0,
            // Integer multiply-accumulates, counted like float ones so reports compare.
            KernelCall::QConv2d { geometry: g, .. } => 2 * g.macs(),
            KernelCall::QLinear { dims: d, .. } => 2 * d.n * d.k * d.m,
            KernelCall::QMaxPool2d(p) | KernelCall::QAvgPool2d(p, _) => {
                p.output_len() * p.kh * p.kw
            }
            KernelCall::QGlobalAvgPool(d) => d.len(),
            KernelCall::Quantize(_, n)
            | KernelCall::Dequantize(_, n)
            | KernelCall::QAdd(_, _, n)
            | KernelCall::RoundBias(n)
            | KernelCall::QClampGrad(_, n)
            | KernelCall::QClampGradInPlace(_, n)
            | KernelCall::QClampMask(_, n)
            | KernelCall::QMaskGrad(n)
            | KernelCall::QMaskGradInPlace(n)
            | KernelCall::QClamp(_, n)
            | KernelCall::QLut(n) => n,
            KernelCall::QMul { dims: d, .. } => d.len(),
            KernelCall::QConcat { dims: d, .. } => d.len(),
            KernelCall::RoundWeights(d)
            | KernelCall::DequantizeWeights(d)
            | KernelCall::ChannelScale { dims: d, .. } => d.len(),
            KernelCall::CopyI8(_) => 0,
            KernelCall::CastF32ToF16(n)
            | KernelCall::CastF16ToF32(n)
            | KernelCall::UnscaleGradient(n) => n,
            KernelCall::RoundThroughF16(n) | KernelCall::RoundThroughF16InPlace(n) => 2 * n,
            KernelCall::RectifyThroughF16(n, _) | KernelCall::RectifyThroughF16InPlace(n, _) => {
                3 * n
            }
            KernelCall::UpdateLossScale(_) => 0,
            KernelCall::Activation(f, n) => f.flops_per_element() * n,
            // The slope (a few operations) times the upstream gradient.
            KernelCall::ActivationGrad(_, n) => 3 * n,
            KernelCall::Mul { dims: d, .. } => d.len(),
            KernelCall::MulGradFactor(d) => 2 * d.len(),
            KernelCall::Concat(_)
            | KernelCall::ConcatGrad { .. }
            | KernelCall::Transpose(_)
            | KernelCall::Slice(_)
            | KernelCall::SliceI8(_)
            | KernelCall::Pad(_)
            | KernelCall::Broadcast(_) => 0,
            KernelCall::BroadcastGrad(d) => d.to_len(),
        };
        flops as u64
    }

    /// Whether the kernel changes parameters and their optimizer state: the steps a loss
    /// scaler skips after an overflow.
    pub fn updates_parameters(&self) -> bool {
        matches!(self, KernelCall::SgdUpdate { .. } | KernelCall::AdamWUpdate { .. })
    }

    /// A short name for errors and reports.
    pub fn name(&self) -> &'static str {
        match self {
            KernelCall::Linear { .. } => "linear",
            KernelCall::LinearGradInput(_) => "linear_grad_input",
            KernelCall::LinearGradWeight(_) => "linear_grad_weight",
            KernelCall::BiasGrad(_) => "bias_grad",
            KernelCall::Conv2d { .. } => "conv2d",
            KernelCall::Conv2dGradInput(_) => "conv2d_grad_input",
            KernelCall::Conv2dGradWeight(_) => "conv2d_grad_weight",
            KernelCall::Conv2dNormAct { .. } => "conv2d_norm_act",
            KernelCall::Relu(_) => "relu",
            KernelCall::Relu6(_) => "relu6",
            KernelCall::ReluGrad(_) => "relu_grad",
            KernelCall::Relu6Grad(_) => "relu6_grad",
            KernelCall::ReluInPlace(_) => "relu_in_place",
            KernelCall::Relu6InPlace(_) => "relu6_in_place",
            KernelCall::ReluGradInPlace(_) => "relu_grad_in_place",
            KernelCall::Relu6GradInPlace(_) => "relu6_grad_in_place",
            KernelCall::DropoutInPlace(..) => "dropout_in_place",
            KernelCall::MaxPool2d(_) => "max_pool2d",
            KernelCall::MaxPool2dGrad(_) => "max_pool2d_grad",
            KernelCall::AvgPool2d(_) => "avg_pool2d",
            KernelCall::AvgPool2dGrad(_) => "avg_pool2d_grad",
            KernelCall::GlobalAvgPool(_) => "global_avg_pool",
            KernelCall::GlobalAvgPoolGrad(_) => "global_avg_pool_grad",
            KernelCall::Add(_) => "add",
            KernelCall::Copy(_) => "copy",
            KernelCall::BatchNormTrain(..) => "batch_norm_train",
            KernelCall::BatchNormEval(..) => "batch_norm_eval",
            KernelCall::BatchNormApply(_) => "batch_norm_apply",
            KernelCall::BatchNormTrainInPlace(..) => "batch_norm_train_in_place",
            KernelCall::BatchNormEvalInPlace(..) => "batch_norm_eval_in_place",
            KernelCall::BatchNormGradInput(_) => "batch_norm_grad_input",
            KernelCall::BatchNormGradParams(_) => "batch_norm_grad_params",
            KernelCall::BatchNormRunning(..) => "batch_norm_running",
            KernelCall::BatchNormGradInputRunning(_) => "batch_norm_grad_input_running",
            KernelCall::BatchNormGradInputFromSums(_) => "batch_norm_grad_input_from_sums",
            KernelCall::BatchNormGradInputFromSumsF16(_) => "batch_norm_grad_input_from_sums_f16",
            KernelCall::BatchNormGradParamsRectified(..) => "batch_norm_grad_params_rectified",
            KernelCall::BatchNormGradParamsRectifiedF16(..) => {
                "batch_norm_grad_params_rectified_f16"
            }
            KernelCall::Dropout(..) => "dropout",
            KernelCall::DropoutGrad(..) => "dropout_grad",
            KernelCall::Softmax(_) => "softmax",
            KernelCall::SoftmaxGrad(_) => "softmax_grad",
            KernelCall::LogSoftmax(_) => "log_softmax",
            KernelCall::LogSoftmaxGrad(_) => "log_softmax_grad",
            KernelCall::LayerNorm(..) => "layer_norm",
            KernelCall::LayerNormGradInput(..) => "layer_norm_grad_input",
            KernelCall::LayerNormGradParams(..) => "layer_norm_grad_params",
            KernelCall::CrossEntropy(_) => "cross_entropy",
            KernelCall::CrossEntropyGrad(_) => "cross_entropy_grad",
            KernelCall::Mse(_) => "mse",
            KernelCall::MseGrad(_) => "mse_grad",
            KernelCall::Fill(..) => "fill",
            KernelCall::Accumulate(..) => "accumulate",
            KernelCall::SumSquares(_) => "sum_squares",
            KernelCall::ClipCoefficient(_) => "clip_coefficient",
            KernelCall::SgdUpdate { .. } => "sgd_update",
            KernelCall::AdamWUpdate { .. } => "adamw_update",
            KernelCall::Zero(_) => "zero",
            KernelCall::Quantize(..) => "quantize",
            KernelCall::Dequantize(..) => "dequantize",
            KernelCall::QConv2d { .. } => "qconv2d",
            KernelCall::QLinear { .. } => "qlinear",
            KernelCall::QAdd(..) => "qadd",
            KernelCall::QMaxPool2d(_) => "qmax_pool2d",
            KernelCall::QAvgPool2d(..) => "qavg_pool2d",
            KernelCall::QGlobalAvgPool(_) => "qglobal_avg_pool",
            KernelCall::CopyI8(_) => "copy_i8",
            KernelCall::RoundWeights(_) => "round_weights",
            KernelCall::RoundBias(_) => "round_bias",
            KernelCall::QClampGrad(..) => "qclamp_grad",
            KernelCall::QClampGradInPlace(..) => "qclamp_grad_in_place",
            KernelCall::QClampMask(..) => "qclamp_mask",
            KernelCall::QMaskGrad(_) => "qmask_grad",
            KernelCall::QMaskGradInPlace(_) => "qmask_grad_in_place",
            KernelCall::QConv2dGradInput(_) => "qconv2d_grad_input",
            KernelCall::QDepthwiseChainGrad { .. } => "qdepthwise_chain_grad",
            KernelCall::QDepthwiseChainBiasGrad(_) => "qdepthwise_chain_bias_grad",
            KernelCall::QBlockGrad { .. } => "qblock_grad",
            KernelCall::QBlockBiasGrad { .. } => "qblock_bias_grad",
            KernelCall::QLinearGradInput(_) => "qlinear_grad_input",
            KernelCall::QClamp(..) => "qclamp",
            KernelCall::DequantizeWeights(_) => "dequantize_weights",
            KernelCall::ChannelScale { .. } => "channel_scale",
            KernelCall::CastF32ToF16(_) => "cast_f32_to_f16",
            KernelCall::CastF16ToF32(_) => "cast_f16_to_f32",
            KernelCall::RoundThroughF16(_) => "round_through_f16",
            KernelCall::RoundThroughF16InPlace(_) => "round_through_f16_in_place",
            KernelCall::RectifyThroughF16(..) => "rectify_through_f16",
            KernelCall::RectifyThroughF16InPlace(..) => "rectify_through_f16_in_place",
            KernelCall::UnscaleGradient(_) => "unscale_gradient",
            KernelCall::UpdateLossScale(_) => "update_loss_scale",
            KernelCall::Activation(..) => "activation",
            KernelCall::ActivationGrad(..) => "activation_grad",
            KernelCall::Mul { .. } => "mul",
            KernelCall::MulGradFactor(_) => "mul_grad_factor",
            KernelCall::Concat(_) => "concat",
            KernelCall::ConcatGrad { .. } => "concat_grad",
            KernelCall::QLut(_) => "qlut",
            KernelCall::QMul { .. } => "qmul",
            KernelCall::QConcat { .. } => "qconcat",
            KernelCall::Transpose(_) => "transpose",
            KernelCall::Broadcast(_) => "broadcast",
            KernelCall::BroadcastGrad(_) => "broadcast_grad",
            KernelCall::Slice(_) => "slice",
            KernelCall::SliceI8(_) => "slice_i8",
            KernelCall::Pad(_) => "pad",
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use crate::hyperparams::{DropoutConfig, LossScaleConfig};

    #[test]
    fn a_kernel_is_its_tag_as_a_varint_then_its_fields() {
        let bytes = |k: &KernelCall| postcard::to_allocvec(k).unwrap();
        assert_eq!(
            bytes(&KernelCall::Linear { dims: LinearDims { n: 1, k: 2, m: 3 }, bias: true }),
            [0, 1, 2, 3, 1]
        );
        assert_eq!(bytes(&KernelCall::Relu(300)), [7, 0xac, 0x02]);
        assert_eq!(bytes(&KernelCall::CopyI8(5)), [58, 5]);
        let last = KernelCall::ChannelScale {
            dims: ChannelDims { outer: 1, channels: 2, inner: 3 },
            unit: 0.5,
            power: -1,
        };
        assert_eq!(last.tag(), 63);
        assert_eq!(bytes(&last)[..4], [63, 1, 2, 3]);
    }

    #[test]
    fn kernels_survive_a_round_trip_and_unknown_tags_are_refused_by_number() {
        let kernels = [
            KernelCall::Dropout(DropoutConfig { p: 0.25, seed: 9 }, 12),
            KernelCall::UpdateLossScale(LossScaleConfig::default()),
            KernelCall::QAvgPool2d(
                Pool2dGeometry {
                    n: 1,
                    c: 2,
                    h: 4,
                    w: 4,
                    kh: 2,
                    kw: 2,
                    stride: (2, 2),
                    padding: (0, 0),
                    out_h: 2,
                    out_w: 2,
                    count_include_pad: false,
                },
                -3,
            ),
        ];
        for k in kernels {
            let back: KernelCall =
                postcard::from_bytes(&postcard::to_allocvec(&k).unwrap()).unwrap();
            assert_eq!(back, k);
        }
        let err = postcard::from_bytes::<KernelCall>(&[120, 1]).unwrap_err();
        assert_eq!(err, postcard::Error::SerdeDeCustom);
        extern crate std;
        assert_eq!(
            std::format!("{}", UnknownKernelTag(120)),
            "unknown kernel tag 120: the file needs a newer sprout"
        );
    }
}
