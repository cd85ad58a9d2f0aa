//! Ops that copy their input's values: `Reshape` (flatten is one) and `Detach`, which stops
//! the gradient.

use super::{Op, OpRules, OperandCounts, Recompute};
use crate::autograd::Vjp;
use crate::graph::GraphError;
use crate::kernel::Kernel;
use crate::lower::{Lowered, Lowering};
use crate::tensor::DType;
use alloc::vec;

pub(crate) struct Reshape;

impl OpRules for Reshape {
    type Params = ();
    const NAME: &'static str = "reshape";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn vjp((): (), cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        // Reshaping the gradient back is itself a reshape.
        cx.first_input(Op::Reshape, vec![cx.dy])
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        copy(cx)
    }
}

pub(crate) struct Detach;

impl OpRules for Detach {
    type Params = ();
    const NAME: &'static str = "detach";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn vjp((): (), _: &mut Vjp<'_>) -> Result<(), GraphError> {
        // The gradient stops here.
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        copy(cx)
    }
}

/// A copy of the input, in its element type.
fn copy(cx: &Lowering<'_>) -> Lowered {
    cx.all(match cx.input_dtype(0) {
        DType::I8 => Kernel::CopyI8(cx.numel()),
        _ => Kernel::Copy(cx.numel()),
    })
}
