//! Int8 ops in TFLite's scheme (see [`crate::quant`]): (de)quantization, the int8 layers,
//! residual add, products, concatenation, look-up-table activations and pooling, the clamp
//! gradient through a bit mask, a depthwise layer's backward pass fused with the layer's
//! before it, and the rounding of trainable int8 weights and biases with
//! their quantization-aware gradient scaling.

pub(super) mod add;
pub(super) mod chain;
pub(super) mod concat;
pub(super) mod layer;
pub(super) mod lut;
pub(super) mod mask;
pub(super) mod mul;
pub(super) mod pool;
pub(super) mod quantize;
pub(super) mod round;

pub use layer::Int8Weights;

use crate::builder::invalid;
use crate::graph::{Graph, GraphError};
use crate::ops::Op;
use crate::tensor::{DType, TensorId};
use alloc::format;

impl Graph {
    fn check_per_channel(
        &self,
        op: Op,
        name: &str,
        t: TensorId,
        dtype: DType,
        channels: usize,
    ) -> Result<(), GraphError> {
        let s = self.typed_rank(op, name, t, dtype, 1)?;
        if s.dims()[0] != channels {
            let detail = format!(
                "'{}' must hold one value per output channel ({channels}), it has {}",
                self.tensor(t).name,
                s.dims()[0]
            );
            return Err(invalid(op, name, detail));
        }
        Ok(())
    }
}
