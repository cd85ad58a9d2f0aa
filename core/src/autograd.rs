//! Compile-time autograd: `differentiate` appends backward nodes to a copy of the graph, one
//! vector-Jacobian rule per op, building only gradients that some trainable tensor needs.

use crate::builder::OutputSpec;
use crate::graph::{Graph, GraphError, Node, Phase, Stage};
use crate::op::Op;
use crate::quant::QuantParams;
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A training graph: the model, its backward pass, and each trainable tensor's gradient.
#[derive(Clone)]
pub struct Differentiated {
    pub graph: Graph,
    pub loss: TensorId,
    /// `(parameter, gradient)` pairs, in the order the parameters were given.
    pub gradients: Vec<(TensorId, TensorId)>,
    /// How many nodes (from the start) are the model's forward pass.
    pub forward_nodes: usize,
}

/// Appends the backward pass of `loss` with respect to `trainable` (which become trainable
/// parameters; every other parameter stays frozen and gets no gradient work).
pub fn differentiate(
    model: &Graph,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<Differentiated, GraphError> {
    differentiate_seeded(model, loss, trainable, None)
}

/// [`differentiate`] with the loss gradient seeded from the scalar `seed` of the model
/// instead of 1 (a loss scale), when given.
pub(crate) fn differentiate_seeded(
    model: &Graph,
    loss: TensorId,
    trainable: &[TensorId],
    seed: Option<TensorId>,
) -> Result<Differentiated, GraphError> {
    model.check_id(loss)?;
    let loss_info = model.tensor(loss);
    if loss_info.shape.numel() != 1 {
        return Err(GraphError::LossNotScalar {
            name: loss_info.name.clone(),
            shape: loss_info.shape,
        });
    }
    let mut graph = model.clone();
    graph.eager = None;
    let forward_nodes = graph.nodes().len();
    graph.stage = Stage::Backward;
    for (i, &p) in trainable.iter().enumerate() {
        graph.check_id(p)?;
        let t = graph.tensor(p);
        if !matches!(t.role, Role::FrozenParam | Role::TrainableParam) {
            return Err(GraphError::NotAParameter { name: t.name.clone(), role: t.role });
        }
        if trainable[..i].contains(&p) {
            let detail = "this parameter is listed twice among the trainable ones".into();
            return Err(GraphError::Invalid { op: "differentiate", node: t.name.clone(), detail });
        }
        graph.set_role(p, Role::TrainableParam);
    }

    let wants = wanted_gradients(&graph, loss, trainable);
    let forward: Vec<Node> = graph.nodes().to_vec();
    let mut pending: Vec<Vec<TensorId>> = vec![Vec::new(); graph.tensors().len()];
    let (seed_op, seed_inputs) = match seed {
        Some(scale) => {
            graph.check_id(scale)?;
            (Op::Detach, vec![scale])
        }
        None => (Op::Fill(1.0), Vec::new()),
    };
    let seed = graph.record(
        "loss.grad_seed",
        seed_op,
        seed_inputs,
        Vec::new(),
        vec![grad_spec(&graph, loss)],
        Phase::MicroBatch,
    )?[0];
    pending[loss.index()].push(seed);

    for node in forward.iter().rev() {
        let Some(&y) = node.outputs.first() else { continue };
        if pending[y.index()].is_empty() {
            continue;
        }
        let dy = sum_contributions(&mut graph, y, core::mem::take(&mut pending[y.index()]))?;
        for (input, grad) in vjp(&mut graph, node, dy, &wants)? {
            pending[input.index()].push(grad);
        }
    }

    let mut gradients = Vec::with_capacity(trainable.len());
    for &p in trainable {
        let contributions = core::mem::take(&mut pending[p.index()]);
        if contributions.is_empty() {
            return Err(GraphError::Invalid {
                op: "differentiate",
                node: graph.tensor(p).name.clone(),
                detail: format!(
                    "the loss '{}' does not depend on this parameter",
                    graph.tensor(loss).name
                ),
            });
        }
        gradients.push((p, sum_contributions(&mut graph, p, contributions)?));
    }
    Ok(Differentiated { graph, loss, gradients, forward_nodes })
}

impl Graph {
    /// Parameters a gradient can reach: those some node reads where its rule passes a
    /// gradient. Weight scales and requantization tables of int8 layers are not among them.
    pub fn differentiable_parameters(&self) -> Vec<TensorId> {
        let mut reachable = vec![false; self.tensors().len()];
        for node in self.nodes() {
            for &i in differentiable_inputs(&node.op) {
                if let Some(t) = node.inputs.get(i) {
                    reachable[t.index()] = true;
                }
            }
        }
        self.parameters().filter(|t| reachable[t.index()]).collect()
    }
}

/// Which inputs of an op a gradient can flow into.
fn differentiable_inputs(op: &Op) -> &'static [usize] {
    match op {
        Op::Linear | Op::Conv2d(_) | Op::BatchNorm2d(_) | Op::QConv2d(_) | Op::QLinear(_) => {
            &[0, 1, 2]
        }
        Op::Add | Op::QAdd(_) => &[0, 1],
        Op::Quantize(_)
        | Op::Dequantize(_)
        | Op::QMaxPool2d(_)
        | Op::QAvgPool2d(..)
        | Op::QGlobalAvgPool
        | Op::RoundWeights { .. }
        | Op::RoundBias { .. } => &[0],
        Op::Relu
        | Op::Relu6
        | Op::MaxPool2d(_)
        | Op::AvgPool2d(_)
        | Op::GlobalAvgPool
        | Op::Dropout(_)
        | Op::Reshape
        | Op::Softmax
        | Op::CrossEntropy
        | Op::Mse
        | Op::Cast => &[0],
        // Detach stops gradients; backward ops and training plumbing are not differentiated
        // again (no double backward).
        _ => &[],
    }
}

