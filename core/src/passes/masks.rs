//! Int8 clamp masks: each int8 clamp's gradient (`qclamp_grad`, which reads the clamp's
//! int8 output) becomes a bit mask of that output, taken right after the output is made,
//! and the gradient through the mask, so the output can die in the forward pass while the
//! backward pass keeps an eighth of its bytes. Values stay bit for bit the same.

use crate::graph::{producers, Graph, GraphError, Node, Phase, Stage, TensorInfo};
use crate::ops::Op;
use crate::quant::backward::mask_bytes;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// Rewrites every [`Op::QClampGrad`] into an [`Op::QClampMask`] right after the node
/// producing its clamp output (first, for a leaf) and an [`Op::QMaskGrad`] in its place.
/// Gradients through the same output and bounds share one mask.
pub(crate) fn clamp_masks(graph: &mut Graph) -> Result<(), GraphError> {
    let nodes = graph.nodes().to_vec();
    let producer = producers(&nodes, graph.tensors().len());
    let mut masks: BTreeMap<(TensorId, (i8, i8)), TensorId> = BTreeMap::new();
    // Mask nodes to run first (`None`) or right after node `i` (`Some(i)`).
    let mut after: BTreeMap<Option<usize>, Vec<Node>> = BTreeMap::new();
    let mut rewritten = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let (Op::QClampGrad(act), [y, dy]) = (node.op, node.inputs.as_slice()) else {
            rewritten.push(node.clone());
            continue;
        };
        let mask = match masks.get(&(*y, act)) {
            Some(&mask) => mask,
            None => {
                let mask = mask_of(graph, *y)?;
                after.entry(producer[y.index()]).or_default().push(Node {
                    name: format!("{}.mask", node.name),
                    op: Op::QClampMask(act),
                    inputs: vec![*y],
                    state: Vec::new(),
                    outputs: vec![mask],
                    phase: Phase::MicroBatch,
                    stage: Stage::Backward,
                });
                masks.insert((*y, act), mask);
                mask
            }
        };
        rewritten.push(Node { op: Op::QMaskGrad, inputs: vec![mask, *dy], ..node.clone() });
    }
    let mut order = after.remove(&None).unwrap_or_default();
    for (i, node) in rewritten.into_iter().enumerate() {
        order.push(node);
        order.extend(after.remove(&Some(i)).unwrap_or_default());
    }
    graph.set_nodes(order);
    Ok(())
}

/// A new int8 tensor for a bit mask of `y`.
fn mask_of(graph: &mut Graph, y: TensorId) -> Result<TensorId, GraphError> {
    let info = graph.tensor(y);
    let (name, len) = (format!("{}.mask", info.name), info.shape.numel());
    graph.add_tensor(TensorInfo {
        name: graph.fresh_name(&name),
        shape: Shape::d1(mask_bytes(len)),
        dtype: DType::I8,
        role: Role::Activation,
        init: None,
    })
}
