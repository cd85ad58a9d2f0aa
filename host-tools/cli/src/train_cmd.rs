//! `sprout train`: trains a zoo model or a `.sprout` file on an image folder or a tensor
//! file, with a progress bar and a summary line per epoch; a fresh run folder holds
//! `args.json`, `metrics.csv`, the checkpoints, `best.sprout` and `curve.png`/`curve.svg`; the
//! summary is printed as text or JSON (`--json`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use sprout_core::hyperparams::BatchNormStats;
use sprout_core::save_model;
use sprout_train::{
    check_output, folder_classes, open_data, run_folder, train, write_atomic, DataOptions,
    EpochRecord, KernelTime, LogitAdjust, Model, OptimizerChoice, RunRecord, ScheduleChoice,
    SplitKind, TrainEvent, TrainOptions,
};
use sprout_zoo::Architecture;

use crate::backend_args::BackendArgs;
use crate::image_args::PipelineArgs;
use crate::progress::{self, Unit};
use crate::summary::{print_json, EpochSummary, KernelSummary, LossScaleSummary, TrainSummary};

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// A zoo model to train from its initial weights: mlp, resnet or leafnet.
    #[arg(long, value_name = "NAME", value_parser = parse_architecture, required_unless_present = "model", conflicts_with = "model")]
    zoo: Option<Architecture>,
    /// A .sprout model to continue training (fine-tuning).
    #[arg(long, value_name = "FILE")]
    model: Option<PathBuf>,
    /// With --zoo: start from this .sprout file's weights wherever names and sizes match (a
    /// pretrained backbone under a new head sized for the data's classes).
    #[arg(long, value_name = "FILE", requires = "zoo", conflicts_with = "model")]
    init_from: Option<PathBuf>,
    /// With --init-from: parameters left at their fresh initial values although the file
    /// has them (--trainable syntax; `head` gives a new head for the same classes).
    #[arg(long, value_name = "CHOICE", requires = "init_from")]
    fresh: Option<String>,
    /// With --model: replace its last classifier (the dense layer or 1x1 convolution
    /// feeding the logits) with a fresh one for N classes (without N: as many as the data
    /// folder has classes), initialised from --seed; train only it with --trainable head.
    #[arg(long, value_name = "N", requires = "model", num_args = 0..=1,
          value_parser = clap::value_parser!(u64).range(1..))]
    new_head: Option<Option<u64>>,
    /// Training data: a folder per class (DIR/train and DIR/val used as given; else DIR, or
    /// DIR/train, split by --val-fraction) or a .npz / .safetensors file with x (float32
    /// [N, C, H, W]) and y (int64 [N]).
    #[arg(long, value_name = "DIR|FILE")]
    data: PathBuf,
    /// Validation tensor file, for a tensor-file --data (default: the training file itself).
    #[arg(long, value_name = "FILE")]
    val: Option<PathBuf>,
    /// The share of each class of a folder without val/ that validates (default 0.2),
    /// chosen by --seed.
    #[arg(long, value_name = "F", value_parser = crate::numbers::fraction)]
    val_fraction: Option<f32>,
    /// What to train: all, head, bias, or comma-separated name patterns with `*`.
    #[arg(long, value_name = "CHOICE", default_value = "all")]
    trainable: String,
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    optimizer: OptimizerArg,
    /// Learning rate, in [0, 10].
    #[arg(long, value_name = "LR", default_value_t = 0.05, value_parser = crate::numbers::learning_rate)]
    lr: f32,
    /// SGD momentum, in [0, 1) [default: 0.9].
    #[arg(long, value_parser = crate::numbers::momentum)]
    momentum: Option<f32>,
    /// Weight decay, in [0, 1].
    #[arg(long, default_value_t = 0.0, value_parser = crate::numbers::weight_decay)]
    weight_decay: f32,
    /// Nesterov momentum (SGD).
    #[arg(long)]
    nesterov: bool,
    #[arg(long, value_enum, default_value_t = ScheduleArg::Constant)]
    schedule: ScheduleArg,
    /// Samples per step; the graph is recorded (a .sprout file re-recorded) for it
    /// [default: 16 for a zoo model; the batch size a .sprout file was recorded for].
    #[arg(long, value_name = "N", alias = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: Option<u64>,
    /// Epochs to train; 0 writes the initialised model (a fresh head, the weights taken with
    /// --init-from) without training it.
    #[arg(long, value_name = "N", default_value_t = 10)]
    epochs: u32,
    /// Keep the data order (class by class / file order).
    #[arg(long)]
    no_shuffle: bool,
    /// Train on the evaluation transform (no flips, no colour jitter).
    #[arg(long)]
    no_augment: bool,
    /// Seed of the zoo model's initial weights, the data order and the augmentation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Mixed precision: the forward pass reads f16 copies of the weights and activations,
    /// the optimizer updates f32 master weights, and the loss is scaled dynamically
    /// (overflowing steps are skipped; PyTorch GradScaler's defaults).
    #[arg(long)]
    mixed_precision: bool,
    /// FedProx: pull the trainable weights towards the ones the run starts from, the
    /// gradient of MU/2 * |w - w0|^2 applied after each update (0: off).
    #[arg(long, value_name = "MU", default_value_t = 0.0)]
    proximal_mu: f32,
    /// SCAFFOLD: a safetensors file of per-parameter offsets by name (trainable f32
    /// parameters, their shapes); after each update every named weight also moves by
    /// -lr * offset, as an offset added to its gradient outside the optimizer.
    #[arg(long, value_name = "FILE")]
    gradient_offset: Option<PathBuf>,
    /// What the batch norms normalise with while training.
    #[arg(long, value_enum, default_value_t = BatchNormArg::Batch)]
    batch_norm: BatchNormArg,
    /// Logit adjustment for label skew: the training loss reads logits + TAU * ln(prior),
    /// the prior being the training split's class frequencies (a class without images
    /// counts one); validation and the saved model read the plain logits (0: off).
    #[arg(long, value_name = "TAU", default_value_t = 0.0, value_parser = crate::numbers::logit_adjust)]
    logit_adjust: f32,
    /// Time every kernel call of the training steps and print, at the end, each kernel's
    /// calls, milliseconds and share of the total.
    #[arg(long)]
    profile: bool,
    /// Stop after N epochs without a better validation accuracy (best.sprout keeps the best).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    patience: Option<u32>,
    /// Continue from a checkpoint-epoch-NNN.ckpt in its run folder; its args.json must match
    /// these options and data (only --epochs may grow).
    #[arg(long, value_name = "CKPT")]
    resume: Option<PathBuf>,
    /// The run folder, new or empty (default runs/<name>, or runs/<name>-2, -3, ... when
    /// taken): args.json, metrics.csv, checkpoints, best.sprout, curve.png and curve.svg.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// The trained model.
    #[arg(short = 'o', long = "output", value_name = "OUT.sprout")]
    output: PathBuf,
    /// Print the summary as one JSON object on standard output (progress and epoch lines
    /// stay on standard error): final_accuracy, final_loss, best_accuracy, samples,
    /// epochs_run, history (per epoch: epoch, train_loss, val_loss, val_accuracy,
    /// learning_rate, images_per_second), output, run_folder, seconds and loss_scale
    /// (final_scale, skipped_steps; null without --mixed-precision) and profile (per kernel:
    /// kernel, calls, milliseconds; null without --profile).
    #[arg(long)]
    json: bool,
    /// Also print progress as JSON lines on standard error, for programs (`sprout serve`
    /// reads them): {"event":"start",first,epochs,batches,batch_size},
    /// {"event":"batch",epoch,batch,loss} (1-based epoch, 0-based batch) and
    /// {"event":"epoch",epoch,train_loss,val_loss,val_accuracy,learning_rate,images_per_second}.
    #[arg(long)]
    progress_json: bool,
    #[command(flatten)]
    images: PipelineArgs,
    #[command(flatten)]
    backend: BackendArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OptimizerArg {
    Sgd,
    Adamw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BatchNormArg {
    /// Each batch's statistics, updating the running ones (PyTorch's train mode)
    Batch,
    /// The running statistics, left as they are; scale, shift and the layers around still
    /// train (PyTorch: batch norms in eval mode). For fine-tuning a trained model on small or
    /// one-sided batches (a federated box's, say); a fresh model's statistics describe
    /// nothing yet
    Running,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ScheduleArg {
    Constant,
    Step,
    Cosine,
    Plateau,
}

fn parse_architecture(name: &str) -> Result<Architecture, String> {
    Architecture::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Architecture::ALL.iter().map(|a| a.name()).collect();
        format!("unknown zoo model '{name}' (known: {})", known.join(", "))
    })
}

