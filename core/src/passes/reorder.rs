//! Operator reordering (as in MIT's Tiny Training Engine): each parameter update, or each
//! gradient accumulation, moves to right after its gradient is final and its parameter's
//! last reader has run, so the gradient buffer dies at once instead of at the end of the step.

use crate::graph::{Graph, Node, Phase, Stage};
use crate::ops::Op;
use alloc::vec;
use alloc::vec::Vec;

/// Whether a node consumes one gradient and may run as soon as that gradient is ready.
fn consumes_one_gradient(node: &Node) -> bool {
    node.stage == Stage::Optimizer
        && node.phase == Phase::MicroBatch
        && matches!(node.op, Op::SgdUpdate(_) | Op::AdamWUpdate(_) | Op::Accumulate(_))
}

/// Moves every gradient-consuming node to the earliest position its dependencies allow.
/// Values are unchanged: a parameter is updated only after every node that reads it.
pub(crate) fn update_early(graph: &mut Graph) {
    let nodes = graph.nodes().to_vec();
    let mut producer = vec![None; graph.tensors().len()];
    let mut last_toucher_so_far: Vec<Option<usize>> = vec![None; graph.tensors().len()];
    // ready[m]: the index after which movable node m may run.
    let mut ready = vec![None; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        if consumes_one_gradient(node) {
            let produced = node.inputs.iter().filter_map(|t| producer[t.index()]);
            let touched = node.state.iter().filter_map(|t| last_toucher_so_far[t.index()]);
            ready[i] = Some(produced.chain(touched).max());
        }
        for t in node.inputs.iter().chain(&node.state) {
            last_toucher_so_far[t.index()] = Some(i);
        }
        for t in &node.outputs {
            producer[t.index()] = Some(i);
            last_toucher_so_far[t.index()] = Some(i);
        }
    }

    // Emit the fixed nodes in order, each followed by the nodes anchored to it (which may
    // anchor further nodes in turn).
    let mut anchored: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut roots = Vec::new();
    for (m, anchor) in ready.iter().enumerate() {
        match anchor {
            Some(Some(a)) => anchored[*a].push(m),
            Some(None) => roots.push(m),
            None => {}
        }
    }
    let fixed = (0..nodes.len()).filter(|&i| ready[i].is_none());
    let mut order: Vec<Node> = Vec::with_capacity(nodes.len());
    for start in roots.into_iter().chain(fixed) {
        let mut stack = vec![start];
        while let Some(i) = stack.pop() {
            order.push(nodes[i].clone());
            stack.extend(anchored[i].iter().rev());
        }
    }
    graph.set_nodes(order);
}

#[cfg(test)]
mod tests {
    use crate::shape::Shape;
    use crate::training::{compile_training_step_with, MemoryOptions};
    use crate::{nn, Graph, TrainConfig};
    use alloc::string::String;
    use alloc::vec::Vec;

    /// Node names of a two-layer MLP's training step, in plan order.
    fn step_names(update_early: bool) -> Vec<String> {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(2, 4)).unwrap();
        let y = g.labels("y", 2).unwrap();
        let h = nn::linear(&mut g, "fc1", x, 8).unwrap();
        let h = g.relu("act", h).unwrap();
        let logits = nn::linear(&mut g, "fc2", h, 3).unwrap();
        let loss = g.cross_entropy("loss", logits, y).unwrap();
        let params: Vec<_> = g.parameters().collect();
        let memory = MemoryOptions { update_early, ..MemoryOptions::default() };
        let t =
            compile_training_step_with(&g, loss, &params, &TrainConfig::sgd(0.9), &memory).unwrap();
        t.plan.steps.iter().map(|s| t.graph.nodes()[s.node as usize].name.clone()).collect()
    }

    fn position(names: &[String], name: &str) -> usize {
        names.iter().position(|n| n == name).unwrap()
    }

    #[test]
    fn an_update_follows_its_gradient_and_the_last_reader_of_its_weight() {
        let names = step_names(true);
        let update = position(&names, "fc2.weight.update");
        // fc2's weight is read by fc1's input gradient, then its own gradient is computed.
        assert!(update > position(&names, "fc2.grad_input"));
        assert_eq!(update, position(&names, "fc2.grad_weight") + 1);
        assert!(update < position(&names, "fc1.grad_weight"), "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("fc1.bias.update"));
    }

    #[test]
    fn without_the_pass_all_updates_wait_for_the_whole_backward_pass() {
        let names = step_names(false);
        let first_update = names.iter().position(|n| n.ends_with(".update")).unwrap();
        assert!(first_update > position(&names, "fc1.grad_weight"));
    }
}
