//! `sprout plan`: compiles a zoo model's training step with the chosen memory options and
//! reports where its memory goes (text, JSON, and an optional SVG picture of the arena).

use std::io::{ErrorKind, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use sprout_core::{
    compile_training_step_with, GraphError, MemoryOptions, PlacementOptions, Strategy, TrainConfig,
};
use sprout_train::write_atomic;
use sprout_zoo::{build, select_trainable, Architecture};

use crate::picture;
use crate::report::{Report, Request};
use crate::size::{format_size, parse_size};
use crate::text;

/// Seed of the model's initial weights; a plan does not depend on weight values.
const SEED: u64 = 42;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The zoo model to plan: mlp, resnet or leafnet.
    #[arg(long, value_name = "MODEL", value_parser = parse_architecture)]
    zoo: Architecture,
    /// What the step trains: all, head, bias, or comma-separated parameter-name patterns
    /// with `*` wildcards (`features.6.*,classifier.*`).
    #[arg(long, value_name = "CHOICE", default_value = "all")]
    trainable: String,
    /// Samples per training step.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Arena bytes the step must fit in (300000, 256KiB, 1.5MiB, 64kB); activations are
    /// recomputed (gradient checkpointing) until it does.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    budget: Option<usize>,
    /// How buffers are placed in the arena.
    #[arg(long, value_enum, default_value_t = StrategyChoice::Greedy)]
    strategy: StrategyChoice,
    /// Keep every optimizer update at the end of the step instead of right after its
    /// gradient is final.
    #[arg(long)]
    no_update_early: bool,
    /// Never let an element-wise op write its output over its input.
    #[arg(long)]
    no_in_place: bool,
    /// Also draw the arena over time as an SVG image into FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    json: bool,
    /// Compare the step's memory with f32, f16 and int8 storage side by side (instead of
    /// the full report).
    #[arg(long, conflicts_with_all = ["json", "svg", "budget"])]
    dtypes: bool,
    /// How many of the largest arena buffers to list and letter in the picture.
    #[arg(long, value_name = "N", default_value_t = 8)]
    top: usize,
}

/// The placement strategies, by their command-line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StrategyChoice {
    /// Largest buffer first, each in the best-fitting gap (TensorFlow Lite Micro's planner).
    Greedy,
    /// Buffers in order of first use, each at the lowest offset that fits.
    FirstFit,
    /// Branch and bound from the greedy placement (graphs of at most 100 buffers).
    Exact,
}

impl StrategyChoice {
    pub fn strategy(self) -> Strategy {
        match self {
            StrategyChoice::Greedy => Strategy::GreedyBySize,
            StrategyChoice::FirstFit => Strategy::FirstFitInTime,
            StrategyChoice::Exact => Strategy::exact(),
        }
    }
}

/// A zoo architecture by name; the error lists the zoo.
fn parse_architecture(name: &str) -> Result<Architecture, String> {
    Architecture::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Architecture::ALL.iter().map(|a| a.name()).collect();
        format!("unknown zoo model '{name}'; the zoo has {}", names.join(", "))
    })
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let arch = args.zoo;
    let batch = usize::try_from(args.batch).context("--batch is too large")?;
    let model = build(arch, batch, SEED)
        .with_context(|| format!("could not record {arch} for batch {batch}"))?;
    let trainable = select_trainable(&model, &args.trainable).map_err(|e| anyhow!("{e}"))?;
    let request = Request {
        model: arch.name().to_string(),
        batch,
        trainable: args.trainable.clone(),
        strategy: args.strategy.strategy(),
        update_early: !args.no_update_early,
        in_place: !args.no_in_place,
        budget: args.budget,
    };
    let memory = MemoryOptions {
        placement: PlacementOptions {
            strategy: request.strategy,
            in_place: request.in_place,
            ..PlacementOptions::default()
        },
        update_early: request.update_early,
        budget: request.budget,
        f16_storage: None,
    };
    if args.dtypes {
        return print(&crate::plan_dtypes::compare(arch, batch, SEED, &args.trainable, &memory)?);
    }
    let sgd = TrainConfig::sgd(0.9);
    let training =
        match compile_training_step_with(&model.graph, model.loss, &trainable, &sgd, &memory) {
            Ok(training) => training,
            Err(GraphError::BudgetUnreachable { budget, smallest }) => bail!(
                "{arch} (batch {batch}, trainable {}) does not fit in {budget} bytes ({}): the \
             smallest arena reachable with gradient checkpointing is {smallest} bytes ({})",
                args.trainable,
                format_size(budget),
                format_size(smallest),
            ),
            Err(error) => {
                return Err(anyhow!("{error}"))
                    .with_context(|| format!("could not compile the training step of {arch}"))
            }
        };
    let report = Report::new(&request, &model, &trainable, &training);

    if let Some(path) = &args.svg {
        write_atomic(path, picture::svg(&report).as_bytes())?;
    }
    let mut output = if args.json {
        serde_json::to_string(&report).context("could not encode the report as JSON")?
    } else {
        text::render(&report, args.top)
    };
    if !output.ends_with('\n') {
        output.push('\n');
    }
    if let (Some(path), false) = (&args.svg, args.json) {
        output.push_str(&format!("\npicture of the arena written to {}\n", path.display()));
    }
    print(&output)
}

/// Writes to stdout; a closed pipe (`sprout plan ... | head`) is not an error.
fn print(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(e).context("could not write to stdout"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoo_names_parse_and_unknown_ones_list_the_zoo() {
        assert_eq!(parse_architecture("leafnet"), Ok(Architecture::LeafNet));
        let message = parse_architecture("lenet").unwrap_err();
        assert!(
            message.contains("'lenet'") && message.contains("mlp, resnet, leafnet"),
            "{message}"
        );
    }
}
