//! The training loop: compile the step, run shuffled full batches through the executor
//! (the last partial batch of an epoch is dropped: a compiled plan has a fixed batch),
//! validate through the inference plan, checkpoint, keep the best model, record the run
//! (`args.json`, `metrics.csv`, the curve), stop early when asked.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sprout_core::hyperparams::{AdamWConfig, BatchNormStats, LossScaleConfig, SgdConfig};
use sprout_core::optim::LOSS_SCALE;
use sprout_core::schedule::{Constant, CosineWithWarmup, Goal, ReduceOnPlateau, StepDecay};
use sprout_core::{
    compile_training_step_with, save_model, DType, EagerOptions, Executor, Graph, GraphError,
    HostMemory, MemoryOptions, ModelFile, Operand, Optimizer, Plan, Progress, Region, Regions,
    StepContext, StepOutcome, TensorId, TrainConfig,
};
use sprout_data::{Batch, Pipeline, ResizeMode};
use sprout_zoo::ZooModel;

use crate::checkpoint::{read_checkpoint, write_checkpoint, Checkpoint, EpochRecord};
use crate::error::CheckpointError;
use crate::files::write_atomic;
use crate::logit_adjust::{adjusted_loss, LogitAdjust};
use crate::metrics::Metrics;
use crate::metrics_csv::{read_metrics, write_metrics, MetricsRow, METRICS_FILE};
use crate::model::{Inference, Model};
use crate::plot::write_curves;
use crate::preprocess::{fit_of, image_input, ImageInput};
use crate::run_record::{RunRecord, RECORD_FILE};
use crate::source::{DataSource, TensorSamples};
use crate::split::{
    class_counts, evaluation_root, open_classes, split_folder, training_root, DataSplit, Fnv,
    SplitKind,
};
use crate::TrainError;
use sprout_cpu::{Cpu, KernelProfile};

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
    /// Where checkpoints, `best.sprout`, `args.json`, `metrics.csv` and the curve go
    /// (nothing is written without one).
    pub out_dir: Option<PathBuf>,
    /// A checkpoint to continue from.
    pub resume: Option<PathBuf>,
    /// Stop after this many epochs without a better validation accuracy.
    pub patience: Option<u32>,
    /// The options and data of the run, completed with these options and written to
    /// `args.json`; resuming, the checkpoint folder's `args.json` must match it.
    pub record: Option<RunRecord>,
    /// Mixed precision: f16 copies of weights and activations in the forward pass, f32
    /// master weights, dynamic loss scaling with `GradScaler`'s defaults.
    pub mixed_precision: bool,
    /// FedProx's proximal term `mu/2 * |w - w0|^2`, anchored at the weights the run
    /// starts from (0: none). Applied decoupled, as AdamW's weight decay: after every
    /// update each trainable weight moves `lr * mu * (w - w0)` back towards its start.
    pub proximal_mu: f32,
    /// SCAFFOLD's correction (Karimireddy et al. 2020), by parameter name: after every
    /// update each named trainable weight also moves by `-lr * offset`, as if the offset
    /// had been added to its gradient outside the optimizer (a box sends its `c - c_i`).
    /// Every name must be a trainable f32 parameter of the model with the offset's shape
    /// and finite values; weights not named move as without it.
    pub gradient_offset: Vec<NamedOffset>,
    /// What the batch norms normalise with while training (their running statistics stay
    /// as they are with [`BatchNormStats::Running`]).
    pub batch_norm: BatchNormStats,
    /// Logit adjustment of the training loss for label skew (none: the plain loss).
    pub logit_adjust: Option<LogitAdjust>,
    /// Time every kernel call of the training steps ([`Outcome::profile`]).
    pub profile: bool,
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
            patience: None,
            record: None,
            mixed_precision: false,
            proximal_mu: 0.0,
            gradient_offset: Vec::new(),
            batch_norm: BatchNormStats::Batch,
            logit_adjust: None,
            profile: false,
        }
    }
}

