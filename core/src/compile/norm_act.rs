//! A frozen batch norm's chain fused into one kernel: a convolution, an evaluation-mode
//! batch norm of its output and a rectifier of that run as [`KernelCall::Conv2dNormAct`],
//! which normalises each output while it is still in cache instead of reading the whole
//! output twice more. The chain's intermediate tensors then never exist.

use super::Lowered;
use crate::geometry::Conv2dGeometry;
use crate::hyperparams::BatchNormConfig;
use crate::kernel::KernelCall;
use crate::reference::Rectifier;
use crate::tensor::TensorId;
use alloc::vec;
use alloc::vec::Vec;

/// `lowered` with every chain fused whose intermediates nothing else reads: a
/// [`KernelCall::Conv2d`] step, the [`KernelCall::BatchNormEval`] step right after it that
/// normalises its output, and the ReLU or ReLU6 step right after that, if any. `keep` are
/// tensors the caller reads after the run, which stay.
pub(super) fn fuse(lowered: Vec<Lowered>, tensors: usize, keep: &[TensorId]) -> Vec<Lowered> {
    let mut uses = vec![0usize; tensors];
    for t in lowered.iter().flat_map(|l| &l.operands) {
        uses[t.index()] += 1;
    }
    for t in keep {
        uses[t.index()] += 1;
    }
    // Read by the step after the one that writes it, and by nothing else.
    let passed_on = |t: TensorId| uses[t.index()] == 2;
    let mut fused = Vec::with_capacity(lowered.len());
    let mut rest = lowered.into_iter().peekable();
    while let Some(conv) = rest.next() {
        let head =
            rest.peek().and_then(|norm| norm_of(&conv, norm)).filter(|h| passed_on(h.output));
        let norm = head.as_ref().and_then(|_| rest.next());
        let (Some(head), Some(norm)) = (head, norm) else {
            fused.push(conv);
            continue;
        };
        let rectifier = rest.peek().and_then(|act| rectifier_of(act, &norm));
        let rectifier = rectifier.filter(|_| passed_on(norm.operands[5]));
        let act = rectifier.and_then(|rectifier| Some((rectifier, rest.next()?)));
        fused.push(chain(conv, head, &norm, act));
    }
    fused
}

/// What a chain takes from its convolution and batch norm.
struct Head {
    /// The convolution's output, the batch norm's input.
    output: TensorId,
    geometry: Conv2dGeometry,
    bias: bool,
    cfg: BatchNormConfig,
}

/// The head of a chain when `norm` is an evaluation-mode batch norm (`y, gamma, beta, mean,
/// var → z`) of `conv`'s output in the same program.
fn norm_of(conv: &Lowered, norm: &Lowered) -> Option<Head> {
    let KernelCall::Conv2d { geometry, bias } = conv.kernel else { return None };
    let KernelCall::BatchNormEval(_, cfg) = norm.kernel else { return None };
    let output = *conv.operands.last()?;
    let reads = norm.operands.len() == 6 && norm.operands[0] == output;
    (reads && norm.per_update == conv.per_update).then_some(Head { output, geometry, bias, cfg })
}

/// The rectifier `act` applies to the output of `norm`, in the same program.
fn rectifier_of(act: &Lowered, norm: &Lowered) -> Option<Rectifier> {
    let relu6 = match act.kernel {
        KernelCall::Relu(_) => false,
        KernelCall::Relu6(_) => true,
        _ => return None,
    };
    let reads = act.operands.first() == norm.operands.last() && act.per_update == norm.per_update;
    reads.then_some(Rectifier { relu6 })
}

/// The one step of a chain: `x, w, [b]` of the convolution, `gamma, beta, mean, var` of the
/// batch norm, and the output of its last step.
fn chain(conv: Lowered, head: Head, norm: &Lowered, act: Option<(Rectifier, Lowered)>) -> Lowered {
    let Head { geometry, bias, cfg, .. } = head;
    let (rectifier, last) = match &act {
        Some((rectifier, act)) => (Some(*rectifier), act),
        None => (None, norm),
    };
    let mut operands = conv.operands;
    operands.pop();
    operands.extend_from_slice(&norm.operands[1..5]);
    operands.extend(last.operands.last());
    Lowered {
        node: conv.node,
        kernel: KernelCall::Conv2dNormAct { geometry, bias, cfg, rectifier },
        operands,
        per_update: conv.per_update,
    }
}
