//! sprout → ONNX and safetensors: writes the forward (inference) part of a graph as an
//! opset-13 model with a dynamic batch axis, and weights as a safetensors file, both
//! under sprout's (PyTorch `state_dict`) names.

use crate::error::OnnxError;
use crate::metadata::metadata_props;
use crate::proto::{
    AttributeProto, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use prost::Message;
use sprout_core::dilation::Dilated;
use sprout_core::format::Metadata;
use sprout_core::graph::{Node, Stage};
use sprout_core::op::Op;
use sprout_core::reference::pointwise::{GELU_CUBIC, SQRT_2_OVER_PI};
use sprout_core::{Graph, Role, Shape, TensorId};
use std::collections::{BTreeMap, BTreeSet};
use std::f32::consts::SQRT_2;

/// The operator set exports import.
pub const OPSET: i64 = 13;

/// The name of the dynamic batch axis on the exported input and outputs.
pub const BATCH_AXIS: &str = "batch";

/// Weight values by tensor name.
pub type Weights = BTreeMap<String, Vec<f32>>;

/// A named tensor for [`export_safetensors`]: name, shape, values (row-major).
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// The initial values of every tensor of `graph` that has one (parameters, buffers,
/// optimizer state): for a graph from [`sprout_core::ModelFile::to_graph`], the stored weights.
pub fn graph_weights(graph: &Graph) -> Weights {
    graph
        .tensors()
        .iter()
        .filter_map(|t| Some((t.name.clone(), t.init.as_ref()?.materialize(t.shape.numel()))))
        .collect()
}

/// The parameters and buffers of `graph` (what PyTorch's `state_dict` holds) with their
/// shapes, in creation order, ready for [`export_safetensors`].
pub fn state_dict(graph: &Graph, weights: &Weights) -> Result<Vec<NamedTensor>, OnnxError> {
    let mut out = Vec::new();
    for t in graph.tensors() {
        if matches!(t.role, Role::FrozenParam | Role::TrainableParam | Role::Buffer) {
            let values = weight(weights, &t.name, t.shape)?;
            out.push((t.name.clone(), t.shape.dims().to_vec(), values.to_vec()));
        }
    }
    Ok(out)
}

/// Tensors as a safetensors file (F32, names as given).
pub fn export_safetensors(weights: &[NamedTensor]) -> Result<Vec<u8>, OnnxError> {
    let bytes: Vec<Vec<u8>> =
        weights.iter().map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let mut views = Vec::with_capacity(weights.len());
    for ((name, shape, _), data) in weights.iter().zip(&bytes) {
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)?;
        views.push((name.as_str(), view));
    }
    Ok(safetensors::serialize(views, None)?)
}

fn weight<'w>(weights: &'w Weights, name: &str, shape: Shape) -> Result<&'w [f32], OnnxError> {
    let values = weights.get(name).ok_or_else(|| OnnxError::Weight {
        name: name.into(),
        detail: "no values were given for it".into(),
    })?;
    if values.len() != shape.numel() {
        return Err(OnnxError::Weight {
            name: name.into(),
            detail: format!(
                "shape {shape} holds {} values, {} were given",
                shape.numel(),
                values.len()
            ),
        });
    }
    Ok(values)
}

/// The forward part of `graph` as ONNX bytes.
pub fn export_onnx(graph: &Graph, weights: &Weights) -> Result<Vec<u8>, OnnxError> {
    Ok(export_proto(graph, weights)?.encode_to_vec())
}

/// [`export_onnx`] with `metadata`'s class names and preprocessing in `metadata_props`
/// (see [`crate::metadata`]).
pub fn export_onnx_with_metadata(
    graph: &Graph,
    weights: &Weights,
    metadata: &Metadata,
) -> Result<Vec<u8>, OnnxError> {
    let mut proto = export_proto(graph, weights)?;
    proto.metadata_props = metadata_props(metadata);
    Ok(proto.encode_to_vec())
}

