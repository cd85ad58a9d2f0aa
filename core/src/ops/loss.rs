//! Losses: mean cross-entropy against class indices and mean squared error, with their
//! gradients. Labels and targets are constants: no gradient flows into them.

use super::{Op, OpRules, OperandCounts, Recompute};
use crate::autograd::Vjp;
use crate::graph::GraphError;
use crate::kernel::Kernel;
use crate::lower::{row_dims, Lowered, Lowering};
use alloc::vec;

pub(crate) struct CrossEntropy;

impl OpRules for CrossEntropy {
    type Params = ();
    const NAME: &'static str = "cross_entropy";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        cx.first_input(Op::CrossEntropyGrad, vec![cx.input(0), cx.input(1), cx.dy])
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::CrossEntropy(row_dims(cx.input(0))))
    }
}

pub(crate) struct Mse;

impl OpRules for Mse {
    type Params = ();
    const NAME: &'static str = "mse";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        cx.first_input(Op::MseGrad, vec![cx.input(0), cx.input(1), cx.dy])
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::Mse(cx.input(0).numel()))
    }
}

pub(crate) struct CrossEntropyGrad;

impl OpRules for CrossEntropyGrad {
    type Params = ();
    const NAME: &'static str = "cross_entropy_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), _: &mut Vjp<'_>) -> Result<(), GraphError> {
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::CrossEntropyGrad(row_dims(cx.input(0))))
    }
}

pub(crate) struct MseGrad;

impl OpRules for MseGrad {
    type Params = ();
    const NAME: &'static str = "mse_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), _: &mut Vjp<'_>) -> Result<(), GraphError> {
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::MseGrad(cx.numel()))
    }
}
