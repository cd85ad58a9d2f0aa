//! Inverted dropout (identity in evaluation) and its gradient, which replays the same mask.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::invalid;
use crate::graph::{Graph, GraphError};
use crate::hyperparams::DropoutConfig;
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering, Mode};
use crate::tensor::TensorId;
use alloc::{format, vec};

pub(crate) struct Dropout;

impl OpRules for Dropout {
    type Params = DropoutConfig;
    const NAME: &'static str = "dropout";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<DropoutConfig> = Gradient::Flows {
        inputs: &[0],
        vjp: |cfg, cx| cx.first_input(Op::DropoutGrad(cfg), vec![cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(_: DropoutConfig) -> Int8Form {
        Int8Form::Identity
    }

    fn lower(cfg: DropoutConfig, cx: &Lowering<'_>) -> Lowered {
        cx.all(match cx.mode {
            Mode::Train | Mode::TrainRunningStats => KernelCall::Dropout(cfg, cx.numel()),
            Mode::Eval => KernelCall::Copy(cx.numel()),
        })
    }
}

pub(crate) struct DropoutGrad;

impl OpRules for DropoutGrad {
    type Params = DropoutConfig;
    const NAME: &'static str = "dropout_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<DropoutConfig> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: DropoutConfig) -> Int8Form {
        Int8Form::Float
    }

    fn lower(cfg: DropoutConfig, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::DropoutGrad(cfg, cx.numel()))
    }
}

impl Graph {
    /// Inverted dropout with drop probability `p`; identity in evaluation.
    pub fn dropout(
        &mut self,
        name: &str,
        x: TensorId,
        cfg: DropoutConfig,
    ) -> Result<TensorId, GraphError> {
        if !cfg.is_sane() {
            return Err(invalid(
                Op::Dropout(cfg),
                name,
                format!("p = {} must be in [0, 1)", cfg.p),
            ));
        }
        self.elementwise(name, Op::Dropout(cfg), x)
    }
}
