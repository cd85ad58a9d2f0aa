//! `ActivationGrad`: the backward op the pointwise activations of
//! [`Activation`] (sigmoid, hard sigmoid, hard swish, leaky ReLU) share, and the gradient
//! rule and settings check each of them uses.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::invalid;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::Vjp;
use crate::reference::pointwise::GradientReads;
use crate::reference::Activation;
use crate::tensor::TensorId;
use alloc::format;
use alloc::vec;

/// `saved, dy → dx`: `saved` is the activation's input or output, as
/// [`Activation::gradient_reads`] says.
pub(crate) struct ActivationGrad;

impl OpRules for ActivationGrad {
    type Params = Activation;
    const NAME: &'static str = "activation_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<Activation> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: Activation) -> Int8Form {
        Int8Form::Float
    }

    fn lower(f: Activation, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::ActivationGrad(f, cx.numel()))
    }
}

/// The gradient rule of activation `f`: one `ActivationGrad` node reading the tensor its
/// slope depends on.
pub(super) fn vjp(f: Activation, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
    let saved = match f.gradient_reads() {
        GradientReads::Input => cx.input(0),
        GradientReads::Output => cx.output(0),
    };
    cx.first_input(Op::ActivationGrad(f), vec![saved, cx.dy])
}

/// The kernel activation `f` lowers to.
pub(super) fn lower(f: Activation, cx: &Lowering<'_>) -> Lowered {
    cx.all(KernelCall::Activation(f, cx.numel()))
}

impl Graph {
    /// Records the activation op `op` (computing `f`) on `x`, once its settings are finite.
    pub(super) fn activation(
        &mut self,
        name: &str,
        op: Op,
        f: Activation,
        x: TensorId,
    ) -> Result<TensorId, GraphError> {
        if !f.is_valid() {
            return Err(invalid(op, name, format!("settings must be finite, they are {f:?}")));
        }
        self.elementwise(name, op, x)
    }
}
