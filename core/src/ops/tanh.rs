//! `Tanh`: the hyperbolic tangent; its gradient reads the output (`1 − y²`).

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::Activation;
use crate::tensor::TensorId;

pub(crate) struct Tanh;

impl OpRules for Tanh {
    type Params = ();
    const NAME: &'static str = "tanh";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> =
        Gradient::Flows { inputs: &[0], vjp: |(), cx| activation_grad::vjp(Activation::Tanh, cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Table(Activation::Tanh)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Tanh, cx)
    }
}

impl Graph {
    /// Element-wise `tanh(x)`.
    pub fn tanh(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.activation(name, Op::Tanh, Activation::Tanh, x)
    }
}
