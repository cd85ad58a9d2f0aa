//! Lowering: one graph node to one plan kernel, with geometry read off the operand shapes
//! and the behaviour of the mode (batch statistics or running ones, dropout on or off).

use crate::geometry::{ChannelDims, Conv2dGeometry, LinearDims, Pool2dGeometry, RowDims};
use crate::graph::{Graph, Node};
use crate::kernel::Kernel;
use crate::op::{ConvParams, Op, PoolParams};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec::Vec;

/// Whether a plan trains (batch statistics, dropout on) or evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Train,
    Eval,
}

/// The kernel for `node` and its operands in signature order.
pub(crate) fn lower(graph: &Graph, node: &Node, mode: Mode) -> (Kernel, Vec<TensorId>) {
    let shape = |id: TensorId| graph.shape(id);
    let input = |i: usize| shape(node.inputs[i]);
    let output = |i: usize| shape(node.outputs[i]);
    let numel = || output(0).numel();
    let all: Vec<TensorId> =
        node.inputs.iter().chain(&node.state).chain(&node.outputs).copied().collect();
    let kernel = match node.op {
        Op::Linear => {
            Kernel::Linear { dims: linear_dims(input(0), input(1)), bias: node.inputs.len() == 3 }
        }
        Op::LinearGradInput => {
            let (dy, w) = (input(0), input(1));
            Kernel::LinearGradInput(LinearDims { n: dim(dy, 0), k: dim(w, 1), m: dim(w, 0) })
        }
        Op::LinearGradWeight => Kernel::LinearGradWeight(linear_dims(input(1), output(0))),
        Op::BiasGrad => Kernel::BiasGrad(channel_dims(input(0))),
        Op::Conv2d(p) => Kernel::Conv2d {
            geometry: conv_geometry(input(0), input(1), output(0), p),
            bias: node.inputs.len() == 3,
        },
        Op::Conv2dGradInput(p) => {
            Kernel::Conv2dGradInput(conv_geometry(output(0), input(1), input(0), p))
        }
        Op::Conv2dGradWeight(p) => {
            Kernel::Conv2dGradWeight(conv_geometry(input(1), output(0), input(0), p))
        }
        Op::Relu => Kernel::Relu(numel()),
        Op::Relu6 => Kernel::Relu6(numel()),
        Op::ReluGrad => Kernel::ReluGrad(numel()),
        Op::Relu6Grad => Kernel::Relu6Grad(numel()),
        Op::MaxPool2d(p) => Kernel::MaxPool2d(pool_geometry(input(0), output(0), p)),
        Op::MaxPool2dGrad(p) => Kernel::MaxPool2dGrad(pool_geometry(input(0), input(1), p)),
        Op::AvgPool2d(p) => Kernel::AvgPool2d(pool_geometry(input(0), output(0), p)),
        Op::AvgPool2dGrad(p) => Kernel::AvgPool2dGrad(pool_geometry(output(0), input(0), p)),
        Op::GlobalAvgPool => Kernel::GlobalAvgPool(channel_dims(input(0))),
        Op::GlobalAvgPoolGrad => Kernel::GlobalAvgPoolGrad(channel_dims(output(0))),
        Op::Add => Kernel::Add(numel()),
        Op::Reshape | Op::Detach if graph.tensor(node.inputs[0]).dtype == DType::I8 => {
            Kernel::CopyI8(numel())
        }
        Op::Reshape | Op::Detach => Kernel::Copy(numel()),
        Op::BatchNorm2d(cfg) => match mode {
            Mode::Train => Kernel::BatchNormTrain(channel_dims(input(0)), cfg),
            Mode::Eval => {
                // Evaluation reads the running statistics and saves nothing for a backward pass.
                let operands = all[..all.len() - 2].to_vec();
                return (Kernel::BatchNormEval(channel_dims(input(0)), cfg), operands);
            }
        },
        Op::BatchNormApply => Kernel::BatchNormApply(channel_dims(input(0))),
        Op::BatchNormGradInput => Kernel::BatchNormGradInput(channel_dims(input(0))),
        Op::BatchNormGradParams => Kernel::BatchNormGradParams(channel_dims(input(0))),
        Op::Dropout(cfg) => match mode {
            Mode::Train => Kernel::Dropout(cfg, numel()),
            Mode::Eval => Kernel::Copy(numel()),
        },
        Op::DropoutGrad(cfg) => Kernel::DropoutGrad(cfg, numel()),
        Op::Softmax => Kernel::Softmax(row_dims(input(0))),
        Op::SoftmaxGrad => Kernel::SoftmaxGrad(row_dims(input(0))),
        Op::CrossEntropy => Kernel::CrossEntropy(row_dims(input(0))),
        Op::CrossEntropyGrad => Kernel::CrossEntropyGrad(row_dims(input(0))),
        Op::Mse => Kernel::Mse(input(0).numel()),
        Op::MseGrad => Kernel::MseGrad(numel()),
        Op::Fill(value) => Kernel::Fill(value, numel()),
        Op::Accumulate(scale) => Kernel::Accumulate(scale, input(0).numel()),
        Op::SumSquares => Kernel::SumSquares(input(0).numel()),
        Op::ClipCoefficient(max_norm) => Kernel::ClipCoefficient(max_norm),
        Op::SgdUpdate(cfg) => Kernel::SgdUpdate {
            cfg,
            len: input(0).numel(),
            clipped: node.inputs.len() == 2,
            momentum: node.state.len() == 2,
        },
        Op::AdamWUpdate(cfg) => {
            Kernel::AdamWUpdate { cfg, len: input(0).numel(), clipped: node.inputs.len() == 2 }
        }
        Op::Zero => Kernel::Zero(shape(node.state[0]).numel()),
        Op::Quantize(p) => Kernel::Quantize(p, numel()),
        Op::Dequantize(p) => Kernel::Dequantize(p, numel()),
        // The weight scales (input 4) serve the backward pass only.
        Op::QConv2d(q) => {
            let kernel = Kernel::QConv2d {
                geometry: conv_geometry(input(0), input(1), output(0), q.conv),
                input_zero_point: q.input.zero_point,
                output_zero_point: q.output.zero_point,
                act: q.act,
            };
            return (kernel, without_weight_scales(node));
        }
        Op::QLinear(q) => {
            let kernel = Kernel::QLinear {
                dims: linear_dims(input(0), input(1)),
                input_zero_point: q.input.zero_point,
                output_zero_point: q.output.zero_point,
                act: q.act,
            };
            return (kernel, without_weight_scales(node));
        }
        Op::QAdd(q) => Kernel::QAdd(q.rescale, q.act, numel()),
        Op::QMaxPool2d(p) => Kernel::QMaxPool2d(pool_geometry(input(0), output(0), p)),
        Op::QAvgPool2d(p, zp) => Kernel::QAvgPool2d(pool_geometry(input(0), output(0), p), zp),
        Op::QGlobalAvgPool => Kernel::QGlobalAvgPool(channel_dims(input(0))),
        Op::RoundWeights { .. } => Kernel::RoundWeights(leading_channel_dims(input(0))),
        Op::RoundBias { .. } => Kernel::RoundBias(numel()),
        Op::QClampGrad(act) => Kernel::QClampGrad(act, numel()),
        Op::DequantizeWeights => Kernel::DequantizeWeights(leading_channel_dims(input(0))),
        Op::ChannelScale { unit, power } => {
            Kernel::ChannelScale { dims: leading_channel_dims(input(0)), unit, power }
        }
        // The input's type picks the direction; a cast to the same type matches neither
        // kernel's signature and is refused by the checks.
        Op::Cast => match graph.tensor(node.inputs[0]).dtype {
            DType::F16 => Kernel::CastF16ToF32(numel()),
            _ => Kernel::CastF32ToF16(numel()),
        },
        Op::UnscaleGradient => Kernel::UnscaleGradient(numel()),
        Op::UpdateLossScale(cfg) => Kernel::UpdateLossScale(cfg),
    };
    (kernel, all)
}

