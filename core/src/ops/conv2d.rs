//! 2-D convolution (dense, grouped and depthwise) with its input and weight gradients.

use super::linear::layer_vjp;
use super::{Gradient, Int8Form, Int8Layer, Op, OpRules, OperandCounts, Recompute};
use crate::builder::{invalid, mismatch};
use crate::geometry::Conv2dGeometry;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::ConvParams;
use crate::ops::lowering::{dim, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::{format, vec};

pub(crate) struct Conv2d;

impl OpRules for Conv2d {
    type Params = ConvParams;
    const NAME: &'static str = "conv2d";
    const OPERANDS: OperandCounts = OperandCounts { inputs: 2..=3, state: 0..=0, outputs: 1..=1 };
    const GRADIENT: Gradient<ConvParams> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |p, cx| layer_vjp(cx, Op::Conv2dGradInput(p), Op::Conv2dGradWeight(p), Op::BiasGrad),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(conv: ConvParams) -> Int8Form {
        Int8Form::Layer(Int8Layer::Conv2d(conv))
    }

    fn lower(p: ConvParams, cx: &Lowering<'_>) -> Lowered {
        let geometry = conv_geometry(cx.input(0), cx.input(1), cx.output(0), p);
        cx.all(KernelCall::Conv2d { geometry, bias: cx.node.inputs.len() == 3 })
    }
}

pub(crate) struct Conv2dGradInput;

impl OpRules for Conv2dGradInput {
    type Params = ConvParams;
    const NAME: &'static str = "conv2d_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<ConvParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: ConvParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: ConvParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Conv2dGradInput(conv_geometry(
            cx.output(0),
            cx.input(1),
            cx.input(0),
            p,
        )))
    }
}

pub(crate) struct Conv2dGradWeight;

impl OpRules for Conv2dGradWeight {
    type Params = ConvParams;
    const NAME: &'static str = "conv2d_grad_weight";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<ConvParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: ConvParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: ConvParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Conv2dGradWeight(conv_geometry(
            cx.input(1),
            cx.output(0),
            cx.input(0),
            p,
        )))
    }
}

/// The geometry of a convolution of `x` with OIHW `w` into `y`.
pub(super) fn conv_geometry(x: Shape, w: Shape, y: Shape, p: ConvParams) -> Conv2dGeometry {
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

impl Graph {
    /// A 2-D convolution with OIHW weights; `groups == channels` is depthwise.
    pub fn conv2d(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        params: ConvParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Conv2d(params);
        let shape = self.conv_shape(op, name, x, w, params, DType::F32)?;
        let mut inputs = vec![x, w];
        if let Some(b) = b {
            self.check_bias(op, name, b, shape.dims()[1])?;
            inputs.push(b);
        }
        self.record_one(name, op, inputs, shape)
    }

    /// The output shape of a convolution of `x` with OIHW `w`, both of `dtype`.
    pub(crate) fn conv_shape(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        w: TensorId,
        params: ConvParams,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let (xs, ws) =
            (self.typed_rank(op, name, x, dtype, 4)?, self.typed_rank(op, name, w, dtype, 4)?);
        let [n, c, h, wd] = [xs.dims()[0], xs.dims()[1], xs.dims()[2], xs.dims()[3]];
        let [o, cg, kh, kw] = [ws.dims()[0], ws.dims()[1], ws.dims()[2], ws.dims()[3]];
        let g = params.groups;
        if g == 0 || c % g != 0 || o % g != 0 {
            return Err(invalid(
                op,
                name,
                format!("groups {g} must divide both input channels {c} and output channels {o}"),
            ));
        }
        if cg != c / g {
            return Err(mismatch(
                op,
                name,
                "weight input channels must equal channels / groups",
                xs,
                ws,
            ));
        }
        let (oh, ow) = self.window(op, name, (h, wd), (kh, kw), params.stride, params.padding)?;
        Ok(Shape::d4(n, o, oh, ow))
    }
}
