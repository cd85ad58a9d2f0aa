//! What `sprout plan` reports about a compiled training step: memory by region, the arena
//! against its lower bound, arithmetic by stage, and every arena buffer with its lifetime.

use serde::Serialize;
use sprout_core::{Region, Role, Strategy, TensorId, Training};
use sprout_zoo::ZooModel;

/// How the step was asked for: the command's choices, echoed in the report.
#[derive(Clone, Debug)]
pub struct Request {
    pub model: String,
    pub batch: usize,
    /// The `--trainable` choice as typed.
    pub trainable: String,
    pub strategy: Strategy,
    pub update_early: bool,
    pub in_place: bool,
    pub budget: Option<usize>,
}

/// One tensor placed in the arena, live from `first_step` to `last_step` inclusive (indices
/// into the plan's steps followed by its update steps).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArenaBuffer {
    pub name: String,
    pub role: &'static str,
    pub offset: usize,
    pub size: usize,
    pub first_step: usize,
    pub last_step: usize,
}

impl ArenaBuffer {
    /// One past the buffer's last byte.
    pub fn end(&self) -> usize {
        self.offset + self.size
    }
}

/// The report, as printed by `--json` (field for field) and rendered as text otherwise.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub batch: usize,
    pub trainable: String,
    pub trainable_tensors: usize,
    pub trainable_params: usize,
    pub model_params: usize,
    /// The placement strategy asked for: `greedy`, `first-fit` or `exact`.
    pub strategy: &'static str,
    /// The one that placed the arena: `exact` falls back to `greedy` on large graphs.
    pub strategy_used: &'static str,
    pub update_early: bool,
    pub in_place: bool,
    pub budget_bytes: Option<usize>,
    pub arena_bytes: usize,
    pub lower_bound_bytes: usize,
    /// `arena_bytes / lower_bound_bytes` (1 for an empty arena).
    pub ratio: f64,
    pub state_bytes: usize,
    pub frozen_bytes: usize,
    /// Steps per training step: forward, backward and updates.
    pub steps: usize,
    pub forward_flops: u64,
    pub backward_flops: u64,
    pub recompute_flops: u64,
    pub optimizer_flops: u64,
    /// Forward activations recomputed by gradient checkpointing to meet the budget.
    pub recomputed: Vec<String>,
    /// Every arena tensor, in the plan's order.
    pub buffers: Vec<ArenaBuffer>,
}

impl Report {
    pub fn new(
        request: &Request,
        model: &ZooModel,
        trainable: &[TensorId],
        training: &Training,
    ) -> Self {
        let plan = &training.plan;
        let graph = &training.graph;
        let buffers: Vec<ArenaBuffer> = plan
            .bindings
            .iter()
            .filter(|b| b.operand.region == Region::Arena)
            .map(|b| ArenaBuffer {
                name: b.name.clone(),
                role: role_name(b.role),
                offset: b.operand.offset,
                size: b.operand.bytes(),
                first_step: b.first_step,
                last_step: b.last_step,
            })
            .collect();
        let stats = &plan.stats;
        let ratio = if stats.lower_bound_bytes == 0 {
            1.0
        } else {
            plan.sizes.arena as f64 / stats.lower_bound_bytes as f64
        };
        Report {
            model: request.model.clone(),
            batch: request.batch,
            trainable: request.trainable.clone(),
            trainable_tensors: trainable.len(),
            trainable_params: trainable.iter().map(|&id| model.graph.shape(id).numel()).sum(),
            model_params: model.parameter_count(),
            strategy: strategy_name(request.strategy),
            strategy_used: strategy_name(stats.strategy),
            update_early: request.update_early,
            in_place: request.in_place,
            budget_bytes: request.budget,
            arena_bytes: plan.sizes.arena,
            lower_bound_bytes: stats.lower_bound_bytes,
            ratio,
            state_bytes: plan.sizes.state,
            frozen_bytes: plan.sizes.frozen,
            steps: plan.steps.len() + plan.update_steps.len(),
            forward_flops: stats.forward_flops,
            backward_flops: stats.backward_flops,
            recompute_flops: stats.recompute_flops,
            optimizer_flops: stats.optimizer_flops,
            recomputed: training
                .recomputed
                .iter()
                .map(|&id| graph.tensor(id).name.clone())
                .collect(),
            buffers,
        }
    }

    /// Recomputed FLOPs as a percentage of the forward pass.
    pub fn recompute_overhead_percent(&self) -> f64 {
        if self.forward_flops == 0 {
            0.0
        } else {
            100.0 * self.recompute_flops as f64 / self.forward_flops as f64
        }
    }

    /// Indices into `buffers` of the `n` largest, largest first (ties: lower offset, then
    /// name).
    pub fn largest(&self, n: usize) -> Vec<usize> {
        let mut sorted: Vec<usize> = (0..self.buffers.len()).collect();
        sorted.sort_by(|&a, &b| {
            let (a, b) = (&self.buffers[a], &self.buffers[b]);
            b.size.cmp(&a.size).then(a.offset.cmp(&b.offset)).then(a.name.cmp(&b.name))
        });
        sorted.truncate(n);
        sorted
    }
}

/// The command-line name of a placement strategy.
pub fn strategy_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::GreedyBySize => "greedy",
        Strategy::FirstFitInTime => "first-fit",
        Strategy::Exact { .. } => "exact",
    }
}

/// A role as a lower-case word: `activation`, `gradient`, `optimizer-state`.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Input => "input",
        Role::Label => "label",
        Role::FrozenParam => "frozen-param",
        Role::TrainableParam => "trainable-param",
        Role::Buffer => "buffer",
        Role::Activation => "activation",
        Role::Gradient => "gradient",
        Role::OptimizerState => "optimizer-state",
        Role::Scratch => "scratch",
    }
}

/// Reports and buffers for unit tests of the report and its pictures.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{ArenaBuffer, Report};

    pub fn buffer(
        name: &str,
        offset: usize,
        size: usize,
        first: usize,
        last: usize,
    ) -> ArenaBuffer {
        ArenaBuffer {
            name: name.into(),
            role: "activation",
            offset,
            size,
            first_step: first,
            last_step: last,
        }
    }

    /// A report of `buffers` in an arena of `arena` bytes (also its lower bound) over `steps`.
    pub fn report(buffers: Vec<ArenaBuffer>, arena: usize, steps: usize) -> Report {
        Report {
            model: "m".into(),
            batch: 1,
            trainable: "all".into(),
            trainable_tensors: 0,
            trainable_params: 0,
            model_params: 0,
            strategy: "greedy",
            strategy_used: "greedy",
            update_early: true,
            in_place: true,
            budget_bytes: None,
            arena_bytes: arena,
            lower_bound_bytes: arena,
            ratio: 1.0,
            state_bytes: 0,
            frozen_bytes: 0,
            steps,
            forward_flops: 0,
            backward_flops: 0,
            recompute_flops: 0,
            optimizer_flops: 0,
            recomputed: vec![],
            buffers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{buffer, report};

    #[test]
    fn largest_buffers_come_first_with_ties_broken_by_offset() {
        let buffers = vec![
            buffer("small", 0, 10, 0, 1),
            buffer("b", 100, 100, 0, 1),
            buffer("a", 10, 100, 0, 1),
        ];
        let mut report = report(buffers, 300, 2);
        report.forward_flops = 200;
        report.recompute_flops = 50;
        let names: Vec<_> =
            report.largest(2).iter().map(|&i| report.buffers[i].name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(report.largest(10).len(), 3);
        assert_eq!(report.recompute_overhead_percent(), 25.0);
    }
}
