//! Half precision: the f32 <-> f16 `Cast` of f16 storage, and the gradient unscaling and
//! dynamic loss scaling of mixed-precision training.

use super::{Op, OpRules, OperandCounts, Recompute};
use crate::autograd::Vjp;
use crate::geometry::LossScaleConfig;
use crate::graph::GraphError;
use crate::kernel::Kernel;
use crate::lower::{Lowered, Lowering};
use crate::tensor::DType;
use alloc::vec;

pub(crate) struct Cast;

impl OpRules for Cast {
    type Params = ();
    const NAME: &'static str = "cast";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn vjp((): (), cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        // The gradient goes back to the input's type: a cast the other way.
        cx.first_input(Op::Cast, vec![cx.dy])
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        // The input's type picks the direction; a cast to the same type matches neither
        // kernel's signature and is refused by the checks.
        cx.all(match cx.input_dtype(0) {
            DType::F16 => Kernel::CastF16ToF32(cx.numel()),
            _ => Kernel::CastF32ToF16(cx.numel()),
        })
    }
}

pub(crate) struct UnscaleGradient;

impl OpRules for UnscaleGradient {
    type Params = ();
    const NAME: &'static str = "unscale_gradient";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 1, 1);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), _: &mut Vjp<'_>) -> Result<(), GraphError> {
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::UnscaleGradient(cx.numel()))
    }
}

pub(crate) struct UpdateLossScale;

impl OpRules for UpdateLossScale {
    type Params = LossScaleConfig;
    const NAME: &'static str = "update_loss_scale";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 2, 0);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp(_: LossScaleConfig, _: &mut Vjp<'_>) -> Result<(), GraphError> {
        Ok(())
    }

    fn lower(cfg: LossScaleConfig, cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::UpdateLossScale(cfg))
    }
}
