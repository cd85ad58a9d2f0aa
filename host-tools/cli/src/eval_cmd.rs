//! `sprout eval`: a `.sprout` model's accuracy, per-class accuracy and confusion matrix on
//! an image folder (DIR/val when present) or a tensor file; optionally with the head
//! weights of a device checkpoint (`--device-checkpoint CKPT --bundle BUNDLE`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sprout_bundle::apply_device_checkpoint;
use sprout_train::{open_data, Inference, Model};

use crate::image_args::ResizeArgs;

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The model to evaluate.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// A folder per class (DIR/val is used when present) or a .npz / .safetensors file.
    #[arg(long, value_name = "DIR|FILE")]
    data: PathBuf,
    /// Evaluate with the head a device trained: a checkpoint from `sprout device pull`
    /// (needs --bundle, the bundle the device runs, made from MODEL).
    #[arg(long, value_name = "CKPT", requires = "bundle")]
    device_checkpoint: Option<PathBuf>,
    /// The device bundle the checkpoint's weights are placed by.
    #[arg(long, value_name = "BUNDLE", requires = "device_checkpoint")]
    bundle: Option<PathBuf>,
    #[command(flatten)]
    resize: ResizeArgs,
}

pub fn run(args: &EvalArgs) -> Result<()> {
    let mut model = Model::open(&args.model)?;
    if let (Some(checkpoint), Some(bundle)) = (&args.device_checkpoint, &args.bundle) {
        let bundle =
            std::fs::read(bundle).with_context(|| format!("reading {}", bundle.display()))?;
        let checkpoint_bytes = sprout_device::read_checkpoint_file(checkpoint)?;
        let info = apply_device_checkpoint(&mut model, &bundle, &checkpoint_bytes)
            .with_context(|| format!("applying the device checkpoint {}", checkpoint.display()))?;
        println!(
            "device checkpoint {}: epoch {}, {} updates, device held-out accuracy {:.1}%",
            checkpoint.display(),
            info.epoch,
            info.progress.updates,
            100.0 * info.accuracy
        );
    }
    let (_, mut data) =
        open_data(&mut model, &args.data, None, false, false, 0, &args.resize.pipeline())?;
    let mut inference = Inference::new(&model)?;
    let metrics = inference.evaluate(&mut data)?;
    let names = &model.metadata.class_names;
    println!(
        "accuracy {:.1}% ({} samples), loss {:.4}",
        100.0 * metrics.accuracy(),
        metrics.samples(),
        metrics.loss()
    );
    let width = names.iter().map(String::len).max().unwrap_or(5).max(5);
    println!("{:<width$} {:>8} {:>7}", "class", "accuracy", "samples");
    for (c, accuracy) in metrics.per_class().iter().enumerate() {
        let samples: u64 = metrics.confusion[c].iter().sum();
        let accuracy = accuracy.map_or("-".into(), |a| format!("{:.1}%", 100.0 * a));
        println!("{:<width$} {accuracy:>8} {samples:>7}", names[c]);
    }
    println!("confusion matrix (rows: true class, columns: predicted)");
    print!("{:<width$}", "");
    for c in 0..names.len() {
        print!(" {c:>6}");
    }
    println!();
    for (c, row) in metrics.confusion.iter().enumerate() {
        print!("{:<width$}", names[c]);
        for v in row {
            print!(" {v:>6}");
        }
        println!();
    }
    Ok(())
}
