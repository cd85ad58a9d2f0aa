//! Layer normalisation over the trailing axes of each sample (`LayerNorm` of PyTorch and
//! ONNX) and its gradients, which recompute each row's statistics from the input.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::invalid;
use crate::geometry::RowDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{dim, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::TensorId;
use alloc::{format, vec};

/// `x [N, ..., D...], gamma [D], beta [D] → y`: each run of the last axes holding `D`
/// values normalised to zero mean and unit variance, then scaled and shifted.
pub(crate) struct LayerNorm;

impl OpRules for LayerNorm {
    type Params = f32;
    const NAME: &'static str = "layer_norm";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<f32> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |eps, cx| {
            let (x, gamma, beta, dy) = (cx.input(0), cx.input(1), cx.input(2), cx.dy);
            if cx.want(0).is_some() {
                let op = Op::LayerNormGradInput(eps);
                let grad = cx.backward("grad_input", op, vec![dy, x, gamma], x)?;
                cx.contribute(x, grad);
            }
            let (want_gamma, want_beta) = (cx.want(1), cx.want(2));
            if want_gamma.is_some() || want_beta.is_some() {
                let op = Op::LayerNormGradParams(eps);
                let ids = cx.backward_many("grad_params", op, vec![dy, x], &[gamma, beta])?;
                for (t, grad) in [(want_gamma, ids[0]), (want_beta, ids[1])] {
                    if let Some(t) = t {
                        cx.contribute(t, grad);
                    }
                }
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(eps: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LayerNorm(rows(cx.input(0), cx.input(1)), eps))
    }
}

/// `dy, x, gamma → dx`.
pub(crate) struct LayerNormGradInput;

impl OpRules for LayerNormGradInput {
    type Params = f32;
    const NAME: &'static str = "layer_norm_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<f32> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(eps: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LayerNormGradInput(rows(cx.input(1), cx.input(2)), eps))
    }
}

/// `dy, x → dgamma, dbeta`.
pub(crate) struct LayerNormGradParams;

impl OpRules for LayerNormGradParams {
    type Params = f32;
    const NAME: &'static str = "layer_norm_grad_params";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 2);
    const GRADIENT: Gradient<f32> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(eps: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::LayerNormGradParams(rows(cx.input(1), cx.output(0)), eps))
    }
}

/// `x` as rows of the `gamma.numel()` values each normalisation covers.
fn rows(x: Shape, gamma: Shape) -> RowDims {
    let cols = dim(gamma, 0);
    RowDims { rows: x.numel().checked_div(cols).unwrap_or(0), cols }
}

impl Graph {
    /// Layer normalisation of `x [N, ...]` over its trailing axes holding `D` values
    /// (one or more whole axes, never the batch axis), `gamma` and `beta` being `[D]`.
    pub fn layer_norm(
        &mut self,
        name: &str,
        x: TensorId,
        gamma: TensorId,
        beta: TensorId,
        eps: f32,
    ) -> Result<TensorId, GraphError> {
        let op = Op::LayerNorm(eps);
        let xs = self.float(op, name, x)?;
        let d = self.float_rank(op, name, gamma, 1)?.dims()[0];
        self.check_bias(op, name, beta, d)?;
        let trailing = (1..xs.rank()).rev().scan(1usize, |p, a| {
            *p *= xs.dims()[a];
            Some(*p)
        });
        if d == 0 || !trailing.into_iter().any(|p| p == d) {
            return Err(invalid(
                op,
                name,
                format!("{d} values per normalisation are not whole trailing axes of {xs}"),
            ));
        }
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(invalid(op, name, format!("eps {eps} must be finite and > 0")));
        }
        self.record_one(name, op, vec![x, gamma, beta], xs)
    }
}
