//! `sprout quantize`: a `.sprout` model with its frozen weights in a smaller storage type:
//! IEEE half precision (`--dtype f16`), or int8 from calibration data (`--dtype int8`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::{load_model, save_model, to_f16_storage, F16Storage, Graph, ModelFile, Role};
use sprout_train::{
    check_output, measurable, open_calibration, quantize_with_reports, read_kind, write_atomic,
    Agreement, Calibration as RangeChoice, FallbackTarget, FileKind, Model, QuantizeSettings,
    RangeMethod, NOT_CLASS_SCORES,
};

use crate::progress::{self, Unit};
use crate::summary::{print_json, CalibrationCandidate, FloatOp, QuantizeSummary};

use crate::image_args::ResizeArgs;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The model to quantize.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// Storage type of the frozen weights.
    #[arg(long, value_enum, default_value_t = StorageType::Int8)]
    dtype: StorageType,
    /// int8 calibration data, no labels needed: a folder of PNG/JPEG images at any depth
    /// or a .npz / .safetensors file with x (float32 [N, C, H, W]).
    #[arg(long, value_name = "DIR|FILE")]
    calib: Option<PathBuf>,
    /// The most calibration samples, an even pick of them when --calib holds more
    /// [default: 512].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    calib_samples: Option<u64>,
    /// How int8 activation ranges are taken from the calibration data [default: auto].
    #[arg(long, value_enum)]
    calibration: Option<Calibration>,
    /// With --calibration percentile: a tensor's range runs from its (100 − P)th to its Pth
    /// percentile, ignoring rarer outliers [default: 99.99].
    #[arg(long, value_name = "P", value_parser = parse_percentile)]
    percentile: Option<f64>,
    /// int8: layers to keep in float, chosen like `sprout train --trainable` (e.g. `head`,
    /// to fine-tune a float head on an int8 backbone).
    #[arg(long, value_name = "CHOICE")]
    keep_float: Option<String>,
    /// int8: layers whose int8 weights stay trainable (kept in integer units, rounded each
    /// forward pass), chosen like `--trainable`.
    #[arg(long, value_name = "CHOICE")]
    trainable_int8: Option<String>,
    /// int8: train those layers without quantization-aware scaling of their gradients.
    #[arg(long, requires = "trainable_int8")]
    no_qas: bool,
    /// int8: run layers whose weights cannot be int8 (a dilated convolution) in float
    /// instead of refusing the model. Ops without an int8 kernel (softmax, say) always run
    /// in float; each one is listed.
    #[arg(long)]
    allow_float: bool,
    /// int8: correct each int8 layer's bias so that its mean output per channel over the
    /// calibration data is the float layer's (rounded weights and inputs move it), layer
    /// after layer. Reads the calibration data once more per depth of layers. It helps
    /// some models and hurts others: compare with and without on your own photos.
    #[arg(long)]
    bias_correction: bool,
    /// int8 of a model of class scores: when the int8 model gives the float model's answer
    /// on fewer than this percentage of the calibration samples, layers stay float, the most
    /// sensitive first, until it does (or --max-float-layers are). 0 only measures it
    /// [default: 97; 0 with --keep-float or --trainable-int8, whose float layers are trained
    /// again before they answer].
    #[arg(long, value_name = "PERCENT", value_parser = parse_agreement)]
    min_agreement: Option<f64>,
    /// int8: the most layers kept float for --min-agreement [default: a tenth of the int8
    /// layers, at least one].
    #[arg(long, value_name = "N")]
    max_float_layers: Option<usize>,
    /// The quantized model (written atomically).
    #[arg(short = 'o', long = "output", value_name = "OUT.sprout")]
    output: PathBuf,
    /// Print the summary as one JSON object on standard output: output, dtype, bytes (of
    /// the new file), model_bytes (of the input), frozen_f32_bytes and frozen_f16_bytes
    /// (f16; else null), calibration_samples, calibration_data and calibration (the range
    /// method kept; int8, else null), calibration_candidates (with --calibration auto: each
    /// method and its output divergence), float_ops and agreement (before, after, target,
    /// kept_float: the layers kept float for --min-agreement; null where the output is not
    /// class scores).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    resize: ResizeArgs,
}

/// The storage type `sprout quantize` converts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageType {
    /// Per-channel symmetric int8 weights, per-tensor asymmetric int8 activations.
    Int8,
    /// IEEE half-precision frozen weights; compute stays f32.
    F16,
}

/// How int8 activation ranges are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Calibration {
    /// Each of minmax, percentile (99.99) and mse, keeping the one whose int8 model's output
    /// over the calibration samples is closest to the float model's.
    Auto,
    /// The smallest and largest value seen.
    Minmax,
    /// The (100 − P)th and Pth percentiles of the values seen (P = --percentile).
    Percentile,
    /// The range, shrunk towards zero, whose rounding and clipping error over the values
    /// seen is least.
    Mse,
}

fn parse_percentile(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("'{text}' is not a number: {e}"))?;
    if p > 0.0 && p <= 100.0 {
        Ok(p)
    } else {
        Err(format!("the percentile must be in (0, 100], got {p}"))
    }
}

