//! Lowering: one graph node to one plan kernel. The driver here hands each node to its op's
//! lowering rule (see [`crate::ops`]) through a [`Lowering`] context.

use crate::graph::{Graph, Node};
use crate::ops::{Lowered, Lowering};

pub use crate::ops::Mode;

/// The kernel for `node` and its operands in signature order.
pub(crate) fn lower(graph: &Graph, node: &Node, mode: Mode) -> Lowered {
    node.op.lower(&Lowering::new(graph, node, mode))
}
