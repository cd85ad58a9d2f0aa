//! Ops that copy their input's values: `Reshape` (flatten is one) and `Detach`, which stops
//! the gradient.

use super::{Gradient, Int8Form, Int8Same, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec;

pub(crate) struct Reshape;

impl OpRules for Reshape {
    type Params = ();
    const NAME: &'static str = "reshape";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| {
            // Reshaping the gradient back is itself a reshape.
            cx.first_input(Op::Reshape, vec![cx.dy])
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::SameQuantization(Int8Same::Reshape)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        copy(cx)
    }
}

pub(crate) struct Detach;

impl OpRules for Detach {
    type Params = ();
    const NAME: &'static str = "detach";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    // The gradient stops here.
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Identity
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        copy(cx)
    }
}

/// A copy of the input, in its element type.
fn copy(cx: &Lowering<'_>) -> Lowered {
    cx.all(match cx.input_dtype(0) {
        DType::I8 => KernelCall::CopyI8(cx.numel()),
        _ => KernelCall::Copy(cx.numel()),
    })
}

impl Graph {
    /// The same values under a new shape with as many elements.
    pub fn reshape(
        &mut self,
        name: &str,
        x: TensorId,
        shape: Shape,
    ) -> Result<TensorId, GraphError> {
        let xs = self.float(Op::Reshape, name, x)?;
        if xs.numel() != shape.numel() {
            return Err(mismatch(Op::Reshape, name, "element counts differ", xs, shape));
        }
        self.record_one(name, Op::Reshape, vec![x], shape)
    }

    /// `[N, ...] → [N, rest]`.
    pub fn flatten(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.check_id(x)?;
        let xs = self.shape(x);
        let n = xs.dim(0).unwrap_or(1);
        self.reshape(name, x, Shape::d2(n, xs.per_sample()))
    }

    /// Passes the value, stops the gradient.
    pub fn detach(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Detach, x)
    }
}
