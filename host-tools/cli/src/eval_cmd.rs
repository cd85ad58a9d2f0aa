//! `sprout eval`: a `.sprout` model's accuracy, per-class accuracy and confusion matrix on
//! an image folder (DIR/val when present) or a tensor file; optionally with the head
//! weights of a device checkpoint (`--device-checkpoint CKPT --bundle BUNDLE`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sprout_bundle::apply_device_checkpoint;
use sprout_train::{open_eval_data, read_kind, FileKind, Inference, Model};

use crate::backend_args::BackendArgs;
use crate::progress::{self, Unit};
use crate::summary::{print_json, ClassSummary, DeviceCheckpointSummary, EvalSummary};

use crate::image_args::ResizeArgs;
use crate::pass_args::PassArgs;

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The model to evaluate.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// A folder per class (DIR/val, else DIR/train, else DIR; its class folders must be the
    /// model's classes) or a .npz / .safetensors file.
    #[arg(long, value_name = "DIR|FILE")]
    data: PathBuf,
    /// Evaluate with the head a device trained: a checkpoint from `sprout device pull`
    /// (needs --bundle, the bundle the device runs, made from MODEL).
    #[arg(long, value_name = "CKPT", requires = "bundle")]
    device_checkpoint: Option<PathBuf>,
    /// The device bundle the checkpoint's weights are placed by.
    #[arg(long, value_name = "BUNDLE", requires = "device_checkpoint")]
    bundle: Option<PathBuf>,
    /// Print the result as one JSON object on standard output instead of the tables:
    /// accuracy, loss (mean cross-entropy), samples, classes (per class: name, accuracy,
    /// samples), confusion (rows: true class, columns: predicted) and device_checkpoint
    /// (path, epoch, updates, device_accuracy; null without --device-checkpoint).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    resize: ResizeArgs,
    #[command(flatten)]
    passes: PassArgs,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: &EvalArgs) -> Result<()> {
    let mut model = Model::open(&args.model)?;
    let mut device_checkpoint = None;
    if let (Some(checkpoint), Some(bundle)) = (&args.device_checkpoint, &args.bundle) {
        let bundle = read_kind(bundle, FileKind::Bundle, "a device bundle")?;
        let checkpoint_bytes = sprout_device::read_checkpoint_file(checkpoint)?;
        let info = apply_device_checkpoint(&mut model, &bundle, &checkpoint_bytes)
            .with_context(|| format!("applying the device checkpoint {}", checkpoint.display()))?;
        device_checkpoint = Some(DeviceCheckpointSummary {
            path: checkpoint.display().to_string(),
            epoch: info.epoch,
            updates: info.progress.updates,
            device_accuracy: info.accuracy,
        });
    }
    // Passes of the batch asked: a model converted for one sample need not run one by one.
    let mut model = model.with_batch(args.passes.pass_size(usize::MAX))?;
    let mut data =
        open_eval_data(&mut model, &args.data, &args.resize.pipeline(), args.resize.asked())?;
    let mut inference = Inference::new(&model)?;
    args.backend.announce();
    let bar = progress::bar("eval", data.len() as u64, Unit::Images);
    let metrics = inference.evaluate_with_progress(&mut data, &mut |done, _| {
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    let names = &model.metadata.class_names;
    let classes = metrics
        .per_class()
        .iter()
        .enumerate()
        .map(|(c, &accuracy)| ClassSummary {
            name: names[c].clone(),
            accuracy,
            samples: metrics.confusion[c].iter().sum(),
        })
        .collect();
    let summary = EvalSummary {
        accuracy: metrics.accuracy(),
        loss: metrics.loss(),
        samples: metrics.samples(),
        classes,
        confusion: metrics.confusion.clone(),
        device_checkpoint,
    };
    if args.json {
        print_json(&summary)
    } else {
        print_text(&summary);
        Ok(())
    }
}

/// The summary as the device checkpoint line, the accuracy line, a per-class table and the
/// confusion matrix.
fn print_text(summary: &EvalSummary) {
    if let Some(d) = &summary.device_checkpoint {
        println!(
            "device checkpoint {}: epoch {}, {} updates, device held-out accuracy {:.1}%",
            d.path,
            d.epoch,
            d.updates,
            100.0 * d.device_accuracy
        );
    }
    println!(
        "accuracy {:.1}% ({} samples), loss {:.4}",
        100.0 * summary.accuracy,
        summary.samples,
        summary.loss
    );
    let width = summary.classes.iter().map(|c| c.name.len()).max().unwrap_or(5).max(5);
    println!("{:<width$} {:>8} {:>7}", "class", "accuracy", "samples");
    for class in &summary.classes {
        let accuracy = class.accuracy.map_or("-".into(), |a| format!("{:.1}%", 100.0 * a));
        println!("{:<width$} {accuracy:>8} {:>7}", class.name, class.samples);
    }
    println!("confusion matrix (rows: true class, columns: predicted)");
    print!("{:<width$}", "");
    for c in 0..summary.classes.len() {
        print!(" {c:>6}");
    }
    println!();
    for (class, row) in summary.classes.iter().zip(&summary.confusion) {
        print!("{:<width$}", class.name);
        for v in row {
            print!(" {v:>6}");
        }
        println!();
    }
}
