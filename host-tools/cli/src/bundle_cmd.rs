//! `sprout bundle`: writes a `.sprout` model as a device bundle for the firmware (backbone
//! inference, head training and head evaluation plans with their weights) and prints where
//! its bytes and the device's memory go.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sprout_bundle::sparse::{self, SparseChoice};
use sprout_bundle::{build, BundleOptions};
use sprout_core::format::bundle::{decode, MAX_TRAINABLE};
use sprout_core::TrainConfig;
use sprout_train::{check_output, write_atomic, Model};

use crate::size::format_size;

#[derive(Args, Debug)]
pub struct BundleArgs {
    /// The trained model whose head the device fine-tunes.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// What the device trains: head, bias, all, or comma-separated name patterns with `*`.
    #[arg(long, value_name = "CHOICE", default_value = "head")]
    trainable: String,
    /// Instead of --trainable, pick a sparse update of the int8 backbone whose device
    /// memory (arena, state four times, feature cache) fits SIZE (e.g. 200KiB): the head, the
    /// biases of the most last trainable int8 layers (`sprout quantize --trainable-int8`),
    /// then the weights of the most last pointwise layers among them. The device caches
    /// features only up to the first trained layer.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size, conflicts_with = "trainable")]
    sparse_budget: Option<usize>,
    /// With --sparse-budget: the samples (training and held out) the device caches, whose
    /// features count in the budget.
    #[arg(long, value_name = "N", default_value_t = 128, requires = "sparse_budget", value_parser = clap::value_parser!(u64).range(1..))]
    cache_samples: u64,
    /// Samples per head training and evaluation batch on the device.
    #[arg(long, value_name = "N", alias = "batch", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
    /// Learning rate of the device's SGD, in [0, 10].
    #[arg(long, value_name = "LR", default_value_t = 0.05, value_parser = crate::numbers::learning_rate)]
    lr: f32,
    /// SGD momentum, in [0, 1).
    #[arg(long, default_value_t = 0.9, value_parser = crate::numbers::momentum)]
    momentum: f32,
    /// Where to write the bundle.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

/// Steps the check after writing decodes into (the firmware picks its own capacity).
const CHECK_STEPS: usize = 1024;

pub fn run(args: &BundleArgs) -> Result<()> {
    check_output(&args.output, &[("MODEL", &args.model)])?;
    let model = Model::open(&args.model)?;
    let options = BundleOptions {
        trainable: args.trainable.clone(),
        batch: args.batch_size as usize,
        config: TrainConfig::sgd(args.momentum),
        learning_rate: args.lr,
    };
    let cannot = || format!("cannot bundle {}", args.model.display());
    let host = match args.sparse_budget {
        Some(budget) => {
            let choice = sparse::choose(&model, &options, budget, args.cache_samples as usize)
                .with_context(cannot)?;
            report_sparse(&choice, budget);
            choice.bundle
        }
        None => build(&model, &options).with_context(cannot)?,
    };
    // What the device will do with it: decode and check every plan.
    let mut steps = Box::new(heapless::Vec::<sprout_core::Step, CHECK_STEPS>::new());
    let bundle = decode(&host.bytes, &mut steps).context("the written bundle does not decode")?;
    write_atomic(&args.output, &host.bytes)?;
    let h = &bundle.header;
    println!("wrote {} ({} bytes)", args.output.display(), host.bytes.len());
    println!(
        "  frozen weights {} bytes, initial state {} bytes, arena {} bytes",
        bundle.frozen.len(),
        bundle.initial_state.len(),
        bundle.arena_bytes()
    );
    println!(
        "  steps: backbone {}, head training {} (+{} per update), head evaluation {}",
        h.backbone.steps, h.train.steps, h.train.update_steps, h.eval.steps
    );
    println!(
        "  features {} per sample ({} bytes cached per sample), {} classes, head batch {}",
        bundle.feature_len(),
        bundle.feature_bytes(),
        bundle.classes(),
        bundle.head_batch()
    );
    if let Some(peak) = host.training.plan.arena_peak() {
        println!("  {}", describe_peak(&host.training.plan, &peak));
    }
    Ok(())
}

/// Live tensors named at the training arena's fullest step; the rest are summed.
const PEAK_NAMES: usize = 8;

/// Where the training step's arena is fullest: the step, its kernel and what is live there.
fn describe_peak(plan: &sprout_core::Plan, peak: &sprout_core::ArenaPeak<'_>) -> String {
    let step = plan.steps.iter().chain(&plan.update_steps).nth(peak.step);
    let kernel = step.map_or("?", |s| s.kernel.name());
    let named = peak.live.iter().take(PEAK_NAMES);
    let mut live: Vec<String> =
        named.map(|b| format!("{} {} B", b.name, b.operand.bytes())).collect();
    let rest = &peak.live[peak.live.len().min(PEAK_NAMES)..];
    if !rest.is_empty() {
        let bytes: usize = rest.iter().map(|b| b.operand.bytes()).sum();
        live.push(format!("{} more {bytes} B", rest.len()));
    }
    format!(
        "training arena {} B, fullest at step {} ({kernel}): {} B live: {}",
        plan.sizes.arena,
        peak.step,
        peak.bytes,
        live.join(", ")
    )
}

/// What a sparse update trains and the device memory it needs.
fn report_sparse(choice: &SparseChoice, budget: usize) {
    let m = &choice.memory;
    let list = |names: &[String]| match names {
        [] => "none".to_string(),
        names => names.join(", "),
    };
    println!(
        "sparse update within {} of device memory: head, {} int8 biases, {} pointwise weights",
        format_size(budget),
        choice.biases.len(),
        choice.weights.len()
    );
    println!("  biases: {}", list(&choice.biases));
    println!("  weights: {}", list(&choice.weights));
    println!(
        "  weights and optimizer state {} B (kept four times), gradients {} B, training arena {} B \
         (int8 inference arena {} B), feature cache {} samples x {} B = {} B; {} B in all",
        m.state,
        m.gradients,
        m.training_arena,
        m.inference_arena,
        m.samples,
        m.per_sample,
        m.cache(),
        m.total()
    );
    if let Some((first, deeper)) = &choice.deeper {
        println!(
            "  the next deeper update, biases from {first}, needs {} B: training arena {} B, \
             feature cache {} samples x {} B",
            deeper.total(),
            deeper.training_arena,
            deeper.samples,
            deeper.per_sample
        );
    }
    if choice.capped_by_count {
        println!(
            "  a larger update would fit the budget, but a bundle names at most {MAX_TRAINABLE} \
             trainable tensors"
        );
    }
}