fn parse_agreement(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("'{text}' is not a number: {e}"))?;
    if (0.0..=100.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("the agreement is a percentage in [0, 100], got {p}"))
    }
}

/// --min-agreement's default, in percent, for a model quantized to answer as it is.
const DEFAULT_MIN_AGREEMENT: f64 = 97.0;

/// --min-agreement without it: [`DEFAULT_MIN_AGREEMENT`], or only a measurement for a model
/// quantized to be trained on (a float head kept to fine-tune: its answers before then,
/// often a fresh head's near ties, say nothing of the int8 layers).
fn default_min_agreement(args: &QuantizeArgs) -> f64 {
    if args.keep_float.is_some() || args.trainable_int8.is_some() {
        0.0
    } else {
        DEFAULT_MIN_AGREEMENT
    }
}

/// The percentile of --calibration percentile without --percentile.
const DEFAULT_PERCENTILE: f64 = 99.99;

/// Calibration samples without --calib-samples.
const DEFAULT_CALIB_SAMPLES: u64 = 512;

/// Refuses options that would do nothing with the others given.
fn check(args: &QuantizeArgs) -> Result<()> {
    if args.dtype == StorageType::F16 {
        let int8_only = [
            ("--calib", args.calib.is_some()),
            ("--calib-samples", args.calib_samples.is_some()),
            ("--calibration", args.calibration.is_some()),
            ("--percentile", args.percentile.is_some()),
            ("--keep-float", args.keep_float.is_some()),
            ("--trainable-int8", args.trainable_int8.is_some()),
            ("--no-qas", args.no_qas),
            ("--allow-float", args.allow_float),
            ("--bias-correction", args.bias_correction),
            ("--min-agreement", args.min_agreement.is_some()),
            ("--max-float-layers", args.max_float_layers.is_some()),
        ];
        if let Some((flag, _)) = int8_only.iter().find(|(_, given)| *given) {
            bail!("{flag} applies to --dtype int8, not f16");
        }
    }
    if args.percentile.is_some() && args.calibration != Some(Calibration::Percentile) {
        bail!("--percentile applies only with --calibration percentile");
    }
    Ok(())
}

pub fn run(args: &QuantizeArgs) -> Result<()> {
    check(args)?;
    let calib = args.calib.as_deref().map(|c| ("--calib", c));
    let inputs: Vec<_> = [("MODEL", args.model.as_path())].into_iter().chain(calib).collect();
    check_output(&args.output, &inputs)?;
    let bytes = read_kind(&args.model, FileKind::Model, "a .sprout model")?;
    let file = load_model(&bytes).with_context(|| format!("loading {}", args.model.display()))?;
    let mut summary = QuantizeSummary {
        output: args.output.display().to_string(),
        dtype: args.dtype.to_possible_value().map_or(String::new(), |v| v.get_name().into()),
        bytes: 0,
        model_bytes: bytes.len(),
        frozen_f32_bytes: None,
        frozen_f16_bytes: None,
        calibration_samples: None,
        calibration_data: None,
        calibration: None,
        calibration_candidates: Vec::new(),
        float_ops: Vec::new(),
        agreement: None,
    };
    let quantized = match args.dtype {
        StorageType::F16 => to_f16(&file, &args.model, &mut summary)?,
        StorageType::Int8 => to_int8(args, &mut summary)?,
    };
    let encoded = save_model(&quantized).context("cannot encode the quantized model")?;
    write_atomic(&args.output, &encoded)?;
    summary.bytes = encoded.len();
    if args.json {
        return print_json(&summary);
    }
    if !summary.calibration_candidates.is_empty() {
        let each: Vec<String> = summary
            .calibration_candidates
            .iter()
            .map(|c| format!("{} {:.2e}", c.method, c.error))
            .collect();
        println!(
            "calibration: kept {} of {} (output error against float on the calibration samples)",
            summary.calibration.as_deref().unwrap_or(""),
            each.join(", ")
        );
    }
    if let Some(agreement) = &summary.agreement {
        print_agreement(agreement, summary.calibration_samples.unwrap_or(0));
    }
    if !summary.float_ops.is_empty() {
        // One line per kind of op and reason; --json lists every node.
        let mut kinds = std::collections::BTreeMap::<(&str, &str), usize>::new();
        for f in &summary.float_ops {
            *kinds.entry((f.op.as_str(), f.reason.as_str())).or_default() += 1;
        }
        println!("{} ops run in float on int8 input:", summary.float_ops.len());
        for ((op, reason), count) in kinds {
            println!("  {count} x {op}: {reason}");
        }
    }
    if let (Some(f32_bytes), Some(f16_bytes)) = (summary.frozen_f32_bytes, summary.frozen_f16_bytes)
    {
        println!("frozen weights: {f32_bytes} bytes as f32 -> {f16_bytes} bytes as f16");
    }
    println!(
        "wrote {} ({} bytes; the model was {} bytes)",
        summary.output, summary.bytes, summary.model_bytes
    );
    Ok(())
}

