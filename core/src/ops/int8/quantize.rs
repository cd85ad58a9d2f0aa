//! Quantization and dequantization of activations and per-channel weights. The gradient
//! passes straight through both.

use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::ops::lowering::{leading_channel_dims, Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::quant::QuantParams;
use crate::tensor::{DType, TensorId};
use alloc::vec;

/// The gradient of a (de)quantization: it passes unchanged.
const STRAIGHT_THROUGH: Gradient<QuantParams> = Gradient::Flows {
    inputs: &[0],
    vjp: |_, cx| {
        cx.pass(&[0], cx.dy);
        Ok(())
    },
};

pub(crate) struct Quantize;

impl OpRules for Quantize {
    type Params = QuantParams;
    const NAME: &'static str = "quantize";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<QuantParams> = STRAIGHT_THROUGH;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QuantParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: QuantParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Quantize(p, cx.numel()))
    }
}

pub(crate) struct Dequantize;

impl OpRules for Dequantize {
    type Params = QuantParams;
    const NAME: &'static str = "dequantize";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<QuantParams> = STRAIGHT_THROUGH;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QuantParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(p: QuantParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Dequantize(p, cx.numel()))
    }
}

pub(crate) struct DequantizeWeights;

impl OpRules for DequantizeWeights {
    type Params = ();
    const NAME: &'static str = "dequantize_weights";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::DequantizeWeights(leading_channel_dims(cx.input(0))))
    }
}

impl Graph {
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
}
