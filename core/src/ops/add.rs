//! Element-wise `Add` of two tensors of the same shape (residual connections).

use super::{OpRules, OperandCounts, Recompute};
use crate::autograd::Vjp;
use crate::graph::GraphError;
use crate::kernel::Kernel;
use crate::lower::{Lowered, Lowering};

pub(crate) struct Add;

impl OpRules for Add {
    type Params = ();
    const NAME: &'static str = "add";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0, 1];
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn vjp((): (), cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        // The gradient passes unchanged to both operands; no copy is made.
        cx.pass(&[0, 1], cx.dy);
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::Add(cx.numel()))
    }
}
