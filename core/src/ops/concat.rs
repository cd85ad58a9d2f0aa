//! `Concat`, two tensors joined along one axis (SqueezeNet's fire modules, Inception
//! branches, DenseNet), and `ConcatGrad`, the part of its gradient that is one operand's.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::mismatch;
use crate::geometry::ConcatDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::{ConcatGradParams, ConcatParams};
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::Vjp;
use crate::shape::Shape;
use crate::tensor::TensorId;
use alloc::vec;

/// `a, b → y`: along `axis`, `a`'s entries then `b`'s.
pub(crate) struct Concat;

impl OpRules for Concat {
    type Params = ConcatParams;
    const NAME: &'static str = "concat";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<ConcatParams> =
        Gradient::Flows { inputs: &[0, 1], vjp: |p, cx| vjp(p.axis, cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: ConcatParams) -> Int8Form {
        Int8Form::Concat(p)
    }

    fn lower(p: ConcatParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Concat(concat_dims(cx.output(0), cx.input(0), cx.input(1), p.axis)))
    }
}

/// `dy → d(part)`: the blocks of `dy` that belong to the first or the second operand.
pub(crate) struct ConcatGrad;

impl OpRules for ConcatGrad {
    type Params = ConcatGradParams;
    const NAME: &'static str = "concat_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<ConcatGradParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: ConcatGradParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: ConcatGradParams, cx: &Lowering<'_>) -> Lowered {
        let (outer, inner) = around(cx.input(0), p.axis);
        let whole = cx.input(0).dim(p.axis).unwrap_or(0) * inner;
        let own = cx.output(0).dim(p.axis).unwrap_or(0) * inner;
        // A hostile file's shapes may not add up: the kernel's checks then refuse it.
        let other = whole.saturating_sub(own);
        let (first, second) = if p.second { (other, own) } else { (own, other) };
        let dims = ConcatDims { outer, first, second };
        cx.all(KernelCall::ConcatGrad { dims, second: p.second })
    }
}

/// The gradient of a concatenation along `axis` (float or int8): each operand's part of `dy`.
pub(super) fn vjp(axis: usize, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
    for (i, what, second) in [(0, "grad_a", false), (1, "grad_b", true)] {
        if cx.want(i).is_some() {
            let x = cx.input(i);
            let op = Op::ConcatGrad(ConcatGradParams { axis, second });
            let grad = cx.backward(what, op, vec![cx.dy], x)?;
            cx.contribute(x, grad);
        }
    }
    Ok(())
}

/// The dimensions of two tensors joined along `axis` into `y`, for the kernels.
pub(super) fn concat_dims(y: Shape, a: Shape, b: Shape, axis: usize) -> ConcatDims {
    let (outer, inner) = around(y, axis);
    let block = |s: Shape| s.dim(axis).unwrap_or(0) * inner;
    ConcatDims { outer, first: block(a), second: block(b) }
}

/// The products of the dimensions before and after `axis`.
fn around(s: Shape, axis: usize) -> (usize, usize) {
    let dims = s.dims();
    let product = |d: &[usize]| d.iter().product();
    (product(dims.get(..axis).unwrap_or(&[])), product(dims.get(axis + 1..).unwrap_or(&[])))
}

impl Graph {
    /// `a` and `b` joined along `axis`: every other dimension must be equal, and `axis`
    /// must not be the batch axis (0).
    pub fn concat(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
        axis: usize,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Concat(ConcatParams { axis });
        let (as_, bs) = (self.float(op, name, a)?, self.float(op, name, b)?);
        let shape = joined(op, name, as_, bs, axis)?;
        self.record_one(name, op, vec![a, b], shape)
    }
}

/// The shape of `a` and `b` joined along `axis` by `op`, or the error saying why they
/// cannot be.
pub(super) fn joined(
    op: Op,
    name: &str,
    as_: Shape,
    bs: Shape,
    axis: usize,
) -> Result<Shape, GraphError> {
    let (ad, bd) = (as_.dims(), bs.dims());
    let joinable = axis >= 1
        && axis < ad.len()
        && ad.len() == bd.len()
        && ad.iter().zip(bd).enumerate().all(|(i, (x, y))| i == axis || x == y);
    let joined = ad.get(axis).zip(bd.get(axis)).and_then(|(x, y)| x.checked_add(*y));
    let (true, Some(joined)) = (joinable, joined) else {
        return Err(mismatch(
            op,
            name,
            "operands must have the same rank and equal dimensions but along the axis, \
             which must not be the batch axis 0",
            as_,
            bs,
        ));
    };
    Ok(as_.with_dim(axis, joined))
}
