//! Compiling a graph into a [`Plan`]: pick the nodes that matter, lower them to kernels,
//! and place every tensor (the `layout` module). Entry points for inference and training.

mod f16_grid;
mod f16_norm;
mod host_plan;
mod layout;
mod norm_act;
mod rectified;
mod round_trip;

pub use host_plan::{ArenaPeak, Binding, HostMemory, Plan, PlanStats, UnknownTensor};

use crate::graph::{producers, Graph, GraphError, Phase};
use crate::lower::{lower, Mode};
use crate::ops::Op;
use crate::tensor::Role;
use crate::tensor::TensorId;
use alloc::vec;
use alloc::vec::Vec;
use sprout_planner::Strategy;

/// How tensors are placed in the arena.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlacementOptions {
    pub strategy: Strategy,
    /// Let element-wise ops write their output over an input that dies at that step.
    pub in_place: bool,
    /// Let inputs and labels share memory with tensors computed after their last use. Saves
    /// their bytes, but the caller must then write them again before every run.
    pub reuse_input_memory: bool,
    /// Run a convolution, the evaluation-mode batch norm of its output and a rectifier of
    /// that as one kernel ([`KernelCall::Conv2dNormAct`](crate::kernel::KernelCall)), where
    /// nothing else reads what the first two output: the same results, fewer passes over
    /// memory.
    pub fuse_frozen_norms: bool,
    /// Run a cast to f16 and the cast of its result back to f32 right after it as one
    /// kernel ([`KernelCall::RoundThroughF16`](crate::kernel::KernelCall)), and only the
    /// cast to f16, if anything reads its result, where the values are on f16's grid
    /// already: the same values, one pass over memory instead of two, or none. A rectifier
    /// after a training batch norm then also has its gradient worked out by the batch
    /// norm's parameter gradient from the f16 copy of its input
    /// ([`KernelCall::BatchNormGradParamsRectifiedF16`](crate::kernel::KernelCall)).
    pub fuse_casts: bool,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            in_place: true,
            reuse_input_memory: false,
            fuse_frozen_norms: true,
            fuse_casts: true,
        }
    }
}

/// Compiles the nodes needed for `outputs` in evaluation mode (inference).
pub fn compile_inference(graph: &Graph, outputs: &[TensorId]) -> Result<Plan, GraphError> {
    compile_outputs(graph, outputs, Mode::Eval)
}

/// Compiles the nodes needed for `outputs` in the given mode, without optimizer steps: for
/// example the loss and gradients of a differentiated graph, to inspect or check them.
/// The outputs stay readable after the run.
pub fn compile_outputs(
    graph: &Graph,
    outputs: &[TensorId],
    mode: Mode,
) -> Result<Plan, GraphError> {
    for &o in outputs {
        graph.check_id(o)?;
    }
    let needed = ancestors(graph, outputs);
    compile(graph, &needed, Kind::Outputs(mode), 1, outputs, &PlacementOptions::default())
}

/// Compiles a differentiated graph with its optimizer steps in a training mode; the loss
/// stays readable after the run.
pub(crate) fn compile_training(
    graph: &Graph,
    loss: TensorId,
    mode: Mode,
    accumulation: u32,
    options: &PlacementOptions,
) -> Result<Plan, GraphError> {
    // Roots: the loss, and every node that changes state without producing a value.
    let mut roots = vec![loss];
    for node in graph.nodes().iter().filter(|n| n.outputs.is_empty()) {
        roots.extend(node.inputs.iter().chain(&node.state));
    }
    let mut needed = ancestors(graph, &roots);
    for (i, node) in graph.nodes().iter().enumerate() {
        needed[i] |= node.outputs.is_empty();
    }
    compile(graph, &needed, Kind::TrainingStep(mode), accumulation, &[loss], options)
}

/// Marks the nodes whose outputs `roots` depend on.
fn ancestors(graph: &Graph, roots: &[TensorId]) -> Vec<bool> {
    let producer = producers(graph.nodes(), graph.tensors().len());
    let mut needed = vec![false; graph.nodes().len()];
    let mut stack: Vec<TensorId> = roots.to_vec();
    while let Some(t) = stack.pop() {
        if let Some(n) = producer[t.index()] {
            if !needed[n] {
                needed[n] = true;
                let node = &graph.nodes()[n];
                stack.extend(node.inputs.iter().chain(&node.state));
            }
        }
    }
    needed
}

/// One node lowered to a kernel, with its operands in signature order.
pub(crate) struct Lowered {
    pub node: usize,
    pub kernel: crate::kernel::KernelCall,
    pub operands: Vec<TensorId>,
    /// Runs in the update program (after `accumulation` micro-batches).
    pub per_update: bool,
}

/// What a compile is for.
#[derive(Clone, Copy)]
enum Kind {
    /// A whole training step in the given mode: frozen batch norms run as in evaluation.
    TrainingStep(Mode),
    /// Some outputs, every node in the given mode.
    Outputs(Mode),
}

fn compile(
    graph: &Graph,
    needed: &[bool],
    step: Kind,
    accumulation: u32,
    keep: &[TensorId],
    options: &PlacementOptions,
) -> Result<Plan, GraphError> {
    let mode = match step {
        Kind::TrainingStep(mode) => mode,
        Kind::Outputs(mode) => mode,
    };
    let per_update = |phase: Phase| accumulation > 1 && phase == Phase::Update;
    let frozen = match step {
        Kind::TrainingStep(_) => frozen_batch_norms(graph, needed),
        Kind::Outputs(_) => vec![false; graph.nodes().len()],
    };
    let mut lowered: Vec<Lowered> = Vec::new();
    // Micro-batch steps first, then the update program: one timeline for the planner.
    for update_program in [false, true] {
        for (i, node) in graph.nodes().iter().enumerate() {
            if needed[i] && per_update(node.phase) == update_program {
                let node_mode = if frozen[i] { Mode::Eval } else { mode };
                let (kernel, operands) = lower(graph, node, node_mode);
                lowered.push(Lowered { node: i, kernel, operands, per_update: update_program });
            }
        }
    }
    if options.fuse_frozen_norms {
        lowered = norm_act::fuse(lowered, graph.tensors().len(), keep);
    }
    if options.fuse_casts {
        lowered = f16_grid::skip_exact(round_trip::fuse(lowered), graph.tensors().len(), keep);
        lowered = f16_norm::fold(graph, lowered, keep);
    }
    layout::place(graph, lowered, accumulation, keep, options)
}

/// Batch-norm nodes that are wholly frozen: scale and shift are not trained and no gradient
/// flows back through them (nothing reads their saved statistics). Like `model.eval()` on
/// a frozen backbone in PyTorch, they normalise with their running statistics even while
/// training, and those statistics stay as they are.
fn frozen_batch_norms(graph: &Graph, needed: &[bool]) -> Vec<bool> {
    let mut read = vec![false; graph.tensors().len()];
    for (node, _) in graph.nodes().iter().zip(needed).filter(|(_, &needed)| needed) {
        for t in &node.inputs {
            read[t.index()] = true;
        }
    }
    let frozen_param = |t: &TensorId| graph.tensor(*t).role == Role::FrozenParam;
    graph
        .nodes()
        .iter()
        .map(|node| {
            matches!(node.op, Op::BatchNorm2d(_))
                && node.inputs[1..].iter().all(frozen_param)
                && node.outputs[1..].iter().all(|t| !read[t.index()])
        })
        .collect()
}
