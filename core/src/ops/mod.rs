//! The rules of each op, one file per op or tight op family (the forward op with its
//! backward ops): its recording method on [`crate::Graph`], name, operand counts, gradient
//! rule, recompute eligibility, int8 form and the kernel it lowers to; and the contexts
//! those rules see ([`Vjp`] for gradients, [`Lowering`] for kernels).
//!
//! The [`Op`] enum and its wire encoding live below the graph in [`crate::op`]; every
//! dispatch over it here is generated from the same op table (`op_table!` there), which
//! pairs each op with its wire tag and the type implementing `OpRules` for it: an op that
//! forgets a rule does not compile. A new op is one table entry with a new tag (tags are
//! never reused or renumbered) and one `OpRules` impl in its family's file; autograd,
//! gradient checkpointing, lowering and int8 conversion need no edit.

mod activation_grad;
mod add;
mod batch_norm;
mod broadcast;
mod concat;
mod conv2d;
mod dropout;
mod elu;
mod gelu;
mod half;
mod hard_sigmoid;
mod hard_swish;
mod int8;
mod layer_norm;
mod leaky_relu;
mod linear;
mod loss;
pub(crate) mod lowering;
mod mul;
mod optimizer;
mod pool;
mod relu;
mod reshape;
mod sigmoid;
mod silu;
mod slice;
mod softmax;
mod softplus;
mod tanh;
mod transpose;
mod vjp;

pub use crate::op::{
    ChannelScaleParams, ConcatGradParams, ConcatParams, ConvParams, DepthwiseChainParams, Op,
    PoolParams, QAddParams, QAvgPoolParams, QConcatParams, QConvParams, QLinearParams, QLutParams,
    QMulParams, RoundBiasParams, RoundWeightsParams, SliceParams, TransposeParams, UnknownOpTag,
};
pub use int8::Int8Weights;
pub use lowering::Mode;
pub(crate) use lowering::{Lowered, Lowering};
pub(crate) use vjp::{grad_spec, Vjp};

use crate::graph::GraphError;
use crate::hyperparams::BatchNormConfig;
use crate::op::{bind, op_table, payload};
use crate::reference::Activation;
use core::fmt;
use core::ops::RangeInclusive;

/// Everything sprout knows about one kind of op. Every rule is required: there are no
/// defaults to fall back on, so a new op states each of them.
pub(crate) trait OpRules {
    /// The op's settings (`()` for an op without any): the payload of its [`Op`] variant.
    type Params: Copy + 'static;
    /// The op's name as people write it, used in errors and reports.
    const NAME: &'static str;
    /// The operand counts a well-formed node of this op has.
    const OPERANDS: OperandCounts;
    /// How a gradient flows through the op (its vector-Jacobian product), if at all.
    const GRADIENT: Gradient<Self::Params>;
    /// Whether gradient checkpointing may recompute the op's first output, and how.
    const RECOMPUTE: Recompute;
    /// How post-training int8 conversion ([`crate::int8_conversion`]) rewrites the op.
    fn int8(params: Self::Params) -> Int8Form;
    /// The kernel one node runs as, with its operands in the kernel's signature order.
    fn lower(params: Self::Params, cx: &Lowering<'_>) -> Lowered;
}

/// How many operands of each kind a node of an op takes (see each [`Op`] variant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperandCounts {
    pub inputs: RangeInclusive<usize>,
    pub state: RangeInclusive<usize>,
    pub outputs: RangeInclusive<usize>,
}

impl OperandCounts {
    /// Exactly `inputs` inputs, `state` state tensors and `outputs` outputs.
    const fn exactly(inputs: usize, state: usize, outputs: usize) -> Self {
        Self { inputs: inputs..=inputs, state: state..=state, outputs: outputs..=outputs }
    }
}

/// How a gradient flows through an op with settings `P`.
#[derive(Clone, Copy)]
pub(crate) enum Gradient<P: 'static> {
    /// None does: the op stops it (detach), or it is a backward op or training plumbing,
    /// which are not differentiated again (no double backward).
    None,
    /// A gradient flows into the inputs `inputs`; `vjp` records the backward nodes of one
    /// node that turn the gradient of its first output into gradients of the inputs that
    /// want one.
    Flows { inputs: &'static [usize], vjp: fn(P, &mut Vjp<'_>) -> Result<(), GraphError> },
}

impl<P> Gradient<P> {
    /// The inputs a gradient can flow into.
    fn inputs(self) -> &'static [usize] {
        match self {
            Gradient::None => &[],
            Gradient::Flows { inputs, .. } => inputs,
        }
    }

    /// Records the backward nodes of the node `cx` holds, an op with settings `params`.
    fn vjp(self, params: P, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        match self {
            Gradient::None => Ok(()),
            Gradient::Flows { vjp, .. } => vjp(params, cx),
        }
    }
}

