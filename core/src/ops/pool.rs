//! Pooling: max, average and global average pooling with their gradients.

use super::{Gradient, Int8Form, Int8Same, Op, OpRules, OperandCounts, Recompute};
use crate::builder::invalid;
use crate::geometry::Pool2dGeometry;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::PoolParams;
use crate::ops::lowering::{channel_dims, dim, Lowered, Lowering};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::{format, vec};

pub(crate) struct MaxPool2d;

impl OpRules for MaxPool2d {
    type Params = PoolParams;
    const NAME: &'static str = "max_pool2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<PoolParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| cx.first_input(Op::MaxPool2dGrad(p), vec![cx.input(0), cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(pool: PoolParams) -> Int8Form {
        Int8Form::SameQuantization(Int8Same::MaxPool2d(pool))
    }

    fn lower(p: PoolParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::MaxPool2d(pool_geometry(cx.input(0), cx.output(0), p)))
    }
}

pub(crate) struct AvgPool2d;

impl OpRules for AvgPool2d {
    type Params = PoolParams;
    const NAME: &'static str = "avg_pool2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<PoolParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| cx.first_input(Op::AvgPool2dGrad(p), vec![cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8(pool: PoolParams) -> Int8Form {
        Int8Form::SameQuantization(Int8Same::AvgPool2d(pool))
    }

    fn lower(p: PoolParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::AvgPool2d(pool_geometry(cx.input(0), cx.output(0), p)))
    }
}

pub(crate) struct GlobalAvgPool;

impl OpRules for GlobalAvgPool {
    type Params = ();
    const NAME: &'static str = "global_avg_pool";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::GlobalAvgPoolGrad, vec![cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Rerun;

    fn int8((): ()) -> Int8Form {
        Int8Form::SameQuantization(Int8Same::GlobalAvgPool)
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::GlobalAvgPool(channel_dims(cx.input(0))))
    }
}

pub(crate) struct MaxPool2dGrad;

impl OpRules for MaxPool2dGrad {
    type Params = PoolParams;
    const NAME: &'static str = "max_pool2d_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<PoolParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: PoolParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: PoolParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::MaxPool2dGrad(pool_geometry(cx.input(0), cx.input(1), p)))
    }
}

pub(crate) struct AvgPool2dGrad;

impl OpRules for AvgPool2dGrad {
    type Params = PoolParams;
    const NAME: &'static str = "avg_pool2d_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<PoolParams> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: PoolParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: PoolParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::AvgPool2dGrad(pool_geometry(cx.output(0), cx.input(0), p)))
    }
}

pub(crate) struct GlobalAvgPoolGrad;

impl OpRules for GlobalAvgPoolGrad {
    type Params = ();
    const NAME: &'static str = "global_avg_pool_grad";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::GlobalAvgPoolGrad(channel_dims(cx.output(0))))
    }
}

/// The geometry of pooling `x` into `y` with window `p`.
pub(super) fn pool_geometry(x: Shape, y: Shape, p: PoolParams) -> Pool2dGeometry {
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

impl Graph {
    pub fn max_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        self.pool(name, Op::MaxPool2d(p), x, p)
    }

    pub fn avg_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        self.pool(name, Op::AvgPool2d(p), x, p)
    }

    /// Mean over H and W: `[N,C,H,W] → [N,C]`.
    pub fn global_avg_pool(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float_rank(Op::GlobalAvgPool, name, x, 4)?;
        self.record_one(name, Op::GlobalAvgPool, vec![x], Shape::d2(xs.dims()[0], xs.dims()[1]))
    }

    fn pool(
        &mut self,
        name: &str,
        op: Op,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        let shape = self.pool_shape(name, op, x, p, DType::F32)?;
        self.record_one(name, op, vec![x], shape)
    }

    /// The output shape of pooling `x` (of `dtype`) with window `p`.
    pub(crate) fn pool_shape(
        &self,
        name: &str,
        op: Op,
        x: TensorId,
        p: PoolParams,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let xs = self.typed_rank(op, name, x, dtype, 4)?;
        if p.padding.0 * 2 > p.kernel.0 || p.padding.1 * 2 > p.kernel.1 {
            return Err(invalid(
                op,
                name,
                format!("padding {:?} must be at most half the window {:?}", p.padding, p.kernel),
            ));
        }
        let (oh, ow) =
            self.window(op, name, (xs.dims()[2], xs.dims()[3]), p.kernel, p.stride, p.padding)?;
        Ok(Shape::d4(xs.dims()[0], xs.dims()[1], oh, ow))
    }
}
