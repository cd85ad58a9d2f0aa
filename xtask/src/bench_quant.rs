//! `cargo xtask bench int8`: what int8 and f16 cost the leaf classifier in accuracy, on the
//! demo's data and backbone (made by `cargo xtask demo` first when missing). Post-training
//! quantization of the fine-tuned classifier; head fine-tuning on a float backbone, in mixed
//! precision, and on an int8 backbone; and an inner int8 block fine-tuned with and without
//! quantization-aware scaling. Every run is one seed: the figures are single measurements.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::on_device::is_current_model;

use anyhow::{Context, Result};
use sprout_train::{
    open_data, open_eval_data, quantize, train, Calibration, DataOptions, DataSource, Inference,
    Model, OptimizerChoice, Pipeline, QuantizeSettings, RangeMethod, ScheduleChoice, TrainOptions,
};
use sprout_zoo::Architecture;

/// What the demo leaves behind that this suite reads.
struct DemoFiles {
    backbone: PathBuf,
    classifier: PathBuf,
    target: PathBuf,
}

fn demo_files(root: &Path) -> Result<DemoFiles> {
    let work = root.join("target/sprout-demo");
    let files = DemoFiles {
        backbone: work.join("backbone.sprout"),
        classifier: work.join("leaf-classifier.sprout"),
        target: work.join("target"),
    };
    let current = [&files.backbone, &files.classifier].iter().all(|f| is_current_model(f));
    if !(current && files.target.join("val").exists()) {
        println!("==> the demo's backbone, classifier and photos are missing: running the demo");
        crate::demo::run(root)?;
    }
    Ok(files)
}

/// The demo's head fine-tuning, with `trainable` in place of `head`.
fn fine_tune(trainable: &str) -> TrainOptions {
    TrainOptions {
        trainable: trainable.into(),
        optimizer: OptimizerChoice::Sgd { momentum: 0.9, weight_decay: 0.0, nesterov: false },
        learning_rate: 0.1,
        schedule: ScheduleChoice::Cosine,
        epochs: 15,
        seed: 2,
        ..TrainOptions::default()
    }
}

/// Validation accuracy (percent) and loss of `model` on the target photos.
fn evaluate(model: &mut Model, target: &Path) -> Result<(f32, f32)> {
    let mut val = open_eval_data(model, target, &Pipeline::default(), None)?;
    let metrics = Inference::new(model)?.evaluate(&mut val)?;
    Ok(percent_and_loss(&metrics))
}

/// Calibration samples: the target training photos, evaluation transform, in order.
fn calibration(model: &mut Model, target: &Path) -> Result<DataSource> {
    let options = DataOptions { augment: false, shuffle: false, ..DataOptions::default() };
    Ok(open_data(model, target, &options)?.train)
}

fn reload(file: &sprout_core::ModelFile) -> Result<Model> {
    let bytes = sprout_core::save_model(file)?;
    Ok(Model::from_bytes(&bytes, Path::new("quantized.sprout"))?)
}

/// Trains `model` with `options` on the target photos; returns accuracy and loss.
fn run_training(model: &mut Model, target: &Path, options: &TrainOptions) -> Result<(f32, f32)> {
    let mut data =
        open_data(model, target, &DataOptions { seed: options.seed, ..DataOptions::default() })?;
    let outcome = train(model, &mut data.train, &mut data.val, options, &mut |_| {})?;
    Ok(percent_and_loss(&outcome.metrics))
}

fn percent_and_loss(metrics: &sprout_train::Metrics) -> (f32, f32) {
    ((100.0 * metrics.accuracy()) as f32, metrics.loss() as f32)
}

/// A fresh 3-class head over the pretrained backbone (the demo's fine-tuning start).
fn fresh_model(backbone: &Path) -> Result<Model> {
    let mut model = Model::from_zoo_for(Architecture::LeafNet, 16, 3, 2)?;
    model.init_from(backbone, Some("head")).context("loading the pretrained backbone")?;
    Ok(model)
}

pub fn int8() -> Result<()> {
    let root = crate::workspace_root();
    let files = demo_files(&root)?;
    let mut rows: Vec<(String, f32, f32)> = Vec::new();
    let mut row = |what: &str, (accuracy, loss): (f32, f32), started: Instant| {
        println!("{what:<58} {accuracy:5.1}%  loss {loss:.3}  ({:.0?})", started.elapsed());
        rows.push((what.to_string(), accuracy, loss));
    };

    println!("==> post-training quantization of {}", files.classifier.display());
    let started = Instant::now();
    let mut classifier = Model::open(&files.classifier)?;
    row("fp32 classifier", evaluate(&mut classifier, &files.target)?, started);
    for (name, method) in
        [("min/max", RangeMethod::MinMax), ("99.99th percentile", RangeMethod::Percentile(99.99))]
    {
        let started = Instant::now();
        let mut calib = calibration(&mut classifier, &files.target)?;
        let settings = QuantizeSettings {
            calibration: Calibration::Fixed(method),
            ..QuantizeSettings::default()
        };
        let file = quantize(&classifier, &mut calib, &settings)?.file;
        let bytes = sprout_core::save_model(&file)?.len();
        let mut int8 = reload(&file)?;
        let what = format!("int8 classifier, {name} calibration ({bytes} B file)");
        row(&what, evaluate(&mut int8, &files.target)?, started);
    }

    println!("\n==> head fine-tuning (15 epochs, SGD) on a float and on an int8 backbone");
    let started = Instant::now();
    let mut float = fresh_model(&files.backbone)?;
    row(
        "fp32 backbone, fp32 head",
        run_training(&mut float, &files.target, &fine_tune("head"))?,
        started,
    );
    let int8_backbone = |trainable: Option<&str>, qas: bool| -> Result<Model> {
        let mut model = fresh_model(&files.backbone)?;
        let mut calib = calibration(&mut model, &files.target)?;
        let settings = QuantizeSettings {
            keep_float: Some("head".into()),
            trainable: trainable.map(str::to_string),
            qas,
            ..QuantizeSettings::default()
        };
        reload(&quantize(&model, &mut calib, &settings)?.file)
    };
    let started = Instant::now();
    let mut model = int8_backbone(None, true)?;
    row(
        "int8 backbone, fp32 head",
        run_training(&mut model, &files.target, &fine_tune("head"))?,
        started,
    );

    println!("\n==> fine-tuning int8 block features.9 with the head, with and without QAS");
    for qas in [true, false] {
        let started = Instant::now();
        let mut model = int8_backbone(Some("features.9.*"), qas)?;
        let options = fine_tune("features.9.*,head");
        let what = format!(
            "int8 backbone, int8 features.9 {} QAS + fp32 head",
            if qas { "with" } else { "without" }
        );
        row(&what, run_training(&mut model, &files.target, &options)?, started);
    }

    println!("\nsummary (validation accuracy on the held-out target photos):");
    for (what, accuracy, loss) in &rows {
        println!("  {what:<58} {accuracy:5.1}%  (loss {loss:.3})");
    }
    Ok(())
}
