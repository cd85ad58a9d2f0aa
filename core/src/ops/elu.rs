//! `Elu`: `x` where `x > 0`, else `alpha · (e^x − 1)`; its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::{Activation, EluParams};
use crate::tensor::TensorId;

pub(crate) struct Elu;

impl OpRules for Elu {
    type Params = EluParams;
    const NAME: &'static str = "elu";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<EluParams> =
        Gradient::Flows { inputs: &[0], vjp: |p, cx| activation_grad::vjp(Activation::Elu(p), cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: EluParams) -> Int8Form {
        Int8Form::Table(Activation::Elu(p))
    }

    fn lower(p: EluParams, cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Elu(p), cx)
    }
}

impl Graph {
    /// Element-wise ELU with scale `alpha` of the negative part.
    pub fn elu(&mut self, name: &str, x: TensorId, alpha: f32) -> Result<TensorId, GraphError> {
        let p = EluParams { alpha };
        self.activation(name, Op::Elu(p), Activation::Elu(p), x)
    }
}
