//! `Transpose`: a tensor's axes reordered (ShuffleNet's channel shuffle, a softmax over an
//! axis that is not the last); its gradient is the transpose by the inverse permutation.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::invalid;
use crate::geometry::PermuteDims;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::TransposeParams;
use crate::ops::lowering::{Lowered, Lowering};
use crate::shape::{Shape, MAX_RANK};
use crate::tensor::TensorId;
use alloc::format;
use alloc::vec;

/// `x → y`: axis `i` of `y` is axis `perm[i]` of `x`.
pub(crate) struct Transpose;

impl OpRules for Transpose {
    type Params = TransposeParams;
    const NAME: &'static str = "transpose";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<TransposeParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| {
            if cx.want(0).is_some() {
                let x = cx.input(0);
                let grad = cx.backward("grad", Op::Transpose(p.inverse()), vec![cx.dy], x)?;
                cx.contribute(x, grad);
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(_: TransposeParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: TransposeParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Transpose(p.dims(cx.input(0))))
    }
}

impl TransposeParams {
    /// The permutation that undoes this one.
    pub fn inverse(self) -> TransposeParams {
        let mut perm = [0; MAX_RANK];
        for (i, &a) in self.perm.iter().enumerate() {
            if let Some(slot) = perm.get_mut(usize::from(a)) {
                *slot = i as u8;
            }
        }
        TransposeParams { perm }
    }

    /// The kernel's view of a transpose of `x`: its dims and permutation padded in front
    /// to four axes. A permutation naming an axis beyond `x`'s rank fails the kernel's check.
    pub fn dims(self, x: Shape) -> PermuteDims {
        let rank = x.rank();
        let lead = MAX_RANK - rank;
        let mut dims = [1; MAX_RANK];
        dims[lead..].copy_from_slice(x.dims());
        let perm = core::array::from_fn(|i| match i.checked_sub(lead) {
            None => i,
            Some(j) => usize::from(self.perm[j]) + lead,
        });
        PermuteDims { dims, perm }
    }
}

impl Graph {
    /// `x` with its axes reordered: axis `i` of the result is axis `perm[i]` of `x`.
    /// `perm` names each axis of `x` once and keeps the batch axis (0) first.
    pub fn transpose(
        &mut self,
        name: &str,
        x: TensorId,
        perm: &[usize],
    ) -> Result<TensorId, GraphError> {
        let op = Op::Transpose(TransposeParams { perm: core::array::from_fn(|i| i as u8) });
        let xs = self.float(op, name, x)?;
        let mut seen = [false; MAX_RANK];
        let permutation = perm.len() == xs.rank()
            && perm.iter().all(|&a| a < xs.rank() && !core::mem::replace(&mut seen[a], true));
        if !permutation || perm.first().is_some_and(|&a| a != 0) {
            return Err(invalid(
                op,
                name,
                format!(
                    "perm {perm:?} must name each of the {} axes of {xs} once and keep the \
                     batch axis 0 first",
                    xs.rank()
                ),
            ));
        }
        let mut params = TransposeParams { perm: core::array::from_fn(|i| i as u8) };
        for (slot, &a) in params.perm.iter_mut().zip(perm) {
            *slot = a as u8;
        }
        let dims: vec::Vec<usize> = perm.iter().map(|&a| xs.dims()[a]).collect();
        let shape = Shape::new(&dims).map_err(|e| invalid(op, name, format!("{e}")))?;
        self.record_one(name, Op::Transpose(params), vec![x], shape)
    }
}