impl TrainOptions {
    /// Records these options into `record` under their `sprout train` flags.
    fn note(&self, record: &mut RunRecord) {
        record.set("--trainable", &self.trainable);
        match self.optimizer {
            OptimizerChoice::Sgd { momentum, weight_decay, nesterov } => {
                record.set("--optimizer", "sgd");
                record.set_f32("--momentum", momentum);
                record.set_f32("--weight-decay", weight_decay);
                record.set("--nesterov", nesterov);
            }
            OptimizerChoice::AdamW { weight_decay } => {
                record.set("--optimizer", "adamw");
                record.set_f32("--weight-decay", weight_decay);
            }
        }
        let schedule = match self.schedule {
            ScheduleChoice::Constant => "constant",
            ScheduleChoice::Step => "step",
            ScheduleChoice::Cosine => "cosine",
            ScheduleChoice::Plateau => "plateau",
        };
        record.set_f32("--lr", self.learning_rate);
        record.set("--schedule", schedule);
        record.set("--epochs", self.epochs);
        record.set("--seed", self.seed);
        record.set("--mixed-precision", self.mixed_precision);
        record.set("--patience", self.patience);
        record.set_f32("--proximal-mu", self.proximal_mu);
        // Recorded only when given (as a digest of its names and values), so runs recorded
        // before the flag existed still resume.
        if !self.gradient_offset.is_empty() {
            record.set("--gradient-offset", offset_digest(&self.gradient_offset));
        }
        // Recorded only when given, so runs recorded before the flag existed still resume.
        if self.batch_norm == BatchNormStats::Running {
            record.set("--batch-norm", "running");
        }
        // Recorded only when given, so runs recorded before the flag existed still resume.
        if let Some(adjust) = &self.logit_adjust {
            record.set_f32("--logit-adjust", adjust.tau);
        }
    }
}

/// What the loop reports as it goes (more kinds of event may come: match with a wildcard).
#[derive(Debug)]
#[non_exhaustive]
pub enum TrainEvent<'a> {
    /// Before the first epoch (`first` > 0 when resuming).
    Start { first: u32, epochs: u32, batches: usize },
    /// After each training batch (0-based `epoch` and `batch`).
    Batch { epoch: u32, batch: usize, loss: f32 },
    /// After each epoch's validation.
    Epoch { record: &'a EpochRecord, metrics: &'a Metrics },
    /// Training stops after `epoch`: `patience` epochs passed without beating `best_epoch`.
    EarlyStop { epoch: u32, best_epoch: u32, patience: u32 },
}

/// The result of a run.
pub struct Outcome {
    /// The model with its final weights.
    pub model: ModelFile,
    pub history: Vec<EpochRecord>,
    /// Validation metrics after the last epoch.
    pub metrics: Metrics,
    pub best_accuracy: Option<f32>,
    /// The (1-based) epoch of the best accuracy, whose model is `best.sprout`.
    pub best_epoch: Option<u32>,
    /// The epoch after which `--patience` stopped the run.
    pub stopped_early: Option<u32>,
    /// With mixed precision: the loss scale at the end, and how many optimizer steps this
    /// run skipped because gradients overflowed.
    pub loss_scale: Option<LossScaleReport>,
    /// With [`TrainOptions::profile`]: the training steps' time per kernel.
    pub profile: Option<KernelProfile>,
}

/// How dynamic loss scaling went in a mixed-precision run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleReport {
    pub final_scale: f32,
    pub skipped_steps: u32,
}

/// The class names of a class-folder data set (`DATA/train` when present, else `DATA`),
/// or `None` for a tensor file.
pub fn folder_classes(data: &Path) -> Result<Option<Vec<String>>, TrainError> {
    if !data.is_dir() {
        return Ok(None);
    }
    Ok(Some(sprout_data::Dataset::open(&training_root(data))?.classes))
}

