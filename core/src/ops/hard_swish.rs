//! `HardSwish`: `x · relu6(x + 3) / 6` (MobileNetV3); its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::Activation;
use crate::tensor::TensorId;

pub(crate) struct HardSwish;

impl OpRules for HardSwish {
    type Params = ();
    const NAME: &'static str = "hard_swish";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| activation_grad::vjp(Activation::HardSwish, cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Table(Activation::HardSwish)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::HardSwish, cx)
    }
}

impl Graph {
    /// Element-wise `x · relu6(x + 3) / 6`.
    pub fn hard_swish(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.activation(name, Op::HardSwish, Activation::HardSwish, x)
    }
}
