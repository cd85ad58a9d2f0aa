//! A batch norm's backward pass in f16 storage folded with the casts around it. A
//! mixed-precision step widens the f16 copy of the batch norm's output, rectifies it again
//! and gates the gradient with that; widens the f16 copy of its input for both gradient
//! kernels; and rounds the input gradient through f16: each a pass over memory. Instead,
//! [`KernelCall::BatchNormGradParamsRectifiedF16`] recomputes each pre-activation from the
//! f16 copy of the input, rounds it to f16 and gates the gradient in place, and
//! [`KernelCall::BatchNormGradInputFromSumsF16`] reads that copy and rounds its output
//! itself, with the same results. In the forward pass, a rectifier of a round trip through
//! f16 and the cast of its output run as one [`KernelCall::RectifyThroughF16`], once the
//! backward pass no longer reads that round trip's f16 copy.

use super::Lowered;
use crate::graph::{producers, Graph};
use crate::kernel::{Access, KernelCall};
use crate::ops::Op;
use crate::reference::Rectifier;
use crate::tensor::{DType, Role, TensorId};
use alloc::vec;
use alloc::vec::Vec;

/// `lowered` with both folds applied, the rectifier's first (it leaves the widened input
/// to the input gradient alone). `keep` are tensors the caller reads after the run.
pub(super) fn fold(graph: &Graph, lowered: Vec<Lowered>, keep: &[TensorId]) -> Vec<Lowered> {
    let lowered = apply(graph, lowered, keep, |c, j| c.rectified(j));
    let lowered = apply(graph, lowered, keep, |c, j| c.grad_input(j));
    apply(graph, lowered, keep, |c, j| c.rectify(j))
}

/// `lowered` with every step `fold` finds a fold for replaced by it.
fn apply(
    graph: &Graph,
    lowered: Vec<Lowered>,
    keep: &[TensorId],
    fold: impl Fn(&Chains<'_>, usize) -> Option<Fold>,
) -> Vec<Lowered> {
    let tensors = graph.tensors().len();
    let mut uses = vec![0usize; tensors];
    let mut written_by = vec![None; tensors];
    let mut kernel_of = vec![None; graph.nodes().len()];
    for (i, l) in lowered.iter().enumerate() {
        kernel_of[l.node] = Some(l.kernel);
        for (t, slot) in l.operands.iter().zip(&l.kernel.signature().slots) {
            uses[t.index()] += 1;
            if slot.access == Access::Write {
                written_by[t.index()] = Some(i);
            }
        }
    }
    for t in keep {
        uses[t.index()] += 1;
    }
    let chains = Chains {
        graph,
        lowered: &lowered,
        keep,
        uses,
        written_by,
        kernel_of,
        producer: producers(graph.nodes(), tensors),
    };
    let found: Vec<(usize, Fold)> =
        (0..lowered.len()).filter_map(|j| Some((j, fold(&chains, j)?))).collect();
    let mut dropped = vec![false; lowered.len()];
    let mut rename: Vec<Option<TensorId>> = vec![None; tensors];
    let mut fused: Vec<Option<Lowered>> = lowered.iter().map(|_| None).collect();
    for (j, f) in found {
        for &s in &f.dropped {
            dropped[s] = true;
        }
        if let Some((from, to)) = f.rename {
            rename[from.index()] = Some(to);
        }
        fused[j] = Some(f.step);
    }
    lowered
        .into_iter()
        .zip(fused)
        .zip(dropped)
        .filter(|(_, dropped)| !dropped)
        .map(|((l, fused), _)| {
            let mut step = fused.unwrap_or(l);
            for t in &mut step.operands {
                *t = rename[t.index()].unwrap_or(*t);
            }
            step
        })
        .collect()
}

/// One fold: the fused step, the steps it replaces, and a tensor later steps read in
/// place of another (`(from, to)`), if any.
struct Fold {
    step: Lowered,
    dropped: Vec<usize>,
    rename: Option<(TensorId, TensorId)>,
}

/// What the matching reads: the lowered steps, the tensors the caller keeps, how often each
/// tensor is used, the step that writes it, each node's kernel and the graph's producers.
struct Chains<'a> {
    graph: &'a Graph,
    lowered: &'a [Lowered],
    keep: &'a [TensorId],
    uses: Vec<usize>,
    written_by: Vec<Option<usize>>,
    kernel_of: Vec<Option<KernelCall>>,
    producer: Vec<Option<usize>>,
}

