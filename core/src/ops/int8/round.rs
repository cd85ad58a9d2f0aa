//! Trainable int8 weights and int32 biases kept in integer units and rounded for the
//! forward pass, and the per-channel gradient scaling (quantization-aware scaling) of
//! their straight-through gradients.

use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::{ChannelScaleParams, RoundBiasParams, RoundWeightsParams};
use crate::ops::lowering::{leading_channel_dims, Lowered, Lowering};
use crate::ops::Vjp;
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::tensor::{DType, TensorId};
use alloc::vec;

pub(crate) struct RoundWeights;

impl OpRules for RoundWeights {
    type Params = RoundWeightsParams;
    const NAME: &'static str = "round_weights";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<RoundWeightsParams> =
        Gradient::Flows { inputs: &[0], vjp: |p, cx| rounded_vjp(cx, p.qas, 1.0) };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: RoundWeightsParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(_: RoundWeightsParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::RoundWeights(leading_channel_dims(cx.input(0))))
    }
}

pub(crate) struct RoundBias;

impl OpRules for RoundBias {
    type Params = RoundBiasParams;
    const NAME: &'static str = "round_bias";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<RoundBiasParams> =
        Gradient::Flows { inputs: &[0], vjp: |p, cx| rounded_vjp(cx, p.qas, p.input_scale) };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: RoundBiasParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(_: RoundBiasParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::RoundBias(cx.numel()))
    }
}

pub(crate) struct ChannelScale;

impl OpRules for ChannelScale {
    type Params = ChannelScaleParams;
    const NAME: &'static str = "channel_scale";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<ChannelScaleParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: ChannelScaleParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: ChannelScaleParams, cx: &Lowering<'_>) -> Lowered {
        let dims = leading_channel_dims(cx.input(0));
        cx.all(KernelCall::ChannelScale { dims, unit: p.unit, power: p.power })
    }
}

/// The straight-through gradient of a rounded weight or bias, scaled by
/// `(unit · w_scale)⁻²` with quantization-aware scaling (`qas`).
fn rounded_vjp(cx: &mut Vjp<'_>, qas: bool, unit: f32) -> Result<(), GraphError> {
    if let Some(x) = cx.want(0) {
        let grad = if qas {
            let op = Op::ChannelScale(ChannelScaleParams { unit, power: -2 });
            cx.backward("qas", op, vec![cx.dy, cx.input(1)], x)?
        } else {
            cx.dy
        };
        cx.contribute(x, grad);
    }
    Ok(())
}

impl Graph {
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
}
