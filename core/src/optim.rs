//! Optimizers as graph steps: gradient accumulation, global-norm clipping and the SGD or
//! AdamW update of every trainable tensor, appended after `differentiate`.

use crate::builder::OutputSpec;
use crate::graph::{Graph, GraphError, Init, Phase, Stage, TensorInfo};
use crate::hyperparams::{AdamWConfig, BatchNormStats, LossScaleConfig, SgdConfig};
use crate::lower::Mode;
use crate::ops::Op;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// The update rule. The learning rate is not part of it: it comes from a schedule at run time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    Sgd(SgdConfig),
    AdamW(AdamWConfig),
}

/// How a training step is put together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    pub optimizer: Optimizer,
    /// Scale all gradients together so their global L2 norm is at most this.
    pub clip_grad_norm: Option<f32>,
    /// Micro-batches whose gradients are summed (averaged) before one update.
    pub accumulation: u32,
    /// Mixed precision: the forward pass reads f16 copies of weights and activations
    /// ([`crate::F16Storage::MIXED_PRECISION`]), the optimizer updates f32 masters, and the
    /// loss is scaled dynamically with these settings (overflowing steps are skipped).
    pub mixed_precision: Option<LossScaleConfig>,
    /// What the batch norms normalise with while training.
    pub batch_norm: BatchNormStats,
}

impl TrainConfig {
    /// Plain SGD with momentum, no clipping, one micro-batch per update.
    pub fn sgd(momentum: f32) -> Self {
        Self {
            optimizer: Optimizer::Sgd(SgdConfig { momentum, weight_decay: 0.0, nesterov: false }),
            clip_grad_norm: None,
            accumulation: 1,
            mixed_precision: None,
            batch_norm: BatchNormStats::Batch,
        }
    }
}

impl BatchNormStats {
    /// The mode a training step with these batch norms is lowered in.
    pub fn training_mode(self) -> Mode {
        match self {
            Self::Batch => Mode::Train,
            Self::Running => Mode::TrainRunningStats,
        }
    }
}

pub(crate) fn check_config(cfg: &TrainConfig) -> Result<(), GraphError> {
    let problem = match cfg.optimizer {
        Optimizer::Sgd(s) => sgd_problem(s),
        Optimizer::AdamW(a) => adamw_problem(a),
    };
    let problem = problem
        .or_else(|| (cfg.accumulation == 0).then(|| "accumulation must be at least 1".into()))
        .or_else(|| match cfg.clip_grad_norm {
            Some(c) if !(c.is_finite() && c > 0.0) => {
                Some(format!("gradient clipping norm {c} must be positive"))
            }
            _ => None,
        })
        .or_else(|| cfg.mixed_precision.and_then(loss_scale_problem));
    match problem {
        Some(detail) => Err(GraphError::Invalid { op: "optimizer", node: "train".into(), detail }),
        None => Ok(()),
    }
}

/// Whether `value` is finite and not negative (NaN is not).
fn non_negative(value: f32) -> bool {
    value.is_finite() && value >= 0.0
}

/// What is wrong with SGD settings, if anything.
pub(crate) fn sgd_problem(s: SgdConfig) -> Option<String> {
    if !(0.0..1.0).contains(&s.momentum) {
        Some(format!("momentum {} must be in [0, 1)", s.momentum))
    } else if s.nesterov && s.momentum == 0.0 {
        Some("Nesterov momentum needs a momentum above 0".to_string())
    } else if !non_negative(s.weight_decay) {
        Some(format!("weight decay {} must be finite and not negative", s.weight_decay))
    } else {
        None
    }
}

/// What is wrong with AdamW settings, if anything.
pub(crate) fn adamw_problem(a: AdamWConfig) -> Option<String> {
    if !(0.0..1.0).contains(&a.beta1) || !(0.0..1.0).contains(&a.beta2) {
        Some(format!("betas ({}, {}) must be in [0, 1)", a.beta1, a.beta2))
    } else if !(a.eps.is_finite() && a.eps > 0.0 && non_negative(a.weight_decay)) {
        Some(format!(
            "eps {} must be positive and weight decay {} finite and not negative",
            a.eps, a.weight_decay
        ))
    } else {
        None
    }
}

