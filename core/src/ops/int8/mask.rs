//! The clamp gradient in two halves (the `clamp_masks` pass splits `qclamp_grad` into them):
//! the clamp's output reduced to a bit mask while the forward pass still holds it, and the
//! gradient stopped where a bit is clear, so the backward pass keeps an eighth of the
//! output's bytes instead of all of them.

use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, OpRules, OperandCounts, Recompute};

/// `y (i8) → mask (i8)`: which clamp outputs pass a gradient, a bit each.
pub(crate) struct QClampMask;

impl OpRules for QClampMask {
    type Params = (i8, i8);
    const NAME: &'static str = "qclamp_mask";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<(i8, i8)> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: (i8, i8)) -> Int8Form {
        Int8Form::Float
    }

    fn lower(act: (i8, i8), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QClampMask(act, cx.input(0).numel()))
    }
}

/// `mask (i8), dy → dx`: the clamp gradient from the clamp's mask.
pub(crate) struct QMaskGrad;

impl OpRules for QMaskGrad {
    type Params = ();
    const NAME: &'static str = "qmask_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QMaskGrad(cx.numel()))
    }
}