/// Dimension `axis` of `s`, or 0 when `s` has fewer axes: a node decoded from a file is
/// lowered before its kernel's checks reject such a shape, and lowering must not panic.
fn dim(s: Shape, axis: usize) -> usize {
    s.dim(axis).unwrap_or(0)
}

fn linear_dims(x: Shape, w: Shape) -> LinearDims {
    LinearDims { n: dim(x, 0), k: dim(x, 1), m: dim(w, 0) }
}

/// `[N, C, rest...]` seen as outer N, channels C, inner the product of the rest.
fn channel_dims(s: Shape) -> ChannelDims {
    let inner = s.dims().get(2..).map_or(0, |rest| rest.iter().product());
    ChannelDims { outer: dim(s, 0), channels: dim(s, 1), inner }
}

/// `[O, rest...]` seen as O channels of the product of the rest (a weight's output
/// channels).
fn leading_channel_dims(s: Shape) -> ChannelDims {
    let inner = s.dims().get(1..).map_or(0, |rest| rest.iter().product());
    ChannelDims { outer: 1, channels: dim(s, 0), inner }
}

/// An int8 layer's operands without its weight scales, which only its backward pass reads.
fn without_weight_scales(node: &Node) -> Vec<TensorId> {
    node.inputs.iter().take(4).chain(&node.outputs).copied().collect()
}

fn row_dims(s: Shape) -> RowDims {
    RowDims { rows: dim(s, 0), cols: dim(s, 1) }
}

fn conv_geometry(x: Shape, w: Shape, y: Shape, p: ConvParams) -> Conv2dGeometry {
    Conv2dGeometry {
        n: dim(x, 0),
        c_in: dim(x, 1),
        h: dim(x, 2),
        w: dim(x, 3),
        c_out: dim(w, 0),
        kh: dim(w, 2),
        kw: dim(w, 3),
        stride: p.stride,
        padding: p.padding,
        groups: p.groups,
        out_h: dim(y, 2),
        out_w: dim(y, 3),
    }
}

fn pool_geometry(x: Shape, y: Shape, p: PoolParams) -> Pool2dGeometry {
    Pool2dGeometry {
        n: dim(x, 0),
        c: dim(x, 1),
        h: dim(x, 2),
        w: dim(x, 3),
        kh: p.kernel.0,
        kw: p.kernel.1,
        stride: p.stride,
        padding: p.padding,
        count_include_pad: p.count_include_pad,
        out_h: dim(y, 2),
        out_w: dim(y, 3),
    }
}
