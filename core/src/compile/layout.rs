//! Placement: the lifetime of every arena tensor over the step timeline, in-place reuse for
//! element-wise ops, offsets from the memory planner, and the final steps and bindings (a
//! rectifier's in-place gradient folded into the batch norm's, see `rectified`).

use super::host_plan::{Binding, Plan, PlanStats};
use super::rectified::Sources;
use super::{Lowered, PlacementOptions};
use crate::graph::{Graph, GraphError, Stage};
use crate::kernel::KernelCall;
use crate::plan::{Operand, Region, RegionSizes, Step, ALIGN};
use crate::tensor::{Role, TensorId};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use sprout_planner::{lower_bound, plan_memory, Buffer};

/// First and last step that use a tensor.
type Life = (usize, usize);

fn region_of(role: Role) -> Region {
    match role {
        Role::FrozenParam => Region::Frozen,
        r if r.is_state() => Region::State,
        _ => Region::Arena,
    }
}

/// Builds the plan from lowered nodes: lifetimes, placement, in-place kernels, bindings.
pub(super) fn place(
    graph: &Graph,
    lowered: Vec<Lowered>,
    accumulation: u32,
    keep: &[TensorId],
    options: &PlacementOptions,
) -> Result<Plan, GraphError> {
    let lives = lifetimes(graph, &lowered, keep, options.reuse_input_memory);
    let mut reuse: Vec<Option<TensorId>> = vec![None; graph.tensors().len()];
    if options.in_place {
        for (step, l) in lowered.iter().enumerate() {
            if let Some((output, input)) = in_place_candidate(graph, l, step, &lives, keep) {
                reuse[output.index()] = Some(input);
            }
        }
    }

    // The arena: every used tensor that is neither a weight nor persistent state.
    let used = |i: &usize| lives[*i].is_some();
    let in_arena = |i: &usize| region_of(graph.tensors()[*i].role) == Region::Arena;
    let arena: Vec<usize> = (0..graph.tensors().len()).filter(used).filter(in_arena).collect();
    let mut buffer_of = vec![usize::MAX; graph.tensors().len()];
    for (b, &t) in arena.iter().enumerate() {
        buffer_of[t] = b;
    }
    let buffers: Vec<Buffer> = arena
        .iter()
        .map(|&t| {
            let (first, last) = lives[t].expect("arena tensors are used");
            let reuse = reuse[t].map(|input| buffer_of[input.index()]);
            Buffer { size: graph.tensors()[t].bytes(), align: ALIGN, first, last, reuse }
        })
        .collect();
    let placement = plan_memory(&buffers, options.strategy).map_err(|e| GraphError::Invalid {
        op: "plan_memory",
        node: String::new(),
        detail: format!("{e}"),
    })?;

    let mut sizes = RegionSizes { arena: placement.arena_bytes, ..RegionSizes::default() };
    let mut operand: Vec<Option<Operand>> = vec![None; graph.tensors().len()];
    for (i, t) in graph.tensors().iter().enumerate().filter(|(i, _)| used(i)) {
        let region = region_of(t.role);
        let offset = match region {
            Region::Arena => placement.offsets[buffer_of[i]],
            Region::Frozen => bump(&mut sizes.frozen, t.bytes()),
            Region::State => bump(&mut sizes.state, t.bytes()),
        };
        operand[i] = Some(Operand { region, offset, len: t.shape.numel(), dtype: t.dtype });
    }
    let place_of = |t: TensorId| operand[t.index()].expect("every operand is used");

    let mut plan = Plan {
        steps: Vec::new(),
        update_steps: Vec::new(),
        accumulation,
        sizes,
        bindings: Vec::new(),
        stats: PlanStats {
            lower_bound_bytes: lower_bound(&buffers),
            strategy: placement.strategy,
            forward_flops: 0,
            backward_flops: 0,
            recompute_flops: 0,
            optimizer_flops: 0,
        },
    };
    // kept_before[s]: steps before timeline position s that remain in the program.
    let mut kept_before: Vec<usize> = Vec::with_capacity(lowered.len() + 1);
    kept_before.push(0);
    let sources = Sources::new(graph, &lowered);
    let mut lowered = lowered.into_iter().enumerate().peekable();
    // A step the previous one was folded into (see `rectified`).
    let mut fused: Option<(KernelCall, Vec<TensorId>)> = None;
    while let Some((step, l)) = lowered.next() {
        let node = &graph.nodes()[l.node];
        let output = in_place(l.kernel).map(|p| l.operands[p.output]);
        let reused = output.and_then(|out| reuse[out.index()].map(|input| (out, input)));
        let shares =
            |&(out, input): &(TensorId, TensorId)| place_of(input).offset == place_of(out).offset;
        let in_place_input = reused.filter(shares).map(|(_, input)| input);
        let next = lowered.peek().map(|(_, next)| next);
        let next = next.filter(|next| next.per_update == l.per_update);
        if let (None, Some(_), Some(next)) = (&fused, in_place_input, next) {
            // Every operand of the folded step must still be alive at the step it replaces
            // (the scale and shift are read there now: an f32 copy of f16 ones is not).
            let alive = |t: &TensorId| lives[t.index()].is_some_and(|(_, last)| last > step);
            fused = sources.fuse(&l, next).filter(|(_, operands)| operands.iter().all(alive));
            if fused.is_some() {
                // Folded into the next step.
                kept_before.push(*kept_before.last().unwrap_or(&0));
                continue;
            }
        }
        let (kernel, operands) = match (fused.take(), in_place_input) {
            (Some(step), _) => step,
            (None, Some(input)) => match in_place(l.kernel).and_then(|p| p.form) {
                Some((kernel, operands)) => (kernel, operands(&l.operands, input)),
                // The output aliases its input: nothing to run.
                None => {
                    kept_before.push(*kept_before.last().unwrap_or(&0));
                    continue;
                }
            },
            (None, None) => (l.kernel, l.operands),
        };
        let flops = kernel.flops();
        let stats = &mut plan.stats;
        match node.stage {
            Stage::Forward => stats.forward_flops += flops,
            Stage::Backward => stats.backward_flops += flops,
            Stage::Recompute => stats.recompute_flops += flops,
            Stage::Optimizer => stats.optimizer_flops += flops,
        }
        let mut ops = heapless::Vec::new();
        for t in operands {
            ops.push(place_of(t)).map_err(|_| GraphError::Invalid {
                op: kernel.name(),
                node: node.name.clone(),
                detail: "too many operands".into(),
            })?;
        }
        let step = Step { kernel, operands: ops, node: l.node as u32 };
        if l.per_update {
            plan.update_steps.push(step);
        } else {
            plan.steps.push(step);
        }
        kept_before.push(kept_before.last().unwrap_or(&0) + 1);
    }

    for (i, t) in graph.tensors().iter().enumerate() {
        let Some((first, last)) = lives[i] else { continue };
        let first_step = kept_before[first];
        let last_step = kept_before[last + 1].saturating_sub(1).max(first_step);
        plan.bindings.push(Binding {
            name: t.name.clone(),
            tensor: TensorId(i as u32),
            role: t.role,
            shape: t.shape,
            operand: place_of(TensorId(i as u32)),
            first_step,
            last_step,
        });
    }
    Ok(plan)
}