/// Whether a node belongs to the inference graph: model code's ops, without losses.
fn is_inference(graph: &Graph, node: &Node) -> bool {
    node.stage == Stage::Forward
        && !matches!(node.op, Op::CrossEntropy | Op::Mse)
        && node.inputs.iter().all(|&i| graph.tensor(i).role != Role::Label)
}

/// The forward part of `graph` as an ONNX `ModelProto` (opset [`OPSET`]): the inputs it
/// reads, every value no other inference node reads as an output, initializers under
/// their sprout names.
pub fn export_proto(graph: &Graph, weights: &Weights) -> Result<ModelProto, OnnxError> {
    let mut nodes: Vec<(&Node, Option<Dilated>)> = graph
        .nodes()
        .iter()
        .filter(|n| is_inference(graph, n))
        .map(|n| (n, matches!(n.op, Op::Conv2d(_)).then(|| graph.kernel_dilation(n.inputs[1]))))
        .map(|(n, d)| (n, d.flatten()))
        .collect();
    // A dilated convolution's kernel spreading is its `dilations` attribute in ONNX.
    let spreading: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|(_, d)| d.iter().flat_map(|d| &d.nodes))
        .map(|&i| graph.nodes()[i].name.as_str())
        .collect();
    nodes.retain(|(n, _)| !spreading.contains(n.name.as_str()));
    // Batch-norm running statistics are state operands: read too.
    let read: BTreeSet<TensorId> = nodes
        .iter()
        .flat_map(|(n, d)| n.inputs.iter().chain(&n.state).chain(d.iter().map(|d| &d.kernel)))
        .copied()
        .collect();
    let inputs: Vec<TensorId> =
        read.iter().copied().filter(|&t| graph.tensor(t).role == Role::Input).collect();
    let outputs: Vec<TensorId> = nodes
        .iter()
        .flat_map(|(n, _)| n.outputs.first().copied())
        .filter(|t| !read.contains(t) && graph.tensor(*t).role == Role::Activation)
        .collect();
    if inputs.is_empty() || outputs.is_empty() {
        return Err(OnnxError::Malformed {
            detail: "the graph has no inference part (no input read, or no output)".into(),
        });
    }
    let batch = graph.shape(inputs[0]).dim(0);
    let value_info = |t: TensorId| {
        let shape = graph.shape(t);
        let dims: Vec<Dim> = shape
            .dims()
            .iter()
            .enumerate()
            .map(|(i, &d)| match i == 0 && Some(d) == batch {
                true => Dim::Symbolic(BATCH_AXIS.into()),
                false => Dim::Fixed(d as i64),
            })
            .collect();
        ValueInfoProto::f32(&graph.tensor(t).name, &dims)
    };
    let mut out = GraphProto {
        name: Some("sprout".into()),
        input: inputs.iter().map(|&t| value_info(t)).collect(),
        output: outputs.iter().map(|&t| value_info(t)).collect(),
        ..Default::default()
    };
    // A layer norm over several axes scales by `[C, H, W]` in ONNX (as PyTorch's
    // `LayerNorm([C, H, W])` holds it), where sprout keeps the values flat.
    let layer_norm_dims: BTreeMap<TensorId, &[usize]> = nodes
        .iter()
        .filter(|(n, _)| matches!(n.op, Op::LayerNorm(_)))
        .flat_map(|(n, _)| {
            let dims = normalised_dims(graph, n);
            n.inputs[1..].iter().map(move |&t| (t, dims))
        })
        .collect();
    let mut initialized = BTreeSet::new();
    for &t in &read {
        let info = graph.tensor(t);
        if matches!(info.role, Role::FrozenParam | Role::TrainableParam | Role::Buffer)
            && initialized.insert(t)
        {
            let dims = layer_norm_dims.get(&t).copied().unwrap_or(info.shape.dims());
            let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            let values = weight(weights, &info.name, info.shape)?;
            out.initializer.push(TensorProto::f32(&info.name, &dims, values));
        }
    }
    for (node, dilated) in nodes {
        export_node(graph, node, dilated, &mut out)?;
    }
    Ok(ModelProto::new(out, OPSET))
}

