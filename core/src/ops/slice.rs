//! `Slice`, a run of one axis cut out of a tensor (ONNX `Split` and `Slice`: ShuffleNet's
//! `chunk`), and `Pad`, its converse: zeros along one axis with the tensor in a run of it
//! (asymmetric zero padding). Each is the other's gradient. A slice of an int8 tensor is
//! an int8 copy in the same quantization.

use super::{Gradient, Int8Form, Int8Same, Op, OpRules, OperandCounts, Recompute, Vjp};
use crate::builder::invalid;
use crate::geometry::SliceDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::SliceParams;
use crate::ops::lowering::{Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::format;
use alloc::vec;

/// `x → y`: along `axis`, `x`'s entries `start..start + len` (`len`: `y`'s length there).
pub(crate) struct Slice;

impl OpRules for Slice {
    type Params = SliceParams;
    const NAME: &'static str = "slice";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<SliceParams> =
        Gradient::Flows { inputs: &[0], vjp: |p, cx| gradient_through(Op::Pad(p), cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(p: SliceParams) -> Int8Form {
        Int8Form::SameQuantization(Int8Same::Slice(p))
    }

    fn lower(p: SliceParams, cx: &Lowering<'_>) -> Lowered {
        let dims = slice_dims(p, cx.input(0), cx.output(0));
        cx.all(match cx.input_dtype(0) {
            DType::I8 => KernelCall::SliceI8(dims),
            _ => KernelCall::Slice(dims),
        })
    }
}

/// `x → y`: zeros along `axis` with `x` from `start`; the gradient of [`Slice`] too.
pub(crate) struct Pad;

impl OpRules for Pad {
    type Params = SliceParams;
    const NAME: &'static str = "pad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<SliceParams> =
        Gradient::Flows { inputs: &[0], vjp: |p, cx| gradient_through(Op::Slice(p), cx) };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(_: SliceParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: SliceParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Pad(slice_dims(p, cx.output(0), cx.input(0))))
    }
}

/// The gradient of a slice or a pad: `op`, its converse, applied to the output's gradient.
fn gradient_through(op: Op, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
    if cx.want(0).is_some() {
        let x = cx.input(0);
        let grad = cx.backward("grad", op, vec![cx.dy], x)?;
        cx.contribute(x, grad);
    }
    Ok(())
}

/// The kernel's view of the slice of `whole` that is `part`. A hostile file's shapes may
/// not add up: the kernel's checks then refuse it.
fn slice_dims(p: SliceParams, whole: Shape, part: Shape) -> SliceDims {
    let dims = whole.dims();
    let product = |d: Option<&[usize]>| d.map_or(0, |d| d.iter().product::<usize>());
    let inner = product(dims.get(p.axis + 1..));
    let along = |s: Shape| s.dim(p.axis).unwrap_or(0).saturating_mul(inner);
    SliceDims {
        outer: product(dims.get(..p.axis)),
        whole: along(whole),
        start: p.start.saturating_mul(inner),
        len: along(part),
    }
}

impl Graph {
    /// Entries `start..start + len` of `x` along `axis`, which must not be the batch axis.
    pub fn slice(
        &mut self,
        name: &str,
        x: TensorId,
        axis: usize,
        start: usize,
        len: usize,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Slice(SliceParams { axis, start });
        let xs = self.float(op, name, x)?;
        let fits = start.checked_add(len).is_some_and(|end| xs.dim(axis).is_some_and(|d| end <= d));
        if axis == 0 || len == 0 || !fits {
            return Err(invalid(
                op,
                name,
                format!(
                    "entries {start}..{} of axis {axis} do not lie inside {xs} (the batch axis \
                     0 is never sliced)",
                    start.saturating_add(len)
                ),
            ));
        }
        self.record_one(name, op, vec![x], xs.with_dim(axis, len))
    }

    /// `x` with `before` zeros ahead of it and `after` behind it along `axis`, which must
    /// not be the batch axis.
    pub fn pad(
        &mut self,
        name: &str,
        x: TensorId,
        axis: usize,
        before: usize,
        after: usize,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Pad(SliceParams { axis, start: before });
        let xs = self.float(op, name, x)?;
        let padded = xs.dim(axis).and_then(|d| d.checked_add(before)?.checked_add(after));
        let Some(padded) = padded.filter(|_| axis > 0) else {
            return Err(invalid(
                op,
                name,
                format!("cannot pad axis {axis} of {xs} (the batch axis 0 is never padded)"),
            ));
        };
        self.record_one(name, op, vec![x], xs.with_dim(axis, padded))
    }
}