/// Whether and how gradient checkpointing recomputes an op's first output from its inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Recompute {
    /// It cannot be: the op has side effects, or it is not a forward op.
    Never,
    /// The node runs again on its (possibly recomputed) inputs.
    Rerun,
    /// `op` runs on the node's inputs followed by its outputs `saved` (state the forward
    /// pass saved), so that state the forward op updates does not move twice.
    Apply { op: Op, saved: &'static [usize] },
}

/// How post-training int8 conversion ([`crate::int8_conversion`]) treats an op: every op
/// states one, so a new op decides whether and how it quantizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Int8Form {
    /// It stays float and reads dequantized values (losses, backward and training ops,
    /// ops without an int8 kernel).
    Float,
    /// A layer with weights: it becomes its int8 layer op with per-channel weights, and
    /// the batch norm (convolution only) and activation that follow fuse into it, unless
    /// its weights are kept float.
    Layer(Int8Layer),
    /// Element-wise addition: it becomes `QAdd`; an activation that follows fuses into it.
    Add,
    /// On an int8 input it runs as its int8 op, keeping the input's quantization.
    SameQuantization(Int8Same),
    /// On an int8 input its value passes unchanged (it is the identity at inference).
    Identity,
    /// A clamp that fuses into the layer or addition before it; alone on an int8 input it
    /// is an error.
    Activation(Int8Clamp),
    /// A batch norm that folds into the convolution before it; alone on an int8 input it
    /// is an error.
    FoldedBatchNorm(BatchNormConfig),
    /// An element-wise function: on an int8 input it becomes a `QLut` of its values.
    Table(Activation),
    /// An element-wise product: on int8 operands it becomes `QMul`.
    Mul,
    /// A concatenation: on int8 operands it becomes `QConcat` in the output's quantization.
    Concat(ConcatParams),
}

/// The int8 layer op a layer with weights becomes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Int8Layer {
    Conv2d(ConvParams),
    Linear,
}

/// The int8 op that keeps its input's quantization.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Int8Same {
    MaxPool2d(PoolParams),
    AvgPool2d(PoolParams),
    GlobalAvgPool,
    Reshape,
    Slice(SliceParams),
}

/// The clamp an activation fuses into the op before it as.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Int8Clamp {
    Relu,
    Relu6,
}

/// Generates the dispatch of [`Op`] to the rules of each op from the op table
/// (`op_table!` in [`crate::op`]).
macro_rules! op_rules {
    ($(
        $(#[$attr:meta])*
        $tag:literal => $variant:ident $(($payload:ty))? : $rules:ty,
    )+) => {
        impl Op {
            /// The op's name as people write it, used in errors and reports.
            pub fn kind(&self) -> &'static str {
                match *self {
                    $( Op::$variant $((bind!($payload, _)))? => <$rules as OpRules>::NAME, )+
                }
            }

            /// The operand counts a well-formed node of this op has; decoders check
            /// untrusted nodes against them before anything indexes their operands.
            pub fn operand_counts(&self) -> OperandCounts {
                match *self {
                    $( Op::$variant $((bind!($payload, _)))? => <$rules as OpRules>::OPERANDS, )+
                }
            }

            /// Which inputs of the op a gradient can flow into.
            pub fn differentiable_inputs(&self) -> &'static [usize] {
                match *self {
                    $(
                        Op::$variant $((bind!($payload, _)))? =>
                            <$rules as OpRules>::GRADIENT.inputs(),
                    )+
                }
            }

            /// Whether and how gradient checkpointing recomputes the op's first output.
            pub(crate) fn recompute(&self) -> Recompute {
                match *self {
                    $( Op::$variant $((bind!($payload, _)))? => <$rules as OpRules>::RECOMPUTE, )+
                }
            }

            /// Records the backward nodes of the node `cx` holds (see [`Gradient`]).
            pub(crate) fn vjp(&self, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
                match *self {
                    $(
                        Op::$variant $((bind!($payload, p)))? =>
                            <$rules as OpRules>::GRADIENT.vjp(payload!(p $(, $payload)?), cx),
                    )+
                }
            }

            /// How post-training int8 conversion rewrites the op (see [`OpRules::int8`]).
            pub(crate) fn int8_form(&self) -> Int8Form {
                match *self {
                    $(
                        Op::$variant $((bind!($payload, p)))? =>
                            <$rules as OpRules>::int8(payload!(p $(, $payload)?)),
                    )+
                }
            }

            /// The kernel the node `cx` holds runs as (see [`OpRules::lower`]).
            pub(crate) fn lower(&self, cx: &Lowering<'_>) -> Lowered {
                match *self {
                    $(
                        Op::$variant $((bind!($payload, p)))? =>
                            <$rules as OpRules>::lower(payload!(p $(, $payload)?), cx),
                    )+
                }
            }
        }
    };
}

op_table!(op_rules);

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}
