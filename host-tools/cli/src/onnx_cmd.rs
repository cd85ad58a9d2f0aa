//! `sprout convert`, `sprout export` and `sprout import-weights`: ONNX models into `.sprout`
//! files, `.sprout` models out to ONNX or safetensors (weights under their PyTorch names),
//! and safetensors weights back onto a `.sprout` model. Class names and
//! preprocessing travel in ONNX `metadata_props` (see `sprout_onnx::metadata`), and
//! `convert`'s flags override them.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::{load_model, save_model, Metadata};
use sprout_onnx::{
    export_onnx_with_metadata, export_safetensors, graph_weights, import_with, metadata,
    read_safetensors, state_dict, with_weights, ImportOptions,
};
use sprout_train::{check_output, fit_of, read_kind, write_atomic, FileKind};

use crate::image_args::ResizeArg;

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The ONNX model to import.
    #[arg(value_name = "MODEL.onnx")]
    model: PathBuf,
    /// The `.sprout` file to write.
    #[arg(short, long, value_name = "MODEL.sprout", alias = "out")]
    output: PathBuf,
    /// Samples per batch to record the graph for (default: the model's fixed batch size,
    /// or 1 for a dynamic batch axis).
    #[arg(long, value_name = "N", alias = "batch", value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: Option<u32>,
    /// Class names in output order: comma-separated, a JSON array, or @FILE with one name
    /// per line (default: the ONNX metadata_props' sprout.classes, else 0, 1, ...).
    #[arg(long, value_name = "NAMES|@FILE")]
    classes: Option<String>,
    /// Per-channel mean pictures are normalised with, for pixels in [0, 1] (default: the
    /// ONNX metadata_props' sprout.mean); ImageNet's is 0.485,0.456,0.406.
    #[arg(long, value_name = "R,G,B", value_parser = parse_channels)]
    mean: Option<Channels>,
    /// Per-channel standard deviation (default: sprout.std); ImageNet's is
    /// 0.229,0.224,0.225.
    #[arg(long, value_name = "R,G,B", value_parser = parse_channels)]
    std: Option<Channels>,
    /// The square picture size, which must be the model input's (default: sprout.size,
    /// else the input's height and width).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
    size: Option<u32>,
    /// How pictures are fitted to the size (default: sprout.resize, else chosen by the
    /// first train, eval or predict's --resize).
    #[arg(long, value_enum)]
    resize: Option<ResizeArg>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// The inference graph, opset 13, with a dynamic batch axis.
    Onnx,
    /// Parameters and buffers (a PyTorch state dict), F32.
    Safetensors,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The `.sprout` model to export.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// What to write.
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// The file to write.
    #[arg(short, long, value_name = "FILE", alias = "out")]
    output: PathBuf,
}

#[derive(Args, Debug)]
pub struct ImportWeightsArgs {
    /// The `.sprout` model whose weights are replaced.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// Weights by name (e.g. from `sprout export --format safetensors`, PyTorch's
    /// `save_file(model.state_dict())`, or a federated average): every tensor must be one of
    /// the model's parameters or buffers with its shape, F32, all values finite; the others
    /// keep their values.
    #[arg(long, value_name = "FILE.safetensors")]
    weights: PathBuf,
    /// The model to write.
    #[arg(short, long, value_name = "FILE", alias = "out")]
    output: PathBuf,
}

pub fn import_weights(args: &ImportWeightsArgs) -> Result<()> {
    check_output(&args.output, &[("MODEL", &args.model), ("--weights", &args.weights)])?;
    let bytes = read_kind(&args.model, FileKind::Model, "a .sprout model")?;
    let model =
        load_model(&bytes).with_context(|| format!("could not load '{}'", args.model.display()))?;
    let weights = read_kind(&args.weights, FileKind::Safetensors, "a safetensors file")?;
    let tensors = read_safetensors(&weights)
        .with_context(|| format!("could not read '{}'", args.weights.display()))?;
    let (updated, applied) = with_weights(&model, &tensors).with_context(|| {
        format!("could not apply '{}' to '{}'", args.weights.display(), args.model.display())
    })?;
    write_atomic(&args.output, &save_model(&updated)?)?;
    println!(
        "applied {applied} tensors of '{}' to '{}': '{}'",
        args.weights.display(),
        args.model.display(),
        args.output.display()
    );
    Ok(())
}

