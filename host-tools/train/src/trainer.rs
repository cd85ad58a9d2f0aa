//! The training loop: compile the step, run shuffled full batches through the executor
//! (the last partial batch of an epoch is dropped: a compiled plan has a fixed batch),
//! validate through the inference plan, checkpoint, keep the best model, draw the curve.

use std::fs;
use std::path::{Path, PathBuf};

use sprout_core::hyperparams::{AdamWConfig, LossScaleConfig, SgdConfig};
use sprout_core::optim::LOSS_SCALE;
use sprout_core::schedule::{Constant, CosineWithWarmup, Goal, ReduceOnPlateau, StepDecay};
use sprout_core::{
    compile_training_step_with, save_model, Executor, MemoryOptions, ModelFile, Optimizer,
    Progress, Region, StepOutcome, TrainConfig,
};
use sprout_data::{Normalize, Pipeline, Transform};

use crate::checkpoint::{read_checkpoint, write_checkpoint, Checkpoint, EpochRecord};
use crate::curve::write_curve;
use crate::error::CheckpointError;
use crate::files::write_atomic;
use crate::metrics::Metrics;
use crate::model::{Inference, Model};
use crate::source::{read_tensor_file, DataSource};
use crate::TrainError;
use sprout_cpu::Cpu;

/// The update rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerChoice {
    Sgd { momentum: f32, weight_decay: f32, nesterov: bool },
    AdamW { weight_decay: f32 },
}

/// How the learning rate moves: `step` divides it by 10 after each third of the updates,
/// `cosine` warms up over the first 5 % and decays to 0, `plateau` halves it when the
/// validation accuracy has not improved for 2 epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleChoice {
    Constant,
    Step,
    Cosine,
    Plateau,
}

/// What a training run does.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// `all`, `head`, `bias` or comma-separated name patterns.
    pub trainable: String,
    pub optimizer: OptimizerChoice,
    pub learning_rate: f32,
    pub schedule: ScheduleChoice,
    pub epochs: u32,
    /// Data order and augmentation.
    pub seed: u64,
    /// Where checkpoints, `best.sprout` and `curve.png` go (nothing is written without one).
    pub out_dir: Option<PathBuf>,
    /// A checkpoint to continue from.
    pub resume: Option<PathBuf>,
    /// Mixed precision: f16 copies of weights and activations in the forward pass, f32
    /// master weights, dynamic loss scaling with `GradScaler`'s defaults.
    pub mixed_precision: bool,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            trainable: "all".into(),
            optimizer: OptimizerChoice::Sgd { momentum: 0.9, weight_decay: 0.0, nesterov: false },
            learning_rate: 0.05,
            schedule: ScheduleChoice::Constant,
            epochs: 10,
            seed: 0,
            out_dir: None,
            resume: None,
            mixed_precision: false,
        }
    }
}

/// What the loop reports as it goes.
#[derive(Debug)]
pub enum TrainEvent<'a> {
    /// Before the first epoch (`first` > 0 when resuming).
    Start { first: u32, epochs: u32, batches: usize },
    /// After each training batch (0-based `epoch` and `batch`).
    Batch { epoch: u32, batch: usize, loss: f32 },
    /// After each epoch's validation.
    Epoch { record: &'a EpochRecord, metrics: &'a Metrics },
}

/// The result of a run.
pub struct Outcome {
    /// The model with its final weights.
    pub model: ModelFile,
    pub history: Vec<EpochRecord>,
    /// Validation metrics after the last epoch.
    pub metrics: Metrics,
    pub best_accuracy: Option<f32>,
    /// With mixed precision: the loss scale at the end, and how many optimizer steps this
    /// run skipped because gradients overflowed.
    pub loss_scale: Option<LossScaleReport>,
}

/// How dynamic loss scaling went in a mixed-precision run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleReport {
    pub final_scale: f32,
    pub skipped_steps: u32,
}

