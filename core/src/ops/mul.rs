//! Element-wise `Mul` of two tensors: of the same shape, or a per-channel factor
//! (`[N, C]` or `[N, C, 1, 1]`) scaling a `[N, C, ...]` tensor (squeeze-excitation), with
//! `MulGradFactor`, the gradient of such a factor.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::geometry::ChannelDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{channel_dims, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::TensorId;
use alloc::vec;

/// `a [N, C, ...], b → y`: `b` has `a`'s shape, or is one factor per channel.
pub(crate) struct Mul;

impl OpRules for Mul {
    type Params = ();
    const NAME: &'static str = "mul";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0, 1],
        vjp: |(), cx| {
            let (a, b) = (cx.input(0), cx.input(1));
            if cx.want(0).is_some() {
                let grad = cx.backward("grad_a", Op::Mul, vec![cx.dy, b], a)?;
                cx.contribute(a, grad);
            }
            if cx.want(1).is_some() {
                let factor = cx.shape(b).numel() != cx.shape(a).numel();
                let op = if factor { Op::MulGradFactor } else { Op::Mul };
                let grad = cx.backward("grad_b", op, vec![cx.dy, a], b)?;
                cx.contribute(b, grad);
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::Mul
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        let (dims, broadcast) = mul_dims(cx);
        cx.all(KernelCall::Mul { dims, broadcast })
    }
}

/// The dimensions of a product (float or int8) and whether its second operand is a
/// per-channel factor.
pub(super) fn mul_dims(cx: &Lowering<'_>) -> (ChannelDims, bool) {
    let len = cx.numel();
    let broadcast = cx.input(1).numel() != len;
    let dims = match broadcast {
        true => channel_dims(cx.output(0)),
        false => ChannelDims { outer: 1, channels: 1, inner: len },
    };
    (dims, broadcast)
}

/// `dy [N, C, ...], a → db [N, C]`: `db[n, c] = Σ dy[n, c, …] · a[n, c, …]`.
pub(crate) struct MulGradFactor;

impl OpRules for MulGradFactor {
    type Params = ();
    const NAME: &'static str = "mul_grad_factor";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::MulGradFactor(channel_dims(cx.input(0))))
    }
}

/// Whether `factor` holds one value per channel of `of` (`[N, C, ...]`): its first two
/// dimensions are `of`'s and any further ones are 1.
pub(super) fn is_channel_factor(factor: Shape, of: Shape) -> bool {
    let (f, o) = (factor.dims(), of.dims());
    o.len() >= 2 && f.len() >= 2 && f[..2] == o[..2] && f[2..].iter().all(|&d| d == 1)
}

impl Graph {
    /// Element-wise product of two tensors of the same shape, or of a `[N, C, ...]` tensor
    /// and a per-channel factor (`[N, C]` or `[N, C, 1, 1]`) on either side.
    pub fn mul(&mut self, name: &str, a: TensorId, b: TensorId) -> Result<TensorId, GraphError> {
        let (as_, bs) = (self.float(Op::Mul, name, a)?, self.float(Op::Mul, name, b)?);
        // The full-size operand goes first: the kernel broadcasts the second.
        let (full, factor, shape) = if as_ == bs || is_channel_factor(bs, as_) {
            (a, b, as_)
        } else if is_channel_factor(as_, bs) {
            (b, a, bs)
        } else {
            return Err(mismatch(
                Op::Mul,
                name,
                "operands must have the same shape, or one must be a per-channel factor \
                 ([N, C] or [N, C, 1, 1]) of the other",
                as_,
                bs,
            ));
        };
        self.record_one(name, Op::Mul, vec![full, factor], shape)
    }
}
