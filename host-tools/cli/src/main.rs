//! `sprout`: the command line of the sprout runtime. This file holds the command-line
//! definitions and dispatches to one module per command.

mod data_cmd;
mod picture;
mod plan_cmd;
mod report;
mod size;
mod text;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Plan(args) => plan_cmd::run(args),
        Command::Data(args) => data_cmd::run(args),
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
