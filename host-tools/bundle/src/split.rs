//! Splitting a model into a frozen backbone and a trainable head: the head is every node
//! that depends on a trainable parameter, plus the dropout and dequantize nodes right before
//! it (a random mask cannot be cached, and an int8 backbone's features are cached as int8,
//! a quarter of their float size); the backbone's one output the head reads is the feature
//! tensor. Values the head reads that are computed from parameters alone (a frozen weight
//! rounded from integer units) are recomputed in the head.

use crate::BundleBuildError;
use sprout_core::op::Op;
use sprout_core::{Graph, Role, TensorId};

/// Where a model splits.
pub struct Split {
    /// The backbone's output the head reads.
    pub features: TensorId,
    /// Indices of the head's nodes, in graph order.
    pub head_nodes: Vec<usize>,
}

/// Finds the split of `graph` for the parameters `trainable`.
pub fn split(graph: &Graph, trainable: &[TensorId]) -> Result<Split, BundleBuildError> {
    let mut depends = vec![false; graph.tensors().len()];
    for &t in trainable {
        depends[t.index()] = true;
    }
    let mut in_head = vec![false; graph.nodes().len()];
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.inputs.iter().chain(&node.state).any(|t| depends[t.index()]) {
            in_head[i] = true;
            for t in &node.outputs {
                depends[t.index()] = true;
            }
        }
    }
    let producer = |t: TensorId| graph.nodes().iter().position(|n| n.outputs.contains(&t));
    // A value computed from parameters alone (a frozen int8 weight rounded from its integer
    // units while only the layer's bias trains) is recomputed in the head, not cached.
    let from_data = data_dependent(graph);
    let mut grew = true;
    while grew {
        grew = false;
        for i in 0..graph.nodes().len() {
            if !in_head[i] {
                continue;
            }
            for &t in &graph.nodes()[i].inputs {
                let computed = graph.tensor(t).role == Role::Activation;
                if computed && !from_data[t.index()] && !depends[t.index()] {
                    let Some(p) = producer(t) else { continue };
                    in_head[p] = true;
                    graph.nodes()[p].outputs.iter().for_each(|o| depends[o.index()] = true);
                    grew = true;
                }
            }
        }
    }
    let features = loop {
        let features = single_feature(graph, &in_head, &depends)?;
        match producer(features) {
            Some(p) if matches!(graph.nodes()[p].op, Op::Dropout(_) | Op::Dequantize(_)) => {
                in_head[p] = true;
                depends[features.index()] = true;
            }
            _ => break features,
        }
    };
    let head_nodes = (0..graph.nodes().len()).filter(|&i| in_head[i]).collect();
    Ok(Split { features, head_nodes })
}

/// For each tensor, whether it depends on the model's input (rather than only on
/// parameters).
fn data_dependent(graph: &Graph) -> Vec<bool> {
    let mut data: Vec<bool> = graph.tensors().iter().map(|t| t.role == Role::Input).collect();
    for node in graph.nodes() {
        if node.inputs.iter().chain(&node.state).any(|t| data[t.index()]) {
            node.outputs.iter().for_each(|o| data[o.index()] = true);
        }
    }
    data
}

/// The one backbone tensor the head reads (besides weights and labels).
fn single_feature(
    graph: &Graph,
    in_head: &[bool],
    depends: &[bool],
) -> Result<TensorId, BundleBuildError> {
    let mut read: Vec<TensorId> = Vec::new();
    for (node, _) in graph.nodes().iter().zip(in_head).filter(|(_, &h)| h) {
        for &t in &node.inputs {
            let role = graph.tensor(t).role;
            let data = matches!(role, Role::Input | Role::Activation);
            if data && !depends[t.index()] && !read.contains(&t) {
                read.push(t);
            }
        }
    }
    match read[..] {
        [features] => Ok(features),
        _ => Err(BundleBuildError::Split {
            detail: format!(
                "the head reads {} backbone tensors ({}); a bundle needs exactly one",
                read.len(),
                read.iter().map(|&t| graph.tensor(t).name.as_str()).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// The head alone: the features become the graph's input and only the head's nodes remain
/// (tensor ids, names and values are kept, so plans and weights match by name).
pub fn head_graph(graph: &Graph, split: &Split) -> Result<Graph, BundleBuildError> {
    let mut tensors = graph.tensors().to_vec();
    for t in tensors.iter_mut().filter(|t| t.role == Role::Input) {
        t.role = Role::Activation;
    }
    tensors[split.features.index()].role = Role::Input;
    let nodes = split.head_nodes.iter().map(|&i| graph.nodes()[i].clone()).collect();
    Ok(Graph::from_parts(graph.seed(), tensors, nodes)?)
}