/// What is wrong with loss-scaling settings, if anything.
pub(crate) fn loss_scale_problem(c: LossScaleConfig) -> Option<String> {
    let interval = 1..=LossScaleConfig::MAX_GROWTH_INTERVAL;
    if !(c.init_scale.is_finite() && c.init_scale > 0.0) {
        Some(format!("initial loss scale {} must be positive", c.init_scale))
    } else if !(c.growth.is_finite() && c.growth > 1.0) {
        Some(format!("loss-scale growth {} must be above 1", c.growth))
    } else if !(c.backoff > 0.0 && c.backoff < 1.0) {
        Some(format!("loss-scale backoff {} must be in (0, 1)", c.backoff))
    } else if !interval.contains(&c.growth_interval) {
        Some(format!(
            "loss-scale growth interval {} must be in 1..={}",
            c.growth_interval,
            LossScaleConfig::MAX_GROWTH_INTERVAL
        ))
    } else {
        None
    }
}

fn state_tensor(graph: &mut Graph, name: String, shape: Shape) -> Result<TensorId, GraphError> {
    state_tensor_from(graph, name, shape, Init::Zeros)
}

fn state_tensor_from(
    graph: &mut Graph,
    name: String,
    shape: Shape,
    init: Init,
) -> Result<TensorId, GraphError> {
    graph.add_tensor(TensorInfo {
        name,
        shape,
        dtype: DType::F32,
        role: Role::OptimizerState,
        init: Some(init),
    })
}

/// The name of the loss scale of a mixed-precision training step (a state tensor, so
/// checkpoints keep it), and of its count of overflow-free steps in a row.
pub const LOSS_SCALE: &str = "loss_scale";
pub const LOSS_SCALE_GOOD_STEPS: &str = "loss_scale.good_steps";

/// The loss scale and its count of good steps: state added to a model before
/// differentiating it, so the loss gradient can be seeded with the scale.
pub(crate) fn add_loss_scale(
    graph: &mut Graph,
    cfg: LossScaleConfig,
) -> Result<LossScale, GraphError> {
    let scale =
        state_tensor_from(graph, LOSS_SCALE.into(), Shape::d1(1), Init::Constant(cfg.init_scale))?;
    let good_steps = state_tensor(graph, LOSS_SCALE_GOOD_STEPS.into(), Shape::d1(1))?;
    Ok(LossScale { scale, good_steps, cfg })
}

/// The state of dynamic loss scaling in a training graph.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LossScale {
    pub scale: TensorId,
    pub good_steps: TensorId,
    pub cfg: LossScaleConfig,
}

/// Unscales every gradient (gathering whether any overflowed), then moves the scale; the
/// parameter updates recorded after this are skipped when a gradient overflowed. The
/// gradients in `effective` are replaced by their unscaled copies.
fn unscale(
    graph: &mut Graph,
    effective: &mut [(TensorId, TensorId, Option<TensorId>)],
    loss_scale: LossScale,
    phase: Phase,
) -> Result<(), GraphError> {
    let found_inf = graph.record(
        "loss_scale.clear_found_inf",
        Op::Fill(0.0),
        Vec::new(),
        Vec::new(),
        vec![scratch("loss_scale.found_inf")],
        phase,
    )?[0];
    for (p, g, _) in effective.iter_mut() {
        let pname = graph.tensor(*p).name.clone();
        let spec =
            OutputSpec::f32(format!("{pname}.grad_unscaled"), graph.shape(*p), Role::Gradient);
        *g = graph.record(
            &format!("{pname}.unscale_grad"),
            Op::UnscaleGradient,
            vec![*g, loss_scale.scale],
            vec![found_inf],
            vec![spec],
            phase,
        )?[0];
    }
    graph.record(
        "loss_scale.update",
        Op::UpdateLossScale(loss_scale.cfg),
        vec![found_inf],
        vec![loss_scale.scale, loss_scale.good_steps],
        Vec::new(),
        phase,
    )?;
    Ok(())
}

