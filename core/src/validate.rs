//! Rebuilding a graph from untrusted parts (a decoded file, a rewrite by a pass): every
//! tensor and node is checked, down to each node's settings and its lowering to a kernel
//! that accepts it. The one validator of graphs: the `.sprout` loader, the ONNX importer and
//! every writer go through it.

use crate::graph::{Graph, GraphError, Init, Node, TensorInfo, MAX_TENSOR_BYTES};
use crate::lower::{lower, Mode};
use crate::op::Op;
use crate::optim::{adamw_problem, loss_scale_problem, sgd_problem};
use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

impl Graph {
    /// A graph from its parts, e.g. decoded from a file. Nothing is trusted: every tensor
    /// must have a unique name, a size that fits [`MAX_TENSOR_BYTES`] and initial values of
    /// its own length, and no dimension of 0; every node must have sane settings (finite
    /// values in their ranges), its op's operand counts, refer to existing
    /// tensors, read only leaves or outputs of earlier nodes, produce each output once, and
    /// lower to a kernel whose geometry and operands check out.
    pub fn from_parts(
        seed: u64,
        tensors: Vec<TensorInfo>,
        nodes: Vec<Node>,
    ) -> Result<Self, GraphError> {
        let mut names = BTreeSet::new();
        for info in &tensors {
            check_tensor(info)?;
            if !names.insert(info.name.as_str()) {
                return Err(GraphError::DuplicateName { name: info.name.clone() });
            }
        }
        let mut graph = Graph::from_checked_tensors(seed, tensors);
        // `Some(false)`: produced by a node not yet reached; `Some(true)`: already produced.
        let mut produced: Vec<Option<bool>> = vec![None; graph.tensors().len()];
        for node in &nodes {
            let invalid = |detail: String| GraphError::Invalid {
                op: node.op.kind(),
                node: node.name.clone(),
                detail,
            };
            if let Some(problem) = settings_problem(&node.op) {
                return Err(invalid(problem));
            }
            let counts = node.op.operand_counts();
            let sizes = [
                ("inputs", &counts.inputs, node.inputs.len()),
                ("state tensors", &counts.state, node.state.len()),
                ("outputs", &counts.outputs, node.outputs.len()),
            ];
            for (what, range, actual) in sizes {
                if !range.contains(&actual) {
                    return Err(invalid(alloc::format!(
                        "takes {}..={} {what}, the node has {actual}",
                        range.start(),
                        range.end()
                    )));
                }
            }
            for &id in node.inputs.iter().chain(&node.state).chain(&node.outputs) {
                graph.check_id(id)?;
            }
            for &id in &node.outputs {
                if produced[id.index()].is_some() {
                    let name = &graph.tensor(id).name;
                    return Err(invalid(alloc::format!("'{name}' is produced twice")));
                }
                produced[id.index()] = Some(false);
            }
        }
        for node in &nodes {
            for &id in node.inputs.iter().chain(&node.state) {
                if produced[id.index()] == Some(false) {
                    let name = &graph.tensor(id).name;
                    return Err(GraphError::Invalid {
                        op: node.op.kind(),
                        node: node.name.clone(),
                        detail: alloc::format!("reads '{name}' before a node produces it"),
                    });
                }
            }
            for &id in &node.outputs {
                produced[id.index()] = Some(true);
            }
        }
        for node in &nodes {
            for mode in [Mode::Train, Mode::Eval, Mode::TrainRunningStats] {
                check_kernel(&graph, node, mode)?;
            }
        }
        graph.set_nodes(nodes);
        Ok(graph)
    }
}

