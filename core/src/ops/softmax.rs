//! Softmax and log-softmax over the last axis (every other axis indexes a row) and their
//! gradients, which read the forward output.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::geometry::RowDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{dim, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::TensorId;
use alloc::vec;

pub(crate) struct Softmax;

impl OpRules for Softmax {
    type Params = ();
    const NAME: &'static str = "softmax";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::SoftmaxGrad, vec![cx.output(0), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Softmax(last_axis_rows(cx.input(0))))
    }
}

pub(crate) struct SoftmaxGrad;

impl OpRules for SoftmaxGrad {
    type Params = ();
    const NAME: &'static str = "softmax_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::SoftmaxGrad(last_axis_rows(cx.input(0))))
    }
}

pub(crate) struct LogSoftmax;

impl OpRules for LogSoftmax {
    type Params = ();
    const NAME: &'static str = "log_softmax";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::LogSoftmaxGrad, vec![cx.output(0), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LogSoftmax(last_axis_rows(cx.input(0))))
    }
}

pub(crate) struct LogSoftmaxGrad;

impl OpRules for LogSoftmaxGrad {
    type Params = ();
    const NAME: &'static str = "log_softmax_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LogSoftmaxGrad(last_axis_rows(cx.input(0))))
    }
}

impl Graph {
    /// Softmax of `x[N, ..., C]` over its last axis.
    pub fn softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.rows(Op::Softmax, name, x)?;
        self.record_one(name, Op::Softmax, vec![x], xs)
    }

    /// Log-softmax of `x[N, ..., C]` over its last axis (log-probabilities; a cross-entropy loss on them
    /// trains as it would on `x`).
    pub fn log_softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.rows(Op::LogSoftmax, name, x)?;
        self.record_one(name, Op::LogSoftmax, vec![x], xs)
    }

    /// The shape of a softmax's operand: `[N, C]`, or `[N, ..., C]` with a row per index
    /// of the axes before the last.
    fn rows(&self, op: Op, name: &str, x: TensorId) -> Result<Shape, GraphError> {
        let rank = self.shape(x).rank().clamp(2, crate::shape::MAX_RANK);
        self.float_rank(op, name, x, rank)
    }
}

/// `[..., C]` as rows of `C`: one per index of the axes before the last.
fn last_axis_rows(s: Shape) -> RowDims {
    let rank = s.rank();
    let rows = s.dims()[..rank.saturating_sub(1)].iter().product();
    RowDims { rows, cols: dim(s, rank.saturating_sub(1)) }
}
