//! The context an op's lowering rule reads: [`Lowering`], one node's operand shapes and the
//! mode (batch statistics or running ones, dropout on or off), and shape-to-dims helpers.

use crate::geometry::{ChannelDims, RowDims};
use crate::graph::{Graph, Node};
use crate::kernel::KernelCall;
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec::Vec;

/// Whether a plan trains (batch statistics, dropout on) or evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Train,
    Eval,
    /// Training whose batch norms normalise with their running statistics, which stay as
    /// they are (PyTorch: the batch-norm layers of a training model put in `eval()` mode).
    /// Gradients flow through them and their scale and shift still train; dropout is on.
    TrainRunningStats,
}

/// A kernel and its operands in signature order.
pub(crate) type Lowered = (KernelCall, Vec<TensorId>);

/// One node as its lowering rule sees it.
pub(crate) struct Lowering<'a> {
    graph: &'a Graph,
    pub node: &'a Node,
    pub mode: Mode,
}

impl<'a> Lowering<'a> {
    /// The context of `node` in `graph`, lowered for `mode`.
    pub(crate) fn new(graph: &'a Graph, node: &'a Node, mode: Mode) -> Self {
        Self { graph, node, mode }
    }

    /// The shape of input `i`.
    pub fn input(&self, i: usize) -> Shape {
        self.graph.shape(self.node.inputs[i])
    }

    /// The element type of input `i`.
    pub fn input_dtype(&self, i: usize) -> DType {
        self.graph.tensor(self.node.inputs[i]).dtype
    }

    /// The shape of state tensor `i`.
    pub fn state(&self, i: usize) -> Shape {
        self.graph.shape(self.node.state[i])
    }

    /// The shape of output `i`.
    pub fn output(&self, i: usize) -> Shape {
        self.graph.shape(self.node.outputs[i])
    }

    /// The number of elements of the first output.
    pub fn numel(&self) -> usize {
        self.output(0).numel()
    }

    /// `kernel` over every operand of the node: inputs, state, then outputs.
    pub fn all(&self, kernel: KernelCall) -> Lowered {
        let node = self.node;
        (kernel, node.inputs.iter().chain(&node.state).chain(&node.outputs).copied().collect())
    }
}

/// Dimension `axis` of `s`, or 0 when `s` has fewer axes: a node decoded from a file is
/// lowered before its kernel's checks reject such a shape, and lowering must not panic.
pub(crate) fn dim(s: Shape, axis: usize) -> usize {
    s.dim(axis).unwrap_or(0)
}

/// `[N, C, rest...]` seen as outer N, channels C, inner the product of the rest.
pub(crate) fn channel_dims(s: Shape) -> ChannelDims {
    let inner = s.dims().get(2..).map_or(0, |rest| rest.iter().product());
    ChannelDims { outer: dim(s, 0), channels: dim(s, 1), inner }
}

/// `[O, rest...]` seen as O channels of the product of the rest (a weight's output
/// channels).
pub(crate) fn leading_channel_dims(s: Shape) -> ChannelDims {
    let inner = s.dims().get(1..).map_or(0, |rest| rest.iter().product());
    ChannelDims { outer: 1, channels: dim(s, 0), inner }
}

pub(crate) fn row_dims(s: Shape) -> RowDims {
    RowDims { rows: dim(s, 0), cols: dim(s, 1) }
}
