//! Compile-time autograd: `differentiate` appends backward nodes to a copy of the graph, one
//! vector-Jacobian rule per op, building only gradients that some trainable tensor needs.

use crate::builder::OutputSpec;
use crate::graph::{Graph, GraphError, Node, Phase, Stage};
use crate::ops::{grad_spec, Op, Vjp};
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
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
    graph.observer = None;
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
        let mut cx = Vjp::new(&mut graph, node, dy, &wants);
        node.op.vjp(&mut cx)?;
        for (input, grad) in cx.into_grads() {
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
            for &i in node.op.differentiable_inputs() {
                if let Some(t) = node.inputs.get(i) {
                    reachable[t.index()] = true;
                }
            }
        }
        self.parameters().filter(|t| reachable[t.index()]).collect()
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
        let flows = node
            .op
            .differentiable_inputs()
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
            for &i in node.op.differentiable_inputs() {
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
