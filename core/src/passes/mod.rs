//! Compiler passes between `differentiate` and placement that shape the training step:
//! updating parameters early, masking int8 clamps early, fusing int8 depthwise chains in the
//! backward pass, and recomputing activations to fit a memory budget.

pub(crate) mod chains;
pub(crate) mod checkpoint;
pub(crate) mod masks;
pub(crate) mod reorder;
