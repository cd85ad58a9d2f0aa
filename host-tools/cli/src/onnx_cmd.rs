//! `sprout convert` and `sprout export`: ONNX models into `.sprout` files, and `.sprout`
//! models out to ONNX or safetensors (weights under their PyTorch names).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::{load_model, save_model};
use sprout_onnx::{
    export_onnx, export_safetensors, graph_weights, import_with, state_dict, ImportOptions,
};
use sprout_train::{read_kind, write_atomic, FileKind};

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

pub fn convert(args: &ConvertArgs) -> Result<()> {
    let bytes = read_kind(&args.model, FileKind::Onnx, "an ONNX model")?;
    let options = ImportOptions { batch: args.batch_size.map(|b| b as usize) };
    let imported = import_with(&bytes, &options)
        .with_context(|| format!("could not import '{}'", args.model.display()))?;
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

pub fn export(args: &ExportArgs) -> Result<()> {
    let bytes = read_kind(&args.model, FileKind::Model, "a .sprout model")?;
    let model =
        load_model(&bytes).with_context(|| format!("could not load '{}'", args.model.display()))?;
    let graph = model.to_graph().context("could not rebuild the graph")?;
    let weights = graph_weights(&graph);
    let file = match args.format {
        ExportFormat::Onnx => export_onnx(&graph, &weights),
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
