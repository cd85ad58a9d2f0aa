//! `HardSigmoid`: `clamp(alpha · x + beta, 0, 1)`, ONNX's piecewise-linear sigmoid
//! (PyTorch's `hardsigmoid` is alpha 1/6, beta 1/2); its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::{Activation, HardSigmoidParams};
use crate::tensor::TensorId;

pub(crate) struct HardSigmoid;

impl OpRules for HardSigmoid {
    type Params = HardSigmoidParams;
    const NAME: &'static str = "hard_sigmoid";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<HardSigmoidParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| activation_grad::vjp(Activation::HardSigmoid(p), cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: HardSigmoidParams) -> Int8Form {
        Int8Form::Table(Activation::HardSigmoid(p))
    }

    fn lower(p: HardSigmoidParams, cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::HardSigmoid(p), cx)
    }
}

impl Graph {
    /// Element-wise `clamp(alpha · x + beta, 0, 1)`.
    pub fn hard_sigmoid(
        &mut self,
        name: &str,
        x: TensorId,
        alpha: f32,
        beta: f32,
    ) -> Result<TensorId, GraphError> {
        let p = HardSigmoidParams { alpha, beta };
        self.activation(name, Op::HardSigmoid(p), Activation::HardSigmoid(p), x)
    }
}
