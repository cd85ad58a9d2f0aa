//! Quantization and dequantization of activations and per-channel weights. The gradient
//! passes straight through both.

use crate::autograd::Vjp;
use crate::graph::GraphError;
use crate::kernel::Kernel;
use crate::lower::{leading_channel_dims, Lowered, Lowering};
use crate::ops::{OpRules, OperandCounts, Recompute};
use crate::quant::QuantParams;

pub(crate) struct Quantize;

impl OpRules for Quantize {
    type Params = QuantParams;
    const NAME: &'static str = "quantize";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp(_: QuantParams, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        cx.pass(&[0], cx.dy);
        Ok(())
    }

    fn lower(p: QuantParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::Quantize(p, cx.numel()))
    }
}

pub(crate) struct Dequantize;

impl OpRules for Dequantize {
    type Params = QuantParams;
    const NAME: &'static str = "dequantize";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[0];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp(_: QuantParams, cx: &mut Vjp<'_>) -> Result<(), GraphError> {
        cx.pass(&[0], cx.dy);
        Ok(())
    }

    fn lower(p: QuantParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::Dequantize(p, cx.numel()))
    }
}

pub(crate) struct DequantizeWeights;

impl OpRules for DequantizeWeights {
    type Params = ();
    const NAME: &'static str = "dequantize_weights";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    const DIFFERENTIABLE: &'static [usize] = &[];
    const RECOMPUTE: Recompute = Recompute::Never;

    fn vjp((): (), _: &mut Vjp<'_>) -> Result<(), GraphError> {
        Ok(())
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(Kernel::DequantizeWeights(leading_channel_dims(cx.input(0))))
    }
}
