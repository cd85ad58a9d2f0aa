//! `QLut`: an element-wise activation (sigmoid, hard sigmoid, hard swish, leaky ReLU) in
//! int8 through a 256-entry table built at quantization time from the input's and the
//! output's quantization.

use crate::builder::invalid;
use crate::graph::{Graph, GraphError};
use crate::kernel::KernelCall;
use crate::op::QLutParams;
use crate::ops::lowering::{Lowered, Lowering};
use crate::ops::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::reference::pointwise::GradientReads;
use crate::tensor::{DType, TensorId};
use alloc::format;
use alloc::vec;

/// Entries of a table: one per int8 value.
pub(crate) const TABLE_LEN: usize = 256;

/// `x (i8), table (i8 [256]) → y (i8)`: `y = table[x + 128]`.
pub(crate) struct QLut;

impl OpRules for QLut {
    type Params = QLutParams;
    const NAME: &'static str = "qlut";
    const OPERANDS: OperandCounts = OperandCounts::exactly(2, 0, 1);
    // The slope of the float function at the dequantized input (or output, for sigmoid).
    const GRADIENT: Gradient<QLutParams> = Gradient::Flows {
        inputs: &[0],
        vjp: |p, cx| {
            let (saved, params) = match p.f.gradient_reads() {
                GradientReads::Input => (cx.input(0), p.input),
                GradientReads::Output => (cx.output(0), p.output),
            };
            let real = cx.scratch("dequantized", Op::Dequantize(params), vec![saved], saved)?;
            cx.first_input(Op::ActivationGrad(p.f), vec![real, cx.dy])
        },
    };
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: QLutParams) -> Int8Form {
        Int8Form::Float
    }

    fn lower(_: QLutParams, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::QLut(cx.numel()))
    }
}

impl Graph {
    /// `f` of the int8 tensor `x` through `table` (i8, [`TABLE_LEN`] entries, see
    /// [`crate::quant::lut_table`]); the output has `params.output`'s quantization.
    pub fn qlut(
        &mut self,
        name: &str,
        x: TensorId,
        table: TensorId,
        params: QLutParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::QLut(params);
        let shape = self.typed(op, name, x, DType::I8)?;
        let entries = self.typed_rank(op, name, table, DType::I8, 1)?.dims()[0];
        if entries != TABLE_LEN {
            let detail = format!("the table must hold {TABLE_LEN} entries, it has {entries}");
            return Err(invalid(op, name, detail));
        }
        if !params.f.is_valid() {
            let detail = format!("settings must be finite, they are {:?}", params.f);
            return Err(invalid(op, name, detail));
        }
        self.record_as(name, op, vec![x, table], shape, DType::I8)
    }
}
