//! Dense layers: `Linear` (over the last axis of `[N, ..., K]`) with its backward ops, the
//! input and weight gradients and the bias gradient that convolutions share.

use super::{Gradient, Int8Form, Int8Layer, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::geometry::{ChannelDims, LinearDims};
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{channel_dims, dim, Lowered, Lowering};
use crate::ops::Vjp;
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec;

pub(crate) struct Linear;

impl OpRules for Linear {
    type Params = ();
    const NAME: &'static str = "linear";
    const OPERANDS: OperandCounts = OperandCounts { inputs: 2..=3, state: 0..=0, outputs: 1..=1 };
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |(), cx| {
            // Over more than one row per sample the bias gradient sums rows, not channels.
            let rows = cx.shape(cx.input(0)).rank() > 2;
            let bias = if rows { Op::RowBiasGrad } else { Op::BiasGrad };
            layer_vjp(cx, Op::LinearGradInput, Op::LinearGradWeight, bias)
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Layer(Int8Layer::Linear)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        let dims = linear_dims(cx.input(0), cx.input(1));
        cx.all(KernelCall::Linear { dims, bias: cx.node.inputs.len() == 3 })
    }
}

pub(crate) struct LinearGradInput;

impl OpRules for LinearGradInput {
    type Params = ();
    const NAME: &'static str = "linear_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LinearGradInput(grad_input_dims(cx)))
    }
}

/// The dims of an input-gradient node `dy [N, ..., M], w [M, K], ... → dx`.
pub(crate) fn grad_input_dims(cx: &Lowering<'_>) -> LinearDims {
    let (dy, w) = (cx.input(0), cx.input(1));
    let m = dim(w, 0);
    let n = dy.numel().checked_div(m).unwrap_or(0);
    LinearDims { n, k: dim(w, 1), m }
}

pub(crate) struct LinearGradWeight;

impl OpRules for LinearGradWeight {
    type Params = ();
    const NAME: &'static str = "linear_grad_weight";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LinearGradWeight(linear_dims(cx.input(1), cx.output(0))))
    }
}

pub(crate) struct BiasGrad;

impl OpRules for BiasGrad {
    type Params = ();
    const NAME: &'static str = "bias_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::BiasGrad(channel_dims(cx.input(0))))
    }
}

/// `dy [..., M] → db [M]`: the bias gradient of a dense layer over `[N, ..., K]`, summed
/// over every row.
pub(crate) struct RowBiasGrad;

impl OpRules for RowBiasGrad {
    type Params = ();
    const NAME: &'static str = "row_bias_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        let channels = dim(cx.output(0), 0);
        let outer = cx.input(0).numel().checked_div(channels).unwrap_or(0);
        cx.all(KernelCall::BiasGrad(ChannelDims { outer, channels, inner: 1 }))
    }
}

/// The gradients of a dense layer or convolution `x, w, (b) → y`: `grad_input` reads the
/// output gradient and the weight, `grad_weight` the output gradient and the input,
/// `grad_bias` the output gradient.
pub(super) fn layer_vjp(
    cx: &mut Vjp<'_>,
    grad_input: Op,
    grad_weight: Op,
    grad_bias: Op,
) -> Result<(), GraphError> {
    let (x, w, dy) = (cx.input(0), cx.input(1), cx.dy);
    if cx.want(0).is_some() {
        let grad = cx.backward("grad_input", grad_input, vec![dy, w], x)?;
        cx.contribute(x, grad);
    }
    if cx.want(1).is_some() {
        let grad = cx.backward("grad_weight", grad_weight, vec![dy, x], w)?;
        cx.contribute(w, grad);
    }
    if let Some(b) = cx.want(2) {
        let grad = cx.backward("grad_bias", grad_bias, vec![dy], b)?;
        cx.contribute(b, grad);
    }
    Ok(())
}

/// The dimensions of a dense layer on `x[N, ..., K]` (a row per index of the axes before
/// the last) and `w[M, K]`.
pub(super) fn linear_dims(x: Shape, w: Shape) -> LinearDims {
    let k = dim(x, x.rank().saturating_sub(1));
    LinearDims { n: x.numel().checked_div(k).unwrap_or(0), k, m: dim(w, 0) }
}

impl Graph {
    /// `y = x · wᵀ + b` with `x[N, ..., K]`, `w[M, K]`, `b[M]`: `y[N, ..., M]`.
    pub fn linear(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Linear;
        let shape = self.linear_shape(op, name, x, w, DType::F32)?;
        let mut inputs = vec![x, w];
        if let Some(b) = b {
            self.check_bias(op, name, b, self.shape(w).dims()[0])?;
            inputs.push(b);
        }
        self.record_one(name, op, inputs, shape)
    }

    /// The output shape `[N, ..., M]` of a dense layer on `x[N, ..., K]` and `w[M, K]` of
    /// `dtype`.
    pub(crate) fn linear_shape(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        w: TensorId,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let xs = self.typed(op, name, x, dtype)?;
        let rank = xs.rank().max(2);
        let (xs, ws) =
            (self.typed_rank(op, name, x, dtype, rank)?, self.typed_rank(op, name, w, dtype, 2)?);
        if xs.dims()[rank - 1] != ws.dims()[1] {
            return Err(mismatch(op, name, "input features differ from the weight's", xs, ws));
        }
        let mut dims = xs.dims().to_vec();
        dims[rank - 1] = ws.dims()[0];
        Shape::new(&dims).map_err(|_| mismatch(op, name, "bad output shape", xs, ws))
    }
}
