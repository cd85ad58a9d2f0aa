//! `sprout plan`: compiles the training step of a zoo model or a `.sprout` file with the
//! chosen memory options and reports where its memory goes (text, JSON, and an optional SVG
//! picture of the arena).

use std::io::{ErrorKind, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::{ArgGroup, Args, ValueEnum};
use sprout_core::{
    compile_training_step_with, DType, GraphError, MemoryOptions, PlacementOptions, Role, Strategy,
    TrainConfig,
};
use sprout_train::{check_output, write_atomic, Model};
use sprout_zoo::{select_trainable, Architecture};

use crate::picture;
use crate::report::{Report, Request};
use crate::size::{format_size, parse_size};
use crate::text;
use crate::train_cmd::open_batched;

/// Seed of the model's initial weights; a plan does not depend on weight values.
const SEED: u64 = 42;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["model", "zoo"])))]
pub struct PlanArgs {
    /// A .sprout model to plan (converted, quantized or trained).
    #[arg(value_name = "MODEL.sprout")]
    model: Option<PathBuf>,
    /// A zoo model to plan instead: mlp, resnet or leafnet.
    #[arg(long, value_name = "NAME", value_parser = parse_architecture)]
    zoo: Option<Architecture>,
    /// What the step trains: all, head, bias, or comma-separated parameter-name patterns
    /// with `*` wildcards (`features.6.*,classifier.*`), as for `sprout train`.
    #[arg(long, value_name = "CHOICE", default_value = "all")]
    trainable: String,
    /// Samples per training step; the graph is recorded (a .sprout file re-recorded) for
    /// it [default: 1 for a zoo model; the batch size a .sprout file was recorded for].
    #[arg(long, value_name = "N", alias = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: Option<u64>,
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
    #[arg(long, value_name = "N", default_value_t = 8, conflicts_with_all = ["json", "dtypes"])]
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

/// The model to plan and its name in the report: a zoo model recorded for `--batch-size`,
/// or a `.sprout` file.
fn open_model(args: &PlanArgs) -> Result<(Model, String)> {
    match (&args.model, args.zoo) {
        (Some(path), _) => {
            let model = open_batched(path, args.batch_size)?;
            Ok((model, path.display().to_string()))
        }
        (None, Some(arch)) => {
            let batch = args.batch_size.unwrap_or(1);
            let batch = usize::try_from(batch).context("--batch-size is too large")?;
            let model = Model::from_zoo(arch, batch, SEED)
                .with_context(|| format!("could not record {arch} for batch {batch}"))?;
            Ok((model, arch.name().to_string()))
        }
        (None, None) => bail!("give a MODEL.sprout file or --zoo NAME"),
    }
}

/// The storage types other than f32 among the model's parameters (a quantized model's).
fn quantized_storage(model: &Model) -> Vec<&'static str> {
    let graph = &model.zoo.graph;
    let params = graph.tensors().iter().filter(|t| {
        matches!(t.role, Role::FrozenParam | Role::TrainableParam) && t.dtype != DType::F32
    });
    let mut kinds: Vec<&'static str> =
        params.map(|t| if t.dtype == DType::F16 { "f16" } else { "int8" }).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

pub fn run(args: &PlanArgs) -> Result<()> {
    if let Some(svg) = &args.svg {
        let model = args.model.as_deref().map(|m| ("MODEL", m));
        check_output(svg, &model.into_iter().collect::<Vec<_>>())?;
    }
    let (model, name) = open_model(args)?;
    let batch = model.batch();
    let stored = quantized_storage(&model);
    if args.dtypes && !stored.is_empty() {
        bail!(
            "--dtypes compares f32 storage with f16 and int8, but {name} already stores \
             weights as {}: plan the float model it was quantized from",
            stored.join(" and ")
        );
    }
    let zoo = &model.zoo;
    let trainable = select_trainable(zoo, &args.trainable).map_err(|e| anyhow!("{e}"))?;
    let request = Request {
        model: name.clone(),
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
        ..MemoryOptions::default()
    };
    if args.dtypes {
        return print(&crate::plan_dtypes::compare(&model, &name, &args.trainable, &memory)?);
    }
    let sgd = TrainConfig::sgd(0.9);
    let training = match compile_training_step_with(&zoo.graph, zoo.loss, &trainable, &sgd, &memory)
    {
        Ok(training) => training,
        Err(GraphError::BudgetUnreachable { budget, smallest }) => bail!(
            "{name} (batch {batch}, trainable {}) does not fit in {budget} bytes ({}): the \
             smallest arena reachable with gradient checkpointing is {smallest} bytes ({})",
            args.trainable,
            format_size(budget),
            format_size(smallest),
        ),
        Err(error) => {
            return Err(anyhow!("{error}"))
                .with_context(|| format!("could not compile the training step of {name}"))
        }
    };
    let report = Report::new(&request, zoo, &trainable, &training);

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