pub fn convert(args: &ConvertArgs) -> Result<()> {
    check_output(&args.output, &[("MODEL", &args.model)])?;
    let bytes = read_kind(&args.model, FileKind::Onnx, "an ONNX model")?;
    let options = ImportOptions {
        batch: args.batch_size.map(|b| b as usize),
        max_memory: Some(sprout_data::Limits::current().max_memory),
    };
    let mut imported = import_with(&bytes, &options)
        .with_context(|| format!("could not import '{}'", args.model.display()))?;
    let output_shape = imported.outputs.first().map(|&o| imported.graph.shape(o));
    let metadata = &mut imported.metadata;
    apply_flags(args, metadata)
        .with_context(|| format!("cannot describe '{}'", args.model.display()))?;
    check_metadata(metadata, output_shape.as_ref().map(|s| s.dims()))
        .with_context(|| format!("cannot describe '{}'", args.model.display()))?;
    let file = save_model(&imported.model_file()).context("could not encode the .sprout model")?;
    write_atomic(&args.output, &file)?;
    let g = &imported.graph;
    let outputs: Vec<_> = imported.outputs.iter().map(|&o| g.tensor(o).name.as_str()).collect();
    let params: usize = g.parameters().map(|p| g.shape(p).numel()).sum();
    println!(
        "converted '{}' (opset {}) to '{}': {} ops, {params} parameters, input '{}' {}, outputs {outputs:?}",
        args.model.display(),
        imported.opset,
        args.output.display(),
        g.nodes().len(),
        g.tensor(imported.input).name,
        g.shape(imported.input),
    );
    Ok(())
}

/// Three per-channel values of a flag.
#[derive(Clone, Debug)]
pub struct Channels(Vec<f32>);

fn parse_channels(text: &str) -> Result<Channels, String> {
    metadata::parse_channels(text).map(Channels)
}

/// Class names from `--classes`: a file's lines after `@`, else the names given.
fn read_classes(value: &str) -> Result<Vec<String>> {
    let Some(path) = value.strip_prefix('@') else {
        return metadata::parse_classes(value).map_err(|e| anyhow::anyhow!("--classes: {e}"));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--classes: cannot read the class file '{path}'"))?;
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    metadata::parse_classes(&lines.join(","))
        .map_err(|e| anyhow::anyhow!("--classes: '{path}': {e}"))
}

/// The flags given override what the ONNX `metadata_props` said.
fn apply_flags(args: &ConvertArgs, metadata: &mut Metadata) -> Result<()> {
    if let Some(classes) = &args.classes {
        metadata.class_names = read_classes(classes)?;
    }
    let prep = &mut metadata.preprocessing;
    if let Some(mean) = &args.mean {
        prep.mean = mean.0.clone();
    }
    if let Some(std) = &args.std {
        prep.std = std.0.clone();
    }
    if let Some(size) = args.size {
        prep.resize = Some((size, size));
    }
    if let Some(resize) = args.resize {
        prep.fit = Some(fit_of(resize.into()));
    }
    Ok(())
}

/// Checks the class names and preprocessing against the model; an image input `[N, 3, H,
/// W]` without a size gets its own.
fn check_metadata(metadata: &mut Metadata, output: Option<&[usize]>) -> Result<()> {
    if let (Some(&[_, classes]), false) = (output, metadata.class_names.is_empty()) {
        if metadata.class_names.len() != classes {
            bail!(
                "{} class names ({:?}) for an output of {classes} classes",
                metadata.class_names.len(),
                metadata.class_names
            );
        }
    }
    let input = metadata.input_shape;
    let prep = &mut metadata.preprocessing;
    if prep.mean.is_empty() != prep.std.is_empty() {
        bail!("give both --mean and --std, or neither");
    }
    match (input.dims(), prep.resize) {
        ([_, 3, h, w], None) => prep.resize = Some((*h as u32, *w as u32)),
        ([_, 3, h, w], Some(size)) if size != (*h as u32, *w as u32) => bail!(
            "pictures of size {}x{} do not fit the model's input {input}: give --size {h}",
            size.0,
            size.1
        ),
        ([_, 3, _, _], Some(_)) => {}
        (_, Some(_)) => {
            bail!("--size and sprout.size need a picture input [N, 3, H, W]; this one is {input}")
        }
        (_, None) => {}
    }
    Ok(())
}

pub fn export(args: &ExportArgs) -> Result<()> {
    check_output(&args.output, &[("MODEL", &args.model)])?;
    let bytes = read_kind(&args.model, FileKind::Model, "a .sprout model")?;
    let model =
        load_model(&bytes).with_context(|| format!("could not load '{}'", args.model.display()))?;
    let graph = model.to_graph().context("could not rebuild the graph")?;
    let weights = graph_weights(&graph);
    let file = match args.format {
        ExportFormat::Onnx => export_onnx_with_metadata(&graph, &weights, &model.metadata),
        ExportFormat::Safetensors => {
            state_dict(&graph, &weights).and_then(|t| export_safetensors(&t))
        }
    }
    .with_context(|| format!("could not export '{}'", args.model.display()))?;
    write_atomic(&args.output, &file)?;
    println!(
        "exported '{}' to '{}' ({} bytes)",
        args.model.display(),
        args.output.display(),
        file.len()
    );
    Ok(())
}