/// How [`open_data`] chooses and feeds the data.
#[derive(Clone, Debug)]
pub struct DataOptions {
    /// A validation tensor file, for a tensor-file data set (an error with a folder).
    pub val: Option<PathBuf>,
    /// The share of a single image folder that validates, as given (`None`:
    /// [`DEFAULT_VAL_FRACTION`](crate::DEFAULT_VAL_FRACTION)); an error with `DATA/val` or a tensor file.
    pub val_fraction: Option<f32>,
    /// Train on the augmenting transform (else on the evaluation transform).
    pub augment: bool,
    pub shuffle: bool,
    /// The data order, the augmentation and the split.
    pub seed: u64,
    /// How image folders are read: decoding threads, cache (the resize mode is the
    /// model's, see [`image_input`]).
    pub pipeline: Pipeline,
    /// The resize mode asked for (`--resize`), which must agree with the model's.
    pub resize: Option<ResizeMode>,
}

impl Default for DataOptions {
    fn default() -> Self {
        Self {
            val: None,
            val_fraction: None,
            augment: true,
            shuffle: true,
            seed: 0,
            pipeline: Pipeline::default(),
            resize: None,
        }
    }
}

/// The training and validation data of a run, and how they were chosen.
pub struct TrainData {
    pub train: DataSource,
    pub val: DataSource,
    pub split: DataSplit,
}

/// The model's way in for the pictures of `data` (see [`image_input`]), recorded in the
/// model: the fit it trains or runs with becomes its own.
fn image_folder_input(
    model: &mut Model,
    data: &Path,
    asked: Option<ResizeMode>,
) -> Result<ImageInput, TrainError> {
    let input = image_input(model, asked)
        .map_err(|e| TrainError::Mismatch(format!("{}: {e}", data.display())))?;
    model.metadata.preprocessing.fit = Some(fit_of(input.fit));
    Ok(input)
}

/// The class names a folder must have for `model`: its own when fixed (a `.sprout` file).
fn known_classes(model: &Model) -> Option<Vec<String>> {
    model.names_fixed.then(|| model.metadata.class_names.clone())
}

/// Opens a tensor file whose samples must have the model's input shape.
fn open_tensors(model: &Model, path: &Path) -> Result<TensorSamples, TrainError> {
    let set = TensorSamples::open(path, model.classes())?;
    if set.sample_dims() != model.sample_dims() {
        return Err(TrainError::Tensor {
            path: path.to_path_buf(),
            tensor: "x".into(),
            expected: format!("shape [N, {}]", dims(&model.sample_dims())),
            actual: format!("[{}, {}]", set.len(), dims(set.sample_dims())),
        });
    }
    Ok(set)
}

/// Opens the training and validation data at `data` for `model`. A folder: `DATA/train`
/// and `DATA/val` as given, else `DATA/train` or `DATA` split per class (see
/// [`DataOptions::val_fraction`]); its class names are given to the model (see
/// [`Model::adopt_classes`]), and a model with fixed names must have exactly the data's
/// classes. A tensor file: validated on `val`, else on itself.
pub fn open_data(
    model: &mut Model,
    data: &Path,
    options: &DataOptions,
) -> Result<TrainData, TrainError> {
    let batch = model.batch();
    let DataOptions { augment, shuffle, seed, .. } = *options;
    if data.is_dir() {
        if let Some(val) = &options.val {
            return Err(TrainError::Mismatch(format!(
                "--val {}: is for tensor files; the folder {} validates on its val/ folder or \
                 on a split of it (--val-fraction)",
                val.display(),
                data.display()
            )));
        }
        let input = image_folder_input(model, data, options.resize)?;
        let known = known_classes(model);
        let (train_set, val_set, split) =
            split_folder(data, known.as_deref(), options.val_fraction, seed)?;
        model.adopt_classes(&train_set.classes, &train_set.root)?;
        let transform = if augment { input.train } else { input.eval };
        let pipeline = &Pipeline { resize: input.fit, ..options.pipeline.clone() };
        let train = DataSource::folder(train_set, transform, batch, seed, shuffle, pipeline)?;
        let val = DataSource::folder(val_set, input.eval, batch, seed, false, pipeline)?;
        return Ok(TrainData { train, val, split });
    }
    if let Some(fraction) = options.val_fraction {
        return Err(TrainError::Mismatch(format!(
            "--val-fraction {fraction}: {} is a tensor file; give its validation data with --val",
            data.display()
        )));
    }
    let train_set = open_tensors(model, data)?;
    let (val_set, kind) = match &options.val {
        Some(v) => (open_tensors(model, v)?, SplitKind::TensorFiles { val: v.clone() }),
        None => (train_set.clone(), SplitKind::TrainingFile),
    };
    let mut hash = Fnv::new();
    for set in [&train_set, &val_set] {
        set.hash_into(&mut hash)?;
    }
    let labels =
        |s: &TensorSamples| s.labels().iter().map(|&l| l as usize).collect::<Vec<_>>().into_iter();
    let split = DataSplit {
        kind,
        train: train_set.len(),
        val: val_set.len(),
        classes: class_counts(&model.metadata.class_names, labels(&train_set), labels(&val_set)),
        hash: hash.hex(),
    };
    Ok(TrainData {
        train: train_set.into_source(batch, seed, shuffle),
        val: val_set.into_source(batch, seed, false),
        split,
    })
}

