//! A narrowing cast and the widening of its result right after it, fused into one kernel:
//! f16 storage rounds every activation and activation gradient to f16 this way, and
//! [`KernelCall::RoundThroughF16`] writes both copies in one pass over the values.

use super::Lowered;
use crate::kernel::KernelCall;
use alloc::vec;
use alloc::vec::Vec;

/// `lowered` with every [`KernelCall::CastF32ToF16`] step followed, in the same program, by
/// a [`KernelCall::CastF16ToF32`] of its output fused into one step: `x → h, y` with the
/// same operands. The f16 copy is still written, for whatever else reads it.
pub(super) fn fuse(lowered: Vec<Lowered>) -> Vec<Lowered> {
    let mut fused = Vec::with_capacity(lowered.len());
    let mut rest = lowered.into_iter().peekable();
    while let Some(narrow) = rest.next() {
        match rest.peek().and_then(|widen| round_trip(&narrow, widen)) {
            Some(step) => {
                rest.next();
                fused.push(step);
            }
            None => fused.push(narrow),
        }
    }
    fused
}

/// The fused step when `widen` casts the f16 output of `narrow` back to f32, in the same
/// program.
fn round_trip(narrow: &Lowered, widen: &Lowered) -> Option<Lowered> {
    let (KernelCall::CastF32ToF16(len), KernelCall::CastF16ToF32(widened)) =
        (narrow.kernel, widen.kernel)
    else {
        return None;
    };
    let ([x, h], [half, y]) = (&narrow.operands[..], &widen.operands[..]) else { return None };
    let same = len == widened && h == half && narrow.per_update == widen.per_update;
    same.then(|| Lowered {
        node: narrow.node,
        kernel: KernelCall::RoundThroughF16(len),
        operands: vec![*x, *h, *y],
        per_update: narrow.per_update,
    })
}