/// A tensor's size fits, it has no dimension of 0 and its initial values (if explicit) have
/// its length: checked for every tensor a builder adds and every tensor decoded.
pub(crate) fn check_tensor(info: &TensorInfo) -> Result<(), GraphError> {
    let bytes = info.shape.dims().iter().try_fold(info.dtype.size(), |acc, &d| acc.checked_mul(d));
    if bytes.is_none_or(|b| b > MAX_TENSOR_BYTES) {
        return Err(GraphError::Invalid {
            op: "tensor",
            node: info.name.clone(),
            detail: alloc::format!(
                "shape {} of {:?} exceeds {MAX_TENSOR_BYTES} bytes",
                info.shape,
                info.dtype
            ),
        });
    }
    if info.shape.dims().contains(&0) {
        return Err(GraphError::Invalid {
            op: "tensor",
            node: info.name.clone(),
            detail: alloc::format!("shape {} has a dimension of 0", info.shape),
        });
    }
    match info.init.as_ref().and_then(Init::explicit_len) {
        Some(len) if len != info.shape.numel() => Err(GraphError::ValueLength {
            tensor: info.name.clone(),
            expected: info.shape.numel(),
            actual: len,
        }),
        _ => Ok(()),
    }
}

/// The node lowers (in `mode`) to a kernel whose geometry is sound and whose operands have
/// the element types and lengths the kernel expects: what the executor checks of a plan.
fn check_kernel(graph: &Graph, node: &Node, mode: Mode) -> Result<(), GraphError> {
    let invalid = |detail: String| GraphError::Invalid {
        op: node.op.kind(),
        node: node.name.clone(),
        detail,
    };
    let (kernel, operands) = lower(graph, node, mode);
    kernel.check().map_err(|e| invalid(String::from(e)))?;
    let slots = kernel.signature().slots;
    if slots.len() != operands.len() {
        return Err(invalid(alloc::format!(
            "its kernel takes {} operands, the node has {}",
            slots.len(),
            operands.len()
        )));
    }
    for (slot, &id) in slots.iter().zip(&operands) {
        let t = graph.tensor(id);
        if (slot.dtype, slot.len) != (t.dtype, t.shape.numel()) {
            return Err(invalid(alloc::format!(
                "'{}' must hold {} {:?} elements, it holds {} {:?}",
                t.name,
                slot.len,
                slot.dtype,
                t.shape.numel(),
                t.dtype
            )));
        }
    }
    Ok(())
}

/// What is wrong with an op's settings, if anything: a value a builder would have refused
/// (batch-norm eps of -1, dropout p of 2, NaN anywhere), which a decoded node may carry.
fn settings_problem(op: &Op) -> Option<String> {
    let finite =
        |what: &str, v: f32| (!v.is_finite()).then(|| alloc::format!("{what} {v} is not finite"));
    match *op {
        Op::BatchNorm2d(c) => (!c.is_sane()).then(|| {
            alloc::format!("eps {} must be > 0 and momentum {} in [0, 1]", c.eps, c.momentum)
        }),
        Op::Dropout(c) | Op::DropoutGrad(c) => {
            (!c.is_sane()).then(|| alloc::format!("p = {} must be in [0, 1)", c.p))
        }
        Op::SgdUpdate(c) => sgd_problem(c),
        Op::AdamWUpdate(c) => adamw_problem(c),
        Op::UpdateLossScale(c) => loss_scale_problem(c),
        Op::Fill(v) => finite("fill value", v),
        Op::Accumulate(v) => finite("accumulation scale", v),
        Op::ClipCoefficient(v) => (!(v.is_finite() && v > 0.0))
            .then(|| alloc::format!("gradient clipping norm {v} must be positive")),
        Op::LeakyRelu(p) => finite("alpha", p.alpha),
        Op::Elu(p) => finite("alpha", p.alpha),
        Op::HardSigmoid(p) => finite("alpha", p.alpha).or_else(|| finite("beta", p.beta)),
        Op::Quantize(q) | Op::Dequantize(q) => (!(q.scale.is_finite() && q.scale > 0.0))
            .then(|| alloc::format!("scale {} must be finite and above 0", q.scale)),
        _ => None,
    }
}
