//! `cargo xtask bench <suite>`: benchmarks, always measured in a release build. `planner`
//! compares the arena placement strategies on the zoo and shows what each memory pass and
//! gradient checkpointing save.
//!
//! `cargo xtask` itself is built in the dev profile, whose timings would measure the
//! compiler's debug code. Rather than reach into the workspace's profiles, `bench SUITE`
//! re-invokes this same program as `cargo run --release -p xtask -- bench-run SUITE`: the
//! suites live here, and the release build only happens when someone benchmarks.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sprout_core::{
    compile_training_step_with, GraphError, MemoryOptions, PlacementOptions, Region, Strategy,
    TrainConfig,
};
use sprout_zoo::{build, select_trainable, Architecture, ZooModel};

use crate::cmd::Cmd;

/// The suites: (name, what it measures).
pub const SUITES: &[(&str, &str)] = &[
    (
        "planner",
        "arena / lower bound of each placement strategy on the zoo, planning time, the bytes \
         each memory pass saves, and gradient checkpointing's arena against recomputed FLOPs",
    ),
    (
        "int8",
        "the leaf classifier's validation accuracy in fp32, f16 and int8: post-training \
         quantization, head fine-tuning in mixed precision and on an int8 backbone, an int8 \
         block with and without QAS",
    ),
    (
        "cortex-m",
        "executed instructions per multiply-accumulate of the Cortex-M int8 and f32 kernels, \
         DSP against scalar, on the QEMU board under -icount shift=0; LeafNet's int8 \
         convolutions against CMSIS-NN (built with arm-none-eabi-gcc), bit for bit; LeafNet \
         pretrained on soil scenes, fine-tuned on the board head-only and with a sparse update",
    ),
    (
        "cpu",
        "leafnet training steps (batch 1, 8, 32; head and all) and inference (batch 1, 32), the \
         release CLI against PyTorch eager (SPROUT_BENCH_PYTHON, else python3) in the same run: \
         img/s, peak RSS, one thread against all (`--reps N`, `--quick`)",
    ),
    (
        "data",
        "one head-only leafnet epoch through the release CLI on 2,000 generated 2048x1536 JPEG \
         photos: images/s and peak RSS, decoding and from the cache (`--photos N` for fewer)",
    ),
    (
        "serve",
        "the edge service on loopback: 64 concurrent predict clients and 8 uploaders for 10 s \
         (`--seconds N`; `--sprout PATH` for another binary): p50 / p99 latency, requests/s, \
         peak RSS, errors",
    ),
    (
        "fleet",
        "federated head fine-tuning on Flower: 5 sprout serve boxes with skewed photos of two \
         domains, 10 rounds; per round the global model's accuracy on a held-out set of every \
         domain beside the best box trained alone and all photos pooled (`--sprout PATH`)",
    ),
    (
        "kernels",
        "leafnet training-step time with the reference kernels against sprout-cpu (one \
         thread and all), and conv2d forward GFLOP/s",
    ),
];

/// The command a benchmark run needs: `cargo xtask bench-run SUITE` in release.
pub const RUN_COMMAND: &str = "bench-run";

/// The suite list, as `cargo xtask bench` prints it.
/// Builds the release `sprout` CLI every benchmark measures and returns its path.
pub fn release_sprout(root: &Path) -> Result<PathBuf> {
    Cmd::cargo(root)
        .args(["build", "--release", "--quiet", "--locked", "-p", "sprout-cli"])
        .run()?;
    Ok(root.join("target/release/sprout"))
}

pub fn suites_help() -> String {
    let mut help = String::from("Usage: cargo xtask bench <suite>\n\nSuites (release build; `cpu`, `data`, `serve` and `fleet` run the release CLI):\n");
    for (name, what) in SUITES {
        help.push_str(&format!("  {name:<9} {what}\n"));
    }
    help
}

pub fn is_suite(name: &str) -> bool {
    SUITES.iter().any(|(suite, _)| *suite == name)
}

/// `cargo xtask bench SUITE`: builds xtask in release and runs the suite there.
pub fn run(root: &Path, suite: &str) -> Result<()> {
    // Counted on the emulated core: the firmware is built in release, xtask's profile
    // does not matter.
    if suite == "cortex-m" {
        return crate::boards::bench(root);
    }
    Cmd::cargo(root)
        .args(["run", "--release", "--quiet", "--locked", "-p", "xtask", "--"])
        .args([RUN_COMMAND, suite])
        .run()
}

/// Runs a suite in this process (the release build started by [`run`]).
pub fn run_suite(suite: &str) -> Result<()> {
    match suite {
        "planner" => planner(),
        "kernels" => crate::bench_kernels::kernels(),
        "int8" => crate::bench_quant::int8(),
        _ => bail!("unknown bench suite `{suite}`\n\n{}", suites_help()),
    }
}