/// Opens the data `sprout eval` measures: of a folder, `DATA/val` (else `DATA/train`, else
/// `DATA`) whole, whose class folders must be the model's classes when its names are fixed;
/// or a tensor file. Pictures are read as the model says (see [`image_input`]).
pub fn open_eval_data(
    model: &mut Model,
    data: &Path,
    pipeline: &Pipeline,
    resize: Option<ResizeMode>,
) -> Result<DataSource, TrainError> {
    let batch = model.batch();
    if data.is_dir() {
        let input = image_folder_input(model, data, resize)?;
        let set =
            open_classes(&evaluation_root(data), known_classes(model).as_deref(), "the model")?;
        model.adopt_classes(&set.classes, &set.root)?;
        let pipeline = &Pipeline { resize: input.fit, ..pipeline.clone() };
        return DataSource::folder(set, input.eval, batch, 0, false, pipeline);
    }
    Ok(open_tensors(model, data)?.into_source(batch, 0, false))
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
    let cfg = TrainConfig {
        optimizer,
        clip_grad_norm: None,
        accumulation: 1,
        mixed_precision,
        batch_norm: options.batch_norm,
    };
    crate::memory::check_graph(&z.graph, "the model to train")?;
    let adjusted = match &options.logit_adjust {
        Some(adjust) => Some(adjusted_loss(&z.graph, z.loss, adjust)?),
        None => None,
    };
    let (graph, loss) = adjusted.as_ref().map_or((&z.graph, z.loss), |(g, l)| (g, *l));
    let training =
        compile_training_step_with(graph, loss, &trainable, &cfg, &MemoryOptions::default())?;
    let plan = &training.plan;
    let mut memory = crate::memory::initial_memory(plan, &training.graph, "the training step")?;
    let anchor = Anchor::new(options, &z.graph, plan, &trainable, &memory)?;
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
    if options.patience == Some(0) {
        return Err(TrainError::Mismatch("--patience 0: give at least 1 epoch".into()));
    }
    let record = options.record.clone().map(|mut r| {
        options.note(&mut r);
        r
    });

    let mut history = Vec::new();
    let mut best: Option<f32> = None;
    let mut first = 0;
    if let Some(path) = &options.resume {
        let ckpt = read_checkpoint(path)?;
        let refuse = |source| TrainError::Checkpoint { path: path.clone(), source };
        // Options first: they name what changed, where the checks below see only effects.
        if let Some(record) = &record {
            let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
            let folder = folder.unwrap_or(Path::new("."));
            if !folder.join(RECORD_FILE).is_file() {
                return Err(TrainError::Mismatch(format!(
                    "--resume {}: its folder has no {RECORD_FILE} (a run of an older sprout?), \
                     so unchanged data and options cannot be checked",
                    path.display()
                )));
            }
            record.refuse_changes(&RunRecord::read(folder)?)?;
        }
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
    let mut best_epoch = None;
    let mut replayed = None;
    for r in &history {
        if replayed.is_none_or(|b| r.val_accuracy > b) {
            (replayed, best_epoch) = (Some(r.val_accuracy), Some(r.epoch));
        }
    }
    let mut rows: Vec<MetricsRow> = history
        .iter()
        .map(|r| MetricsRow { record: r.clone(), images_per_second: None, seconds: None })
        .collect();
    if let Some(dir) = &options.out_dir {
        fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
        if let Some(record) = &record {
            record.write(dir)?;
        }
        let csv = dir.join(METRICS_FILE);
        if options.resume.is_some() && csv.is_file() {
            for old in read_metrics(&csv)? {
                if let Some(row) = rows.iter_mut().find(|r| r.record.epoch == old.record.epoch) {
                    (row.images_per_second, row.seconds) = (old.images_per_second, old.seconds);
                }
            }
        }
    }
    progress(TrainEvent::Start { first, epochs: options.epochs, batches: per_epoch });

    let mut metrics = None;
    let mut skipped_steps = 0;
    let mut before = vec![0u8; memory.region(Region::State).len()];
    let mut stopped_early = None;
    let mut profile = options.profile.then(KernelProfile::new);
    for epoch in first..options.epochs {
        if let Some(patience) = options.patience {
            let best_epoch = best_epoch.unwrap_or(0);
            if epoch - best_epoch >= patience {
                progress(TrainEvent::EarlyStop { epoch, best_epoch, patience });
                stopped_early = Some(epoch);
                break;
            }
        }
        let started = Instant::now();
        let (mut loss_sum, mut steps, mut lr) = (0.0f64, 0usize, options.learning_rate);
        for (index, b) in train.epoch(u64::from(epoch)).enumerate() {
            let b = b?;
            if b.len() < batch {
                continue; // the plan's batch is fixed: the last partial batch is dropped
            }
            // The state before the step, for an eager replay should the step go non-finite.
            before.copy_from_slice(memory.region(Region::State));
            let context = StepContext {
                learning_rate: rate.at(exec.updates()),
                update: exec.updates(),
                micro_batch: exec.progress().micro_batches,
            };
            let mut regions = memory.regions();
            regions.write(&input, &b.x)?;
            regions.write(&labels, &b.y)?;
            lr = context.learning_rate;
            let outcome = exec.train_step_observed(&mut regions, lr, &mut profile)?;
            let skipped = matches!(outcome, StepOutcome::Skipped { .. });
            skipped_steps += u32::from(skipped);
            if !skipped {
                anchor.pull(&mut regions, lr)?;
            }
            let value = regions.read::<f32>(&loss)?[0];
            // A skipped step (loss scaling) has overflowed on purpose; its update did not run.
            let diverged = if skipped { None } else { non_finite(value, plan, &memory) };
            if let Some(what) = diverged {
                let step = FailedStep {
                    graph: &training.graph,
                    plan,
                    memory: &memory,
                    before: &before,
                    cfg: &cfg,
                };
                return Err(TrainError::NonFinite {
                    what,
                    epoch: epoch + 1,
                    batch: index + 1,
                    origin: step.first_anomaly(z, &b, context),
                });
            }
            loss_sum += f64::from(value);
            steps += 1;
            progress(TrainEvent::Batch { epoch, batch: index, loss: value });
        }
        let training_seconds = started.elapsed().as_secs_f64();
        // Validation and checkpoints run without the step's activations and gradients.
        memory.release_arena();
        sprout_cpu::advise_huge_pages(&mut memory);
        inference.load_weights(plan, &memory);
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
            (best, best_epoch) = (Some(accuracy), Some(epoch + 1));
        }
        rows.push(MetricsRow {
            record: record.clone(),
            images_per_second: Some((steps * batch) as f64 / training_seconds.max(1e-9)),
            seconds: Some(started.elapsed().as_secs_f64()),
        });
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
            write_metrics(&dir.join(METRICS_FILE), &rows)?;
            write_curves(dir, &history)?;
        }
        progress(TrainEvent::Epoch { record: &record, metrics: &m });
        metrics = Some(m);
    }
    let metrics = match metrics {
        Some(m) => m,
        None => {
            inference.load_weights(plan, &memory);
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
        best_epoch,
        stopped_early,
        loss_scale,
        profile,
    })
}

