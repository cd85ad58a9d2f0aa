//! Recording int8 ops: one method per quantized op on [`Graph`], checking element types and
//! shapes like the float builder does, plus the leaves that hold quantized weights.

use super::params::QuantParams;
use crate::builder::{invalid, mismatch};
use crate::graph::{Graph, GraphError, Init};
use crate::ops::{
    Op, PoolParams, QAddParams, QAvgPoolParams, QConvParams, QLinearParams, RoundBiasParams,
    RoundWeightsParams,
};
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
use alloc::vec;

/// The tensors of one int8 convolution or dense layer besides its input.
#[derive(Clone, Copy, Debug)]
pub struct Int8Weights {
    /// `i8` weights (a frozen parameter, or the output of [`Graph::round_weights`]).
    pub weight: TensorId,
    /// `i32 [O]` bias in units of `input_scale · weight_scale[o]`.
    pub bias: TensorId,
    /// `i32 [O, 2]`: each output channel's requantization multiplier and shift.
    pub requant: TensorId,
    /// `f32 [O]`: each output channel's weight scale.
    pub weight_scale: TensorId,
}

impl Graph {
    /// A frozen integer parameter (`I8` weights, `I32` biases and multipliers) with exact
    /// values.
    pub fn int_parameter(
        &mut self,
        name: &str,
        shape: Shape,
        dtype: DType,
        values: alloc::vec::Vec<i32>,
    ) -> Result<TensorId, GraphError> {
        let init = Init::Ints(values);
        self.check_init(name, shape, &init)?;
        self.leaf(name, shape, dtype, Role::FrozenParam, Some(init))
    }

    /// `f32 → i8` with `p`.
    pub fn quantize(
        &mut self,
        name: &str,
        x: TensorId,
        p: QuantParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Quantize(p);
        let shape = self.typed(op, name, x, DType::F32)?;
        self.record_as(name, op, vec![x], shape, DType::I8)
    }

    /// `i8 → f32` with `p`.
    pub fn dequantize(
        &mut self,
        name: &str,
        x: TensorId,
        p: QuantParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Dequantize(p);
        let shape = self.typed(op, name, x, DType::I8)?;
        self.record_as(name, op, vec![x], shape, DType::F32)
    }

    /// An int8 convolution with requantized output and fused clamp.
    pub fn qconv2d(
        &mut self,
        name: &str,
        x: TensorId,
        weights: Int8Weights,
        params: QConvParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QConv2d(params);
        let shape = self.conv_shape(op, name, x, weights.weight, params.conv, DType::I8)?;
        self.check_int8_weights(op, name, weights, shape.dims()[1])?;
        self.record_int8_layer(name, op, x, weights, shape)
    }

    /// An int8 dense layer `x[N, K] · w[M, K]ᵀ + b` with requantized output and fused clamp.
    pub fn qlinear(
        &mut self,
        name: &str,
        x: TensorId,
        weights: Int8Weights,
        params: QLinearParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QLinear(params);
        let shape = self.linear_shape(op, name, x, weights.weight, DType::I8)?;
        self.check_int8_weights(op, name, weights, shape.dims()[1])?;
        self.record_int8_layer(name, op, x, weights, shape)
    }

    /// An int8 element-wise sum of two tensors of the same shape.
    pub fn qadd(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
        params: QAddParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QAdd(params);
        let (sa, sb) = (self.typed(op, name, a, DType::I8)?, self.typed(op, name, b, DType::I8)?);
        if sa != sb {
            return Err(mismatch(op, name, "operands must have the same shape", sa, sb));
        }
        self.record_as(name, op, vec![a, b], sa, DType::I8)
    }

    /// Int8 max pooling; the output keeps the input's quantization.
    pub fn qmax_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QMaxPool2d(p);
        let shape = self.pool_shape(name, op, x, p, DType::I8)?;
        self.record_as(name, op, vec![x], shape, DType::I8)
    }

    /// Int8 average pooling of an input with zero point `zero_point`; the output keeps the
    /// input's quantization.
    pub fn qavg_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
        zero_point: i32,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QAvgPool2d(QAvgPoolParams { pool: p, zero_point });
        let shape = self.pool_shape(name, op, x, p, DType::I8)?;
        self.record_as(name, op, vec![x], shape, DType::I8)
    }

    /// Int8 mean over H and W: `[N, C, H, W] → [N, C]`, same quantization.
    pub fn qglobal_avg_pool(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let op = Op::QGlobalAvgPool;
        let s = self.typed_rank(op, name, x, DType::I8, 4)?;
        self.record_as(name, op, vec![x], Shape::d2(s.dims()[0], s.dims()[1]), DType::I8)
    }

    /// Rounds a trainable weight kept in integer units (`f32`) to the `i8` weight an int8
    /// layer reads; `qas` scales its gradient by `weight_scale⁻²`.
    pub fn round_weights(
        &mut self,
        name: &str,
        w_bar: TensorId,
        weight_scale: TensorId,
        qas: bool,
    ) -> Result<TensorId, GraphError> {
        let op = Op::RoundWeights(RoundWeightsParams { qas });
        let shape = self.typed(op, name, w_bar, DType::F32)?;
        self.check_per_channel(op, name, weight_scale, DType::F32, shape.dim(0).unwrap_or(0))?;
        self.record_as(name, op, vec![w_bar, weight_scale], shape, DType::I8)
    }

    /// Rounds a trainable bias kept in units of `input_scale · weight_scale` to `i32`; `qas`
    /// scales its gradient by `(input_scale · weight_scale)⁻²`.
    pub fn round_bias(
        &mut self,
        name: &str,
        b_bar: TensorId,
        weight_scale: TensorId,
        input_scale: f32,
        qas: bool,
    ) -> Result<TensorId, GraphError> {
        let op = Op::RoundBias(RoundBiasParams { input_scale, qas });
        let shape = self.typed_rank(op, name, b_bar, DType::F32, 1)?;
        self.check_per_channel(op, name, weight_scale, DType::F32, shape.dims()[0])?;
        self.record_as(name, op, vec![b_bar, weight_scale], shape, DType::I32)
    }

    fn record_int8_layer(
        &mut self,
        name: &str,
        op: Op,
        x: TensorId,
        w: Int8Weights,
        shape: Shape,
    ) -> Result<TensorId, GraphError> {
        let inputs = vec![x, w.weight, w.bias, w.requant, w.weight_scale];
        self.record_as(name, op, inputs, shape, DType::I8)
    }

    fn check_int8_weights(
        &self,
        op: Op,
        name: &str,
        w: Int8Weights,
        channels: usize,
    ) -> Result<(), GraphError> {
        self.check_per_channel(op, name, w.bias, DType::I32, channels)?;
        self.check_per_channel(op, name, w.weight_scale, DType::F32, channels)?;
        let requant = self.typed(op, name, w.requant, DType::I32)?;
        if requant != Shape::d2(channels, 2) {
            return Err(mismatch(
                op,
                name,
                "requantization pairs must be [channels, 2]",
                Shape::d2(channels, 2),
                requant,
            ));
        }
        Ok(())
    }

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