/// The training and validation folders of a class-folder data set: `DATA/train` and
/// `DATA/val` when present, else `DATA` for both.
fn split_roots(data: &Path) -> (PathBuf, PathBuf) {
    match (data.join("train").is_dir(), data.join("val").is_dir()) {
        (true, true) => (data.join("train"), data.join("val")),
        (true, false) => (data.join("train"), data.join("train")),
        _ => (data.to_path_buf(), data.to_path_buf()),
    }
}

/// The class names of a class-folder data set, or `None` for a tensor file.
pub fn folder_classes(data: &Path) -> Result<Option<Vec<String>>, TrainError> {
    if !data.is_dir() {
        return Ok(None);
    }
    let (train_root, _) = split_roots(data);
    Ok(Some(sprout_data::Dataset::open(&train_root)?.classes))
}

/// Opens training and validation data at `data` for `model`: a folder (`DATA/train` and
/// `DATA/val` when present, else `DATA` for both) or a tensor file (validation: `val`, else
/// the training file). Folder class names are given to the model (see
/// [`Model::adopt_classes`]); folder images are read as `pipeline` says; samples must have
/// the model's input shape.
pub fn open_data(
    model: &mut Model,
    data: &Path,
    val: Option<&Path>,
    augment: bool,
    shuffle: bool,
    seed: u64,
    pipeline: &Pipeline,
) -> Result<(DataSource, DataSource), TrainError> {
    let batch = model.batch();
    if data.is_dir() {
        let size = model.image_size().ok_or_else(|| {
            TrainError::Mismatch(format!(
                "{}: image folders need a model with [N, 3, S, S] input; this one takes {:?}",
                data.display(),
                model.sample_dims()
            ))
        })?;
        let (train_root, val_root) = split_roots(data);
        let prep = &model.metadata.preprocessing;
        let normalize = match (&prep.mean[..], &prep.std[..]) {
            (&[m0, m1, m2], &[s0, s1, s2]) => Normalize { mean: [m0, m1, m2], std: [s0, s1, s2] },
            _ => Normalize::IMAGENET,
        };
        let eval = Transform { normalize, ..Transform::eval(size) };
        let transform =
            if augment { Transform { normalize, ..Transform::train(size) } } else { eval };
        let fixed = model.names_fixed.then(|| model.metadata.class_names.clone());
        let train = DataSource::folder(
            &train_root,
            fixed.as_deref(),
            transform,
            batch,
            seed,
            shuffle,
            pipeline,
        )?;
        let names = train.class_names().unwrap_or_default();
        model.adopt_classes(&names, &train_root)?;
        let val_source =
            DataSource::folder(&val_root, Some(&names), eval, batch, seed, false, pipeline)?;
        return Ok((train, val_source));
    }
    let open = |path: &Path| -> Result<DataSource, TrainError> {
        let set = read_tensor_file(path, model.classes())?;
        if set.sample_dims != model.sample_dims() {
            return Err(TrainError::Tensor {
                path: path.to_path_buf(),
                tensor: "x".into(),
                expected: format!("shape [N, {}]", dims(&model.sample_dims())),
                actual: format!("[{}, {}]", set.len(), dims(&set.sample_dims)),
            });
        }
        Ok(DataSource::tensors(set, batch, seed, shuffle))
    };
    let train = open(data)?;
    let val_source = match val {
        Some(v) => open(v)?,
        None => open(data)?,
    };
    let val_source = match val_source {
        DataSource::Tensors { set, batch, seed, .. } => {
            DataSource::tensors(set, batch, seed, false)
        }
        other => other,
    };
    Ok((train, val_source))
}

