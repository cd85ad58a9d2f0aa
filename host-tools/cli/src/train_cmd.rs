//! `sprout train`: trains a zoo model or a `.sprout` file on an image folder or a tensor
//! file, with a progress line, checkpoints, `best.sprout` and `curve.png` in the run folder.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::save_model;
use sprout_train::{
    folder_classes, open_data, train, write_atomic, Model, OptimizerChoice, ScheduleChoice,
    TrainEvent, TrainOptions,
};
use sprout_zoo::Architecture;

use crate::image_args::PipelineArgs;

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
    #[arg(long, value_name = "FILE", requires = "zoo")]
    init_from: Option<PathBuf>,
    /// With --init-from: parameters left at their fresh initial values although the file
    /// has them (--trainable syntax; `head` gives a new head for the same classes).
    #[arg(long, value_name = "CHOICE", requires = "init_from")]
    fresh: Option<String>,
    /// Training data: a folder per class (DIR/train and DIR/val when present) or a .npz /
    /// .safetensors file with x (float32 [N, C, H, W]) and y (int64 [N]).
    #[arg(long, value_name = "DIR|FILE")]
    data: PathBuf,
    /// Validation tensor file (default: the training file itself).
    #[arg(long, value_name = "FILE")]
    val: Option<PathBuf>,
    /// What to train: all, head, bias, or comma-separated name patterns with `*`.
    #[arg(long, value_name = "CHOICE", default_value = "all")]
    trainable: String,
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    optimizer: OptimizerArg,
    /// Learning rate.
    #[arg(long, value_name = "LR", default_value_t = 0.05)]
    lr: f32,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Nesterov momentum (SGD).
    #[arg(long)]
    nesterov: bool,
    #[arg(long, value_enum, default_value_t = ScheduleArg::Constant)]
    schedule: ScheduleArg,
    /// Samples per step (a zoo model is recorded for it; a .sprout file keeps its own).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
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
    /// Continue from a checkpoint-epoch-NNN.ckpt (same model, data, options and --seed).
    #[arg(long, value_name = "CKPT")]
    resume: Option<PathBuf>,
    /// Where checkpoints, best.sprout and curve.png go (default runs/<name>).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// The trained model.
    #[arg(short = 'o', long = "output", value_name = "OUT.sprout")]
    output: PathBuf,
    #[command(flatten)]
    images: PipelineArgs,
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

pub fn run(args: &TrainArgs) -> Result<()> {
    let started = Instant::now();
    let (mut model, name) = match (&args.zoo, &args.model) {
        (Some(arch), _) => {
            // A class folder tree decides how many classes the head has.
            let classes = folder_classes(&args.data)?.map_or(arch.classes(), |c| c.len());
            let batch = args.batch_size as usize;
            let mut model = Model::from_zoo_for(*arch, batch, classes, args.seed)?;
            if let Some(path) = &args.init_from {
                let taken = model.init_from(path, args.fresh.as_deref())?;
                eprintln!("initialised {taken} tensors from {}", path.display());
            }
            (model, arch.name().to_string())
        }
        (None, Some(path)) => {
            let model = Model::open(path)?;
            if model.batch() != args.batch_size as usize {
                eprintln!(
                    "note: {} is recorded for batches of {}; training uses that batch size",
                    path.display(),
                    model.batch()
                );
            }
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            (model, stem.unwrap_or_else(|| "model".into()))
        }
        (None, None) => bail!("give --zoo NAME or --model FILE.sprout"),
    };
    let (mut data, mut val) = open_data(
        &mut model,
        &args.data,
        args.val.as_deref(),
        !args.no_augment,
        !args.no_shuffle,
        args.seed,
        &args.images.pipeline()?,
    )?;
    let optimizer = match args.optimizer {
        OptimizerArg::Sgd => OptimizerChoice::Sgd {
            momentum: args.momentum,
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
    let out_dir = args.out_dir.clone().unwrap_or_else(|| PathBuf::from("runs").join(&name));
    let options = TrainOptions {
        trainable: args.trainable.clone(),
        optimizer,
        learning_rate: args.lr,
        schedule,
        epochs: args.epochs,
        seed: args.seed,
        out_dir: Some(out_dir.clone()),
        resume: args.resume.clone(),
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
        "wrote {} (run folder {}: checkpoints, best.sprout, curve.png) in {:.1} s",
        args.output.display(),
        out_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