/// A parameter's SCAFFOLD offset: its name, shape and values (row-major).
pub type NamedOffset = (String, Vec<usize>, Vec<f32>);

/// A digest of `offsets`' names, shapes and values, for the run record.
fn offset_digest(offsets: &[NamedOffset]) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (name, shape, values) in offsets {
        hasher.update(name.as_bytes());
        shape.iter().for_each(|d| hasher.update(&(*d as u64).to_le_bytes()));
        values.iter().for_each(|v| hasher.update(&v.to_le_bytes()));
    }
    format!("xxh3:{:032x}", hasher.digest128())
}

/// Each offset's parameter in `graph`, checked: every name must be one of the `trainable`
/// parameters, with its shape and finite values (`sprout train --gradient-offset`; the
/// service checks a job's offsets this way before it queues the job).
pub fn check_gradient_offset<'o>(
    graph: &Graph,
    trainable: &[TensorId],
    offsets: &'o [NamedOffset],
) -> Result<Vec<(TensorId, &'o [f32])>, TrainError> {
    offsets
        .iter()
        .map(|(name, shape, values)| {
            let refuse =
                |why: String| TrainError::Mismatch(format!("gradient offset '{name}': {why}"));
            let id = graph
                .find(name)
                .filter(|id| trainable.contains(id))
                .ok_or_else(|| refuse("not a trainable parameter of the model".into()))?;
            let dims = graph.tensor(id).shape.dims();
            if shape.as_slice() != dims || values.len() != graph.tensor(id).shape.numel() {
                return Err(refuse(format!(
                    "shape {shape:?} ({} values), the parameter's is {dims:?}",
                    values.len()
                )));
            }
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(refuse(format!("holds {bad}")));
            }
            Ok((id, values.as_slice()))
        })
        .collect()
}

