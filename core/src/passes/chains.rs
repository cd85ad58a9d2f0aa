//! Depthwise chains: the backward ops of an int8 depthwise layer's input gradient, the
//! clamp mask of the layer before it, that layer's bias gradient and (a 1x1 layer) its
//! input gradient become one node that runs a channel at a time
//! ([`Op::QDepthwiseChainGrad`], [`Op::QDepthwiseChainBiasGrad`]), so the gradient of the
//! hidden channels between the two layers is never stored; with a 1x1 projection after
//! the depthwise layer, its input gradient, clamp and bias gradient join in
//! ([`Op::QBlockGrad`]: a whole inverted-residual block). Values stay bit for bit the same.

use crate::graph::{producers, Graph, GraphError, Node, TensorInfo};
use crate::op::{ConvParams, DepthwiseChainParams};
use crate::ops::Op;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// The nodes one fused node replaces: the depthwise input gradient `depthwise`, the mask
/// gradient `mask` after it, and the nodes reading that: the earlier layer's `bias`
/// gradient and its 1x1 `input` gradient, either or both.
struct Chain {
    /// The projection's input gradient, mask gradient and bias gradient before the chain.
    projection: Option<(usize, usize, Option<usize>)>,
    conv: ConvParams,
    depthwise: usize,
    mask: usize,
    bias: Option<usize>,
    input: Option<usize>,
    input_hw: (usize, usize),
}

/// Rewrites every depthwise chain (see the module) whose parts nothing else reads. Run after
/// `clamp_masks`: the chain starts from the clamp's mask gradient.
pub(crate) fn depthwise_chains(graph: &mut Graph) -> Result<(), GraphError> {
    let nodes = graph.nodes().to_vec();
    let readers = readers(&nodes, graph.tensors().len());
    let producer = producers(&nodes, graph.tensors().len());
    let mut replaced: Vec<Option<Node>> = vec![None; nodes.len()];
    let mut removed = vec![false; nodes.len()];
    for d in 0..nodes.len() {
        let Some(mut chain) = find(graph, &nodes, &readers, &producer, d) else {
            continue;
        };
        chain.projection = projection(graph, &nodes, &readers, &producer, &chain)
            .filter(|(p, _, _)| replaced[*p].is_none() && !removed[*p]);
        let first = chain.projection.map_or(d, |(p, _, _)| p);
        replaced[first] = Some(fused(graph, &nodes, &chain)?);
        let (depthwise, projection) = (chain.depthwise, chain.projection);
        let parts = [chain.mask].into_iter().chain(chain.bias).chain(chain.input);
        let projection_parts = projection.into_iter().flat_map(|(_, m, b)| [Some(m), b]);
        let parts =
            parts.chain(projection_parts.flatten()).chain((first != d).then_some(depthwise));
        for n in parts {
            removed[n] = true;
        }
    }
    let order = nodes
        .into_iter()
        .zip(replaced)
        .enumerate()
        .filter(|(i, _)| !removed[*i])
        .map(|(_, (node, fused))| fused.unwrap_or(node))
        .collect();
    graph.set_nodes(order);
    Ok(())
}

/// For each tensor, the nodes that read it (as an input or state), once per read.
fn readers(nodes: &[Node], tensors: usize) -> Vec<Vec<usize>> {
    let mut readers = vec![Vec::new(); tensors];
    for (i, node) in nodes.iter().enumerate() {
        for t in node.inputs.iter().chain(&node.state) {
            readers[t.index()].push(i);
        }
    }
    readers
}