/// The model with every frozen f32 weight stored as f16; notes the frozen bytes before and
/// after in `summary`.
fn to_f16(file: &ModelFile, path: &Path, summary: &mut QuantizeSummary) -> Result<ModelFile> {
    let graph = file.to_graph().with_context(|| format!("loading {}", path.display()))?;
    let options = F16Storage { frozen_weights: true, ..F16Storage::default() };
    let half = to_f16_storage(&graph, &[], options)
        .with_context(|| format!("{}: cannot store the weights as f16", path.display()))?;
    summary.frozen_f32_bytes = Some(frozen_bytes(&graph));
    summary.frozen_f16_bytes = Some(frozen_bytes(&half));
    let mut metadata = file.metadata.clone();
    metadata.provenance = format!("{} (f16 weights: sprout quantize)", metadata.provenance);
    Ok(ModelFile::from_graph(&half, metadata))
}

/// The model rewritten in int8 from activation ranges observed on `--calib`, with a bar
/// over the calibration samples; notes the calibration set in `summary`.
fn to_int8(args: &QuantizeArgs, summary: &mut QuantizeSummary) -> Result<ModelFile> {
    let Some(calib) = &args.calib else {
        bail!("int8 quantization needs calibration data: give --calib DIR|FILE");
    };
    let model = Model::open_any_output(&args.model)?;
    if args.min_agreement.is_some() && !measurable(&model) {
        bail!("--min-agreement: {}: {NOT_CLASS_SCORES}", args.model.display());
    }
    let samples = args.calib_samples.unwrap_or(DEFAULT_CALIB_SAMPLES) as usize;
    let mut data =
        open_calibration(&model, calib, samples, &args.resize.pipeline(), args.resize.asked())?;
    let calibration = match args.calibration.unwrap_or(Calibration::Auto) {
        Calibration::Auto => RangeChoice::Closest,
        Calibration::Minmax => RangeChoice::Fixed(RangeMethod::MinMax),
        Calibration::Percentile => RangeChoice::Fixed(RangeMethod::Percentile(
            args.percentile.unwrap_or(DEFAULT_PERCENTILE),
        )),
        Calibration::Mse => RangeChoice::Fixed(RangeMethod::Mse),
    };
    let origin = data.origin().display().to_string();
    let note = format!("calibrating on {} samples of {origin}", data.len());
    // Standard output carries nothing but the JSON object in --json mode.
    if args.json {
        eprintln!("{note}");
    } else {
        println!("{note}");
    }
    (summary.calibration_samples, summary.calibration_data) = (Some(data.len()), Some(origin));
    let settings = QuantizeSettings {
        calibration,
        keep_float: args.keep_float.clone(),
        trainable: args.trainable_int8.clone(),
        qas: !args.no_qas,
        allow_float: args.allow_float,
        bias_correction: args.bias_correction,
        fallback: Some(FallbackTarget {
            min_agreement: args.min_agreement.unwrap_or(default_min_agreement(args)) / 100.0,
            max_layers: args.max_float_layers,
        }),
    };
    let bar = progress::bar("calibrate", data.len() as u64, Unit::Images);
    let mut progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let mut phase = |what: &str| bar.set_message(what.to_string());
    let quantized = quantize_with_reports(&model, &mut data, &settings, &mut progress, &mut phase)?;
    bar.finish_and_clear();
    summary.calibration = Some(quantized.method.name());
    summary.calibration_candidates = quantized
        .candidates
        .iter()
        .map(|&(method, error)| CalibrationCandidate { method: method.name(), error })
        .collect();
    summary.float_ops = quantized
        .float_fallbacks
        .into_iter()
        .map(|f| FloatOp { op: f.op.into(), node: f.node, reason: f.reason.into() })
        .collect();
    summary.agreement = quantized.agreement;
    Ok(quantized.file)
}

/// The int8 model's agreement with the float model, and the layers kept float for it.
fn print_agreement(a: &Agreement, samples: usize) {
    let percent = |f: f64| 100.0 * f;
    println!(
        "agreement: int8 gives the float model's answer on {:.1}% of the {samples} calibration samples",
        percent(a.before)
    );
    if !a.kept_float.is_empty() {
        let each: Vec<String> = a
            .kept_float
            .iter()
            .map(|k| format!("{} ({:.1}%)", k.weight, percent(k.agreement)))
            .collect();
        let layers = if each.len() == 1 { "layer" } else { "layers" };
        println!(
            "  below {:.1}%: kept {} {layers} float, the most sensitive first: {}",
            percent(a.target),
            each.len(),
            each.join(", ")
        );
    }
    if a.after < a.target {
        println!(
            "warning: the int8 model agrees on {:.1}%, below --min-agreement {:.1}%; more layers may stay float with --max-float-layers, or calibrate on more samples",
            percent(a.after),
            percent(a.target)
        );
    } else if !a.kept_float.is_empty() {
        println!("  the int8 model written agrees on {:.1}%", percent(a.after));
    }
}

/// Bytes of the frozen parameters' values.
fn frozen_bytes(graph: &Graph) -> usize {
    graph.tensors().iter().filter(|t| t.role == Role::FrozenParam).map(|t| t.bytes()).sum()
}
