//! Int8 ops in TFLite's scheme (see [`crate::quant`]): (de)quantization, the int8 layers,
//! residual add and pooling, and the rounding of trainable int8 weights and biases with
//! their quantization-aware gradient scaling.

pub(super) mod add;
pub(super) mod layer;
pub(super) mod pool;
pub(super) mod quantize;
pub(super) mod round;

pub use add::QAddParams;
pub use layer::{QConvParams, QLinearParams};
pub use pool::QAvgPoolParams;
pub use round::{ChannelScaleParams, RoundBiasParams, RoundWeightsParams};
