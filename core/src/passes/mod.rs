//! Compiler passes between `differentiate` and placement that shape the training step:
//! updating parameters early, masking int8 clamps early, and recomputing activations to fit
//! a memory budget.

pub(crate) mod checkpoint;
pub(crate) mod masks;
pub(crate) mod reorder;
