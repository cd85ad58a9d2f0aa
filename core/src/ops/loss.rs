//! Losses: mean cross-entropy against class indices and mean squared error, with their
//! gradients. Labels and targets are constants: no gradient flows into them.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{row_dims, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::string::ToString;
use alloc::vec;

pub(crate) struct CrossEntropy;

impl OpRules for CrossEntropy {
    type Params = ();
    const NAME: &'static str = "cross_entropy";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::CrossEntropyGrad, vec![cx.input(0), cx.input(1), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::CrossEntropy(row_dims(cx.input(0))))
    }
}

pub(crate) struct Mse;

impl OpRules for Mse {
    type Params = ();
    const NAME: &'static str = "mse";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::MseGrad, vec![cx.input(0), cx.input(1), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Mse(cx.input(0).numel()))
    }
}

pub(crate) struct CrossEntropyGrad;

impl OpRules for CrossEntropyGrad {
    type Params = ();
    const NAME: &'static str = "cross_entropy_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::CrossEntropyGrad(row_dims(cx.input(0))))
    }
}

pub(crate) struct MseGrad;

impl OpRules for MseGrad {
    type Params = ();
    const NAME: &'static str = "mse_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::MseGrad(cx.numel()))
    }
}

impl Graph {
    /// Mean cross-entropy of `logits[N,C]` against class indices `labels[N]`.
    pub fn cross_entropy(
        &mut self,
        name: &str,
        logits: TensorId,
        labels: TensorId,
    ) -> Result<TensorId, GraphError> {
        let op = Op::CrossEntropy;
        let ls = self.float_rank(op, name, logits, 2)?;
        self.check_id(labels)?;
        let lab = self.tensor(labels).clone();
        if lab.dtype != DType::I32 {
            return Err(GraphError::DType {
                op: op.kind(),
                node: name.to_string(),
                tensor: lab.name,
                expected: DType::I32,
                actual: lab.dtype,
            });
        }
        if lab.shape != Shape::d1(ls.dims()[0]) {
            return Err(mismatch(
                op,
                name,
                "labels must be one per row of the logits",
                ls,
                lab.shape,
            ));
        }
        self.record_one(name, op, vec![logits, labels], Shape::SCALAR)
    }

    /// Mean squared error between two tensors of the same shape.
    pub fn mse(
        &mut self,
        name: &str,
        pred: TensorId,
        target: TensorId,
    ) -> Result<TensorId, GraphError> {
        let (ps, ts) = (self.float(Op::Mse, name, pred)?, self.float(Op::Mse, name, target)?);
        if ps != ts {
            return Err(mismatch(
                Op::Mse,
                name,
                "prediction and target must have the same shape",
                ps,
                ts,
            ));
        }
        self.record_one(name, Op::Mse, vec![pred, target], Shape::SCALAR)
    }
}