/// The trailing axes of a layer norm's input that it normalises over: those whose sizes
/// multiply to its scale's length (the graph's validator checks there are such).
fn normalised_dims<'g>(graph: &'g Graph, node: &Node) -> &'g [usize] {
    let dims = graph.tensor(node.inputs[0]).shape.dims();
    let d = graph.shape(node.inputs[1]).numel();
    let mut product = 1;
    let start = (1..dims.len()).rev().find(|&a| {
        product *= dims[a];
        product >= d
    });
    &dims[start.unwrap_or(dims.len())..]
}

fn export_node(
    graph: &Graph,
    node: &Node,
    dilated: Option<Dilated>,
    out: &mut GraphProto,
) -> Result<(), OnnxError> {
    let name = |t: &TensorId| graph.tensor(*t).name.clone();
    let mut inputs: Vec<String> = node.inputs.iter().map(name).collect();
    let dilation = match &dilated {
        Some(d) => {
            inputs[1] = name(&d.kernel);
            d.dilation
        }
        None => (1, 1),
    };
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let y = name(&node.outputs[0]);
    let n = node.name.as_str();
    let ints = |v: (usize, usize)| [v.0 as i64, v.1 as i64];
    let pads = |p: (usize, usize)| [p.0 as i64, p.1 as i64, p.0 as i64, p.1 as i64];
    let mut constant = |suffix: &str, t: TensorProto| -> String {
        // Node names need not be unique (the slices of a GatherND): nor are these, unless
        // numbered when taken.
        let taken = |name: &str| out.initializer.iter().any(|i| i.name.as_deref() == Some(name));
        let mut cname = format!("{n}.{suffix}");
        for k in 1.. {
            if !taken(&cname) {
                break;
            }
            cname = format!("{n}#{k}.{suffix}");
        }
        out.initializer.push(TensorProto { name: Some(cname.clone()), ..t });
        cname
    };
    let onnx = match node.op {
        Op::Linear if graph.shape(node.inputs[0]).rank() > 2 => {
            // Gemm is 2-D: over rows, `x · wᵀ` is a MatMul by the transposed weight.
            let wt = format!("{y}:wt");
            let perm = AttributeProto::ints("perm", &[1, 0]);
            out.node.push(
                NodeProto::new("Transpose", &format!("{n}:wt"), &[inputs[1]], &[&wt]).with(perm),
            );
            match inputs.get(2) {
                None => NodeProto::new("MatMul", n, &[inputs[0], &wt], &[&y]),
                Some(b) => {
                    let product = format!("{y}:product");
                    let matmul = NodeProto::new(
                        "MatMul",
                        &format!("{n}:product"),
                        &[inputs[0], &wt],
                        &[&product],
                    );
                    out.node.push(matmul);
                    NodeProto::new("Add", n, &[&product, b], &[&y])
                }
            }
        }
        Op::Linear => {
            NodeProto::new("Gemm", n, &inputs, &[&y]).with(AttributeProto::int("transB", 1))
        }
        Op::Gelu(p) => {
            // Gelu itself needs opset 20; before it, `x · ½(1 + erf(x / √2))` or
            // `x · ½(1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, as PyTorch exports them.
            let x = inputs[0].to_string();
            let mut scalar = |name: &str, v: f32| constant(name, TensorProto::f32("", &[], &[v]));
            let v = |s: &str| format!("{y}:{s}");
            let mut chain: Vec<(&str, Vec<String>, String)> = match p.tanh {
                true => vec![
                    ("Mul", vec![x.clone(), x.clone()], v("square")),
                    ("Mul", vec![x.clone(), v("square")], v("cube")),
                    ("Mul", vec![scalar("cubic", GELU_CUBIC), v("cube")], v("cubic")),
                    ("Add", vec![x.clone(), v("cubic")], v("inner")),
                    ("Mul", vec![scalar("scale", SQRT_2_OVER_PI), v("inner")], v("scaled")),
                    ("Tanh", vec![v("scaled")], v("f")),
                ],
                false => vec![
                    ("Div", vec![x.clone(), scalar("sqrt2", SQRT_2)], v("scaled")),
                    ("Erf", vec![v("scaled")], v("f")),
                ],
            };
            chain.push(("Add", vec![v("f"), scalar("one", 1.0)], v("plus")));
            chain.push(("Mul", vec![x, v("plus")], v("times")));
            let half = scalar("half", 0.5);
            for (op, ins, o) in chain {
                let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
                out.node.push(NodeProto::new(op, &o, &ins, &[&o]));
            }
            NodeProto::new("Mul", n, &[&v("times"), &half], &[&y])
        }
        Op::LayerNorm(eps) => {
            // LayerNormalization needs opset 17; before it, the chain PyTorch exports, over
            // the trailing axes the scale's values cover.
            let two = constant("two", TensorProto::f32("", &[], &[2.0]));
            let eps = constant("eps", TensorProto::f32("", &[], &[eps]));
            let names = ["mean", "centred", "squared", "var", "var_eps", "std", "normed", "scaled"];
            let [mean, centred, squared, var, var_eps, std, normed, scaled] =
                names.map(|s| format!("{y}:{s}"));
            let k = normalised_dims(graph, node).len() as i64;
            let last = AttributeProto::ints("axes", &(-k..0).collect::<Vec<_>>());
            out.node.push(
                NodeProto::new("ReduceMean", &mean, &[inputs[0]], &[&mean]).with(last.clone()),
            );
            let chain = [
                ("Sub", vec![inputs[0], mean.as_str()], &centred),
                ("Pow", vec![centred.as_str(), two.as_str()], &squared),
            ];
            for (op, ins, o) in chain {
                out.node.push(NodeProto::new(op, o, &ins, &[o]));
            }
            out.node.push(NodeProto::new("ReduceMean", &var, &[&squared], &[&var]).with(last));
            let chain = [
                ("Add", vec![var.as_str(), eps.as_str()], &var_eps),
                ("Sqrt", vec![var_eps.as_str()], &std),
                ("Div", vec![centred.as_str(), std.as_str()], &normed),
                ("Mul", vec![normed.as_str(), inputs[1]], &scaled),
            ];
            for (op, ins, o) in chain {
                out.node.push(NodeProto::new(op, o, &ins, &[o]));
            }
            NodeProto::new("Add", n, &[&scaled, inputs[2]], &[&y])
        }
        Op::Conv2d(p) => {
            let w = graph.shape(dilated.map_or(node.inputs[1], |d| d.kernel));
            NodeProto::new("Conv", n, &inputs, &[&y])
                .with(AttributeProto::ints(
                    "kernel_shape",
                    &[w.dims()[2] as i64, w.dims()[3] as i64],
                ))
                .with(AttributeProto::ints("strides", &ints(p.stride)))
                .with(AttributeProto::ints("pads", &pads(p.padding)))
                .with(AttributeProto::ints("dilations", &ints(dilation)))
                .with(AttributeProto::int("group", p.groups as i64))
        }
        Op::Relu => NodeProto::new("Relu", n, &inputs, &[&y]),
        Op::Relu6 => {
            let lo = constant("min", TensorProto::f32("", &[], &[0.0]));
            let hi = constant("max", TensorProto::f32("", &[], &[6.0]));
            NodeProto::new("Clip", n, &[inputs[0], &lo, &hi], &[&y])
        }
        Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
            let max = matches!(node.op, Op::MaxPool2d(_));
            let node =
                NodeProto::new(if max { "MaxPool" } else { "AveragePool" }, n, &inputs, &[&y])
                    .with(AttributeProto::ints("kernel_shape", &ints(p.kernel)))
                    .with(AttributeProto::ints("strides", &ints(p.stride)))
                    .with(AttributeProto::ints("pads", &pads(p.padding)));
            match max {
                true => node,
                false => {
                    node.with(AttributeProto::int("count_include_pad", p.count_include_pad as i64))
                }
            }
        }
        Op::GlobalAvgPool => {
            // ONNX pools to [N, C, 1, 1]; sprout's [N, C] is its flattening.
            let pooled = format!("{y}:nchw");
            out.node.push(NodeProto::new(
                "GlobalAveragePool",
                &format!("{n}:pool"),
                &inputs,
                &[&pooled],
            ));
            NodeProto::new("Flatten", n, &[&pooled], &[&y]).with(AttributeProto::int("axis", 1))
        }
        Op::Add => NodeProto::new("Add", n, &inputs, &[&y]),
        Op::Sigmoid => NodeProto::new("Sigmoid", n, &inputs, &[&y]),
        Op::HardSigmoid(p) => NodeProto::new("HardSigmoid", n, &inputs, &[&y])
            .with(AttributeProto::float("alpha", p.alpha))
            .with(AttributeProto::float("beta", p.beta)),
        Op::HardSwish => {
            // HardSwish itself needs opset 14; at 13 it is x · HardSigmoid(x), as PyTorch
            // exports it there.
            let gate = format!("{y}:gate");
            out.node.push(
                NodeProto::new("HardSigmoid", &format!("{n}:gate"), &inputs, &[&gate])
                    .with(AttributeProto::float("alpha", 1.0 / 6.0))
                    .with(AttributeProto::float("beta", 0.5)),
            );
            NodeProto::new("Mul", n, &[inputs[0], &gate], &[&y])
        }
        Op::Silu => {
            // ONNX has no SiLU: `x · Sigmoid(x)`, as PyTorch exports it.
            let gate = format!("{y}:sigmoid");
            out.node.push(NodeProto::new("Sigmoid", &format!("{n}:sigmoid"), &inputs, &[&gate]));
            NodeProto::new("Mul", n, &[inputs[0], &gate], &[&y])
        }
        Op::LeakyRelu(p) => NodeProto::new("LeakyRelu", n, &inputs, &[&y])
            .with(AttributeProto::float("alpha", p.alpha)),
        Op::Elu(p) => {
            NodeProto::new("Elu", n, &inputs, &[&y]).with(AttributeProto::float("alpha", p.alpha))
        }
        Op::Softplus => NodeProto::new("Softplus", n, &inputs, &[&y]),
        Op::Tanh => NodeProto::new("Tanh", n, &inputs, &[&y]),
        Op::Mul => {
            let (a, b) = (graph.shape(node.inputs[0]), graph.shape(node.inputs[1]));
            if a.rank() == b.rank() {
                NodeProto::new("Mul", n, &inputs, &[&y])
            } else {
                // A [N, C] factor broadcasts from the right in ONNX: give it a's rank.
                let mut spec = vec![0i64; a.rank()];
                spec[1] = b.dims()[1] as i64;
                spec[2..].fill(1);
                let s = constant("factor_shape", TensorProto::i64("", &[spec.len() as i64], &spec));
                let factor = format!("{y}:factor");
                out.node.push(NodeProto::new(
                    "Reshape",
                    &format!("{n}:factor"),
                    &[inputs[1], &s],
                    &[&factor],
                ));
                NodeProto::new("Mul", n, &[inputs[0], &factor], &[&y])
            }
        }
        Op::BatchNorm2d(cfg) => {
            let state: Vec<String> = node.state.iter().map(name).collect();
            let all = [inputs[0], inputs[1], inputs[2], &state[0], &state[1]];
            NodeProto::new("BatchNormalization", n, &all, &[&y])
                .with(AttributeProto::float("epsilon", cfg.eps))
                .with(AttributeProto::float("momentum", 1.0 - cfg.momentum))
        }
        Op::Dropout(cfg) => {
            let ratio = constant("ratio", TensorProto::f32("", &[], &[cfg.p]));
            NodeProto::new("Dropout", n, &[inputs[0], &ratio], &[&y])
        }
        Op::Reshape => {
            let (from, to) = (graph.shape(node.inputs[0]), graph.shape(node.outputs[0]));
            let flatten = from.rank() > 2 && to.rank() == 2 && from.dim(0) == to.dim(0);
            if flatten {
                NodeProto::new("Flatten", n, &inputs, &[&y]).with(AttributeProto::int("axis", 1))
            } else {
                // Copy the batch dimension (0) when it is kept, so the batch stays dynamic.
                let spec: Vec<i64> = to
                    .dims()
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| if i == 0 && from.dim(0) == Some(d) { 0 } else { d as i64 })
                    .collect();
                let s = constant("shape", TensorProto::i64("", &[spec.len() as i64], &spec));
                NodeProto::new("Reshape", n, &[inputs[0], &s], &[&y])
            }
        }
        Op::Softmax | Op::LogSoftmax => {
            // Over the last axis: opset 13's meaning of `axis`, which sprout exports.
            let last = graph.shape(node.inputs[0]).rank().saturating_sub(1) as i64;
            NodeProto::new(
                if node.op == Op::Softmax { "Softmax" } else { "LogSoftmax" },
                n,
                &inputs,
                &[&y],
            )
            .with(AttributeProto::int("axis", last))
        }
        Op::Detach => NodeProto::new("Identity", n, &inputs, &[&y]),
        Op::Concat(p) => NodeProto::new("Concat", n, &inputs, &[&y])
            .with(AttributeProto::int("axis", p.axis as i64)),
        Op::Pad(p) => {
            let (from, to) = (graph.shape(node.inputs[0]), graph.shape(node.outputs[0]));
            let rank = from.rank();
            let mut pads = vec![0i64; 2 * rank];
            let grown = to.dim(p.axis).unwrap_or(0).saturating_sub(from.dim(p.axis).unwrap_or(0));
            pads[p.axis] = p.start as i64;
            pads[rank + p.axis] = grown.saturating_sub(p.start) as i64;
            let s = constant("pads", TensorProto::i64("", &[pads.len() as i64], &pads));
            NodeProto::new("Pad", n, &[inputs[0], &s], &[&y])
        }
        Op::Slice(p) => {
            let len = graph.shape(node.outputs[0]).dim(p.axis).unwrap_or(0);
            let mut one =
                |suffix: &str, v: usize| constant(suffix, TensorProto::i64("", &[1], &[v as i64]));
            let (s, e, a) =
                (one("starts", p.start), one("ends", p.start + len), one("axes", p.axis));
            NodeProto::new("Slice", n, &[inputs[0], &s, &e, &a], &[&y])
        }
        Op::Transpose(p) => {
            let rank = graph.shape(node.inputs[0]).rank();
            let perm: Vec<i64> = p.perm[..rank].iter().map(|&a| i64::from(a)).collect();
            NodeProto::new("Transpose", n, &inputs, &[&y]).with(AttributeProto::ints("perm", &perm))
        }
        Op::Broadcast => {
            // Expand broadcasts both ways: a 1 keeps the axis (the batch stays dynamic).
            let (from, to) = (graph.shape(node.inputs[0]), graph.shape(node.outputs[0]));
            let spec: Vec<i64> = from
                .dims()
                .iter()
                .zip(to.dims())
                .map(|(&f, &t)| if f == t { 1 } else { t as i64 })
                .collect();
            let s = constant("shape", TensorProto::i64("", &[spec.len() as i64], &spec));
            NodeProto::new("Expand", n, &[inputs[0], &s], &[&y])
        }
        other => return Err(OnnxError::NotExportable { op: other.kind(), node: n.into() }),
    };
    out.node.push(onnx);
    Ok(())
}
