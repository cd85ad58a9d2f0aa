//! `Softplus`: `ln(1 + e^x)`, `x` itself above 20 as in PyTorch; its gradient (the
//! sigmoid) reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::Activation;
use crate::tensor::TensorId;

pub(crate) struct Softplus;

impl OpRules for Softplus {
    type Params = ();
    const NAME: &'static str = "softplus";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| activation_grad::vjp(Activation::Softplus, cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Table(Activation::Softplus)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Softplus, cx)
    }
}

impl Graph {
    /// Element-wise `ln(1 + e^x)`.
    pub fn softplus(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.activation(name, Op::Softplus, Activation::Softplus, x)
    }
}