/// Sequential placement in a persistent region: the next aligned offset.
fn bump(end: &mut usize, bytes: usize) -> usize {
    let offset = end.next_multiple_of(ALIGN);
    *end = offset + bytes;
    offset
}

/// When each used tensor is first and last needed. Inputs and labels are written before
/// the first step (and kept to the end unless `reuse_input_memory`); tensors the caller
/// reads afterwards (`keep`) and persistent state live to the end.
fn lifetimes(
    graph: &Graph,
    lowered: &[Lowered],
    keep: &[TensorId],
    reuse_input_memory: bool,
) -> Vec<Option<Life>> {
    let mut lives: Vec<Option<Life>> = vec![None; graph.tensors().len()];
    for (step, l) in lowered.iter().enumerate() {
        for t in &l.operands {
            let life = lives[t.index()].get_or_insert((step, step));
            life.0 = life.0.min(step);
            life.1 = life.1.max(step);
        }
    }
    let end = lowered.len().saturating_sub(1);
    for (i, life) in lives.iter_mut().enumerate() {
        let Some(life) = life else { continue };
        let role = graph.tensors()[i].role;
        let fed = matches!(role, Role::Input | Role::Label);
        if fed {
            life.0 = 0;
        }
        let preserved = fed && !reuse_input_memory;
        if preserved || keep.contains(&TensorId(i as u32)) || region_of(role) != Region::Arena {
            life.1 = end;
        }
    }
    lives
}

/// Operands of an in-place form, from the step's operands and the input taken over.
type InPlaceOperands = fn(&[TensorId], TensorId) -> Vec<TensorId>;

