//! `LeakyRelu`: `x` where `x > 0`, else `alpha · x`; its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::{Activation, LeakyReluParams};
use crate::tensor::TensorId;

pub(crate) struct LeakyRelu;

impl OpRules for LeakyRelu {
    type Params = LeakyReluParams;
    const NAME: &'static str = "leaky_relu";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<LeakyReluParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| activation_grad::vjp(Activation::LeakyRelu(p), cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: LeakyReluParams) -> Int8Form {
        Int8Form::Table(Activation::LeakyRelu(p))
    }

    fn lower(p: LeakyReluParams, cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::LeakyRelu(p), cx)
    }
}

impl Graph {
    /// Element-wise leaky ReLU with negative slope `alpha`.
    pub fn leaky_relu(
        &mut self,
        name: &str,
        x: TensorId,
        alpha: f32,
    ) -> Result<TensorId, GraphError> {
        let p = LeakyReluParams { alpha };
        self.activation(name, Op::LeakyRelu(p), Activation::LeakyRelu(p), x)
    }
}
