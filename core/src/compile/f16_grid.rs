//! Round trips through f16 of values already on f16's grid: widened from f16, or clamped or
//! gated from such values (a rectifier and its gradient). Rounding them changes nothing, so
//! such a [`KernelCall::RoundThroughF16`] step keeps only what it still does: the f16 copy,
//! where a later step reads it, and a copy of the values, which vanishes where it can run
//! in place.

use super::Lowered;
use crate::kernel::{Access, KernelCall};
use crate::tensor::TensorId;
use alloc::vec;
use alloc::vec::Vec;

/// `lowered` with every [`KernelCall::RoundThroughF16`] step (`x → h, y`) whose `x` is on
/// f16's grid replaced by [`KernelCall::CastF32ToF16`] (`x → h`, only where another step
/// reads `h` or the caller keeps it) and [`KernelCall::Copy`] (`x → y`). `keep` are tensors
/// the caller reads after the run.
pub(super) fn skip_exact(lowered: Vec<Lowered>, tensors: usize, keep: &[TensorId]) -> Vec<Lowered> {
    let mut uses = vec![0usize; tensors];
    let mut updated = vec![false; tensors];
    for l in &lowered {
        let slots = l.kernel.signature().slots;
        for (t, slot) in l.operands.iter().zip(&slots) {
            uses[t.index()] += 1;
            updated[t.index()] |= slot.access == Access::Update;
        }
    }
    for t in keep {
        uses[t.index()] += 1;
    }
    let mut exact = vec![false; tensors];
    let mut out = Vec::with_capacity(lowered.len());
    for l in lowered {
        let on_grid = |t: &TensorId| exact[t.index()] && !updated[t.index()];
        let output = on_grid_output(&l, on_grid);
        let round_trip = match (l.kernel, &l.operands[..]) {
            (KernelCall::RoundThroughF16(len), &[x, h, y]) if on_grid(&x) => Some((len, x, h, y)),
            _ => None,
        };
        if let Some(t) = output {
            exact[t.index()] = true;
        }
        let Some((len, x, h, y)) = round_trip else {
            out.push(l);
            continue;
        };
        let step = |kernel, operands| Lowered { kernel, operands, ..l };
        // Written here and read elsewhere.
        if uses[h.index()] > 1 {
            out.push(step(KernelCall::CastF32ToF16(len), vec![x, h]));
        }
        out.push(step(KernelCall::Copy(len), vec![x, y]));
    }
    out
}

/// The output of `l` that holds values on f16's grid, given which tensors do (`on_grid`).
fn on_grid_output(l: &Lowered, on_grid: impl Fn(&TensorId) -> bool) -> Option<TensorId> {
    match (l.kernel, &l.operands[..]) {
        (KernelCall::CastF16ToF32(_), &[_, y]) | (KernelCall::RoundThroughF16(_), &[_, _, y]) => {
            Some(y)
        }
        // max(x, 0), clamp(x, 0, 6) and a copy of values on the grid stay on it.
        (KernelCall::Relu(_) | KernelCall::Relu6(_) | KernelCall::Copy(_), &[x, y]) => {
            on_grid(&x).then_some(y)
        }
        // Each gradient either passes or is zero.
        (KernelCall::ReluGrad(_) | KernelCall::Relu6Grad(_), &[_, dy, dx]) => {
            on_grid(&dy).then_some(dx)
        }
        _ => None,
    }
}
