//! Gradient checkpointing: chosen forward activations are not kept for the backward pass;
//! each is recomputed from kept ones right before its first backward use, with the same
//! kernels, so the step's results stay bit-identical.

use crate::graph::{producers, Graph, GraphError, Node, Phase, Stage, TensorInfo};
use crate::ops::Recompute;
use crate::tensor::{Role, TensorId};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// Forward activations that could be recomputed instead of kept, in forward order. Those
/// the backward pass reads are the point; the others matter because recomputing a dropped
/// activation reads its producer's inputs, which may then be dropped in turn.
pub(crate) fn candidates(graph: &Graph, forward_nodes: usize) -> Vec<TensorId> {
    graph.nodes()[..forward_nodes]
        .iter()
        .filter(|n| n.op.recompute() != Recompute::Never)
        .map(|n| n.outputs[0])
        .collect()
}

/// Rewrites the graph so that every tensor in `drop` is recomputed for the backward pass.
pub(crate) fn recompute(
    graph: &mut Graph,
    forward_nodes: usize,
    drop: &[TensorId],
) -> Result<(), GraphError> {
    let nodes = graph.nodes().to_vec();
    let tensors = graph.tensors().len();
    let forward = &nodes[..forward_nodes];
    let mut rewriter = Rewriter {
        graph,
        forward,
        producer: producers(forward, tensors),
        dropped: vec![false; tensors],
        copy: vec![None; tensors],
        out: forward.to_vec(),
    };
    for &t in drop {
        rewriter.dropped[t.index()] = true;
    }
    for node in &nodes[forward_nodes..] {
        let mut node = node.clone();
        for input in node.inputs.iter_mut() {
            *input = rewriter.available(*input)?;
        }
        rewriter.out.push(node);
    }
    let out = core::mem::take(&mut rewriter.out);
    rewriter.graph.set_nodes(out);
    Ok(())
}

/// The state of one rewrite: which tensors are dropped and their recomputed copies.
struct Rewriter<'a> {
    graph: &'a mut Graph,
    forward: &'a [Node],
    producer: Vec<Option<usize>>,
    dropped: Vec<bool>,
    copy: Vec<Option<TensorId>>,
    /// The new node list, forward nodes first.
    out: Vec<Node>,
}

impl Rewriter<'_> {
    /// The tensor a backward node should read in place of `t`: `t` itself, or its
    /// recomputed copy (recorded now, with whatever it needs, if it does not exist yet).
    fn available(&mut self, t: TensorId) -> Result<TensorId, GraphError> {
        if !self.dropped[t.index()] {
            return Ok(t);
        }
        if let Some(copy) = self.copy[t.index()] {
            return Ok(copy);
        }
        let Some(n) = self.producer[t.index()] else { return Ok(t) };
        let original = self.forward[n].clone();
        let mut inputs = Vec::with_capacity(original.inputs.len());
        for &input in &original.inputs {
            inputs.push(self.available(input)?);
        }
        let op = match original.op.recompute() {
            Recompute::Apply { op, saved } => {
                inputs.extend(saved.iter().map(|&i| original.outputs[i]));
                op
            }
            Recompute::Rerun | Recompute::Never => original.op,
        };
        let info = self.graph.tensor(t).clone();
        let copy = self.graph.add_tensor(TensorInfo {
            name: self.graph.fresh_name(&format!("{}.recomputed", info.name)),
            role: Role::Activation,
            init: None,
            ..info
        })?;
        self.out.push(Node {
            name: format!("{}.recompute", original.name),
            op,
            inputs,
            state: Vec::new(),
            outputs: vec![copy],
            phase: Phase::MicroBatch,
            stage: Stage::Recompute,
        });
        self.copy[t.index()] = Some(copy);
        Ok(copy)
    }
}