/// The chain starting at node `d`, if `d` is an int8 depthwise input gradient whose every
/// part below is read only inside the chain and whose operands exist before `d` runs.
fn find(
    graph: &Graph,
    nodes: &[Node],
    readers: &[Vec<usize>],
    producer: &[Option<usize>],
    d: usize,
) -> Option<Chain> {
    let node = &nodes[d];
    let (Op::QConv2dGradInput(p), [dy, w, _], [hidden]) =
        (node.op, node.inputs.as_slice(), node.outputs.as_slice())
    else {
        return None;
    };
    let (x, w) = (graph.shape(*hidden), graph.shape(*w));
    let channels = x.dim(1)?;
    let depthwise = p.groups == channels && w.dim(0)? == channels && w.dim(1)? == 1;
    let floats = [*dy, *hidden].iter().all(|t| graph.tensor(*t).dtype == DType::F32);
    if !depthwise || !floats || x.rank() != 4 {
        return None;
    }
    let mask = only_reader(readers, *hidden)?;
    let (Op::QMaskGrad, [_, g], [masked]) =
        (nodes[mask].op, nodes[mask].inputs.as_slice(), nodes[mask].outputs.as_slice())
    else {
        return None;
    };
    if g != hidden || graph.tensor(*masked).dtype != DType::F32 {
        return None;
    }
    let (mut bias, mut input) = (None, None);
    for &r in &readers[masked.index()] {
        let reader = &nodes[r];
        match (reader.op, reader.inputs.as_slice()) {
            (Op::BiasGrad, [_]) if bias.is_none() => bias = Some(r),
            (Op::QConv2dGradInput(q), [_, w, _])
                if input.is_none() && pointwise(q, graph.shape(*w), channels) =>
            {
                input = Some(r)
            }
            _ => return None,
        }
    }
    // The mask and the 1x1 layer's weights and scales exist when the chain's first node runs.
    let weights = input.map_or(&[][..], |e| &nodes[e].inputs[1..]);
    let before_d = |t: &TensorId| producer[t.index()].is_none_or(|p| p < d);
    let ready = nodes[mask].inputs[..1].iter().chain(weights).all(before_d);
    let input_hw = (x.dim(2)?, x.dim(3)?);
    (ready && (bias.is_some() || input.is_some())).then_some(Chain {
        projection: None,
        conv: p,
        depthwise: d,
        mask,
        bias,
        input,
        input_hw,
    })
}

/// The nodes of a 1x1 projection's backward pass that feed `chain` (its input gradient,
/// the depthwise clamp's mask gradient and the depthwise bias gradient, if any), when
/// nothing else reads them.
fn projection(
    graph: &Graph,
    nodes: &[Node],
    readers: &[Vec<usize>],
    producer: &[Option<usize>],
    chain: &Chain,
) -> Option<(usize, usize, Option<usize>)> {
    let depthwise = &nodes[chain.depthwise];
    let mask = producer[depthwise.inputs[0].index()]?;
    let (Op::QMaskGrad, [m, g]) = (nodes[mask].op, nodes[mask].inputs.as_slice()) else {
        return None;
    };
    let p = producer[g.index()]?;
    let (Op::QConv2dGradInput(q), [dy, w, _]) = (nodes[p].op, nodes[p].inputs.as_slice()) else {
        return None;
    };
    let channels = graph.shape(depthwise.inputs[1]).dim(0)?;
    let transposed = graph.shape(*w);
    let one_by_one = q == ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
    if !one_by_one
        || transposed.dim(1) != Some(channels)
        || transposed.dims().get(2..) != Some(&[1, 1][..])
    {
        return None;
    }
    if only_reader(readers, *g) != Some(mask) || graph.tensor(*dy).dtype != DType::F32 {
        return None;
    }
    let mut bias = None;
    for &r in &readers[depthwise.inputs[0].index()] {
        match (nodes[r].op, nodes[r].inputs.as_slice()) {
            _ if r == chain.depthwise => {}
            (Op::BiasGrad, [_]) if bias.is_none() => bias = Some(r),
            _ => return None,
        }
    }
    // Everything the fused node reads exists when the projection's gradient would run.
    let chain_inputs = depthwise.inputs[1..].iter().chain(&nodes[chain.mask].inputs[..1]);
    let expansion = chain.input.map_or(&[][..], |e| &nodes[e].inputs[1..]);
    let before_p = |t: &TensorId| producer[t.index()].is_none_or(|i| i < p);
    let ready = [*m].iter().chain(chain_inputs).chain(expansion).all(before_p);
    ready.then_some((p, mask, bias))
}