/// Zoo models with the batch each is benchmarked at.
const MODELS: [(Architecture, usize); 3] =
    [(Architecture::Mlp, 8), (Architecture::ResNet, 1), (Architecture::LeafNet, 1)];
/// `--trainable` choices.
const CHOICES: [&str; 3] = ["all", "head", "bias"];
/// Placement strategies, default first.
const STRATEGIES: [(&str, Strategy); 3] = [
    ("greedy", Strategy::GreedyBySize),
    ("first-fit", Strategy::FirstFitInTime),
    ("exact", Strategy::exact()),
];
/// Timed compiles per measurement; the median is reported.
const RUNS: usize = 5;
/// The arena / lower bound ratio the default strategy should stay under.
const TARGET_RATIO: f64 = 1.05;
/// Seed of the zoo models' weights; plans do not depend on them.
const SEED: u64 = 42;

/// One compiled training step, timed.
#[derive(Clone, Copy, Debug)]
struct Measured {
    arena: usize,
    lower_bound: usize,
    /// Arena tensors, each one planner buffer.
    buffers: usize,
    /// Whether the strategy asked for is the one that placed the arena (`exact` falls back
    /// to greedy on large graphs).
    as_asked: bool,
    /// Median wall time of the whole training-step compile (differentiation, passes and
    /// placement); the difference between strategies is the placement.
    time: Duration,
}

impl Measured {
    fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.arena as f64 / self.lower_bound as f64
        }
    }
}

/// Compiles the training step of `model` `runs` times with `memory` and measures it.
fn measure(
    model: &ZooModel,
    choice: &str,
    memory: &MemoryOptions,
    runs: usize,
) -> Result<Measured> {
    let trainable = select_trainable(model, choice).map_err(|e| anyhow!("{e}"))?;
    let sgd = TrainConfig::sgd(0.9);
    let mut times = Vec::with_capacity(runs);
    let mut plan = None;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let training =
            compile_training_step_with(&model.graph, model.loss, &trainable, &sgd, memory)
                .map_err(|e| anyhow!("{e}"))?;
        times.push(start.elapsed());
        plan = Some(training.plan);
    }
    let plan = plan.expect("at least one run");
    let buffers = plan.bindings.iter().filter(|b| b.operand.region == Region::Arena).count();
    Ok(Measured {
        arena: plan.sizes.arena,
        lower_bound: plan.stats.lower_bound_bytes,
        buffers,
        as_asked: plan.stats.strategy == memory.placement.strategy,
        time: median(&mut times),
    })
}

pub(crate) fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn options(strategy: Strategy, update_early: bool, in_place: bool) -> MemoryOptions {
    MemoryOptions {
        placement: PlacementOptions { strategy, in_place, ..PlacementOptions::default() },
        update_early,
        ..MemoryOptions::default()
    }
}

/// Milliseconds with two decimals: `12.34ms`.
pub(crate) fn millis(time: Duration) -> String {
    format!("{:.2}ms", time.as_secs_f64() * 1e3)
}

fn planner() -> Result<()> {
    println!(
        "planner: arena / lower bound per placement strategy (compile: median of {RUNS} \
         whole training-step compiles, SGD with momentum, all passes on)\n"
    );
    let mut header = format!(
        "{:<8} {:>5}  {:<9} {:>7} {:>12}",
        "model", "batch", "trainable", "buffers", "lower bound"
    );
    for (name, _) in STRATEGIES {
        header.push_str(&format!("  {:>8} {:>9}", name, "compile"));
    }
    println!("{header}");
    println!("{}", "-".repeat(header.len()));

    let mut worst: Option<(f64, String)> = None;
    let mut fell_back = false;
    for (arch, batch) in MODELS {
        let model = build(arch, batch, SEED)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("could not record {arch} for batch {batch}"))?;
        for choice in CHOICES {
            let mut row = String::new();
            let mut first = None;
            for (index, (_, strategy)) in STRATEGIES.into_iter().enumerate() {
                let m = measure(&model, choice, &options(strategy, true, true), RUNS)
                    .with_context(|| format!("{arch}/{choice}"))?;
                first.get_or_insert(m);
                let mark = if m.as_asked { ' ' } else { '*' };
                fell_back |= !m.as_asked;
                row.push_str(&format!("  {:>7.3}x{mark}{:>9}", m.ratio(), millis(m.time)));
                if index == 0 && worst.as_ref().is_none_or(|(r, _)| m.ratio() > *r) {
                    worst = Some((m.ratio(), format!("{arch} batch {batch}, trainable {choice}")));
                }
            }
            let first = first.context("no strategy")?;
            let lower_bound = format!("{} B", first.lower_bound);
            println!(
                "{:<8} {batch:>5}  {choice:<9} {:>7} {lower_bound:>12}{row}",
                arch.name(),
                first.buffers
            );
        }
    }
    if fell_back {
        println!(
            "\n* more than {} arena buffers: the exact search hands over to greedy placement",
            match Strategy::exact() {
                Strategy::Exact { max_buffers, .. } => max_buffers,
                _ => 0,
            }
        );
    }

    // Full training keeps activations for the backward pass, so in-place ops matter most
    // when only the head trains.
    passes_table("all")?;
    passes_table("head")?;
    checkpointing_table()?;

    let (ratio, case) = worst.context("no measurement")?;
    let verdict = if ratio <= TARGET_RATIO { "meets" } else { "misses" };
    println!("\nworst greedy ratio: {ratio:.3}x ({case}): {verdict} the {TARGET_RATIO:.2}x target");
    Ok(())
}

