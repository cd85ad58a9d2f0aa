//! Compiling a whole training step: differentiate, append the optimizer, run the passes
//! (early updates, gradient checkpointing under a byte budget) and place the result.

use crate::autograd::{differentiate_seeded, Differentiated};
use crate::compile::{compile_training, PlacementOptions, Plan};
use crate::f16_storage::{f32_copies, to_f16_storage, F16Storage};
use crate::graph::{Graph, GraphError};
use crate::optim::{add_loss_scale, append_optimizer, check_config, TrainConfig};
use crate::passes::{chains, checkpoint, masks, reorder};
use crate::tensor::TensorId;
use alloc::vec::Vec;

/// How the training step is shaped for memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryOptions {
    pub placement: PlacementOptions,
    /// Run each parameter's update as soon as its gradient is final.
    pub update_early: bool,
    /// Keep a bit mask of each int8 clamp's output for its gradient instead of the output.
    pub clamp_masks: bool,
    /// With `clamp_masks`: run each int8 depthwise layer's input gradient, the clamp and bias
    /// gradients of the layer before it and (a 1x1 layer) that layer's input gradient as
    /// one kernel, a channel at a time, so the hidden channels' gradient is never stored.
    pub depthwise_chains: bool,
    /// Arena bytes the step must fit in; activations are recomputed until it does.
    pub budget: Option<usize>,
    /// Store frozen weights and/or activations as f16 (see [`F16Storage`]); mixed
    /// precision ([`TrainConfig::mixed_precision`]) implies
    /// [`F16Storage::MIXED_PRECISION`].
    pub f16_storage: Option<F16Storage>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self {
            placement: PlacementOptions::default(),
            update_early: true,
            clamp_masks: true,
            depthwise_chains: true,
            budget: None,
            f16_storage: None,
        }
    }
}

/// A compiled training step and the graph it came from.
pub struct Training {
    pub graph: Graph,
    pub loss: TensorId,
    pub gradients: Vec<(TensorId, TensorId)>,
    /// Forward activations recomputed in the backward pass (gradient checkpointing).
    pub recomputed: Vec<TensorId>,
    pub plan: Plan,
}

/// Differentiates `loss` with respect to `trainable`, appends the optimizer and compiles the
/// whole training step with the default memory options.
pub fn compile_training_step(
    model: &Graph,
    loss: TensorId,
    trainable: &[TensorId],
    cfg: &TrainConfig,
) -> Result<Training, GraphError> {
    compile_training_step_with(model, loss, trainable, cfg, &MemoryOptions::default())
}

/// [`compile_training_step`] with explicit memory options.
pub fn compile_training_step_with(
    model: &Graph,
    loss: TensorId,
    trainable: &[TensorId],
    cfg: &TrainConfig,
    memory: &MemoryOptions,
) -> Result<Training, GraphError> {
    check_config(cfg)?;
    let storage = cfg.mixed_precision.map(|_| F16Storage::MIXED_PRECISION).or(memory.f16_storage);
    let mut model = match storage {
        Some(storage) => to_f16_storage(model, trainable, storage)?,
        None => model.clone(),
    };
    let loss_scale = cfg.mixed_precision.map(|c| add_loss_scale(&mut model, c)).transpose()?;
    let seed = loss_scale.map(|s| s.scale);
    let Differentiated { mut graph, loss, gradients, forward_nodes } =
        differentiate_seeded(&model, loss, trainable, seed)?;
    append_optimizer(&mut graph, &gradients, cfg, loss_scale)?;
    // The f32 copies that f16 storage makes are recomputed for the backward pass, so only
    // f16 copies stay alive between the passes.
    let f32_copies = f32_copies(&graph, forward_nodes);
    // A loss scaler decides whether to update only once every gradient is known.
    let update_early = memory.update_early && loss_scale.is_none();
    let compiler =
        StepCompiler { graph: &graph, forward_nodes, loss, cfg, memory, update_early, f32_copies };
    let (graph, plan, recomputed) = match memory.budget {
        None => compiler.build(&[])?,
        Some(budget) => compiler.fit(budget)?,
    };
    Ok(Training { graph, loss, gradients, recomputed, plan })
}

