//! Compiling a whole training step: differentiate, append the optimizer, run the passes
//! (early updates, gradient checkpointing under a byte budget) and place the result.

use crate::autograd::{differentiate, Differentiated};
use crate::compile::{compile_training, PlacementOptions, Plan};
use crate::graph::{Graph, GraphError};
use crate::optim::{append_optimizer, check_config, TrainConfig};
use crate::passes::{checkpoint, reorder};
use crate::tensor::TensorId;
use alloc::vec::Vec;

/// How the training step is shaped for memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryOptions {
    pub placement: PlacementOptions,
    /// Run each parameter's update as soon as its gradient is final.
    pub update_early: bool,
    /// Arena bytes the step must fit in; activations are recomputed until it does.
    pub budget: Option<usize>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self { placement: PlacementOptions::default(), update_early: true, budget: None }
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
    let Differentiated { mut graph, loss, gradients, forward_nodes } =
        differentiate(model, loss, trainable)?;
    append_optimizer(&mut graph, &gradients, cfg)?;
    let step = Step { graph: &graph, forward_nodes, loss, cfg, memory };
    let (graph, plan, recomputed) = match memory.budget {
        None => step.build(&[])?,
        Some(budget) => step.fit(budget)?,
    };
    Ok(Training { graph, loss, gradients, recomputed, plan })
}

/// One training graph and how to compile it.
struct Step<'a> {
    graph: &'a Graph,
    forward_nodes: usize,
    loss: TensorId,
    cfg: &'a TrainConfig,
    memory: &'a MemoryOptions,
}

type Built = (Graph, Plan, Vec<TensorId>);

impl Step<'_> {
    /// The step with the activations in `drop` recomputed.
    fn build(&self, drop: &[TensorId]) -> Result<Built, GraphError> {
        let mut graph = self.graph.clone();
        if !drop.is_empty() {
            checkpoint::recompute(&mut graph, self.forward_nodes, drop)?;
        }
        if self.memory.update_early {
            reorder::update_early(&mut graph);
        }
        let plan =
            compile_training(&graph, self.loss, self.cfg.accumulation, &self.memory.placement)?;
        Ok((graph, plan, drop.to_vec()))
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
