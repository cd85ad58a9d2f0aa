//! Training plumbing: constant fills (the loss seed, zeroing), gradient accumulation,
//! global-norm clipping and the SGD and AdamW parameter updates. None of it is
//! differentiated or recomputed.

use super::{Gradient, Int8Form, OpRules, OperandCounts, Recompute};
use crate::hyperparams::{AdamWConfig, SgdConfig};
use crate::kernel::KernelCall;
use crate::ops::lowering::{Lowered, Lowering};

pub(crate) struct Fill;

impl OpRules for Fill {
    type Params = f32;
    const NAME: &'static str = "fill";
    const OPERANDS: OperandCounts = OperandCounts::exactly(0, 0, 1);
    const GRADIENT: Gradient<f32> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(value: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Fill(value, cx.numel()))
    }
}

pub(crate) struct Accumulate;

impl OpRules for Accumulate {
    type Params = f32;
    const NAME: &'static str = "accumulate";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 1, 0);
    const GRADIENT: Gradient<f32> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(scale: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Accumulate(scale, cx.input(0).numel()))
    }
}

pub(crate) struct SumSquares;

impl OpRules for SumSquares {
    type Params = ();
    const NAME: &'static str = "sum_squares";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 1, 0);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::SumSquares(cx.input(0).numel()))
    }
}

pub(crate) struct ClipCoefficient;

impl OpRules for ClipCoefficient {
    type Params = f32;
    const NAME: &'static str = "clip_coefficient";
    const OPERANDS: OperandCounts = OperandCounts::exactly(1, 0, 1);
    const GRADIENT: Gradient<f32> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: f32) -> Int8Form {
        Int8Form::Float
    }

    fn lower(max_norm: f32, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::ClipCoefficient(max_norm))
    }
}

pub(crate) struct SgdUpdate;

impl OpRules for SgdUpdate {
    type Params = SgdConfig;
    const NAME: &'static str = "sgd_update";
    const OPERANDS: OperandCounts = OperandCounts { inputs: 1..=2, state: 1..=2, outputs: 0..=0 };
    const GRADIENT: Gradient<SgdConfig> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: SgdConfig) -> Int8Form {
        Int8Form::Float
    }

    fn lower(cfg: SgdConfig, cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::SgdUpdate {
            cfg,
            len: cx.input(0).numel(),
            clipped: cx.node.inputs.len() == 2,
            momentum: cx.node.state.len() == 2,
        })
    }
}

pub(crate) struct AdamWUpdate;

impl OpRules for AdamWUpdate {
    type Params = AdamWConfig;
    const NAME: &'static str = "adamw_update";
    const OPERANDS: OperandCounts = OperandCounts { inputs: 1..=2, state: 3..=3, outputs: 0..=0 };
    const GRADIENT: Gradient<AdamWConfig> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8(_: AdamWConfig) -> Int8Form {
        Int8Form::Float
    }

    fn lower(cfg: AdamWConfig, cx: &Lowering<'_>) -> Lowered {
        let clipped = cx.node.inputs.len() == 2;
        cx.all(KernelCall::AdamWUpdate { cfg, len: cx.input(0).numel(), clipped })
    }
}

pub(crate) struct Zero;

impl OpRules for Zero {
    type Params = ();
    const NAME: &'static str = "zero";
    const OPERANDS: OperandCounts = OperandCounts::exactly(0, 1, 0);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::Zero(cx.state(0).numel()))
    }
}
