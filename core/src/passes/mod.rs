//! Compiler passes between `differentiate` and placement that shape the training step:
//! updating parameters early, and recomputing activations to fit a memory budget.

pub(crate) mod checkpoint;
pub(crate) mod reorder;
