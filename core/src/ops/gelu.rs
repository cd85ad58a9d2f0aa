//! `Gelu`: `x · Φ(x)` (transformers, ConvNeXt), exact through `erf` or PyTorch's tanh
//! approximation; its gradient reads the input.

use super::{activation_grad, Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::graph::{Graph, GraphError};
use crate::ops::lowering::{Lowered, Lowering};
use crate::reference::{Activation, GeluParams};
use crate::tensor::TensorId;

pub(crate) struct Gelu;

impl OpRules for Gelu {
    type Params = GeluParams;
    const NAME: &'static str = "gelu";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<GeluParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| activation_grad::vjp(Activation::Gelu(p), cx),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: GeluParams) -> Int8Form {
        Int8Form::Table(Activation::Gelu(p))
    }

    fn lower(p: GeluParams, cx: &Lowering<'_>) -> Lowered {
        activation_grad::lower(Activation::Gelu(p), cx)
    }
}

impl Graph {
    /// Element-wise GELU, exact (`x · ½(1 + erf(x / √2))`) or, with `tanh`, PyTorch's
    /// `approximate='tanh'`.
    pub fn gelu(&mut self, name: &str, x: TensorId, tanh: bool) -> Result<TensorId, GraphError> {
        let p = GeluParams { tanh };
        self.activation(name, Op::Gelu(p), Activation::Gelu(p), x)
    }
}
