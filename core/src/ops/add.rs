//! Element-wise `Add` of two tensors of the same shape (residual connections).

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::tensor::TensorId;
use alloc::vec;

pub(crate) struct Add;

impl OpRules for Add {
    type Params = ();
    const NAME: &'static str = "add";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0, 1],
        vjp: |(), cx| {
            // The gradient passes unchanged to both operands; no copy is made.
            cx.pass(&[0, 1], cx.dy);
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Add
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Add(cx.numel()))
    }
}

impl Graph {
    /// Element-wise sum of two tensors of the same shape.
    pub fn add(&mut self, name: &str, a: TensorId, b: TensorId) -> Result<TensorId, GraphError> {
        let (as_, bs) = (self.float(Op::Add, name, a)?, self.float(Op::Add, name, b)?);
        if as_ != bs {
            return Err(mismatch(Op::Add, name, "operands must have the same shape", as_, bs));
        }
        self.record_one(name, Op::Add, vec![a, b], as_)
    }
}
