//! Rectifiers: `Relu` and `Relu6` (clamped to `[0, 6]`) with their gradients, which read
//! the forward output.

use super::{Gradient, Int8Clamp, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::tensor::TensorId;
use alloc::vec;

pub(crate) struct Relu;

impl OpRules for Relu {
    type Params = ();
    const NAME: &'static str = "relu";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::ReluGrad, vec![cx.output(0), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Activation(Int8Clamp::Relu)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Relu(cx.numel()))
    }
}

pub(crate) struct Relu6;

impl OpRules for Relu6 {
    type Params = ();
    const NAME: &'static str = "relu6";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::Relu6Grad, vec![cx.output(0), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Activation(Int8Clamp::Relu6)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Relu6(cx.numel()))
    }
}

pub(crate) struct ReluGrad;

impl OpRules for ReluGrad {
    type Params = ();
    const NAME: &'static str = "relu_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::ReluGrad(cx.numel()))
    }
}

pub(crate) struct Relu6Grad;

impl OpRules for Relu6Grad {
    type Params = ();
    const NAME: &'static str = "relu6_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Relu6Grad(cx.numel()))
    }
}

impl Graph {
    pub fn relu(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Relu, x)
    }

    pub fn relu6(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Relu6, x)
    }
}
