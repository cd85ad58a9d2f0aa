//! `cargo xtask bench kernels`: leafnet training-step time with the reference kernels and
//! with sprout-cpu side by side, and the GFLOP/s of one leafnet-sized convolution.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use sprout_core::geometry::{window_output, Conv2dGeometry};
use sprout_core::rng::SplitMix;
use sprout_core::{compile_training_step, Executor, Host, Kernels, Reference, TrainConfig};
use sprout_cpu::Cpu;
use sprout_zoo::{build, select_trainable, Architecture};

use crate::bench::{median, millis};

/// Leafnet's batch in this suite.
const BATCH: usize = 8;
/// Timed training steps per measurement (after one warm-up step); the median is reported.
const STEPS: usize = 5;
/// Timed convolutions per measurement.
const CONV_RUNS: usize = 20;

/// Median time of one leafnet training step with `kernels`.
fn step_time(choice: &str, kernels: impl Kernels<Memory = Host>) -> Result<Duration> {
    let model = build(Architecture::LeafNet, BATCH, 42).map_err(|e| anyhow!("{e}"))?;
    let trainable = select_trainable(&model, choice).map_err(|e| anyhow!("{e}"))?;
    let training =
        compile_training_step(&model.graph, model.loss, &trainable, &TrainConfig::sgd(0.9))
            .map_err(|e| anyhow!("{e}"))?;
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), kernels)?;
    let (input, labels) = (plan.operand("input")?, plan.operand("labels")?);
    let mut rng = SplitMix::new(3);
    let x: Vec<f32> = (0..input.len).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let y: Vec<i32> = (0..BATCH as i32).map(|i| i % 3).collect();
    let mut regions = memory.regions();
    regions.write(&input, &x)?;
    regions.write(&labels, &y)?;
    let mut times = Vec::with_capacity(STEPS);
    for run in 0..=STEPS {
        let start = Instant::now();
        exec.train_step(&mut regions, 0.01)?;
        if run > 0 {
            times.push(start.elapsed());
        }
    }
    Ok(median(&mut times))
}

/// GFLOP/s (two per multiply-accumulate) of `g`'s forward pass with `kernels`.
fn conv_gflops(g: &Conv2dGeometry, mut kernels: impl Kernels<Memory = Host>) -> f64 {
    let mut rng = SplitMix::new(5);
    let mut random = |len| (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect::<Vec<f32>>();
    let (x, w, b) = (random(g.input_len()), random(g.weight_len()), random(g.c_out));
    let mut y = vec![0.0; g.output_len()];
    kernels.conv2d(&x, &w, Some(&b), &mut y, g);
    let mut times: Vec<Duration> = (0..CONV_RUNS)
        .map(|_| {
            let start = Instant::now();
            kernels.conv2d(&x, &w, Some(&b), &mut y, g);
            start.elapsed()
        })
        .collect();
    2.0 * g.macs() as f64 / median(&mut times).as_secs_f64() / 1e9
}

pub fn kernels() -> Result<()> {
    let all = Cpu::new().threads();
    println!(
        "kernels: leafnet batch {BATCH}, median of {STEPS} SGD training steps; cpu = sprout-cpu \
         ({all} threads available)\n"
    );
    let header = format!(
        "{:<10} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "trainable", "reference", "cpu 1 thr", "cpu all", "x 1 thr", "x all"
    );
    println!("{header}\n{}", "-".repeat(header.len()));
    for choice in ["all", "head"] {
        let reference = step_time(choice, Reference)?;
        let one = step_time(choice, Cpu::with_threads(1))?;
        let every = step_time(choice, Cpu::new())?;
        let ratio = |t: Duration| reference.as_secs_f64() / t.as_secs_f64();
        println!(
            "{choice:<10} {:>11} {:>11} {:>11} {:>8.1}x {:>8.1}x",
            millis(reference),
            millis(one),
            millis(every),
            ratio(one),
            ratio(every)
        );
    }

    // Leafnet's stem (features.0): 3x3, stride 2, padding 1, 3 -> 16 channels at 64x64.
    let (size, k, stride, padding) = (64, 3, 2, 1);
    let side = window_output(size, k, stride, padding).unwrap_or(size);
    let g = Conv2dGeometry {
        n: BATCH,
        c_in: 3,
        h: size,
        w: size,
        c_out: 16,
        kh: k,
        kw: k,
        stride: (stride, stride),
        padding: (padding, padding),
        groups: 1,
        out_h: side,
        out_w: side,
    };
    println!(
        "\nconv2d forward (leafnet stem) {}x{}x{size}x{size} -> {} channels, 3x3, stride 2, pad 1 \
         ({:.1} MFLOP): reference \
         {:.2} GFLOP/s, cpu 1 thread {:.2} GFLOP/s, cpu {all} threads {:.2} GFLOP/s",
        g.n,
        g.c_in,
        g.c_out,
        2.0 * g.macs() as f64 / 1e6,
        conv_gflops(&g, Reference),
        conv_gflops(&g, Cpu::with_threads(1)),
        conv_gflops(&g, Cpu::new())
    );
    Ok(())
}