/// What moves the trainable weights after every update besides the optimizer: FedProx's
/// pull towards the weights the run started from (`mu`) and SCAFFOLD's offsets.
struct Anchor {
    mu: f32,
    weights: Vec<(Operand, Vec<f32>)>,
    offsets: Vec<(Operand, Vec<f32>)>,
}

impl Anchor {
    /// The starting values of the f32 `trainable` weights in `memory` (none when the
    /// proximal mu is 0) and the options' gradient offsets, each checked against the model.
    fn new(
        options: &TrainOptions,
        graph: &Graph,
        plan: &Plan,
        trainable: &[TensorId],
        memory: &HostMemory,
    ) -> Result<Self, TrainError> {
        let mu = options.proximal_mu;
        if !(mu.is_finite() && mu >= 0.0) {
            return Err(TrainError::Mismatch(format!(
                "--proximal-mu {mu}: give a finite value of 0 or more"
            )));
        }
        let f32_operand =
            |id: TensorId| plan.binding_of(id).map(|b| b.operand).filter(|o| o.dtype == DType::F32);
        let mut weights = Vec::new();
        if mu > 0.0 {
            for &id in trainable {
                let Some(operand) = f32_operand(id) else { continue };
                let bytes = &memory.region(operand.region)[operand.offset..operand.end()];
                let start = bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                weights.push((operand, start));
            }
        }
        let mut offsets = Vec::with_capacity(options.gradient_offset.len());
        for (id, values) in check_gradient_offset(graph, trainable, &options.gradient_offset)? {
            let operand = f32_operand(id).ok_or_else(|| {
                TrainError::Mismatch(format!(
                    "gradient offset '{}': not an f32 weight of the plan",
                    graph.tensor(id).name
                ))
            })?;
            offsets.push((operand, values.to_vec()));
        }
        Ok(Self { mu, weights, offsets })
    }

    /// Moves every anchored weight `lr * mu * (w - w0)` back towards its start and every
    /// offset one by `-lr * offset`.
    fn pull(&self, regions: &mut Regions<'_>, lr: f32) -> Result<(), TrainError> {
        let rate = lr * self.mu;
        for (operand, start) in &self.weights {
            let pulled: Vec<f32> = regions
                .read::<f32>(operand)?
                .iter()
                .zip(start)
                .map(|(&w, &w0)| w - rate * (w - w0))
                .collect();
            regions.write(operand, &pulled)?;
        }
        for (operand, offset) in &self.offsets {
            let moved: Vec<f32> = regions
                .read::<f32>(operand)?
                .iter()
                .zip(offset)
                .map(|(&w, &o)| w - lr * o)
                .collect();
            regions.write(operand, &moved)?;
        }
        Ok(())
    }
}

