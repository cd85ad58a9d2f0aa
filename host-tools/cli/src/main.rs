//! `sprout`: the command line of the sprout runtime. This file holds the command-line
//! definitions and dispatches to one module per command.

mod bundle_cmd;
mod data_cmd;
mod device_cmd;
mod eval_cmd;
mod flash_cmd;
mod image_args;
mod onnx_cmd;
mod picture;
mod plan_cmd;
mod plan_dtypes;
mod predict_cmd;
mod quantize_cmd;
mod report;
mod run_cmd;
mod size;
mod text;
mod train_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Train neural networks on the device that uses them.
#[derive(Parser, Debug)]
#[command(name = "sprout", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compile a zoo model's training step and show its memory plan: arena against the lower
    /// bound, FLOPs, the largest buffers and a picture of the arena over time.
    Plan(plan_cmd::PlanArgs),
    /// Make data sets: `sprout data leaves` writes synthetic plant-leaf photos in train/val
    /// folders per class.
    Data(data_cmd::DataArgs),
    /// Train a zoo model or a .sprout file on an image folder or a tensor file, with
    /// checkpoints, the best model and a training curve in a run folder.
    Train(train_cmd::TrainArgs),
    /// Accuracy, per-class accuracy and confusion matrix of a .sprout model on a data set.
    Eval(eval_cmd::EvalArgs),
    /// Class and probabilities of images, preprocessed as the model's metadata says.
    Predict(predict_cmd::PredictArgs),
    /// Run a .sprout model on a float32 .npy tensor and write its logits as .npy.
    Run(run_cmd::RunArgs),
    /// Store a .sprout model's frozen weights as f16 (--dtype f16) or int8 (--dtype int8
    /// with --calib DATA).
    Quantize(quantize_cmd::QuantizeArgs),
    /// Import an ONNX model into a `.sprout` file.
    Convert(onnx_cmd::ConvertArgs),
    /// Export a `.sprout` model's inference graph to ONNX, or its weights to safetensors.
    Export(onnx_cmd::ExportArgs),
    /// Talk to a device running sprout's firmware (a serial port or tcp:HOST:PORT): train
    /// on it from a data folder, pull its checkpoint, push one to it.
    Device(device_cmd::DeviceArgs),
    /// Write a .sprout model as a device bundle: backbone, head training and head evaluation
    /// plans with their weights, for the firmware to embed.
    Bundle(bundle_cmd::BundleArgs),
    /// Flash a firmware ELF to a board through its debug probe.
    Flash(flash_cmd::FlashArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Plan(args) => plan_cmd::run(args),
        Command::Data(args) => data_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Quantize(args) => quantize_cmd::run(args),
        Command::Convert(args) => onnx_cmd::convert(args),
        Command::Export(args) => onnx_cmd::export(args),
        Command::Device(args) => device_cmd::run(args),
        Command::Bundle(args) => bundle_cmd::run(args),
        Command::Flash(args) => flash_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The chain by hand rather than `{error:?}`, which adds a backtrace when
            // RUST_BACKTRACE is set.
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