/// `wants[t]`: the gradient of `t` is needed, i.e. `t` lies on a path from a trainable
/// tensor to the loss.
fn wanted_gradients(graph: &Graph, loss: TensorId, trainable: &[TensorId]) -> Vec<bool> {
    let n = graph.tensors().len();
    let mut depends_on_trainable = vec![false; n];
    for &p in trainable {
        depends_on_trainable[p.index()] = true;
    }
    for node in graph.nodes() {
        let flows = differentiable_inputs(&node.op)
            .iter()
            .filter_map(|&i| node.inputs.get(i))
            .any(|t| depends_on_trainable[t.index()]);
        if flows {
            for o in &node.outputs {
                depends_on_trainable[o.index()] = true;
            }
        }
    }
    let mut reaches_loss = vec![false; n];
    reaches_loss[loss.index()] = true;
    for node in graph.nodes().iter().rev() {
        if node.outputs.iter().any(|o| reaches_loss[o.index()]) {
            for &i in differentiable_inputs(&node.op) {
                if let Some(t) = node.inputs.get(i) {
                    reaches_loss[t.index()] = true;
                }
            }
        }
    }
    (0..n).map(|i| depends_on_trainable[i] && reaches_loss[i]).collect()
}

/// The gradient of `x`: its single contribution, or the sum of several (fan-out). Sums are
/// taken in f32: the gradients of an f16 tensor are widened, added and narrowed again.
fn sum_contributions(
    graph: &mut Graph,
    x: TensorId,
    contributions: Vec<TensorId>,
) -> Result<TensorId, GraphError> {
    if contributions.len() == 1 {
        return Ok(contributions[0]);
    }
    let name = graph.tensor(x).name.clone();
    let half = graph.tensor(x).dtype == DType::F16;
    let mut wide = Vec::with_capacity(contributions.len());
    for c in contributions {
        wide.push(if half { widen(graph, c)? } else { c });
    }
    let mut iter = wide.into_iter();
    let mut total = iter.next().expect("callers pass at least one contribution");
    for c in iter {
        let spec = OutputSpec::f32(format!("{name}.grad"), graph.shape(x), Role::Gradient);
        let sum = format!("{name}.grad_sum");
        total = graph.record(
            &sum,
            Op::Add,
            vec![total, c],
            Vec::new(),
            vec![spec],
            Phase::MicroBatch,
        )?[0];
    }
    if half {
        total = backward(graph, &format!("{name}.grad_narrow"), Op::Cast, vec![total], x)?;
    }
    Ok(total)
}

