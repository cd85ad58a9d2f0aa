//! `sprout`: the command line of the sprout runtime. This file holds the command-line
//! definitions and dispatches to one module per command.

mod backend_args;
mod bundle_cmd;
mod data_cmd;
mod device_cmd;
mod duration;
mod eval_cmd;
mod flash_cmd;
mod image_args;
mod numbers;
mod onnx_cmd;
mod pass_args;
mod picture;
mod plan_cmd;
mod plan_dtypes;
mod predict_cmd;
mod progress;
mod quantize_cmd;
mod report;
mod run_cmd;
mod serve_cmd;
mod size;
mod summary;
mod text;
mod train_cmd;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

/// Train neural networks on the device that uses them.
///
/// sprout trains, evaluates and quantizes models on the desktop, plans where a training
/// step's memory goes, imports and exports ONNX, and trains on boards running sprout's
/// firmware. A typical path: `data leaves` (or your own class folders) -> `train` -> `eval`
/// / `predict` -> `quantize` -> `bundle` -> `flash` -> `device train`.
#[derive(Parser, Debug)]
#[command(name = "sprout", version = sprout_train::VERSION, about, long_about)]
struct Cli {
    /// The most memory one model, plan, data file or decoded image may declare, e.g. 8G
    /// (K, M, G, T: powers of 1024). Files declaring more are refused before anything is
    /// allocated. Default: $SPROUT_MAX_MEMORY, else 2G.
    #[arg(long, global = true, value_name = "SIZE", value_parser = memory_size)]
    max_memory: Option<u64>,
    #[command(subcommand)]
    command: Command,
}

/// Parses a `--max-memory` size.
fn memory_size(text: &str) -> Result<u64, String> {
    sprout_data::parse_size(text)
}

/// The process's resource limits: `--max-memory`, else the environment, else the defaults.
fn limits(cli: &Cli) -> anyhow::Result<sprout_data::Limits> {
    let mut limits = sprout_data::Limits::from_env()?;
    if let Some(bytes) = cli.max_memory {
        limits.max_memory = bytes;
    }
    Ok(limits)
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show where a training step's memory goes, for a .sprout file or a zoo model.
    ///
    /// Compiles the training step and reports the arena against its lower bound, the state
    /// and frozen-weight regions, FLOPs, the largest buffers and a picture of the arena over
    /// time (--svg, --json); --budget recomputes activations until the step fits; --dtypes
    /// compares f32, f16 and int8 storage.
    Plan(plan_cmd::PlanArgs),
    /// Make data sets (`sprout data leaves`: synthetic plant-leaf photos).
    ///
    /// `sprout data leaves -o DIR` writes PNG photos in DIR/train/CLASS and DIR/val/CLASS,
    /// the same bytes for the same arguments.
    Data(data_cmd::DataArgs),
    /// Train a zoo model or a .sprout file on an image folder or a tensor file.
    ///
    /// Writes the trained model (-o), and checkpoints, the best model and a training curve in
    /// a run folder; --resume continues from a checkpoint, --init-from starts a zoo model
    /// from a pretrained file's weights.
    Train(Box<train_cmd::TrainArgs>),
    /// Measure a .sprout model's accuracy on a data set.
    ///
    /// Prints accuracy, loss, per-class accuracy and the confusion matrix on an image folder
    /// (DIR/val when present) or a tensor file, optionally with the head a device trained.
    Eval(eval_cmd::EvalArgs),
    /// Classify images with a .sprout model.
    ///
    /// Prints each image's class and the probabilities of all classes, preprocessed as the
    /// model's metadata says (resize, per-channel mean and standard deviation).
    Predict(predict_cmd::PredictArgs),
    /// Run a .sprout model on a float32 .npy tensor and write its logits as .npy.
    Run(run_cmd::RunArgs),
    /// Store a .sprout model's frozen weights as int8 or f16.
    ///
    /// int8 (--dtype int8, the default) needs calibration data (--calib) for the activation
    /// ranges and can keep layers in float (--keep-float head) or trainable in int8; f16
    /// (--dtype f16) halves the frozen weights and keeps f32 compute.
    Quantize(quantize_cmd::QuantizeArgs),
    /// Import an ONNX model into a .sprout file.
    Convert(onnx_cmd::ConvertArgs),
    /// Export a .sprout model's inference graph to ONNX, or its weights to safetensors.
    Export(onnx_cmd::ExportArgs),
    /// Apply safetensors weights (by name, shapes checked) onto a .sprout model.
    ImportWeights(onnx_cmd::ImportWeightsArgs),
    /// Train on a device running sprout's firmware, pull or push its checkpoint.
    ///
    /// The device is a serial port or tcp:HOST:PORT (QEMU): `device train` sends a data
    /// folder and trains there, `device pull` saves its checkpoint, `device push` sends one.
    Device(device_cmd::DeviceArgs),
    /// Write a .sprout model as a device bundle for the firmware.
    ///
    /// The bundle holds the backbone inference, head training and head evaluation plans with
    /// their weights; the command prints where its bytes and the device's memory go.
    Bundle(bundle_cmd::BundleArgs),
    /// Flash a firmware ELF to a board through its debug probe.
    Flash(flash_cmd::FlashArgs),
    /// Run the edge service: data sets, fine-tuning jobs, a model registry, predictions.
    ///
    /// `sprout serve --data-dir DIR --listen 127.0.0.1:8080` serves a JSON API under /api/v1
    /// (OpenAPI document at /api/v1/openapi.json) with bearer tokens made by `sprout serve
    /// token create --data-dir DIR --scope read|train|admin`. Jobs run as child `sprout
    /// train` processes and resume after a restart.
    Serve(serve_cmd::ServeArgs),
    /// Print a shell completion script (bash, zsh or fish) to standard output.
    ///
    /// bash: `sprout completions bash > ~/.local/share/bash-completion/completions/sprout`;
    /// zsh: into a folder on $fpath as `_sprout`; fish: `~/.config/fish/completions/sprout.fish`.
    Completions(CompletionsArgs),
}

