//! `QMul`: the int8 element-wise product, of two tensors of one shape or of a tensor and a
//! per-channel factor (squeeze-excitation, `x · sigmoid(x)`), rescaled as TFLite does.

use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::QMulParams;
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::mul::{is_channel_factor, mul_dims};
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::tensor::{DType, TensorId};
use alloc::vec;

/// `a (i8 [N, C, ...]), b (i8) → y (i8)`: `b` of `a`'s shape, or one factor per channel.
pub(crate) struct QMul;

impl OpRules for QMul {
    type Params = QMulParams;
    const NAME: &'static str = "qmul";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    // The float product's gradient, each operand read dequantized.
    const GRADIENT: Gradient<QMulParams> = Gradient::Flows {
        inputs: &[0, 1],
        vjp: |p, cx| {
            let (a, b) = (cx.input(0), cx.input(1));
            if cx.want(0).is_some() {
                let real = cx.scratch("b_real", Op::Dequantize(p.b), vec![b], b)?;
                let grad = cx.backward("grad_a", Op::Mul, vec![cx.dy, real], a)?;
                cx.contribute(a, grad);
            }
            if cx.want(1).is_some() {
                let real = cx.scratch("a_real", Op::Dequantize(p.a), vec![a], a)?;
                let factor = cx.shape(b).numel() != cx.shape(a).numel();
                let op = if factor { Op::MulGradFactor } else { Op::Mul };
                let grad = cx.backward("grad_b", op, vec![cx.dy, real], b)?;
                cx.contribute(b, grad);
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QMulParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: QMulParams, cx: &Lowering<'_>) -> Lowered {
        let (dims, broadcast) = mul_dims(cx);
        cx.all(KernelCall::QMul { rescale: p.rescale, dims, broadcast })
    }
}

impl Graph {
    /// The int8 product of `a` and `b`: `b` has `a`'s shape or is a per-channel factor of
    /// it (`[N, C]` or `[N, C, 1, 1]`).
    pub fn qmul(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
        params: QMulParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QMul(params);
        let (sa, sb) = (self.typed(op, name, a, DType::I8)?, self.typed(op, name, b, DType::I8)?);
        if sa != sb && !is_channel_factor(sb, sa) {
            let detail = "the second operand must have the first's shape or be a per-channel \
                          factor of it ([N, C] or [N, C, 1, 1])";
            return Err(mismatch(op, name, detail, sa, sb));
        }
        self.record_as(name, op, vec![a, b], sa, DType::I8)
    }
}
