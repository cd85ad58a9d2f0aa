//! The memory limit applied to graphs and plans: their declared tensor bytes are checked
//! against [`Limits::current`] before any of that memory is allocated.

use sprout_core::{Graph, HostMemory, Plan};
use sprout_data::Limits;

use crate::TrainError;

/// The bytes of every tensor of `graph`, added up (saturating).
pub fn graph_bytes(graph: &Graph) -> u64 {
    graph.tensors().iter().fold(0u64, |sum, t| {
        sum.saturating_add((t.shape.numel() as u64).saturating_mul(t.dtype.size() as u64))
    })
}

/// Refuses `graph` when its tensors add up to more than the memory limit; `what` names it.
pub fn check_graph(graph: &Graph, what: &str) -> Result<(), TrainError> {
    Ok(Limits::current().check_memory(&format!("{what} (all its tensors)"), graph_bytes(graph))?)
}

/// The initial memory of `plan` (compiled from `graph`), refused before it is allocated when
/// its regions add up to more than the memory limit; backed by huge pages where the system
/// grants them (see [`sprout_cpu::advise_huge_pages`]).
pub fn initial_memory(plan: &Plan, graph: &Graph, what: &str) -> Result<HostMemory, TrainError> {
    let s = plan.sizes;
    let bytes = [s.frozen, s.state, s.arena].iter().fold(0u64, |a, &b| a.saturating_add(b as u64));
    Limits::current().check_memory(&format!("the plan of {what}"), bytes)?;
    let mut memory = plan.initial_memory(graph);
    sprout_cpu::advise_huge_pages(&mut memory);
    Ok(memory)
}