/// What is non-finite after a training step, if anything: its loss, or a weight, buffer or
/// optimizer state value (an update that overflowed).
fn non_finite(loss: f32, plan: &Plan, memory: &HostMemory) -> Option<String> {
    if !loss.is_finite() {
        return Some(format!("the loss is {loss}"));
    }
    plan.bindings.iter().filter(|b| b.role.is_state() && b.operand.dtype == DType::F32).find_map(
        |b| {
            let bytes = &memory.region(b.operand.region)[b.operand.offset..b.operand.end()];
            let values =
                || bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
            // A pass without early exit (which vectorizes) first; the search only on failure.
            if values().fold(true, |finite, v| finite & v.is_finite()) {
                return None;
            }
            let (i, v) = values().enumerate().find(|(_, v)| !v.is_finite())?;
            Some(format!("'{}' holds {v} at element {i} after the update", b.name))
        },
    )
}

/// A training step that went non-finite, with what it started from.
struct FailedStep<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    memory: &'a HostMemory,
    /// The state region before the step.
    before: &'a [u8],
    /// How the step was compiled (its batch norms' mode).
    cfg: &'a TrainConfig,
}

impl FailedStep<'_> {
    /// Where the step's first NaN or infinity appeared: the step re-run on the reference
    /// kernels in eager anomaly mode, from the state it started with and batch `b`.
    fn first_anomaly(&self, z: &ZooModel, b: &Batch, context: StepContext) -> String {
        let x: Vec<u8> = b.x.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let y: Vec<u8> = b.y.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut values: Vec<(TensorId, &[u8])> = vec![(z.input, &x), (z.labels, &y)];
        for binding in &self.plan.bindings {
            let range = binding.operand.offset..binding.operand.end();
            let bytes = match binding.operand.region {
                Region::State => &self.before[range],
                Region::Frozen => &self.memory.region(Region::Frozen)[range],
                Region::Arena => continue,
            };
            values.push((binding.tensor, bytes));
        }
        let mode = self.cfg.batch_norm.training_mode();
        let options = EagerOptions { mode, detect_anomalies: true, context };
        match self.graph.replay(options, &values) {
            Err(GraphError::Anomaly { op, node, tensor, shape, index, value }) => format!(
                "it first appeared in {op} '{node}' ('{tensor}' {shape} holds {value} at \
                 element {index})"
            ),
            Err(other) => format!("re-running the step to find its first NaN failed: {other}"),
            Ok(()) => "re-running the step on the reference kernels gave no NaN or infinity".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::{nn, Shape};

    #[test]
    fn a_non_finite_loss_or_weight_after_a_step_is_named() {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(2, 4)).unwrap();
        let y = g.labels("y", 2).unwrap();
        let logits = nn::linear(&mut g, "fc", x, 3).unwrap();
        let loss = g.cross_entropy("loss", logits, y).unwrap();
        let trainable: Vec<TensorId> = g.with_role(sprout_core::Role::FrozenParam).collect();
        let cfg = TrainConfig::sgd(0.9);
        let training = sprout_core::compile_training_step(&g, loss, &trainable, &cfg).unwrap();
        let plan = &training.plan;
        let mut memory = plan.initial_memory(&training.graph);
        assert_eq!(non_finite(0.5, plan, &memory), None);
        assert_eq!(non_finite(f32::NAN, plan, &memory).as_deref(), Some("the loss is NaN"));
        let weight = plan.binding("fc.weight").unwrap().operand;
        let at = weight.offset + 4 * 5;
        memory.region_mut(weight.region)[at..at + 4].copy_from_slice(&f32::INFINITY.to_ne_bytes());
        let found = non_finite(0.5, plan, &memory).unwrap();
        assert_eq!(found, "'fc.weight' holds inf at element 5 after the update");
    }
}
