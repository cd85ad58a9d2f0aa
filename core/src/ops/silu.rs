//! `Silu`: `x · sigmoid(x)` (swish; EfficientNet), one op so that int8 makes it one table of
//! `x`; its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::Activation;
use crate::tensor::TensorId;

pub(crate) struct Silu;

impl OpRules for Silu {
    type Params = ();
    const NAME: &'static str = "silu";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> =
        Gradient::Flows { inputs: &[0], vjp: |(), cx| activation_grad::vjp(Activation::Silu, cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Table(Activation::Silu)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Silu, cx)
    }
}

impl Graph {
    /// Element-wise `x · sigmoid(x)`.
    pub fn silu(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.activation(name, Op::Silu, Activation::Silu, x)
    }
}
