//! Int8 quantization in TensorFlow Lite's scheme: per-tensor asymmetric activations,
//! per-channel symmetric weights, fixed-point requantization and the int8 reference kernels.
//!
//! Models quantized elsewhere (TFLite, ONNX QDQ) map onto these types without conversion:
//! `real = scale · (q − zero_point)`, accumulators are `i32`, and every rescale is TFLite's
//! `MultiplyByQuantizedMultiplier`, so results are bit-exact with TFLite's reference kernels.

pub mod backward;
pub mod chain;
pub mod kernels;
pub mod params;
#[cfg(test)]
mod testing;

pub use kernels::{
    add_s8, avg_pool2d_s8, clamp_s8, concat_s8, conv2d_s8, dequantize_slice, global_avg_pool_s8,
    linear_s8, lut_s8, lut_table, max_pool2d_s8, mul_s8, quantize_slice, relu6_s8, relu_s8,
    AddRescale, ConcatRescale, MulRescale, OutputQuant, QConv2dArgs, QLayerArgs, QLinearArgs,
    Requantization, Rescale,
};
pub use params::{
    quantize_symmetric, quantize_weight, symmetric_scale, QuantError, QuantParams, Requantize,
    FULL_RANGE,
};
