//! The int8 residual add, the standalone int8 clamp (a ReLU or ReLU6 with nothing to fuse
//! into) and the clamp gradient (the straight-through estimator of a clamp) that the
//! backward passes of every int8 op with a clamp use.

use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::QAddParams;
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::tensor::{DType, TensorId};
use alloc::vec;

pub(crate) struct QAdd;

impl OpRules for QAdd {
    type Params = QAddParams;
    const NAME: &'static str = "qadd";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<QAddParams> = Gradient::Flows {
        inputs: &[0, 1],
        vjp: |q, cx| {
            let y = cx.output(0);
            let dy = cx.backward("clamp_grad", Op::QClampGrad(q.act), vec![y, cx.dy], y)?;
            cx.pass(&[0, 1], dy);
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QAddParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(q: QAddParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QAdd(q.rescale, q.act, cx.numel()))
    }
}

/// `x (i8) → y (i8)`: `clamp(x, low, high)`, the output keeping the input's quantization.
pub(crate) struct QClamp;

impl OpRules for QClamp {
    type Params = (i8, i8);
    const NAME: &'static str = "qclamp";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<(i8, i8)> = Gradient::Flows {
        inputs: &[0],
        vjp: |act, cx| {
            let y = cx.output(0);
            let dx = cx.backward("clamp_grad", Op::QClampGrad(act), vec![y, cx.dy], y)?;
            cx.pass(&[0], dx);
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: (i8, i8)) -> Int8Form {
        Int8Form::Float
    }

    fn lower(act: (i8, i8), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QClamp(act, cx.numel()))
    }
}

pub(crate) struct QClampGrad;

impl OpRules for QClampGrad {
    type Params = (i8, i8);
    const NAME: &'static str = "qclamp_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<(i8, i8)> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: (i8, i8)) -> Int8Form {
        Int8Form::Float
    }

    fn lower(act: (i8, i8), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QClampGrad(act, cx.numel()))
    }
}

impl Graph {
    /// An int8 clamp of `x` to `act` (ReLU: from the zero point up), keeping its
    /// quantization.
    pub fn qclamp(
        &mut self,
        name: &str,
        x: TensorId,
        act: (i8, i8),
    ) -> Result<TensorId, GraphError> {
        let shape = self.typed(Op::QClamp(act), name, x, DType::I8)?;
        self.record_as(name, Op::QClamp(act), vec![x], shape, DType::I8)
    }

    /// An int8 element-wise sum of two tensors of the same shape.
    pub fn qadd(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
        params: QAddParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QAdd(params);
        let (sa, sb) = (self.typed(op, name, a, DType::I8)?, self.typed(op, name, b, DType::I8)?);
        if sa != sb {
            return Err(mismatch(op, name, "operands must have the same shape", sa, sb));
        }
        self.record_as(name, op, vec![a, b], sa, DType::I8)
    }
}