/// `path` made absolute, so a resumed run started from another folder compares equal.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Samples per step of a zoo model without --batch-size.
const DEFAULT_BATCH_SIZE: u64 = 16;

/// SGD momentum without --momentum.
const DEFAULT_MOMENTUM: f32 = 0.9;

/// Refuses options that would do nothing with the others given.
fn check(args: &TrainArgs) -> Result<()> {
    if args.optimizer == OptimizerArg::Adamw {
        if args.momentum.is_some() {
            bail!("--momentum applies to --optimizer sgd, not adamw");
        }
        if args.nesterov {
            bail!("--nesterov applies to --optimizer sgd, not adamw");
        }
    }
    Ok(())
}

/// A `.sprout` model, re-recorded for `--batch-size` when given (else the batch size it was
/// recorded for).
pub fn open_batched(path: &Path, batch_size: Option<u64>) -> Result<Model> {
    let model = Model::open(path)?;
    let Some(asked) = batch_size else { return Ok(model) };
    let batch = usize::try_from(asked).context("--batch-size is too large")?;
    if batch == model.batch() {
        return Ok(model);
    }
    model
        .with_batch(batch)
        .with_context(|| format!("could not re-record {} for batches of {batch}", path.display()))
}

pub fn run(args: &TrainArgs) -> Result<()> {
    check(args)?;
    let started = Instant::now();
    let (mut model, name) = match (&args.zoo, &args.model) {
        (Some(arch), _) => {
            // A class folder tree decides how many classes the head has.
            let classes = folder_classes(&args.data)?.map_or(arch.classes(), |c| c.len());
            let batch = args.batch_size.unwrap_or(DEFAULT_BATCH_SIZE) as usize;
            let mut model = Model::from_zoo_for(*arch, batch, classes, args.seed)?;
            if let Some(path) = &args.init_from {
                let taken = model.init_from(path, args.fresh.as_deref())?;
                eprintln!("initialised {taken} tensors from {}", path.display());
            }
            (model, arch.name().to_string())
        }
        (None, Some(path)) => {
            let mut model = open_batched(path, args.batch_size)?;
            if let Some(asked) = args.new_head {
                let classes = match (asked, folder_classes(&args.data)?) {
                    (Some(n), _) => n as usize,
                    (None, Some(folders)) => folders.len(),
                    (None, None) => bail!(
                        "--new-head without N takes the class count from a class folder; \
                         {} is a tensor file: give --new-head N",
                        args.data.display()
                    ),
                };
                model.new_head(classes, args.seed)?;
                eprintln!("new head for {classes} classes on {}", path.display());
            }
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            (model, stem.unwrap_or_else(|| "model".into()))
        }
        (None, None) => bail!("give --zoo NAME or --model FILE.sprout"),
    };
    let data_options = DataOptions {
        val: args.val.clone(),
        val_fraction: args.val_fraction,
        augment: !args.no_augment,
        shuffle: !args.no_shuffle,
        seed: args.seed,
        pipeline: args.images.pipeline()?,
        resize: args.images.resize.asked(),
    };
    let opened = open_data(&mut model, &args.data, &data_options)?;
    let (mut data, mut val) = (opened.train, opened.val);
    eprintln!("split {}: {}", args.data.display(), opened.split);
    let optimizer = match args.optimizer {
        OptimizerArg::Sgd => OptimizerChoice::Sgd {
            momentum: args.momentum.unwrap_or(DEFAULT_MOMENTUM),
            weight_decay: args.weight_decay,
            nesterov: args.nesterov,
        },
        OptimizerArg::Adamw => OptimizerChoice::AdamW { weight_decay: args.weight_decay },
    };
    let schedule = match args.schedule {
        ScheduleArg::Constant => ScheduleChoice::Constant,
        ScheduleArg::Step => ScheduleChoice::Step,
        ScheduleArg::Cosine => ScheduleChoice::Cosine,
        ScheduleArg::Plateau => ScheduleChoice::Plateau,
    };
    let inputs = [
        ("--data", Some(&args.data)),
        ("--val", args.val.as_ref()),
        ("--model", args.model.as_ref()),
        ("--init-from", args.init_from.as_ref()),
        ("--resume", args.resume.as_ref()),
    ];
    let inputs: Vec<(&str, &Path)> =
        inputs.iter().filter_map(|(flag, p)| p.map(|p| (*flag, p.as_path()))).collect();
    check_output(&args.output, &inputs)?;
    let base = PathBuf::from("runs").join(&name);
    let out_dir = run_folder(&base, args.out_dir.as_deref(), args.resume.as_deref())?;
    let mut record = RunRecord::new(std::env::args().collect());
    record.set("--zoo", args.zoo.map(|a| a.name()));
    record.set("--model", args.model.as_deref().map(absolute));
    record.set("--init-from", args.init_from.as_deref().map(absolute));
    record.set("--fresh", &args.fresh);
    record.set("--new-head", args.new_head.map(|_| model.classes()));
    record.set("--data", absolute(&args.data));
    record.set("--val", args.val.as_deref().map(absolute));
    match opened.split.kind {
        SplitKind::Stratified { fraction, .. } => record.set_f32("--val-fraction", fraction),
        _ => record.set("--val-fraction", None::<f32>),
    }
    record.set("--batch-size", model.batch());
    record.set("--no-augment", args.no_augment);
    record.set("--no-shuffle", args.no_shuffle);
    record.set("--resume", args.resume.as_deref().map(absolute));
    record.set("--out-dir", absolute(&out_dir));
    record.set("--output", absolute(&args.output));
    let class_counts = opened.split.classes.iter().map(|c| c.train).collect();
    record.data = Some(opened.split);
    let options = TrainOptions {
        trainable: args.trainable.clone(),
        optimizer,
        learning_rate: args.lr,
        schedule,
        epochs: args.epochs,
        seed: args.seed,
        out_dir: Some(out_dir.clone()),
        resume: args.resume.clone(),
        patience: args.patience,
        record: Some(record),
        mixed_precision: args.mixed_precision,
        profile: args.profile,
        proximal_mu: args.proximal_mu,
        gradient_offset: match &args.gradient_offset {
            None => Vec::new(),
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("--gradient-offset {}", path.display()))?;
                sprout_onnx::read_safetensors(&bytes)
                    .with_context(|| format!("--gradient-offset {}", path.display()))?
            }
        },
        batch_norm: match args.batch_norm {
            BatchNormArg::Batch => BatchNormStats::Batch,
            BatchNormArg::Running => BatchNormStats::Running,
        },
        logit_adjust: (args.logit_adjust > 0.0)
            .then_some(LogitAdjust { tau: args.logit_adjust, class_counts }),
    };
    let images_per_batch = model.batch() as u64;
    let (mut epochs, mut per_epoch, mut images) = (0u32, 0u64, 0u64);
    let mut bar: Option<ProgressBar> = None;
    // The epoch's training time: from its start to its last batch (validation excluded).
    let (mut epoch_started, mut last_batch) = (Instant::now(), Instant::now());
    let mut rates: Vec<(u32, f64)> = Vec::new();
    let progress_line = |line: serde_json::Value| {
        if args.progress_json {
            eprintln!("{line}");
        }
    };
    args.backend.announce();
    let outcome = train(&model, &mut data, &mut val, &options, &mut |event| match event {
        TrainEvent::Start { first, epochs: total, batches } => {
            progress_line(serde_json::json!({"event": "start", "first": first, "epochs": total,
                "batches": batches, "batch_size": images_per_batch}));
            (epochs, per_epoch) = (total, batches as u64 * images_per_batch);
            if first > 0 {
                eprintln!("resuming after epoch {first} of {total}");
            }
            if first < total {
                bar = Some(epoch_bar(first + 1, total, per_epoch));
            }
            epoch_started = Instant::now();
        }
        TrainEvent::Batch { epoch, batch, loss } => {
            progress_line(serde_json::json!({"event": "batch", "epoch": epoch + 1, "batch": batch,
                "loss": loss}));
            images += images_per_batch;
            last_batch = Instant::now();
            if let Some(bar) = &bar {
                bar.set_position(images);
                bar.set_message(if images >= per_epoch {
                    "validating".to_string()
                } else {
                    format!("loss {}", progress::decimal(f64::from(loss)))
                });
            }
        }
        TrainEvent::Epoch { record, .. } => {
            let seconds = last_batch.saturating_duration_since(epoch_started).as_secs_f64();
            let rate = images as f64 / seconds.max(1e-9);
            rates.push((record.epoch, rate));
            progress_line(serde_json::json!({"event": "epoch", "epoch": record.epoch,
                "train_loss": record.train_loss, "val_loss": record.val_loss,
                "val_accuracy": record.val_accuracy, "learning_rate": record.learning_rate,
                "images_per_second": rate}));
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
            eprintln!("{}", epoch_line(record, epochs, rate));
            if record.epoch < epochs {
                bar = Some(epoch_bar(record.epoch + 1, epochs, per_epoch));
            }
            (images, epoch_started) = (0, Instant::now());
        }
        TrainEvent::EarlyStop { epoch, best_epoch, patience } => {
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
            eprintln!(
                "stopping after epoch {epoch}: no better validation accuracy for {patience} \
                 epochs (best: epoch {best_epoch}, kept as best.sprout)"
            );
        }
        _ => {}
    })?;
    // An epoch the loop did not start (it stopped early) leaves its bar behind.
    if let Some(bar) = bar.take() {
        bar.finish_and_clear();
    }
    let bytes = save_model(&outcome.model).context("cannot encode the trained model")?;
    write_atomic(&args.output, &bytes)?;
    let history = outcome
        .history
        .iter()
        .map(|r| EpochSummary {
            epoch: r.epoch,
            train_loss: r.train_loss,
            val_loss: r.val_loss,
            val_accuracy: r.val_accuracy,
            learning_rate: r.learning_rate,
            images_per_second: rates.iter().find(|(e, _)| *e == r.epoch).map(|&(_, v)| v),
        })
        .collect();
    let summary = TrainSummary {
        final_accuracy: outcome.metrics.accuracy(),
        final_loss: outcome.metrics.loss(),
        best_accuracy: outcome.best_accuracy,
        samples: outcome.metrics.samples(),
        epochs_run: rates.len(),
        history,
        output: args.output.display().to_string(),
        run_folder: out_dir.display().to_string(),
        seconds: started.elapsed().as_secs_f64(),
        loss_scale: outcome.loss_scale.map(|s| LossScaleSummary {
            final_scale: s.final_scale,
            skipped_steps: s.skipped_steps,
        }),
        profile: outcome.profile.as_ref().map(|p| {
            let kernel = |(kernel, t): (&'static str, KernelTime)| KernelSummary {
                kernel,
                calls: t.calls,
                milliseconds: t.time.as_secs_f64() * 1e3,
            };
            p.kinds().into_iter().map(kernel).collect()
        }),
    };
    if args.json {
        return print_json(&summary);
    }
    // With no epoch trained there is no best epoch to name.
    let best = summary.best_accuracy.map(|b| format!(", best {:.1}%", 100.0 * b));
    println!(
        "final validation accuracy {:.1}% ({} samples){}",
        100.0 * summary.final_accuracy,
        summary.samples,
        best.unwrap_or_default()
    );
    if let Some(scaling) = &summary.loss_scale {
        println!(
            "mixed precision: loss scale {} at the end, {} overflowing steps skipped",
            scaling.final_scale, scaling.skipped_steps
        );
    }
    if let Some(profile) = &outcome.profile {
        println!("time per kernel over every training step:\n{profile}");
    }
    println!("wrote {} in {:.1} s", summary.output, summary.seconds);
    println!(
        "run folder {}: args.json, metrics.csv, checkpoints, best.sprout, curve.png",
        summary.run_folder
    );
    Ok(())
}

