//! Row-wise softmax and log-softmax and their gradients, which read the forward output.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{row_dims, Lowered, Lowering};
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
        cx.all(KernelCall::Softmax(row_dims(cx.input(0))))
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
        cx.all(KernelCall::SoftmaxGrad(row_dims(cx.input(0))))
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
        cx.all(KernelCall::LogSoftmax(row_dims(cx.input(0))))
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
        cx.all(KernelCall::LogSoftmaxGrad(row_dims(cx.input(0))))
    }
}

impl Graph {
    /// Row-wise softmax of `x[N,C]`.
    pub fn softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float_rank(Op::Softmax, name, x, 2)?;
        self.record_one(name, Op::Softmax, vec![x], xs)
    }

    /// Row-wise log-softmax of `x[N,C]` (log-probabilities; a cross-entropy loss on them
    /// trains as it would on `x`).
    pub fn log_softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float_rank(Op::LogSoftmax, name, x, 2)?;
        self.record_one(name, Op::LogSoftmax, vec![x], xs)
    }
}