/// An f32 copy of the f16 gradient `g`.
fn widen(graph: &mut Graph, g: TensorId) -> Result<TensorId, GraphError> {
    let t = graph.tensor(g);
    let spec = OutputSpec::f32(format!("{}.wide", t.name), t.shape, Role::Gradient);
    let name = format!("{}.widen", t.name);
    Ok(graph.record(&name, Op::Cast, vec![g], Vec::new(), vec![spec], Phase::MicroBatch)?[0])
}

/// The gradient of `like`: same shape and element type.
/// A gradient keeps an f16 tensor's storage type; every other gradient is f32 (an int8
/// tensor's gradient is real-valued).
fn grad_spec(graph: &Graph, like: TensorId) -> OutputSpec {
    let t = graph.tensor(like);
    let dtype = if t.dtype == DType::F16 { DType::F16 } else { DType::F32 };
    OutputSpec { name: format!("{}.grad", t.name), shape: t.shape, dtype, role: Role::Gradient }
}

/// Records one backward node producing a gradient shaped like `like`.
fn backward(
    graph: &mut Graph,
    name: &str,
    op: Op,
    inputs: Vec<TensorId>,
    like: TensorId,
) -> Result<TensorId, GraphError> {
    let spec = grad_spec(graph, like);
    Ok(graph.record(name, op, inputs, Vec::new(), vec![spec], Phase::MicroBatch)?[0])
}

/// Rules of ops whose gradient flows into their first input only: the backward op and its
/// operands.
fn first_input_rule(node: &Node, dy: TensorId) -> Option<(Op, Vec<TensorId>)> {
    let (x, y) = (node.inputs[0], node.outputs[0]);
    Some(match node.op {
        Op::Relu => (Op::ReluGrad, vec![y, dy]),
        Op::Relu6 => (Op::Relu6Grad, vec![y, dy]),
        Op::MaxPool2d(p) => (Op::MaxPool2dGrad(p), vec![x, dy]),
        Op::AvgPool2d(p) => (Op::AvgPool2dGrad(p), vec![dy]),
        Op::GlobalAvgPool => (Op::GlobalAvgPoolGrad, vec![dy]),
        Op::Dropout(cfg) => (Op::DropoutGrad(cfg), vec![dy]),
        // Reshaping the gradient back is itself a reshape.
        Op::Reshape => (Op::Reshape, vec![dy]),
        Op::Softmax => (Op::SoftmaxGrad, vec![y, dy]),
        Op::CrossEntropy => (Op::CrossEntropyGrad, vec![x, node.inputs[1], dy]),
        // The target of a mean squared error is a constant.
        Op::Mse => (Op::MseGrad, vec![x, node.inputs[1], dy]),
        Op::QAvgPool2d(p, _) => (Op::AvgPool2dGrad(p), vec![dy]),
        Op::QGlobalAvgPool => (Op::GlobalAvgPoolGrad, vec![dy]),
        // The gradient goes back to the input's type: a cast the other way.
        Op::Cast => (Op::Cast, vec![dy]),
        _ => return None,
    })
}

/// One node as its vector-Jacobian product sees it: which inputs want a gradient, and the
/// names of the backward nodes it adds.
struct NodeGrads<'n> {
    node: &'n Node,
    wants: &'n [bool],
}

impl NodeGrads<'_> {
    /// Input `i`, when its gradient is wanted.
    fn want(&self, i: usize) -> Option<TensorId> {
        self.node.inputs.get(i).copied().filter(|t| self.wants[t.index()])
    }

    /// `NODE.what`: the name of a backward node of this node.
    fn name(&self, what: &str) -> String {
        format!("{}.{what}", self.node.name)
    }
}