/// The bar over epoch `epoch` (1-based) of `epochs`, `images` long.
fn epoch_bar(epoch: u32, epochs: u32, images: u64) -> ProgressBar {
    progress::bar(&format!("epoch {epoch}/{epochs}"), images, Unit::Images)
}

/// One line per epoch that fits an 80-column terminal, e.g.
/// `epoch 3/10  loss 0.412  val 0.398  acc 91.2%  lr 5.0e-2  212 img/s`.
fn epoch_line(record: &EpochRecord, epochs: u32, images_per_second: f64) -> String {
    format!(
        "epoch {}/{epochs}  loss {}  val {}  acc {:.1}%  lr {:.1e}  {} img/s",
        record.epoch,
        progress::decimal(f64::from(record.train_loss)),
        progress::decimal(f64::from(record.val_loss)),
        100.0 * record.val_accuracy,
        record.learning_rate,
        progress::rate(images_per_second)
    )
}

#[cfg(test)]
mod tests {
    use super::{epoch_line, EpochRecord};
    use crate::progress::COLUMNS;

    #[test]
    fn epoch_lines_fit_80_columns() {
        let typical = EpochRecord {
            epoch: 3,
            train_loss: 0.41234,
            val_loss: 0.398,
            val_accuracy: 0.912,
            learning_rate: 0.05,
        };
        assert_eq!(
            epoch_line(&typical, 10, 212.3),
            "epoch 3/10  loss 0.412  val 0.398  acc 91.2%  lr 5.0e-2  212 img/s"
        );
        let extreme = EpochRecord {
            epoch: 9999,
            train_loss: 1.234e30,
            val_loss: f32::NAN,
            val_accuracy: 1.0,
            learning_rate: 1.5e-10,
        };
        let line = epoch_line(&extreme, 9999, 123_456.0);
        assert!(line.len() <= COLUMNS, "{} columns: {line}", line.len());
    }
}