/// Arena bytes of leafnet with each memory pass switched off, against all passes on.
fn passes_table(choice: &str) -> Result<()> {
    let (arch, batch) = (Architecture::LeafNet, 1);
    let model = build(arch, batch, SEED).map_err(|e| anyhow!("{e}"))?;
    println!("\nmemory passes: {arch} batch {batch}, trainable {choice}, greedy placement\n");
    let header =
        format!("{:<24} {:>12} {:>12} {:>14}", "passes", "arena", "lower bound", "vs all passes");
    println!("{header}");
    println!("{}", "-".repeat(header.len()));
    let cases = [
        ("all passes", true, true),
        ("without early updates", false, true),
        ("without in-place ops", true, false),
        ("with neither", false, false),
    ];
    let mut baseline = None;
    for (name, update_early, in_place) in cases {
        let memory = options(Strategy::GreedyBySize, update_early, in_place);
        let m = measure(&model, choice, &memory, 1).with_context(|| format!("{arch}: {name}"))?;
        let base = *baseline.get_or_insert(m.arena);
        let delta = m.arena as i64 - base as i64;
        println!(
            "{name:<24} {:>12} {:>12} {:>14}",
            format!("{} B", m.arena),
            format!("{} B", m.lower_bound),
            format!("{delta:+} B")
        );
    }
    Ok(())
}

/// Gradient checkpointing on leafnet/all: the arena and the recomputed FLOPs at shrinking
/// budgets, down to the smallest reachable one.
fn checkpointing_table() -> Result<()> {
    let model = build(Architecture::LeafNet, 1, SEED).map_err(|e| anyhow!("{e}"))?;
    let trainable = select_trainable(&model, "all").map_err(|e| anyhow!("{e}"))?;
    let compile = |budget: Option<usize>| {
        let memory = MemoryOptions { budget, ..MemoryOptions::default() };
        compile_training_step_with(
            &model.graph,
            model.loss,
            &trainable,
            &TrainConfig::sgd(0.9),
            &memory,
        )
    };
    let plain = compile(None).map_err(|e| anyhow!("{e}"))?.plan;
    let smallest = match compile(Some(0)) {
        Err(GraphError::BudgetUnreachable { smallest, .. }) => smallest,
        other => {
            bail!("a zero budget must be unreachable, got {:?}", other.map(|t| t.plan.sizes.arena))
        }
    };
    println!("\ngradient checkpointing: leafnet batch 1, trainable all\n");
    let header = format!(
        "{:<20} {:>12} {:>12} {:>12} {:>14}",
        "budget", "arena", "recomputed", "extra FLOPs", "of forward"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.len()));
    let arena = plain.sizes.arena;
    for (label, budget) in [
        ("none", None),
        ("3/4 of plain", Some(arena * 3 / 4)),
        ("1/2 of plain", Some(arena / 2)),
        ("smallest reachable", Some(smallest)),
    ] {
        let training = compile(budget).map_err(|e| anyhow!("{label}: {e}"))?;
        let (plan, stats) = (&training.plan, &training.plan.stats);
        println!(
            "{label:<20} {:>12} {:>12} {:>12} {:>13.1}%",
            format!("{} B", plan.sizes.arena),
            training.recomputed.len(),
            stats.recompute_flops,
            100.0 * stats.recompute_flops as f64 / stats.forward_flops.max(1) as f64
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planner_suite_is_listed_and_others_are_not() {
        assert!(is_suite("planner"));
        assert!(!is_suite("bench-run"));
        assert!(suites_help().contains("\n  planner "));
        let error = run_suite("nope").unwrap_err().to_string();
        assert!(error.contains("unknown bench suite `nope`") && error.contains("planner"));
    }

    #[test]
    fn medians_ignore_outliers() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(9), ms(1), ms(2), ms(3), ms(100)]), ms(3));
        assert_eq!(median(&mut [ms(5)]), ms(5));
    }

    #[test]
    fn a_measurement_places_the_arena_at_or_above_its_lower_bound() {
        let model = build(Architecture::Mlp, 2, SEED).unwrap();
        let m = measure(&model, "head", &options(Strategy::FirstFitInTime, true, true), 1).unwrap();
        assert!(m.lower_bound > 0 && m.arena >= m.lower_bound, "{m:?}");
        assert!(m.as_asked && m.ratio() >= 1.0);
    }
}
