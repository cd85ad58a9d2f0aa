//! The context an op's gradient rule records into: [`Vjp`], one node's view of the graph
//! being differentiated, and the gradient spec every backward node's output follows.

use crate::builder::OutputSpec;
use crate::graph::{Graph, GraphError, Node, Phase};
use crate::op::Op;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// The gradient of `like`: same shape and element type.
/// A gradient keeps an f16 tensor's storage type; every other gradient is f32 (an int8
/// tensor's gradient is real-valued).
pub(crate) fn grad_spec(graph: &Graph, like: TensorId) -> OutputSpec {
    let t = graph.tensor(like);
    let dtype = if t.dtype == DType::F16 { DType::F16 } else { DType::F32 };
    OutputSpec { name: format!("{}.grad", t.name), shape: t.shape, dtype, role: Role::Gradient }
}

/// One node as its vector-Jacobian product (see [`crate::ops::Gradient`]) sees it: the
/// gradient of its first output, which inputs want a gradient, and the contributions its
/// rule has recorded so far.
pub(crate) struct Vjp<'a> {
    graph: &'a mut Graph,
    node: &'a Node,
    /// The gradient of the node's first output.
    pub dy: TensorId,
    wants: &'a [bool],
    grads: Vec<(TensorId, TensorId)>,
}

impl<'a> Vjp<'a> {
    /// The context of `node` in `graph`, whose first output has gradient `dy`; `wants[t]`
    /// says whether tensor `t` needs a gradient.
    pub(crate) fn new(
        graph: &'a mut Graph,
        node: &'a Node,
        dy: TensorId,
        wants: &'a [bool],
    ) -> Self {
        Self { graph, node, dy, wants, grads: Vec::new() }
    }

    /// The `(input, gradient)` contributions the rule recorded.
    pub(crate) fn into_grads(self) -> Vec<(TensorId, TensorId)> {
        self.grads
    }

    /// Input `i` of the node.
    pub fn input(&self, i: usize) -> TensorId {
        self.node.inputs[i]
    }

    /// Output `i` of the node.
    pub fn output(&self, i: usize) -> TensorId {
        self.node.outputs[i]
    }

    /// The shape of tensor `t`.
    pub fn shape(&self, t: TensorId) -> Shape {
        self.graph.shape(t)
    }

    /// Input `i`, when its gradient is wanted.
    pub fn want(&self, i: usize) -> Option<TensorId> {
        self.node.inputs.get(i).copied().filter(|t| self.wants[t.index()])
    }

    /// Adds `grad` to the gradient of `input`.
    pub fn contribute(&mut self, input: TensorId, grad: TensorId) {
        self.grads.push((input, grad));
    }

    /// Passes `grad` unchanged to each of the inputs `inputs` that wants a gradient.
    pub fn pass(&mut self, inputs: &[usize], grad: TensorId) {
        for &i in inputs {
            if let Some(t) = self.want(i) {
                self.contribute(t, grad);
            }
        }
    }

    /// The rule of ops whose gradient flows into their first input only: one backward node
    /// `op` reading `inputs`, named `NODE.grad`, when that input wants a gradient.
    pub fn first_input(&mut self, op: Op, inputs: Vec<TensorId>) -> Result<(), GraphError> {
        if let Some(x) = self.want(0) {
            let grad = self.backward("grad", op, inputs, x)?;
            self.contribute(x, grad);
        }
        Ok(())
    }

    /// Records the backward node `NODE.what` producing a gradient shaped like `like`.
    pub fn backward(
        &mut self,
        what: &str,
        op: Op,
        inputs: Vec<TensorId>,
        like: TensorId,
    ) -> Result<TensorId, GraphError> {
        let spec = grad_spec(self.graph, like);
        Ok(self.record(what, op, inputs, vec![spec])?[0])
    }

    /// Records the backward node `NODE.what` producing gradients shaped like `likes`.
    pub fn backward_many(
        &mut self,
        what: &str,
        op: Op,
        inputs: Vec<TensorId>,
        likes: &[TensorId],
    ) -> Result<Vec<TensorId>, GraphError> {
        let specs = likes.iter().map(|&t| grad_spec(self.graph, t)).collect();
        self.record(what, op, inputs, specs)
    }

    /// Records a backward-pass intermediate `NODE.what` that is not a gradient (a
    /// dequantized operand), f32 and shaped like `like`.
    pub fn scratch(
        &mut self,
        what: &str,
        op: Op,
        inputs: Vec<TensorId>,
        like: TensorId,
    ) -> Result<TensorId, GraphError> {
        let spec = OutputSpec::f32(self.name(what), self.graph.shape(like), Role::Activation);
        Ok(self.record(what, op, inputs, vec![spec])?[0])
    }

    /// Records the node `NODE.what` of the backward pass.
    fn record(
        &mut self,
        what: &str,
        op: Op,
        inputs: Vec<TensorId>,
        outputs: Vec<OutputSpec>,
    ) -> Result<Vec<TensorId>, GraphError> {
        let name = self.name(what);
        self.graph.record(&name, op, inputs, Vec::new(), outputs, Phase::MicroBatch)
    }

    /// `NODE.what`: the name of a backward node of this node.
    fn name(&self, what: &str) -> String {
        format!("{}.{what}", self.node.name)
    }
}
