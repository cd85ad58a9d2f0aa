//! Batch normalisation: the forward op (batch statistics in training, running ones in
//! evaluation), its re-application with saved statistics, and its gradients.

use super::{Gradient, Int8Form, Op, OpRules, OperandCounts, Recompute};
use crate::builder::{invalid, OutputSpec};
use crate::graph::{Graph, GraphError, Phase};
use crate::hyperparams::BatchNormConfig;
use crate::kernel::KernelCall;
use crate::ops::lowering::{channel_dims, Lowered, Lowering, Mode};
use crate::shape::Shape;
use crate::tensor::{Role, TensorId};
use alloc::string::ToString;
use alloc::{format, vec};

pub(crate) struct BatchNorm2d;

impl OpRules for BatchNorm2d {
    type Params = BatchNormConfig;
    const NAME: &'static str = "batch_norm2d";
    const OPERANDS: OperandCounts = OperandCounts::exactly(3, 2, 3);
    const GRADIENT: Gradient<BatchNormConfig> = Gradient::Flows {
        inputs: &[0, 1, 2],
        vjp: |_, cx| {
            let (x, gamma, beta, dy) = (cx.input(0), cx.input(1), cx.input(2), cx.dy);
            let (mean, invstd) = (cx.output(1), cx.output(2));
            let (want_gamma, want_beta) = (cx.want(1), cx.want(2));
            let mut sums = None;
            if want_gamma.is_some() || want_beta.is_some() {
                // One kernel yields both; a frozen one of the pair costs C floats.
                let inputs = vec![dy, x, mean, invstd];
                let op = Op::BatchNormGradParams;
                let ids = cx.backward_many("grad_params", op, inputs, &[gamma, beta])?;
                for (t, grad) in [(want_gamma, ids[0]), (want_beta, ids[1])] {
                    if let Some(t) = t {
                        cx.contribute(t, grad);
                    }
                }
                sums = Some((ids[0], ids[1]));
            }
            if cx.want(0).is_some() {
                // The parameter gradients are the sums the input gradient needs: read them
                // rather than summing again.
                let (op, inputs) = match sums {
                    Some((dgamma, dbeta)) => (
                        Op::BatchNormGradInputFromSums,
                        vec![dy, x, gamma, mean, invstd, dgamma, dbeta],
                    ),
                    None => (Op::BatchNormGradInput, vec![dy, x, gamma, mean, invstd]),
                };
                let grad = cx.backward("grad_input", op, inputs, x)?;
                cx.contribute(x, grad);
            }
            Ok(())
        },
    };
    // Re-normalise with the statistics saved by the forward pass: the running statistics
    // must not move twice.
    const RECOMPUTE: Recompute = Recompute::Apply { op: Op::BatchNormApply, saved: &[1, 2] };

    fn int8(config: BatchNormConfig) -> Int8Form {
        Int8Form::FoldedBatchNorm(config)
    }

    fn lower(cfg: BatchNormConfig, cx: &Lowering<'_>) -> Lowered {
        let dims = channel_dims(cx.input(0));
        match cx.mode {
            Mode::Train => cx.all(KernelCall::BatchNormTrain(dims, cfg)),
            Mode::TrainRunningStats => cx.all(KernelCall::BatchNormRunning(dims, cfg)),
            Mode::Eval => {
                // Evaluation reads the running statistics and saves nothing for a backward pass.
                let (kernel, mut operands) = cx.all(KernelCall::BatchNormEval(dims, cfg));
                operands.truncate(operands.len() - 2);
                (kernel, operands)
            }
        }
    }
}

pub(crate) struct BatchNormApply;

impl OpRules for BatchNormApply {
    type Params = ();
    const NAME: &'static str = "batch_norm_apply";
    const OPERANDS: OperandCounts = OperandCounts::exactly(5, 0, 1);
    // It only recomputes a forward output inside the backward pass.
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::BatchNormApply(channel_dims(cx.input(0))))
    }
}

pub(crate) struct BatchNormGradInput;

impl OpRules for BatchNormGradInput {
    type Params = ();
    const NAME: &'static str = "batch_norm_grad_input";
    const OPERANDS: OperandCounts = OperandCounts::exactly(5, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        let dims = channel_dims(cx.input(0));
        cx.all(match cx.mode {
            Mode::TrainRunningStats => KernelCall::BatchNormGradInputRunning(dims),
            Mode::Train | Mode::Eval => KernelCall::BatchNormGradInput(dims),
        })
    }
}

pub(crate) struct BatchNormGradInputFromSums;

impl OpRules for BatchNormGradInputFromSums {
    type Params = ();
    const NAME: &'static str = "batch_norm_grad_input_from_sums";
    const OPERANDS: OperandCounts = OperandCounts::exactly(7, 0, 1);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        let dims = channel_dims(cx.input(0));
        match cx.mode {
            // The running statistics do not depend on `x`: the sums are not needed.
            Mode::TrainRunningStats => {
                let (kernel, mut operands) = cx.all(KernelCall::BatchNormGradInputRunning(dims));
                operands.drain(5..7);
                (kernel, operands)
            }
            Mode::Train | Mode::Eval => cx.all(KernelCall::BatchNormGradInputFromSums(dims)),
        }
    }
}

pub(crate) struct BatchNormGradParams;

impl OpRules for BatchNormGradParams {
    type Params = ();
    const NAME: &'static str = "batch_norm_grad_params";
    const OPERANDS: OperandCounts = OperandCounts::exactly(4, 0, 2);
    const GRADIENT: Gradient<()> = Gradient::None;
    const RECOMPUTE: Recompute = Recompute::Never;

    fn int8((): ()) -> Int8Form {
        Int8Form::Float
    }

    fn lower((): (), cx: &Lowering<'_>) -> Lowered {
        cx.all(KernelCall::BatchNormGradParams(channel_dims(cx.input(0))))
    }
}

impl Graph {
    /// Batch normalisation over the channels of `x[N,C,H,W]`. `gamma`, `beta` are `[C]`
    /// parameters; `running_mean`, `running_var` are `[C]` buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm2d(
        &mut self,
        name: &str,
        x: TensorId,
        gamma: TensorId,
        beta: TensorId,
        running_mean: TensorId,
        running_var: TensorId,
        cfg: BatchNormConfig,
    ) -> Result<TensorId, GraphError> {
        let op = Op::BatchNorm2d(cfg);
        let xs = self.float_rank(op, name, x, 4)?;
        let c = xs.dims()[1];
        for t in [gamma, beta, running_mean, running_var] {
            self.check_bias(op, name, t, c)?;
        }
        if !cfg.is_sane() {
            return Err(invalid(
                op,
                name,
                format!("eps {} must be > 0 and momentum {} in [0, 1]", cfg.eps, cfg.momentum),
            ));
        }
        let outputs = vec![
            OutputSpec::f32(name.to_string(), xs, Role::Activation),
            OutputSpec::f32(format!("{name}.saved_mean"), Shape::d1(c), Role::Scratch),
            OutputSpec::f32(format!("{name}.saved_invstd"), Shape::d1(c), Role::Scratch),
        ];
        let ids = self.record(
            name,
            op,
            vec![x, gamma, beta],
            vec![running_mean, running_var],
            outputs,
            Phase::MicroBatch,
        )?;
        Ok(ids[0])
    }
}
