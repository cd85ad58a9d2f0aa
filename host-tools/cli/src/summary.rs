//! The `--json` summaries of `train`, `eval`, `predict` and `quantize`: the shape of each,
//! defined once here, and printing one as a single JSON object on standard output.
//! Accuracies and probabilities are fractions in [0, 1]; paths are as given or written.

use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;
use sprout_train::Agreement;

/// Writes `summary` to standard output as one JSON object on one line.
pub fn print_json(summary: &impl Serialize) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, summary).context("cannot encode the JSON summary")?;
    writeln!(out).context("cannot write the JSON summary to standard output")
}

/// `sprout train --json`.
#[derive(Serialize, Debug)]
pub struct TrainSummary {
    /// Validation accuracy after the last epoch.
    pub final_accuracy: f64,
    /// Mean validation cross-entropy after the last epoch.
    pub final_loss: f64,
    /// The best validation accuracy of any epoch; null when no epoch was trained.
    pub best_accuracy: Option<f32>,
    /// Validation samples.
    pub samples: u64,
    /// Epochs this command trained (fewer than `history` holds after `--resume`).
    pub epochs_run: usize,
    /// Every epoch of the run, resumed ones included.
    pub history: Vec<EpochSummary>,
    /// The trained model.
    pub output: String,
    /// The run folder: checkpoints, best.sprout, curve.png.
    pub run_folder: String,
    /// Wall-clock seconds of the whole command.
    pub seconds: f64,
    /// With `--mixed-precision`: the final loss scale and the steps skipped on overflow.
    pub loss_scale: Option<LossScaleSummary>,
    /// With `--profile`: the training steps' time per kernel, the most time first.
    pub profile: Option<Vec<KernelSummary>>,
}

/// One kernel of [`TrainSummary::profile`].
#[derive(Serialize, Debug)]
pub struct KernelSummary {
    pub kernel: &'static str,
    pub calls: u64,
    pub milliseconds: f64,
}

/// One epoch of [`TrainSummary::history`].
#[derive(Serialize, Debug)]
pub struct EpochSummary {
    /// 1-based.
    pub epoch: u32,
    pub train_loss: f32,
    pub val_loss: f32,
    pub val_accuracy: f32,
    /// The learning rate of the epoch's last step.
    pub learning_rate: f32,
    /// Training images per second, timed by this command (null for epochs it resumed after).
    pub images_per_second: Option<f64>,
}

/// [`TrainSummary::loss_scale`].
#[derive(Serialize, Debug)]
pub struct LossScaleSummary {
    pub final_scale: f32,
    pub skipped_steps: u32,
}

/// `sprout eval --json`.
#[derive(Serialize, Debug)]
pub struct EvalSummary {
    pub accuracy: f64,
    /// Mean cross-entropy.
    pub loss: f64,
    pub samples: u64,
    /// Per class, in the model's class order.
    pub classes: Vec<ClassSummary>,
    /// `confusion[true class][predicted class]`: sample counts.
    pub confusion: Vec<Vec<u64>>,
    /// With `--device-checkpoint`: the checkpoint whose head was evaluated.
    pub device_checkpoint: Option<DeviceCheckpointSummary>,
}

/// One class of [`EvalSummary::classes`].
#[derive(Serialize, Debug)]
pub struct ClassSummary {
    pub name: String,
    /// Null when the data has no sample of the class.
    pub accuracy: Option<f64>,
    pub samples: u64,
}

/// [`EvalSummary::device_checkpoint`].
#[derive(Serialize, Debug)]
pub struct DeviceCheckpointSummary {
    pub path: String,
    pub epoch: u32,
    pub updates: u32,
    /// The accuracy the device measured on its held-out samples.
    pub device_accuracy: f32,
}

/// `sprout predict --json`.
#[derive(Serialize, Debug)]
pub struct PredictSummary {
    /// One per image, in the order given.
    pub predictions: Vec<Prediction>,
}

/// One image of [`PredictSummary::predictions`].
#[derive(Serialize, Debug)]
pub struct Prediction {
    pub path: String,
    /// The most probable class.
    pub class: String,
    /// Its index in the model's class list.
    pub class_index: usize,
    /// Its probability.
    pub probability: f32,
    /// Every class's probability, in the model's class order.
    pub probabilities: Vec<ClassProbability>,
}

/// One entry of [`Prediction::probabilities`].
#[derive(Serialize, Debug)]
pub struct ClassProbability {
    pub class: String,
    pub probability: f32,
}

/// `sprout quantize --json`.
#[derive(Serialize, Debug)]
pub struct QuantizeSummary {
    /// The quantized model.
    pub output: String,
    /// `int8` or `f16`.
    pub dtype: String,
    /// Size of the quantized model file.
    pub bytes: usize,
    /// Size of the model file it was made from.
    pub model_bytes: usize,
    /// f16: bytes of the frozen weights before and after; null for int8.
    pub frozen_f32_bytes: Option<usize>,
    pub frozen_f16_bytes: Option<usize>,
    /// int8: the calibration samples and where they came from; null for f16.
    pub calibration_samples: Option<usize>,
    pub calibration_data: Option<String>,
    /// int8: the range method the activation ranges came from (`minmax`, `percentile
    /// 99.99`, `mse`); null for f16.
    pub calibration: Option<String>,
    /// int8 with `--calibration auto`: each method tried and its output's divergence from
    /// the float model's over the calibration samples (for class scores the mean KL
    /// divergence of the probabilities, else the squared error relative to the float
    /// output's sum of squares); empty otherwise.
    pub calibration_candidates: Vec<CalibrationCandidate>,
    /// int8: the ops an int8 value reaches that run in float, and why.
    pub float_ops: Vec<FloatOp>,
    /// int8 of a model of class scores: how often the int8 model gives the float model's
    /// answer over the calibration samples, and the layers kept float to raise it; null
    /// otherwise.
    pub agreement: Option<Agreement>,
}

/// One entry of [`QuantizeSummary::calibration_candidates`].
#[derive(Serialize, Debug)]
pub struct CalibrationCandidate {
    pub method: String,
    pub error: f64,
}

/// One entry of [`QuantizeSummary::float_ops`].
#[derive(Serialize, Debug)]
pub struct FloatOp {
    pub op: String,
    pub node: String,
    pub reason: String,
}