fn dims(d: &[usize]) -> String {
    d.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// The learning rate as a function of the update count (and, for plateau, of the
/// validation accuracies seen).
enum Rate {
    Fixed(Box<dyn sprout_core::schedule::Schedule>),
    Plateau(ReduceOnPlateau),
}

impl Rate {
    fn new(choice: ScheduleChoice, base: f32, total: u32) -> Self {
        match choice {
            ScheduleChoice::Constant => Rate::Fixed(Box::new(Constant(base))),
            ScheduleChoice::Step => {
                Rate::Fixed(Box::new(StepDecay { base, gamma: 0.1, step_size: (total / 3).max(1) }))
            }
            ScheduleChoice::Cosine => Rate::Fixed(Box::new(CosineWithWarmup {
                base,
                min: 0.0,
                warmup: total / 20,
                total,
            })),
            ScheduleChoice::Plateau => {
                let mut p = ReduceOnPlateau::new(base, Goal::Maximize);
                p.patience = 2;
                p.factor = 0.5;
                Rate::Plateau(p)
            }
        }
    }

    fn at(&self, update: u32) -> f32 {
        match self {
            Rate::Fixed(s) => s.learning_rate(update),
            Rate::Plateau(p) => p.learning_rate(),
        }
    }

    fn observe(&mut self, accuracy: f32) {
        if let Rate::Plateau(p) = self {
            p.observe(accuracy);
        }
    }
}

/// Trains `model` on `train`, validating on `val` after every epoch.
pub fn train(
    model: &Model,
    train: &mut DataSource,
    val: &mut DataSource,
    options: &TrainOptions,
    progress: &mut dyn FnMut(TrainEvent<'_>),
) -> Result<Outcome, TrainError> {
    let batch = model.batch();
    let per_epoch = train.len() / batch;
    if per_epoch == 0 {
        return Err(TrainError::Mismatch(format!(
            "{}: {} samples, fewer than one batch of {batch}",
            train.origin().display(),
            train.len()
        )));
    }
    let z = &model.zoo;
    let trainable = sprout_zoo::select_trainable(z, &options.trainable)?;
    let optimizer = match options.optimizer {
        OptimizerChoice::Sgd { momentum, weight_decay, nesterov } => {
            Optimizer::Sgd(SgdConfig { momentum, weight_decay, nesterov })
        }
        OptimizerChoice::AdamW { weight_decay } => {
            Optimizer::AdamW(AdamWConfig { weight_decay, ..AdamWConfig::default() })
        }
    };
    let mixed_precision = options.mixed_precision.then(LossScaleConfig::default);
    let cfg = TrainConfig { optimizer, clip_grad_norm: None, accumulation: 1, mixed_precision };
    let training =
        compile_training_step_with(&z.graph, z.loss, &trainable, &cfg, &MemoryOptions::default())?;
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let operand = |id| {
        plan.binding_of(id)
            .map(|b| b.operand)
            .ok_or_else(|| TrainError::Mismatch("the loss does not depend on the input".into()))
    };
    let (input, labels, loss) = (operand(z.input)?, operand(z.labels)?, operand(training.loss)?);
    let mut exec = Executor::new(plan.view(), Cpu::new())?;
    let mut inference = Inference::new(model)?;
    let total = u32::try_from(per_epoch).unwrap_or(u32::MAX).saturating_mul(options.epochs);
    let mut rate = Rate::new(options.schedule, options.learning_rate, total);
    let hash = model.graph_hash();

    let mut history = Vec::new();
    let mut best: Option<f32> = None;
    let mut first = 0;
    if let Some(path) = &options.resume {
        let ckpt = read_checkpoint(path)?;
        let refuse = |source| TrainError::Checkpoint { path: path.clone(), source };
        if ckpt.graph_hash != hash {
            return Err(refuse(CheckpointError::ModelHash {
                expected: hash,
                found: ckpt.graph_hash,
            }));
        }
        let state = memory.region_mut(Region::State);
        if ckpt.state.len() != state.len() {
            return Err(refuse(CheckpointError::StateSize {
                expected: state.len(),
                found: ckpt.state.len(),
            }));
        }
        if ckpt.epoch > options.epochs {
            return Err(refuse(CheckpointError::Finished {
                done: ckpt.epoch,
                requested: options.epochs,
            }));
        }
        if ckpt.seed != options.seed {
            return Err(TrainError::Mismatch(format!(
                "checkpoint {} was trained with --seed {}, not {}",
                path.display(),
                ckpt.seed,
                options.seed
            )));
        }
        let progress = Progress {
            updates: ckpt.updates,
            micro_batches: ckpt.micro_batches,
            pending: ckpt.pending,
        };
        exec.resume_at(progress)?;
        memory.region_mut(Region::State).copy_from_slice(&ckpt.state);
        for record in &ckpt.history {
            rate.observe(record.val_accuracy);
        }
        first = ckpt.epoch;
        best = ckpt.best_accuracy;
        history = ckpt.history;
    }
    progress(TrainEvent::Start { first, epochs: options.epochs, batches: per_epoch });
    if let Some(dir) = &options.out_dir {
        fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
    }

    let mut metrics = None;
    let mut skipped_steps = 0;
    for epoch in first..options.epochs {
        let (mut loss_sum, mut steps, mut lr) = (0.0f64, 0usize, options.learning_rate);
        for (index, b) in train.epoch(u64::from(epoch)).enumerate() {
            let b = b?;
            if b.len() < batch {
                continue; // the plan's batch is fixed: the last partial batch is dropped
            }
            let mut regions = memory.regions();
            regions.write(&input, &b.x)?;
            regions.write(&labels, &b.y)?;
            lr = rate.at(exec.updates());
            if let StepOutcome::Skipped { .. } = exec.train_step(&mut regions, lr)? {
                skipped_steps += 1;
            }
            let value = regions.read::<f32>(&loss)?[0];
            loss_sum += f64::from(value);
            steps += 1;
            progress(TrainEvent::Batch { epoch, batch: index, loss: value });
        }
        plan.copy_weights(&memory, &inference.plan, &mut inference.memory);
        let m = inference.evaluate(val)?;
        let accuracy = m.accuracy() as f32;
        rate.observe(accuracy);
        let record = EpochRecord {
            epoch: epoch + 1,
            train_loss: (loss_sum / steps.max(1) as f64) as f32,
            val_loss: m.loss() as f32,
            val_accuracy: accuracy,
            learning_rate: lr,
        };
        history.push(record.clone());
        let improved = best.is_none_or(|b| accuracy > b);
        if improved {
            best = Some(accuracy);
        }
        if let Some(dir) = &options.out_dir {
            let file = model.file_with(plan, &memory);
            let model_bytes = save_model(&file)
                .map_err(|source| TrainError::Model { path: dir.join("best.sprout"), source })?;
            if improved {
                write_atomic(&dir.join("best.sprout"), &model_bytes)?;
            }
            let state = memory.region(Region::State).to_vec();
            let progress = exec.progress();
            let ckpt = Checkpoint {
                epoch: epoch + 1,
                updates: progress.updates,
                micro_batches: progress.micro_batches,
                pending: progress.pending,
                seed: options.seed,
                best_accuracy: best,
                graph_hash: hash,
                state_size: state.len() as u64,
                state,
                history: history.clone(),
                model: model_bytes,
            };
            write_checkpoint(dir, &ckpt)?;
            write_curve(&dir.join("curve.png"), &history)?;
        }
        progress(TrainEvent::Epoch { record: &record, metrics: &m });
        metrics = Some(m);
    }
    let metrics = match metrics {
        Some(m) => m,
        None => {
            plan.copy_weights(&memory, &inference.plan, &mut inference.memory);
            inference.evaluate(val)?
        }
    };
    let loss_scale = match plan.binding(LOSS_SCALE) {
        Some(b) => {
            let final_scale = memory.regions().read::<f32>(&b.operand)?[0];
            Some(LossScaleReport { final_scale, skipped_steps })
        }
        None => None,
    };
    Ok(Outcome {
        model: model.file_with(plan, &memory),
        history,
        metrics,
        best_accuracy: best,
        loss_scale,
    })
}
