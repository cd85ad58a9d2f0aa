//! `Broadcast`: a tensor repeated along its size-1 axes to a larger shape (numpy's rule, which
//! ONNX's Add, Sub and Mul follow); its gradient sums over the repeated axes.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::{invalid, mismatch};
use crate::geometry::BroadcastDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};
use crate::shape::{Shape, MAX_RANK};
use crate::tensor::TensorId;
use alloc::format;
use alloc::vec;

/// `x → y`: `x` repeated along the axes where it has 1 and `y` more.
pub(crate) struct Broadcast;

impl OpRules for Broadcast {
    type Params = ();
    const NAME: &'static str = "broadcast";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| {
            if cx.want(0).is_some() {
                let x = cx.input(0);
                let grad = cx.backward("grad", Op::BroadcastGrad, vec![cx.dy], x)?;
                cx.contribute(x, grad);
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Broadcast(broadcast_dims(cx.input(0), cx.output(0))))
    }
}

/// `dy → dx`: `dy` summed over the axes a broadcast repeated `dx` along.
pub(crate) struct BroadcastGrad;

impl OpRules for BroadcastGrad {
    type Params = ();
    const NAME: &'static str = "broadcast_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::BroadcastGrad(broadcast_dims(cx.output(0), cx.input(0))))
    }
}

/// The kernel's view of broadcasting `from` to `to`: both padded in front to four axes.
fn broadcast_dims(from: Shape, to: Shape) -> BroadcastDims {
    let padded = |s: Shape| {
        let mut dims = [1; MAX_RANK];
        dims[MAX_RANK - s.rank()..].copy_from_slice(s.dims());
        dims
    };
    BroadcastDims { from: padded(from), to: padded(to) }
}

impl Graph {
    /// `x` repeated along its size-1 axes to `shape` (numpy broadcasting): `x` has `shape`'s
    /// rank, and each of its axes is `shape`'s or 1, its batch axis (0) always `shape`'s.
    pub fn broadcast(
        &mut self,
        name: &str,
        x: TensorId,
        shape: Shape,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Broadcast;
        let xs = self.float(op, name, x)?;
        let fits = xs.rank() == shape.rank()
            && xs.dims().iter().zip(shape.dims()).all(|(&a, &b)| a == b || a == 1);
        if !fits {
            return Err(mismatch(
                op,
                name,
                "each axis must be the target's or 1, at the same rank",
                xs,
                shape,
            ));
        }
        if xs.dim(0) != shape.dim(0) {
            return Err(invalid(
                op,
                name,
                format!("{xs} cannot be broadcast to {shape} along the batch axis 0"),
            ));
        }
        self.record_one(name, op, vec![x], shape)
    }
}
