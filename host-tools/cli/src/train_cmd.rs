//! `sprout train`: trains a zoo model or a `.sprout` file on an image folder or a tensor
//! file, with a progress line; a fresh run folder holds `args.json`, `metrics.csv`, the
//! checkpoints, `best.sprout` and `curve.png`/`curve.svg`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::save_model;
use sprout_train::{
    check_output, folder_classes, open_data, run_folder, train, write_atomic, DataOptions, Model,
    OptimizerChoice, RunRecord, ScheduleChoice, SplitKind, TrainEvent, TrainOptions,
};
use sprout_zoo::Architecture;

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
    #[arg(long, value_name = "F", value_parser = parse_fraction)]
    val_fraction: Option<f32>,
    /// What to train: all, head, bias, or comma-separated name patterns with `*`.
    #[arg(long, value_name = "CHOICE", default_value = "all")]
    trainable: String,
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    optimizer: OptimizerArg,
    /// Learning rate.
    #[arg(long, value_name = "LR", default_value_t = 0.05)]
    lr: f32,
    /// SGD momentum [default: 0.9].
    #[arg(long)]
    momentum: Option<f32>,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Nesterov momentum (SGD).
    #[arg(long)]
    nesterov: bool,
    #[arg(long, value_enum, default_value_t = ScheduleArg::Constant)]
    schedule: ScheduleArg,
    /// Samples per step of a zoo model, which is recorded for it [default: 16] (a .sprout
    /// file keeps the batch size it was recorded for).
    #[arg(long, value_name = "N", alias = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: Option<u64>,
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OptimizerArg {
    Sgd,
    Adamw,
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

fn parse_fraction(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err(format!("'{text}' is not a fraction between 0 and 1 (exclusive), e.g. 0.2")),
    }
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

/// Refuses a `--batch-size` other than the one the `.sprout` file at `path` was recorded
/// for: its graph is fixed, so the option would do nothing.
pub fn check_batch_size(model: &Model, path: &Path, asked: Option<u64>) -> Result<()> {
    match asked {
        Some(asked) if asked != model.batch() as u64 => bail!(
            "--batch-size {asked} does not apply to {}, which is recorded for batches of {}",
            path.display(),
            model.batch()
        ),
        _ => Ok(()),
    }
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
            let model = Model::open(path)?;
            check_batch_size(&model, path, args.batch_size)?;
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
    };
    let mut stderr = std::io::stderr();
    let terminal = stderr.is_terminal();
    let (mut batches, mut epochs, mut last_accuracy) = (0usize, 0u32, None::<f32>);
    let outcome = train(&model, &mut data, &mut val, &options, &mut |p| match p {
        TrainEvent::Start { first, epochs: total, batches: per_epoch } => {
            (batches, epochs) = (per_epoch, total);
            if first > 0 {
                eprintln!("resuming after epoch {first} of {total}");
            }
        }
        TrainEvent::Batch { epoch, batch, loss } if terminal => {
            let done = (batch + 1).min(batches);
            let width = 24;
            let filled = done * width / batches.max(1);
            let accuracy = last_accuracy.map_or("-".into(), |a| format!("{:.1}%", 100.0 * a));
            let _ = write!(
                stderr,
                "\repoch {}/{epochs} [{}{}] {done}/{batches} loss {loss:.4} val acc {accuracy}  ",
                epoch + 1,
                "#".repeat(filled),
                "-".repeat(width - filled)
            );
        }
        TrainEvent::Batch { .. } => {}
        TrainEvent::Epoch { record, .. } => {
            last_accuracy = Some(record.val_accuracy);
            if terminal {
                let _ = write!(stderr, "\r");
            }
            eprintln!(
                "epoch {}/{epochs}: train loss {:.4}, val loss {:.4}, val accuracy {:.1}%, lr {:.3e}{}",
                record.epoch,
                record.train_loss,
                record.val_loss,
                100.0 * record.val_accuracy,
                record.learning_rate,
                " ".repeat(20)
            );
        }
        TrainEvent::EarlyStop { epoch, best_epoch, patience } => eprintln!(
            "stopping after epoch {epoch}: no better validation accuracy for {patience} epochs \
             (best: epoch {best_epoch}, kept as best.sprout)"
        ),
    })?;
    let bytes = save_model(&outcome.model).context("cannot encode the trained model")?;
    write_atomic(&args.output, &bytes)?;
    // With no epoch trained there is no best epoch to name.
    let best = outcome.best_accuracy.map(|b| format!(", best {:.1}%", 100.0 * b));
    println!(
        "final validation accuracy {:.1}% ({} samples){}",
        100.0 * outcome.metrics.accuracy(),
        outcome.metrics.samples(),
        best.unwrap_or_default()
    );
    if let Some(scaling) = outcome.loss_scale {
        println!(
            "mixed precision: loss scale {} at the end, {} overflowing steps skipped",
            scaling.final_scale, scaling.skipped_steps
        );
    }
    println!(
        "wrote {} (run folder {}: args.json, metrics.csv, checkpoints, best.sprout, curve.png) \
         in {:.1} s",
        args.output.display(),
        out_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