/// How a kernel can run in place.
struct InPlace {
    /// Operand slot of the output.
    output: usize,
    /// Slots of the inputs whose memory the output may take over.
    inputs: &'static [usize],
    /// The kernel that runs over the taken-over memory and its operands, or `None` when the
    /// step only moves the values (a copy) and vanishes.
    form: Option<(KernelCall, InPlaceOperands)>,
}

/// For kernels that can work in place: where the output is, which inputs it may replace
/// and the kernel that then runs.
fn in_place(kernel: KernelCall) -> Option<InPlace> {
    let unary = |form: KernelCall| {
        let only_input: InPlaceOperands = |_, x| vec![x];
        Some(InPlace { output: 1, inputs: &[0], form: Some((form, only_input)) })
    };
    let grad = |form: KernelCall| {
        let y_then_input: InPlaceOperands = |o, x| vec![o[0], x];
        Some(InPlace { output: 2, inputs: &[1], form: Some((form, y_then_input)) })
    };
    match kernel {
        KernelCall::Relu(n) => unary(KernelCall::ReluInPlace(n)),
        KernelCall::Relu6(n) => unary(KernelCall::Relu6InPlace(n)),
        KernelCall::Dropout(cfg, n) | KernelCall::DropoutGrad(cfg, n) => {
            unary(KernelCall::DropoutInPlace(cfg, n))
        }
        KernelCall::Copy(_) => Some(InPlace { output: 1, inputs: &[0], form: None }),
        KernelCall::ReluGrad(n) => grad(KernelCall::ReluGradInPlace(n)),
        KernelCall::Relu6Grad(n) => grad(KernelCall::Relu6GradInPlace(n)),
        KernelCall::QClampGrad(act, n) => grad(KernelCall::QClampGradInPlace(act, n)),
        KernelCall::QMaskGrad(n) => grad(KernelCall::QMaskGradInPlace(n)),
        KernelCall::Add(n) => {
            let other_then_input: InPlaceOperands =
                |o, x| vec![if o[0] == x { o[1] } else { o[0] }, x];
            let form = Some((KernelCall::Accumulate(1.0, n), other_then_input));
            Some(InPlace { output: 2, inputs: &[0, 1], form })
        }
        // x, gamma, beta, running_mean, running_var, y, saved_mean, saved_invstd
        KernelCall::BatchNormTrain(d, cfg) => {
            let ops: InPlaceOperands = |o, x| vec![o[1], o[2], o[3], o[4], x, o[6], o[7]];
            let form = Some((KernelCall::BatchNormTrainInPlace(d, cfg), ops));
            Some(InPlace { output: 5, inputs: &[0], form })
        }
        KernelCall::RoundThroughF16(n) => {
            let input_then_half: InPlaceOperands = |o, x| vec![x, o[1]];
            let form = Some((KernelCall::RoundThroughF16InPlace(n), input_then_half));
            Some(InPlace { output: 2, inputs: &[0], form })
        }
        KernelCall::RectifyThroughF16(n, r) => {
            let input_then_half: InPlaceOperands = |o, x| vec![x, o[2]];
            let form = Some((KernelCall::RectifyThroughF16InPlace(n, r), input_then_half));
            Some(InPlace { output: 1, inputs: &[0], form })
        }
        KernelCall::BatchNormEval(d, cfg) => {
            let ops: InPlaceOperands = |o, x| vec![o[1], o[2], o[3], o[4], x];
            let form = Some((KernelCall::BatchNormEvalInPlace(d, cfg), ops));
            Some(InPlace { output: 5, inputs: &[0], form })
        }
        // Already in place, or no output of an input's size and lifetime to take over.
        KernelCall::Linear { .. }
        | KernelCall::LinearGradInput(_)
        | KernelCall::LinearGradWeight(_)
        | KernelCall::BiasGrad(_)
        | KernelCall::Conv2d { .. }
        | KernelCall::Conv2dNormAct { .. }
        | KernelCall::Conv2dGradInput(_)
        | KernelCall::QConv2dGradInput(_)
        | KernelCall::QDepthwiseChainGrad { .. }
        | KernelCall::QDepthwiseChainBiasGrad(_)
        | KernelCall::QBlockGrad { .. }
        | KernelCall::QBlockBiasGrad { .. }
        | KernelCall::QLinearGradInput(_)
        | KernelCall::Conv2dGradWeight(_)
        | KernelCall::ReluInPlace(_)
        | KernelCall::Relu6InPlace(_)
        | KernelCall::ReluGradInPlace(_)
        | KernelCall::Relu6GradInPlace(_)
        | KernelCall::DropoutInPlace(..)
        | KernelCall::MaxPool2d(_)
        | KernelCall::MaxPool2dGrad(_)
        | KernelCall::AvgPool2d(_)
        | KernelCall::AvgPool2dGrad(_)
        | KernelCall::GlobalAvgPool(_)
        | KernelCall::GlobalAvgPoolGrad(_)
        | KernelCall::BatchNormApply(_)
        | KernelCall::BatchNormTrainInPlace(..)
        | KernelCall::BatchNormEvalInPlace(..)
        | KernelCall::BatchNormGradInput(_)
        | KernelCall::BatchNormGradParams(_)
        | KernelCall::BatchNormRunning(..)
        | KernelCall::BatchNormGradInputRunning(_)
        | KernelCall::BatchNormGradInputFromSums(_)
        | KernelCall::BatchNormGradInputFromSumsF16(_)
        | KernelCall::BatchNormGradParamsRectified(..)
        | KernelCall::BatchNormGradParamsRectifiedF16(..)
        | KernelCall::Softmax(_)
        | KernelCall::SoftmaxGrad(_)
        | KernelCall::LogSoftmax(_)
        | KernelCall::LogSoftmaxGrad(_)
        | KernelCall::LayerNorm(..)
        | KernelCall::LayerNormGradInput(..)
        | KernelCall::LayerNormGradParams(..)
        | KernelCall::CrossEntropy(_)
        | KernelCall::CrossEntropyGrad(_)
        | KernelCall::Mse(_)
        | KernelCall::MseGrad(_)
        | KernelCall::Fill(..)
        | KernelCall::Accumulate(..)
        | KernelCall::SumSquares(_)
        | KernelCall::ClipCoefficient(_)
        | KernelCall::SgdUpdate { .. }
        | KernelCall::AdamWUpdate { .. }
        | KernelCall::Zero(_)
        | KernelCall::CastF32ToF16(_)
        | KernelCall::CastF16ToF32(_)
        | KernelCall::RoundThroughF16InPlace(_)
        | KernelCall::RectifyThroughF16InPlace(..)
        | KernelCall::UnscaleGradient(_)
        | KernelCall::UpdateLossScale(_)
        | KernelCall::Quantize(..)
        | KernelCall::Dequantize(..)
        | KernelCall::QConv2d { .. }
        | KernelCall::QLinear { .. }
        | KernelCall::QAdd(..)
        | KernelCall::QMaxPool2d(_)
        | KernelCall::QAvgPool2d(..)
        | KernelCall::QGlobalAvgPool(_)
        | KernelCall::CopyI8(_)
        | KernelCall::RoundWeights(_)
        | KernelCall::RoundBias(_)
        | KernelCall::QClampGradInPlace(..)
        | KernelCall::QClampMask(..)
        | KernelCall::QMaskGradInPlace(_)
        | KernelCall::QClamp(..)
        | KernelCall::QLut(_)
        | KernelCall::QMul { .. }
        | KernelCall::QConcat { .. }
        | KernelCall::Activation(..)
        | KernelCall::ActivationGrad(..)
        | KernelCall::Mul { .. }
        | KernelCall::MulGradFactor(_)
        | KernelCall::Concat(_)
        | KernelCall::ConcatGrad { .. }
        | KernelCall::Transpose(_)
        | KernelCall::Slice(_)
        | KernelCall::SliceI8(_)
        | KernelCall::Pad(_)
        | KernelCall::Broadcast(_)
        | KernelCall::BroadcastGrad(_)
        | KernelCall::DequantizeWeights(_)
        | KernelCall::ChannelScale { .. } => None,
    }
}

/// `(output, input)` when the step's output may be written over `input`: an arena
/// intermediate of the same size, read once by this step, that dies here.
fn in_place_candidate(
    graph: &Graph,
    l: &Lowered,
    step: usize,
    lives: &[Option<Life>],
    keep: &[TensorId],
) -> Option<(TensorId, TensorId)> {
    let InPlace { output, inputs, .. } = in_place(l.kernel)?;
    let output = l.operands[output];
    if lives[output.index()].is_none_or(|(first, _)| first != step) {
        return None;
    }
    inputs
        .iter()
        .map(|&i| l.operands[i])
        .find(|&x| {
            let info = graph.tensor(x);
            region_of(info.role) == Region::Arena
                && !matches!(info.role, Role::Input | Role::Label)
                && !keep.contains(&x)
                && lives[x.index()].is_some_and(|(_, last)| last == step)
                && info.bytes() == graph.tensor(output).bytes()
                && l.operands.iter().filter(|&&t| t == x).count() == 1
        })
        .map(|x| (output, x))
}
