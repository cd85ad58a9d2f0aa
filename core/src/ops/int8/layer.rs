//! The int8 convolution and dense layer: requantized output with a fused clamp, and a
//! backward pass that runs the float backward kernels on dequantized operands.

use crate::builder::mismatch;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::{ChannelScaleParams, ConvParams, QConvParams, QLinearParams};
use crate::ops::conv2d::conv_geometry;
use crate::ops::linear::{grad_input_dims, linear_dims};
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::Vjp;
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::quant::QuantParams;
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec;
use alloc::vec::Vec;

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

pub(crate) struct QConv2d;

impl OpRules for QConv2d {
    type Params = QConvParams;
    const NAME: &'static str = "qconv2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(5, 0, 1);
    const GRADIENT: Gradient<QConvParams> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |q, cx| {
            let grads = (Op::QConv2dGradInput(q.conv), Op::Conv2dGradWeight(q.conv), Op::BiasGrad);
            int8_layer_vjp(cx, q.input, q.act, grads)
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QConvParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(q: QConvParams, cx: &Lowering<'_>) -> Lowered {
        let kernel = KernelCall::QConv2d {
            geometry: conv_geometry(cx.input(0), cx.input(1), cx.output(0), q.conv),
            input_zero_point: q.input.zero_point,
            output_zero_point: q.output.zero_point,
            act: q.act,
        };
        (kernel, without_weight_scales(cx))
    }
}

pub(crate) struct QLinear;

impl OpRules for QLinear {
    type Params = QLinearParams;
    const NAME: &'static str = "qlinear";
    const OPERANDS: OperandCounts = OperandCounts::exactly(5, 0, 1);
    const GRADIENT: Gradient<QLinearParams> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |q, cx| {
            let rows = cx.shape(cx.input(0)).rank() > 2;
            let bias = if rows { Op::RowBiasGrad } else { Op::BiasGrad };
            let grads = (Op::QLinearGradInput, Op::LinearGradWeight, bias);
            int8_layer_vjp(cx, q.input, q.act, grads)
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QLinearParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(q: QLinearParams, cx: &Lowering<'_>) -> Lowered {
        let kernel = KernelCall::QLinear {
            dims: linear_dims(cx.input(0), cx.input(1)),
            input_zero_point: q.input.zero_point,
            output_zero_point: q.output.zero_point,
            act: q.act,
        };
        (kernel, without_weight_scales(cx))
    }
}

/// An int8 layer's operands without its weight scales (input 4), which only its backward
/// pass reads.
fn without_weight_scales(cx: &Lowering<'_>) -> Vec<crate::tensor::TensorId> {
    cx.node.inputs.iter().take(4).chain(&cx.node.outputs).copied().collect()
}

/// The gradients of an int8 convolution or dense layer, in real units for its input and
/// in integer units (`∂L/∂q`) for its weight and bias: the output gradient is first
/// stopped where the fused clamp saturated, then the float backward kernels `grads`
/// (input, weight, bias) run on dequantized operands.
/// A convolution's input gradient through its int8 weights and their scales.
pub(crate) struct QConv2dGradInput;

impl OpRules for QConv2dGradInput {
    type Params = ConvParams;
    const NAME: &'static str = "qconv2d_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<ConvParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: ConvParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: ConvParams, cx: &Lowering<'_>) -> Lowered {
        let geometry = conv_geometry(cx.output(0), cx.input(1), cx.input(0), p);
        cx.all(KernelCall::QConv2dGradInput(geometry))
    }
}

/// A dense layer's input gradient through its int8 weights and their scales.
pub(crate) struct QLinearGradInput;

impl OpRules for QLinearGradInput {
    type Params = ();
    const NAME: &'static str = "qlinear_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QLinearGradInput(grad_input_dims(cx)))
    }
}

fn int8_layer_vjp(
    cx: &mut Vjp<'_>,
    input: QuantParams,
    act: (i8, i8),
    grads: (Op, Op, Op),
) -> Result<(), GraphError> {
    let (x, w, bias, w_scale, y) =
        (cx.input(0), cx.input(1), cx.input(2), cx.input(4), cx.output(0));
    let dy = cx.backward("clamp_grad", Op::QClampGrad(act), vec![y, cx.dy], y)?;
    if cx.want(0).is_some() {
        // Through the int8 weights themselves: a frozen layer's backward needs no f32 copy.
        let grad = cx.backward("grad_input", grads.0, vec![dy, w, w_scale], x)?;
        cx.contribute(x, grad);
    }
    if cx.want(1).is_some() {
        let x_real = cx.scratch("input_real", Op::Dequantize(input), vec![x], x)?;
        let real = cx.backward("grad_weight_real", grads.1, vec![dy, x_real], w)?;
        let op = Op::ChannelScale(ChannelScaleParams { unit: 1.0, power: 1 });
        let grad = cx.backward("grad_weight", op, vec![real, w_scale], w)?;
        cx.contribute(w, grad);
    }
    if cx.want(2).is_some() {
        let real = cx.backward("grad_bias_real", grads.2, vec![dy], bias)?;
        let op = Op::ChannelScale(ChannelScaleParams { unit: input.scale, power: 1 });
        let grad = cx.backward("grad_bias", op, vec![real, w_scale], bias)?;
        cx.contribute(bias, grad);
    }
    Ok(())
}

impl Graph {
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

    /// An int8 dense layer `x[N, ..., K] · w[M, K]ᵀ + b` with requantized output and fused clamp.
    pub fn qlinear(
        &mut self,
        name: &str,
        x: TensorId,
        weights: Int8Weights,
        params: QLinearParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QLinear(params);
        let shape = self.linear_shape(op, name, x, weights.weight, DType::I8)?;
        self.check_int8_weights(op, name, weights, self.shape(weights.weight).dims()[0])?;
        self.record_int8_layer(name, op, x, weights, shape)
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
}