/// The vector-Jacobian product of one node: gradient contributions for its inputs.
fn vjp(
    graph: &mut Graph,
    node: &Node,
    dy: TensorId,
    wants: &[bool],
) -> Result<Vec<(TensorId, TensorId)>, GraphError> {
    let g = NodeGrads { node, wants };
    let mut out = Vec::new();
    if let Some((op, inputs)) = first_input_rule(node, dy) {
        if let Some(x) = g.want(0) {
            out.push((x, backward(graph, &g.name("grad"), op, inputs, x)?));
        }
        return Ok(out);
    }
    match node.op {
        Op::Linear | Op::Conv2d(_) => {
            let (grad_input, grad_weight) = match node.op {
                Op::Conv2d(p) => (Op::Conv2dGradInput(p), Op::Conv2dGradWeight(p)),
                _ => (Op::LinearGradInput, Op::LinearGradWeight),
            };
            let (x, w) = (node.inputs[0], node.inputs[1]);
            if g.want(0).is_some() {
                out.push((x, backward(graph, &g.name("grad_input"), grad_input, vec![dy, w], x)?));
            }
            if g.want(1).is_some() {
                out.push((
                    w,
                    backward(graph, &g.name("grad_weight"), grad_weight, vec![dy, x], w)?,
                ));
            }
            if let Some(b) = g.want(2) {
                out.push((b, backward(graph, &g.name("grad_bias"), Op::BiasGrad, vec![dy], b)?));
            }
        }
        Op::Add => {
            // The gradient passes unchanged to both operands; no copy is made.
            out.extend([g.want(0), g.want(1)].into_iter().flatten().map(|t| (t, dy)));
        }
        Op::BatchNorm2d(_) => {
            let (x, gamma, beta) = (node.inputs[0], node.inputs[1], node.inputs[2]);
            let (mean, invstd) = (node.outputs[1], node.outputs[2]);
            if g.want(0).is_some() {
                let inputs = vec![dy, x, gamma, mean, invstd];
                let op = Op::BatchNormGradInput;
                out.push((x, backward(graph, &g.name("grad_input"), op, inputs, x)?));
            }
            if g.want(1).is_some() || g.want(2).is_some() {
                // One kernel yields both; a frozen one of the pair costs C floats.
                let specs = vec![grad_spec(graph, gamma), grad_spec(graph, beta)];
                let inputs = vec![dy, x, mean, invstd];
                let ids = graph.record(
                    &g.name("grad_params"),
                    Op::BatchNormGradParams,
                    inputs,
                    Vec::new(),
                    specs,
                    Phase::MicroBatch,
                )?;
                let pairs = [(g.want(1), ids[0]), (g.want(2), ids[1])];
                out.extend(pairs.into_iter().filter_map(|(t, g)| t.map(|t| (t, g))));
            }
        }
        // Straight-through: (de)quantization passes the gradient unchanged.
        Op::Quantize(_) | Op::Dequantize(_) => out.extend(g.want(0).map(|x| (x, dy))),
        Op::RoundWeights { qas } | Op::RoundBias { qas, .. } => {
            if let Some(x) = g.want(0) {
                let grad = if qas {
                    let unit = match node.op {
                        Op::RoundBias { input_scale, .. } => input_scale,
                        _ => 1.0,
                    };
                    let op = Op::ChannelScale { unit, power: -2 };
                    backward(graph, &g.name("qas"), op, vec![dy, node.inputs[1]], x)?
                } else {
                    dy
                };
                out.push((x, grad));
            }
        }
        Op::QMaxPool2d(p) => {
            if let Some(x) = g.want(0) {
                // Any increasing map of the codes finds the same maxima.
                let codes = scratch(graph, &g.name("codes"), Op::Dequantize(UNIT), vec![x], x)?;
                let op = Op::MaxPool2dGrad(p);
                out.push((x, backward(graph, &g.name("grad"), op, vec![codes, dy], x)?));
            }
        }
        Op::QAdd(q) => {
            let dy = backward(
                graph,
                &g.name("clamp_grad"),
                Op::QClampGrad(q.act),
                vec![node.outputs[0], dy],
                node.outputs[0],
            )?;
            out.extend([g.want(0), g.want(1)].into_iter().flatten().map(|t| (t, dy)));
        }
        Op::QConv2d(_) | Op::QLinear(_) => out = int8_layer_vjp(graph, &g, dy)?,
        // Detach, backward ops and training plumbing pass no gradient.
        _ => {}
    }
    Ok(out)
}

/// Parameters that read int8 codes as their integer values.
const UNIT: QuantParams = QuantParams { scale: 1.0, zero_point: 0 };