/// The one node reading `t`, read once.
fn only_reader(readers: &[Vec<usize>], t: TensorId) -> Option<usize> {
    match readers[t.index()].as_slice() {
        [r] => Some(*r),
        _ => None,
    }
}

/// Whether settings `q` and weights of shape `w` make a 1x1 layer with `channels` outputs.
fn pointwise(q: ConvParams, w: Shape, channels: usize) -> bool {
    let one = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
    q == one && w.rank() == 4 && w.dim(0) == Some(channels) && w.dims()[2..] == [1, 1]
}

/// The node replacing `chain`, writing the outputs of the nodes it replaces (a new bias
/// gradient nobody reads when the earlier layer's bias does not train).
fn fused(graph: &mut Graph, nodes: &[Node], chain: &Chain) -> Result<Node, GraphError> {
    let depthwise = &nodes[chain.depthwise];
    let params = DepthwiseChainParams { conv: chain.conv, input_hw: chain.input_hw };
    let db = match chain.bias {
        Some(b) => nodes[b].outputs[0],
        None => unread_bias_grad(graph, depthwise)?,
    };
    // The depthwise layer's weights and scales and the earlier layer's mask.
    let mut inputs = depthwise.inputs[1..].to_vec();
    inputs.push(nodes[chain.mask].inputs[0]);
    let mut outputs = vec![db];
    let op = match chain.projection {
        Some((p, mask, bias)) => {
            let db_p = match bias {
                Some(b) => nodes[b].outputs[0],
                None => unread_bias_grad(graph, depthwise)?,
            };
            // The projection's output gradient, weights and scales, then its mask.
            let mut block = nodes[p].inputs.clone();
            block.push(nodes[mask].inputs[0]);
            inputs.splice(0..0, block);
            outputs.insert(0, db_p);
            match chain.input {
                Some(_) => Op::QBlockGrad(params),
                None => Op::QBlockBiasGrad(params),
            }
        }
        None => {
            inputs.insert(0, depthwise.inputs[0]);
            match chain.input {
                Some(_) => Op::QDepthwiseChainGrad(params),
                None => Op::QDepthwiseChainBiasGrad(params),
            }
        }
    };
    if let Some(e) = chain.input {
        inputs.extend_from_slice(&nodes[e].inputs[1..]);
        outputs.push(nodes[e].outputs[0]);
    }
    if chain.projection.is_some() {
        outputs.push(scratch_plane(graph, depthwise)?);
    }
    let name = format!("{}.chain", depthwise.name);
    Ok(Node { name, op, inputs, state: Vec::new(), outputs, ..depthwise.clone() })
}

/// A bias gradient, one per channel, for a layer of a chain whose bias does not train.
fn unread_bias_grad(graph: &mut Graph, depthwise: &Node) -> Result<TensorId, GraphError> {
    let channels = graph.shape(depthwise.inputs[2]).numel();
    new_gradient(graph, &format!("{}.chain.bias_grad", depthwise.name), channels)
}

/// One plane of the depthwise layer's output gradient, the scratch of a block's chain.
fn scratch_plane(graph: &mut Graph, depthwise: &Node) -> Result<TensorId, GraphError> {
    let dy = graph.shape(depthwise.inputs[0]);
    let plane = dy.dims().get(2..).map_or(0, |hw| hw.iter().product());
    new_gradient(graph, &format!("{}.chain.scratch", depthwise.name), plane)
}

fn new_gradient(graph: &mut Graph, name: &str, len: usize) -> Result<TensorId, GraphError> {
    let name = graph.fresh_name(name);
    let info = TensorInfo {
        name,
        shape: Shape::d1(len),
        dtype: DType::F32,
        role: Role::Gradient,
        init: None,
    };
    graph.add_tensor(info)
}
