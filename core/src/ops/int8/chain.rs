//! The backward pass of an int8 depthwise layer and the layer before it, a channel at a
//! time (the `chains` pass makes these nodes from the unfused backward ops): the depthwise
//! input gradient, the earlier layer's clamp mask and bias gradient and, with a 1x1 layer
//! before, that layer's input gradient, without the hidden channels' gradients in memory.

use crate::kernel::KernelCall;
use crate::op::DepthwiseChainParams;
use crate::ops::conv2d::conv_geometry;
use crate::ops::lowering::{dim, Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, OpRules, OperandCounts, Recompute};
use crate::shape::Shape;

/// `dy, w, w_scale, mask, w_e, w_e_scale → db, dx`.
pub(crate) struct QDepthwiseChainGrad;

impl OpRules for QDepthwiseChainGrad {
    type Params = DepthwiseChainParams;
    const NAME: &'static str = "qdepthwise_chain_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(6, 0, 2);
    const GRADIENT: Gradient<DepthwiseChainParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: DepthwiseChainParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: DepthwiseChainParams, cx: &Lowering<'_>) -> Lowered {
        let c_in = dim(cx.output(1), 1);
        cx.all(KernelCall::QDepthwiseChainGrad { depthwise: depthwise(p, cx), c_in })
    }
}

/// `dy, w, w_scale, mask → db`.
pub(crate) struct QDepthwiseChainBiasGrad;

impl OpRules for QDepthwiseChainBiasGrad {
    type Params = DepthwiseChainParams;
    const NAME: &'static str = "qdepthwise_chain_bias_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(4, 0, 1);
    const GRADIENT: Gradient<DepthwiseChainParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: DepthwiseChainParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: DepthwiseChainParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QDepthwiseChainBiasGrad(depthwise(p, cx)))
    }
}

/// The depthwise layer's geometry: its output gradient (input 0) and weights (input 1)
/// give the batch, channels and window; the settings give the input's height and width.
fn depthwise(p: DepthwiseChainParams, cx: &Lowering<'_>) -> crate::geometry::Conv2dGeometry {
    let (dy, (h, w)) = (cx.input(0), p.input_hw);
    let x = Shape::d4(dim(dy, 0), dim(dy, 1), h, w);
    conv_geometry(x, cx.input(1), dy, p.conv)
}

/// `dy, w_p, w_p_scale, mask_p, w, w_scale, mask, w_e, w_e_scale → db_p, db, dx, scratch`.
pub(crate) struct QBlockGrad;

impl OpRules for QBlockGrad {
    type Params = DepthwiseChainParams;
    const NAME: &'static str = "qblock_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(9, 0, 4);
    const GRADIENT: Gradient<DepthwiseChainParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: DepthwiseChainParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: DepthwiseChainParams, cx: &Lowering<'_>) -> Lowered {
        let (depthwise, c_out) = block(p, cx);
        let c_in = dim(cx.output(2), 1);
        cx.all(KernelCall::QBlockGrad { depthwise, c_in, c_out })
    }
}

/// `dy, w_p, w_p_scale, mask_p, w, w_scale, mask → db_p, db, scratch`.
pub(crate) struct QBlockBiasGrad;

impl OpRules for QBlockBiasGrad {
    type Params = DepthwiseChainParams;
    const NAME: &'static str = "qblock_bias_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(7, 0, 3);
    const GRADIENT: Gradient<DepthwiseChainParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: DepthwiseChainParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: DepthwiseChainParams, cx: &Lowering<'_>) -> Lowered {
        let (depthwise, c_out) = block(p, cx);
        cx.all(KernelCall::QBlockBiasGrad { depthwise, c_out })
    }
}

/// A block's depthwise geometry and output channels: the depthwise layer's output gradient
/// has the block output's (input 0) batch and spatial size and the depthwise layer's
/// channels (its weights', input 4, first axis).
fn block(p: DepthwiseChainParams, cx: &Lowering<'_>) -> (crate::geometry::Conv2dGeometry, usize) {
    let (dy, w) = (cx.input(0), cx.input(4));
    let hidden = Shape::d4(dim(dy, 0), dim(w, 0), dim(dy, 2), dim(dy, 3));
    let x = Shape::d4(dim(dy, 0), dim(w, 0), p.input_hw.0, p.input_hw.1);
    (conv_geometry(x, w, hidden, p.conv), dim(dy, 1))
}
