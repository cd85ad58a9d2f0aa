//! Half precision: the f32 <-> f16 `Cast` of f16 storage, and the gradient unscaling and
//! dynamic loss scaling of mixed-precision training.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::{invalid, OutputSpec};
use crate::graph::{Graph, GraphError, Phase};
use crate::hyperparams::LossScaleConfig;
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::tensor::{DType, Role, TensorId};
use alloc::string::ToString;
use alloc::vec::Vec;
use alloc::{format, vec};

pub(crate) struct Cast;

impl OpRules for Cast {
    type Params = ();
    const NAME: &'static str = "cast";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| {
            // The gradient goes back to the input's type: a cast the other way.
            cx.first_input(Op::Cast, vec![cx.dy])
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        // The input's type picks the direction; a cast to the same type matches neither
        // kernel's signature and is refused by the checks.
        cx.all(match cx.input_dtype(0) {
            DType::F16 => KernelCall::CastF16ToF32(cx.numel()),
            _ => KernelCall::CastF32ToF16(cx.numel()),
        })
    }
}

pub(crate) struct UnscaleGradient;

impl OpRules for UnscaleGradient {
    type Params = ();
    const NAME: &'static str = "unscale_gradient";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 1, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::UnscaleGradient(cx.numel()))
    }
}

pub(crate) struct UpdateLossScale;

impl OpRules for UpdateLossScale {
    type Params = LossScaleConfig;
    const NAME: &'static str = "update_loss_scale";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 2, 0);
    const GRADIENT: Gradient<LossScaleConfig> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: LossScaleConfig) -> Int8Form {
        Int8Form::Float
    }

    fn lower(cfg: LossScaleConfig, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::UpdateLossScale(cfg))
    }
}

impl Graph {
    /// The values of `x` in another element type: f32 to f16 (round to nearest even, ±inf
    /// beyond ±65504) or f16 to f32 (exact). The gradient is cast back.
    pub fn cast(&mut self, name: &str, x: TensorId, dtype: DType) -> Result<TensorId, GraphError> {
        self.check_id(x)?;
        let t = self.tensor(x);
        let expected = match dtype {
            DType::F16 => DType::F32,
            DType::F32 => DType::F16,
            other => {
                let detail = format!("casts go between f32 and f16, not to {other:?}");
                return Err(invalid(Op::Cast, name, detail));
            }
        };
        if t.dtype != expected {
            return Err(GraphError::DType {
                op: Op::Cast.kind(),
                node: name.to_string(),
                tensor: t.name.clone(),
                expected,
                actual: t.dtype,
            });
        }
        let out =
            OutputSpec { name: name.to_string(), shape: t.shape, dtype, role: Role::Activation };
        Ok(self.record(name, Op::Cast, vec![x], Vec::new(), vec![out], Phase::MicroBatch)?[0])
    }
}