/// Compiles one differentiated training graph into plans, with chosen activations
/// recomputed (not a plan [`crate::plan::Step`], which is one kernel call).
struct StepCompiler<'a> {
    graph: &'a Graph,
    forward_nodes: usize,
    loss: TensorId,
    cfg: &'a TrainConfig,
    memory: &'a MemoryOptions,
    update_early: bool,
    /// Always recomputed (see [`f32_copies`]).
    f32_copies: Vec<TensorId>,
}

type Built = (Graph, Plan, Vec<TensorId>);

impl StepCompiler<'_> {
    /// The training step with the activations in `drop` (and the f32 copies) recomputed.
    fn build(&self, drop: &[TensorId]) -> Result<Built, GraphError> {
        let mut graph = self.graph.clone();
        let mut drop = drop.to_vec();
        let extra: Vec<TensorId> =
            self.f32_copies.iter().copied().filter(|t| !drop.contains(t)).collect();
        drop.extend(extra);
        if !drop.is_empty() {
            checkpoint::recompute(&mut graph, self.forward_nodes, &drop)?;
        }
        if self.memory.clamp_masks {
            masks::clamp_masks(&mut graph)?;
            if self.memory.depthwise_chains {
                chains::depthwise_chains(&mut graph)?;
            }
        }
        if self.update_early {
            reorder::update_early(&mut graph);
        }
        let mode = self.cfg.batch_norm.training_mode();
        let (accumulation, placement) = (self.cfg.accumulation, &self.memory.placement);
        let plan = compile_training(&graph, self.loss, mode, accumulation, placement)?;
        Ok((graph, plan, drop))
    }

    /// The cheapest step (least recomputation) whose arena fits `budget`. Candidates:
    /// keeping every k-th activation for every k (uniform segments; k ≈ √n is the classic
    /// schedule for chains), and dropping activations greedily by bytes per recomputed FLOP
    /// (general graphs with residual branches).
    fn fit(&self, budget: usize) -> Result<Built, GraphError> {
        let plain = self.build(&[])?;
        if plain.1.sizes.arena <= budget {
            return Ok(plain);
        }
        let candidates = checkpoint::candidates(self.graph, self.forward_nodes);
        let mut best: Option<Built> = None;
        let mut smallest = plain.1.sizes.arena;
        for drop in self.schedules(&candidates) {
            let built = self.build(&drop)?;
            smallest = smallest.min(built.1.sizes.arena);
            let fits = built.1.sizes.arena <= budget;
            if fits && best.as_ref().is_none_or(|b| cheaper(&built.1, &b.1)) {
                best = Some(built);
            }
        }
        best.ok_or(GraphError::BudgetUnreachable { budget, smallest })
    }

    /// Drop sets to try, from the uniform-segment and greedy families.
    fn schedules(&self, candidates: &[TensorId]) -> Vec<Vec<TensorId>> {
        let mut sets = Vec::new();
        for keep_every in 2..=candidates.len() + 1 {
            let drop = candidates
                .iter()
                .enumerate()
                .filter(|(i, _)| (i + 1) % keep_every != 0)
                .map(|(_, &t)| t)
                .collect();
            sets.push(drop);
        }
        let mut by_value = candidates.to_vec();
        let bytes = |t: &TensorId| self.graph.tensor(*t).bytes();
        by_value.sort_by_key(|t| core::cmp::Reverse(bytes(t)));
        for n in 1..by_value.len() {
            sets.push(by_value[..n].to_vec());
        }
        sets
    }
}

/// Less recomputation wins; then a smaller arena.
fn cheaper(a: &Plan, b: &Plan) -> bool {
    (a.stats.recompute_flops, a.sizes.arena) < (b.stats.recompute_flops, b.sizes.arena)
}
