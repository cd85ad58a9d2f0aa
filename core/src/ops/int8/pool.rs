//! Int8 pooling (max, average, global average); the output keeps the input's quantization
//! and the gradient runs through the float pooling gradients.

use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::PoolParams;
use crate::op::QAvgPoolParams;
use crate::ops::lowering::{channel_dims, Lowered, Lowering};
use crate::ops::pool::pool_geometry;
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::quant::QuantParams;
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::vec;

/// Parameters that read int8 codes as their integer values.
const UNIT: QuantParams = QuantParams { scale: 1.0, zero_point: 0 };

pub(crate) struct QMaxPool2d;

impl OpRules for QMaxPool2d {
    type Params = PoolParams;
    const NAME: &'static str = "qmax_pool2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<PoolParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| {
            if let Some(x) = cx.want(0) {
                // Any increasing map of the codes finds the same maxima.
                let codes = cx.scratch("codes", Op::Dequantize(UNIT), vec![x], x)?;
                let grad = cx.backward("grad", Op::MaxPool2dGrad(p), vec![codes, cx.dy], x)?;
                cx.contribute(x, grad);
            }
            Ok(())
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: PoolParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: PoolParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QMaxPool2d(pool_geometry(cx.input(0), cx.output(0), p)))
    }
}

pub(crate) struct QAvgPool2d;

impl OpRules for QAvgPool2d {
    type Params = QAvgPoolParams;
    const NAME: &'static str = "qavg_pool2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<QAvgPoolParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| cx.first_input(Op::AvgPool2dGrad(p.pool), vec![cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QAvgPoolParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: QAvgPoolParams, cx: &Lowering<'_>) -> Lowered {
        let geometry = pool_geometry(cx.input(0), cx.output(0), p.pool);
        cx.all(KernelCall::QAvgPool2d(geometry, p.zero_point))
    }
}

pub(crate) struct QGlobalAvgPool;

impl OpRules for QGlobalAvgPool {
    type Params = ();
    const NAME: &'static str = "qglobal_avg_pool";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::Flows {
        inputs: &[0],
        vjp: |(), cx| cx.first_input(Op::GlobalAvgPoolGrad, vec![cx.dy]),
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QGlobalAvgPool(channel_dims(cx.input(0))))
    }
}

impl Graph {
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
}
