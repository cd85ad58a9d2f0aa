//! Frozen int8 layers stay int8 in the bundle: a trainable int8 layer (`sprout quantize
//! --trainable-int8`) keeps its weights and bias in `f32` integer units, rounded each
//! forward pass. Where the device does not train them, the rounding is done once here and
//! the bundle carries the `i8` weights and `i32` bias a frozen layer holds, a quarter of the
//! bytes; only the weights and biases the device trains stay wide.

use crate::BundleBuildError;
use sprout_core::graph::TensorInfo;
use sprout_core::op::Op;
use sprout_core::quant::backward::{round_bias, round_weights};
use sprout_core::{Graph, Init, Role, TensorId};

/// `graph` with every rounded weight or bias whose integer units are not in `trainable`
/// replaced by its rounded values as a frozen parameter (tensor ids and names are kept;
/// the integer units themselves are left unread).
pub fn narrow(graph: &Graph, trainable: &[TensorId]) -> Result<Graph, BundleBuildError> {
    let mut tensors = graph.tensors().to_vec();
    let mut nodes = Vec::with_capacity(graph.nodes().len());
    for node in graph.nodes() {
        let frozen_units = match (node.op, &node.inputs[..], &node.outputs[..]) {
            (Op::RoundWeights(_) | Op::RoundBias(_), [units, _], [out])
                if !trainable.contains(units) =>
            {
                Some((*units, *out))
            }
            _ => None,
        };
        let Some((units, out)) = frozen_units else {
            nodes.push(node.clone());
            continue;
        };
        let values = initial_values(graph.tensor(units))?;
        let ints: Vec<i32> = match node.op {
            Op::RoundWeights(_) => {
                let mut w = vec![0i8; values.len()];
                round_weights(&values, &mut w);
                w.into_iter().map(i32::from).collect()
            }
            _ => {
                let mut b = vec![0i32; values.len()];
                round_bias(&values, &mut b);
                b
            }
        };
        let rounded = &mut tensors[out.index()];
        rounded.role = Role::FrozenParam;
        rounded.init = Some(Init::Ints(ints));
    }
    Ok(Graph::from_parts(graph.seed(), tensors, nodes)?)
}

/// A parameter's values; an error naming it when it has none.
fn initial_values(info: &TensorInfo) -> Result<Vec<f32>, BundleBuildError> {
    match &info.init {
        Some(init) => Ok(init.materialize(info.shape.numel())),
        None => Err(BundleBuildError::Split {
            detail: format!("the int8 layer's '{}' has no values to round", info.name),
        }),
    }
}