/// Records a backward-pass intermediate that is not a gradient (a dequantized operand).
fn scratch(
    graph: &mut Graph,
    name: &str,
    op: Op,
    inputs: Vec<TensorId>,
    like: TensorId,
) -> Result<TensorId, GraphError> {
    let spec = OutputSpec::f32(name.into(), graph.shape(like), Role::Activation);
    Ok(graph.record(name, op, inputs, Vec::new(), vec![spec], Phase::MicroBatch)?[0])
}

/// The gradients of an int8 convolution or dense layer, in real units for its input and
/// in integer units (`∂L/∂q`) for its weight and bias: the output gradient is first
/// stopped where the fused clamp saturated, then the float backward kernels run on
/// dequantized operands.
fn int8_layer_vjp(
    graph: &mut Graph,
    g: &NodeGrads<'_>,
    dy: TensorId,
) -> Result<Vec<(TensorId, TensorId)>, GraphError> {
    let node = g.node;
    let (x, w, bias, w_scale, y) =
        (node.inputs[0], node.inputs[1], node.inputs[2], node.inputs[4], node.outputs[0]);
    let (input, act, grads) = match node.op {
        Op::QConv2d(q) => {
            (q.input, q.act, (Op::Conv2dGradInput(q.conv), Op::Conv2dGradWeight(q.conv)))
        }
        Op::QLinear(q) => (q.input, q.act, (Op::LinearGradInput, Op::LinearGradWeight)),
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    let dy = backward(graph, &g.name("clamp_grad"), Op::QClampGrad(act), vec![y, dy], y)?;
    if g.want(0).is_some() {
        let op = Op::DequantizeWeights;
        let w_real = scratch(graph, &g.name("weight_real"), op, vec![w, w_scale], w)?;
        out.push((x, backward(graph, &g.name("grad_input"), grads.0, vec![dy, w_real], x)?));
    }
    if g.want(1).is_some() {
        let x_real = scratch(graph, &g.name("input_real"), Op::Dequantize(input), vec![x], x)?;
        let real = backward(graph, &g.name("grad_weight_real"), grads.1, vec![dy, x_real], w)?;
        let op = Op::ChannelScale { unit: 1.0, power: 1 };
        out.push((w, backward(graph, &g.name("grad_weight"), op, vec![real, w_scale], w)?));
    }
    if g.want(2).is_some() {
        let real = backward(graph, &g.name("grad_bias_real"), Op::BiasGrad, vec![dy], bias)?;
        let op = Op::ChannelScale { unit: input.scale, power: 1 };
        out.push((bias, backward(graph, &g.name("grad_bias"), op, vec![real, w_scale], bias)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Init;
    use crate::shape::Shape;

    /// `loss = mse(x · wᵀ, t)` with one parameter `w`.
    fn tiny() -> (Graph, TensorId, TensorId) {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(2, 3)).unwrap();
        let w = g.parameter("w", Shape::d2(1, 3), Init::Constant(0.5)).unwrap();
        let t = g.target("t", Shape::d2(2, 1)).unwrap();
        let y = g.linear("fc", x, w, None).unwrap();
        let loss = g.mse("loss", y, t).unwrap();
        (g, loss, w)
    }

    #[test]
    fn a_parameter_listed_twice_is_refused() {
        let (g, loss, w) = tiny();
        let err = differentiate(&g, loss, &[w, w]).err().expect("duplicate must fail");
        assert!(
            matches!(err, GraphError::Invalid { op: "differentiate", ref node, .. } if node == "w")
        );
    }

    #[test]
    fn the_model_graph_is_left_untouched() {
        let (g, loss, w) = tiny();
        let d = differentiate(&g, loss, &[w]).unwrap();
        assert_eq!(g.tensor(w).role, Role::FrozenParam);
        assert_eq!(d.graph.tensor(w).role, Role::TrainableParam);
        assert!(d.graph.nodes().len() > g.nodes().len());
        // Only the weight's gradient is built: no gradient for the input x.
        let kinds: Vec<&str> =
            d.graph.nodes()[g.nodes().len()..].iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds, ["fill", "mse_grad", "linear_grad_weight"]);
    }
}