fn scratch(name: &str) -> OutputSpec {
    OutputSpec::f32(name.to_string(), Shape::SCALAR, Role::Scratch)
}

/// Appends accumulation, unscaling (with `loss_scale`), clipping and the updates.
pub(crate) fn append_optimizer(
    graph: &mut Graph,
    gradients: &[(TensorId, TensorId)],
    cfg: &TrainConfig,
    loss_scale: Option<LossScale>,
) -> Result<(), GraphError> {
    graph.stage = Stage::Optimizer;
    let accumulate = cfg.accumulation > 1;
    let phase = if accumulate { Phase::Update } else { Phase::MicroBatch };

    // With accumulation, each micro-batch adds its gradient into a persistent accumulator,
    // and the update reads the accumulator and then zeroes it.
    let mut effective = Vec::with_capacity(gradients.len());
    for &(p, g) in gradients {
        if !accumulate {
            effective.push((p, g, None));
            continue;
        }
        let pname = graph.tensor(p).name.clone();
        let acc = state_tensor(graph, format!("{pname}.grad_accumulator"), graph.shape(p))?;
        let scale = 1.0 / cfg.accumulation as f32;
        let name = format!("{pname}.accumulate");
        graph.record(
            &name,
            Op::Accumulate(scale),
            vec![g],
            vec![acc],
            Vec::new(),
            Phase::MicroBatch,
        )?;
        effective.push((p, acc, Some(acc)));
    }

    if let Some(loss_scale) = loss_scale {
        unscale(graph, &mut effective, loss_scale, phase)?;
    }

    let coef = match cfg.clip_grad_norm {
        Some(max_norm) => {
            let sum = graph.record(
                "grad_norm.zero",
                Op::Fill(0.0),
                Vec::new(),
                Vec::new(),
                vec![scratch("grad_norm.sum_squares")],
                phase,
            )?[0];
            for (i, &(_, g, _)) in effective.iter().enumerate() {
                let name = format!("grad_norm.add_{i}");
                graph.record(&name, Op::SumSquares, vec![g], vec![sum], Vec::new(), phase)?;
            }
            let op = Op::ClipCoefficient(max_norm);
            Some(
                graph.record(
                    "grad_norm.clip",
                    op,
                    vec![sum],
                    Vec::new(),
                    vec![scratch("grad_norm.coefficient")],
                    phase,
                )?[0],
            )
        }
        None => None,
    };

    for (p, g, acc) in effective {
        let pname = graph.tensor(p).name.clone();
        let shape = graph.shape(p);
        let mut inputs = vec![g];
        inputs.extend(coef);
        let (op, state) = match cfg.optimizer {
            Optimizer::Sgd(s) => {
                let mut state = vec![p];
                if s.momentum != 0.0 {
                    state.push(state_tensor(graph, format!("{pname}.momentum_buffer"), shape)?);
                }
                (Op::SgdUpdate(s), state)
            }
            Optimizer::AdamW(a) => {
                let m = state_tensor(graph, format!("{pname}.exp_avg"), shape)?;
                let v = state_tensor(graph, format!("{pname}.exp_avg_sq"), shape)?;
                (Op::AdamWUpdate(a), vec![p, m, v])
            }
        };
        graph.record(&format!("{pname}.update"), op, inputs, state, Vec::new(), phase)?;
        if let Some(acc) = acc {
            graph.record(
                &format!("{pname}.zero_grad"),
                Op::Zero,
                Vec::new(),
                vec![acc],
                Vec::new(),
                phase,
            )?;
        }
    }
    Ok(())
}