impl Chains<'_> {
    /// The step writing `t`, when `t` is read once (by the step after it in the chain).
    fn passed_on(&self, t: TensorId) -> Option<(usize, &Lowered)> {
        let i = self.written_by[t.index()]?;
        (self.uses[t.index()] == 2).then(|| (i, &self.lowered[i]))
    }

    /// The graph node writing `t`.
    fn node_of(&self, t: TensorId) -> Option<&crate::graph::Node> {
        Some(&self.graph.nodes()[self.producer[t.index()]?])
    }

    /// The f16 tensor that the graph widens into `t`.
    fn widened_from(&self, t: TensorId) -> Option<TensorId> {
        let cast = self.node_of(t).filter(|n| n.op == Op::Cast)?;
        let half = *cast.inputs.first()?;
        (self.graph.tensor(half).dtype == DType::F16).then_some(half)
    }

    /// The fold of step `j`, if it is the parameter gradient (`dz, xr, mean, invstd →
    /// dgamma, dbeta`) of a training batch norm whose `dz` is a rectifier's gradient (`ar,
    /// g → dz`, then perhaps a copy) through the rectifier recomputed from a widened f16
    /// copy (`zh → zr`, `zr → ar`) of the batch norm's output, `xr` the widened f16 copy
    /// `yh` of its input: the rectifier's steps vanish and the fused step gates `g` in
    /// place, which later steps read instead of `dz`.
    fn rectified(&self, j: usize) -> Option<Fold> {
        let params = &self.lowered[j];
        let KernelCall::BatchNormGradParams(dims) = params.kernel else { return None };
        let [gated, xr, mean, invstd, dgamma, dbeta] = params.operands[..] else { return None };
        let mut dropped = Vec::new();
        // The rectifier's gradient, perhaps copied (a round trip of values on f16's grid).
        let mut at = self.written_by[gated.index()]?;
        if let KernelCall::Copy(_) = self.lowered[at].kernel {
            dropped.push(at);
            at = self.passed_on(self.lowered[at].operands[0])?.0;
        }
        let step = &self.lowered[at];
        let relu6 = match step.kernel {
            KernelCall::ReluGrad(_) => false,
            KernelCall::Relu6Grad(_) => true,
            _ => return None,
        };
        let grad_at = at;
        dropped.push(at);
        let [ar, mut g, _] = step.operands[..] else { return None };
        // The gradient's round trip through f16 before it, whose f16 copy nothing reads:
        // the fused step rounds the gradient itself, in place of the round trip's input.
        if let Some((at, [x, h, _])) = self.passed_on(g).and_then(|(at, s)| match s.kernel {
            KernelCall::RoundThroughF16(_) => {
                Some((at, <[TensorId; 3]>::try_from(&s.operands[..]).ok()?))
            }
            _ => None,
        }) {
            if self.uses[h.index()] == 1 && self.uses[x.index()] == 2 {
                dropped.push(at);
                g = x;
            }
        }
        let (at, rectify) = self.passed_on(ar)?;
        dropped.push(at);
        let same_rectifier = match rectify.kernel {
            KernelCall::Relu(_) => !relu6,
            KernelCall::Relu6(_) => relu6,
            _ => false,
        };
        let (at, widen) = self.passed_on(*rectify.operands.first()?)?;
        dropped.push(at);
        let KernelCall::CastF16ToF32(_) = widen.kernel else { return None };
        let zh = *widen.operands.first()?;
        // `zh` is the f16 copy of a training batch norm's output, whose input is widened
        // from the f16 copy that `xr` widens too.
        let z = *self.node_of(zh).filter(|n| n.op == Op::Cast)?.inputs.first()?;
        let norm_index = self.producer[z.index()]?;
        let norm = &self.graph.nodes()[norm_index];
        let trained = matches!(
            self.kernel_of[norm_index],
            Some(KernelCall::BatchNormTrain(..) | KernelCall::BatchNormRunning(..))
        );
        let yh = self.widened_from(xr)?;
        let same_norm = matches!(norm.op, Op::BatchNorm2d(_))
            && norm.outputs.first() == Some(&z)
            && norm.outputs.get(1..3) == Some(&[mean, invstd][..])
            && self.widened_from(*norm.inputs.first()?) == Some(yh);
        // `g` is gated in place, so nothing else may read it; the gated gradient is read
        // first by this step, which reads it in its place.
        let role = self.graph.tensor(g).role;
        let own = self.uses[g.index()] == 2
            && matches!(role, Role::Activation | Role::Gradient)
            && !self.keep.contains(&gated);
        let first_read = (grad_at + 1..j).all(|s| dropped.contains(&s) || !self.reads(s, gated));
        let steps = dropped.iter().map(|&s| &self.lowered[s]);
        let one_program = steps.chain([params]).all(|s| s.per_update == params.per_update);
        if !(same_rectifier && trained && same_norm && own && first_read && one_program) {
            return None;
        }
        dropped.extend(self.widening_read_once(xr));
        let (gamma, beta) = (*norm.inputs.get(1)?, *norm.inputs.get(2)?);
        let step = Lowered {
            node: params.node,
            kernel: KernelCall::BatchNormGradParamsRectifiedF16(dims, Rectifier { relu6 }),
            operands: vec![yh, gamma, beta, mean, invstd, g, dgamma, dbeta],
            per_update: params.per_update,
        };
        Some(Fold { step, dropped, rename: Some((gated, g)) })
    }

    /// The fold of step `j`, if it is the input gradient from sums (`dy, xr, gamma, mean,
    /// invstd, dgamma, dbeta → dx`) of a batch norm whose input `xr` is widened from an f16
    /// copy `yh`, and `dx` is read only by a round trip through f16 (`dx → h, y`) whose f16
    /// copy `h` nothing reads: the fused step reads `yh` and writes `y` itself.
    fn grad_input(&self, j: usize) -> Option<Fold> {
        let step = &self.lowered[j];
        let KernelCall::BatchNormGradInputFromSums(dims) = step.kernel else { return None };
        let [dy, xr, gamma, mean, invstd, dgamma, dbeta, dx] = step.operands[..] else {
            return None;
        };
        let yh = self.widened_from(xr)?;
        let (at, round_trip) = self.read_once(dx, j)?;
        let [_, h, y] = round_trip.operands[..] else { return None };
        let unread = self.uses[h.index()] == 1;
        let one_program = round_trip.per_update == step.per_update;
        if !(matches!(round_trip.kernel, KernelCall::RoundThroughF16(_)) && unread && one_program) {
            return None;
        }
        let mut dropped = vec![at];
        dropped.extend(self.widening_read_once(xr));
        let step = Lowered {
            node: step.node,
            kernel: KernelCall::BatchNormGradInputFromSumsF16(dims),
            operands: vec![dy, yh, gamma, mean, invstd, dgamma, dbeta, y],
            per_update: step.per_update,
        };
        Some(Fold { step, dropped, rename: None })
    }

    /// The fold of step `j`, if it is a rectifier (`z' → a`) of a round trip through f16
    /// (`z → zh, z'`) whose f16 copy `zh` nothing reads (the backward pass reads the batch
    /// norm's input instead, see [`Chains::rectified`]), and a later cast makes the f16
    /// copy of its output (`a → ah`): one step writes `a` and `ah`, the round trip and the
    /// cast vanish.
    fn rectify(&self, j: usize) -> Option<Fold> {
        let step = &self.lowered[j];
        let rectifier = match step.kernel {
            KernelCall::Relu(_) => Rectifier { relu6: false },
            KernelCall::Relu6(_) => Rectifier { relu6: true },
            _ => return None,
        };
        let [rounded, a] = step.operands[..] else { return None };
        let (at, round_trip) = self.passed_on(rounded)?;
        let KernelCall::RoundThroughF16(len) = round_trip.kernel else { return None };
        let [z, zh, _] = round_trip.operands[..] else { return None };
        let cast = (j + 1..self.lowered.len()).find(|&s| {
            let s = &self.lowered[s];
            matches!(s.kernel, KernelCall::CastF32ToF16(_)) && s.operands.first() == Some(&a)
        })?;
        let ah = *self.lowered[cast].operands.get(1)?;
        let steps = [round_trip, &self.lowered[cast]];
        let one_program = steps.iter().all(|s| s.per_update == step.per_update);
        if !(self.uses[zh.index()] == 1 && one_program) {
            return None;
        }
        let step = Lowered {
            node: step.node,
            kernel: KernelCall::RectifyThroughF16(len, rectifier),
            operands: vec![z, a, ah],
            per_update: step.per_update,
        };
        Some(Fold { step, dropped: vec![at, cast], rename: None })
    }

    /// The one step after `j` that reads `t`, where `t` is used by `j` and that step only.
    fn read_once(&self, t: TensorId, j: usize) -> Option<(usize, &Lowered)> {
        if self.uses[t.index()] != 2 {
            return None;
        }
        let at = (j + 1..self.lowered.len()).find(|&s| self.reads(s, t))?;
        Some((at, &self.lowered[at]))
    }

    /// The step widening `xr`, when the step being folded is the only one that reads it:
    /// it goes too.
    fn widening_read_once(&self, xr: TensorId) -> Option<usize> {
        (self.uses[xr.index()] == 2).then_some(self.written_by[xr.index()]?)
    }

    /// Whether step `s` reads or writes `t`.
    fn reads(&self, s: usize, t: TensorId) -> bool {
        self.lowered[s].operands.contains(&t)
    }
}
