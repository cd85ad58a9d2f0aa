//! `sprout quantize`: a `.sprout` model with its frozen weights in a smaller storage type:
//! IEEE half precision (`--dtype f16`), or int8 from calibration data (`--dtype int8`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::{load_model, save_model, to_f16_storage, F16Storage, Graph, ModelFile, Role};
use sprout_train::{open_data, quantize, write_atomic, Model, QuantizeSettings, RangeMethod};

use crate::image_args::ResizeArgs;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The model to quantize.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// Storage type of the frozen weights.
    #[arg(long, value_enum, default_value_t = StorageType::Int8)]
    dtype: StorageType,
    /// int8 calibration data: a folder per class (DIR/train when present) or a .npz /
    /// .safetensors file with x (float32 [N, C, H, W]).
    #[arg(long, value_name = "DIR|FILE")]
    calib: Option<PathBuf>,
    /// How int8 activation ranges are taken from the calibration data.
    #[arg(long, value_enum, default_value_t = Calibration::Minmax)]
    calibration: Calibration,
    /// With --calibration percentile: a tensor's range runs from its (100 − P)th to its Pth
    /// percentile, ignoring rarer outliers.
    #[arg(long, value_name = "P", default_value_t = 99.99, value_parser = parse_percentile)]
    percentile: f64,
    /// int8: layers to keep in float, chosen like `sprout train --trainable` (e.g. `head`,
    /// to fine-tune a float head on an int8 backbone).
    #[arg(long, value_name = "CHOICE")]
    keep_float: Option<String>,
    /// int8: layers whose int8 weights stay trainable (kept in integer units, rounded each
    /// forward pass), chosen like `--trainable`.
    #[arg(long, value_name = "CHOICE")]
    trainable_int8: Option<String>,
    /// int8: train those layers without quantization-aware scaling of their gradients.
    #[arg(long)]
    no_qas: bool,
    /// The quantized model (written atomically).
    #[arg(short = 'o', long = "output", value_name = "OUT.sprout")]
    output: PathBuf,
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
    /// The smallest and largest value seen.
    Minmax,
    /// The (100 − P)th and Pth percentiles of the values seen (P = --percentile).
    Percentile,
}

fn parse_percentile(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("'{text}' is not a number: {e}"))?;
    if p > 0.0 && p <= 100.0 {
        Ok(p)
    } else {
        Err(format!("the percentile must be in (0, 100], got {p}"))
    }
}

pub fn run(args: &QuantizeArgs) -> Result<()> {
    let bytes =
        std::fs::read(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    let file = load_model(&bytes).with_context(|| format!("loading {}", args.model.display()))?;
    let quantized = match args.dtype {
        StorageType::F16 => to_f16(&file, &args.model)?,
        StorageType::Int8 => to_int8(args)?,
    };
    let encoded = save_model(&quantized).context("cannot encode the quantized model")?;
    write_atomic(&args.output, &encoded)?;
    println!(
        "wrote {} ({} bytes; the model was {} bytes)",
        args.output.display(),
        encoded.len(),
        bytes.len()
    );
    Ok(())
}

/// The model with every frozen f32 weight stored as f16.
fn to_f16(file: &ModelFile, path: &Path) -> Result<ModelFile> {
    let graph = file.to_graph().with_context(|| format!("loading {}", path.display()))?;
    let options = F16Storage { frozen_weights: true, ..F16Storage::default() };
    let half = to_f16_storage(&graph, &[], options)
        .with_context(|| format!("{}: cannot store the weights as f16", path.display()))?;
    println!(
        "frozen weights: {} bytes as f32 -> {} bytes as f16",
        frozen_bytes(&graph),
        frozen_bytes(&half)
    );
    let mut metadata = file.metadata.clone();
    metadata.provenance = format!("{} (f16 weights: sprout quantize)", metadata.provenance);
    Ok(ModelFile::from_graph(&half, metadata))
}

/// The model rewritten in int8 from activation ranges observed on `--calib`.
fn to_int8(args: &QuantizeArgs) -> Result<ModelFile> {
    let Some(calib) = &args.calib else {
        bail!("int8 quantization needs calibration data: give --calib DIR|FILE");
    };
    let mut model = Model::open(&args.model)?;
    let (mut data, _) =
        open_data(&mut model, calib, None, false, false, 0, &args.resize.pipeline())?;
    let method = match args.calibration {
        Calibration::Minmax => RangeMethod::MinMax,
        Calibration::Percentile => RangeMethod::Percentile(args.percentile),
    };
    println!("calibrating on {} samples of {}", data.len(), data.origin().display());
    let settings = QuantizeSettings {
        method,
        keep_float: args.keep_float.clone(),
        trainable: args.trainable_int8.clone(),
        qas: !args.no_qas,
    };
    Ok(quantize(&model, &mut data, &settings)?)
}

/// Bytes of the frozen parameters' values.
fn frozen_bytes(graph: &Graph) -> usize {
    graph.tensors().iter().filter(|t| t.role == Role::FrozenParam).map(|t| t.bytes()).sum()
}
