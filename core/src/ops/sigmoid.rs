//! `Sigmoid`: `1 / (1 + e^-x)` (gates, squeeze-excitation, SiLU as `x · sigmoid(x)`); its
//! gradient reads the output.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::Activation;
use crate::tensor::TensorId;

pub(crate) struct Sigmoid;

impl OpRules for Sigmoid {
    type Params = ();
    const NAME: &'static str = "sigmoid";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| activation_grad::vjp(Activation::Sigmoid, cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Table(Activation::Sigmoid)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Sigmoid, cx)
    }
}

impl Graph {
    /// Element-wise logistic function.
    pub fn sigmoid(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.activation(name, Op::Sigmoid, Activation::Sigmoid, x)
    }
}
