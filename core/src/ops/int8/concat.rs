//! `QConcat`: two int8 tensors joined along one axis, each moved to the output's
//! quantization (SqueezeNet's fire modules).

use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::QConcatParams;
use crate::ops::concat::{concat_dims, joined, vjp};
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::tensor::{DType, TensorId};
use alloc::vec;

/// `a (i8), b (i8) → y (i8)`: along `axis`, `a`'s entries then `b`'s.
pub(crate) struct QConcat;

impl OpRules for QConcat {
    type Params = QConcatParams;
    const NAME: &'static str = "qconcat";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<QConcatParams> =
        Gradient::Flows { inputs: &[0, 1], vjp: |p, cx| vjp(p.axis, cx) };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QConcatParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: QConcatParams, cx: &Lowering<'_>) -> Lowered {
        let dims = concat_dims(cx.output(0), cx.input(0), cx.input(1), p.axis);
        cx.all(KernelCall::QConcat { dims, rescale: p.rescale })
    }
}

impl Graph {
    /// The int8 tensors `a` and `b` joined along `params.axis` (not the batch axis 0),
    /// every other dimension equal.
    pub fn qconcat(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
        params: QConcatParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QConcat(params);
        let (sa, sb) = (self.typed(op, name, a, DType::I8)?, self.typed(op, name, b, DType::I8)?);
        let shape = joined(op, name, sa, sb, params.axis)?;
        self.record_as(name, op, vec![a, b], shape, DType::I8)
    }
}