#[derive(clap::Args, Debug)]
struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_enum)]
    shell: Shell,
}

/// The shells `sprout completions` writes scripts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script of `shell` to stdout.
fn completions(args: &CompletionsArgs) -> anyhow::Result<()> {
    use clap_complete::Shell as Target;
    let shell = match args.shell {
        Shell::Bash => Target::Bash,
        Shell::Zsh => Target::Zsh,
        Shell::Fish => Target::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "sprout", &mut script);
    std::io::stdout().write_all(&script).context("could not write to stdout")
}

/// The lines of an error's chain to print: each cause whose text the line before already
/// holds (a wrapper that prints its source) is left out, so nothing is said twice.
fn error_lines(error: &anyhow::Error) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if lines.last().is_some_and(|previous| previous.contains(&text)) {
            continue;
        }
        lines.push(text);
    }
    lines
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = limits(&cli).map(sprout_data::Limits::install).and_then(|()| match &cli.command {
        Command::Plan(args) => plan_cmd::run(args),
        Command::Data(args) => data_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Quantize(args) => quantize_cmd::run(args),
        Command::Convert(args) => onnx_cmd::convert(args),
        Command::Export(args) => onnx_cmd::export(args),
        Command::ImportWeights(args) => onnx_cmd::import_weights(args),
        Command::Device(args) => device_cmd::run(args),
        Command::Bundle(args) => bundle_cmd::run(args),
        Command::Flash(args) => flash_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Completions(args) => completions(args),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The chain by hand rather than `{error:?}`, which adds a backtrace when
            // RUST_BACKTRACE is set.
            let lines = error_lines(&error);
            eprintln!("error: {}", lines[0]);
            for cause in &lines[1..] {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{error_lines, Cli};
    use anyhow::anyhow;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_cause_already_said_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file (os error 2)");
        let wrapped = anyhow::Error::new(io).context("x.sprout: no such file (os error 2)");
        assert_eq!(error_lines(&wrapped), ["x.sprout: no such file (os error 2)"]);
        let distinct = anyhow!("bad header").context("cannot bundle m.sprout");
        assert_eq!(error_lines(&distinct), ["cannot bundle m.sprout", "bad header"]);
    }
}
