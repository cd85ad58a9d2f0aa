//! `cargo xtask bench kernels`: leafnet training-step time with the reference kernels and
//! with sprout-cpu side by side, the GFLOP/s of one leafnet-sized convolution, and the
//! pointwise kernels (activations, their gradients, the element-wise product) per element.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use sprout_core::backend::PointwiseKernels;
use sprout_core::geometry::{window_output, ChannelDims, Conv2dGeometry};
use sprout_core::reference::pointwise::GradientReads;
use sprout_core::reference::{Activation, HardSigmoidParams, LeakyReluParams};
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
/// Elements of each pointwise measurement (4 MiB per f32 tensor).
const POINTWISE_LEN: usize = 1 << 20;
/// Timed calls per pointwise measurement (after one warm-up call).
const POINTWISE_RUNS: usize = 21;

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

/// Median time of `POINTWISE_RUNS` calls of `call`, after one warm-up call.
fn time_call(mut call: impl FnMut()) -> Duration {
    call();
    let mut times: Vec<Duration> = (0..POINTWISE_RUNS)
        .map(|_| {
            let start = Instant::now();
            call();
            start.elapsed()
        })
        .collect();
    median(&mut times)
}

/// One line of the pointwise table: the reference's and sprout-cpu's time for one kernel.
fn pointwise_line(name: &str, mut run: impl FnMut(&mut dyn Kernels<Memory = Host>)) {
    let reference = time_call(|| run(&mut Reference));
    let mut cpu = Cpu::with_threads(1);
    let fast = time_call(|| run(&mut cpu));
    let ns = |t: Duration| t.as_secs_f64() * 1e9 / POINTWISE_LEN as f64;
    println!(
        "{name:<24} {:>10} {:>10} {:>8.2} {:>8.2} {:>7.1}x",
        millis(reference),
        millis(fast),
        ns(reference),
        ns(fast),
        reference.as_secs_f64() / fast.as_secs_f64()
    );
}

/// Each activation forward and backward, and the element-wise product, on
/// [`POINTWISE_LEN`] elements: the reference kernels against sprout-cpu (one thread).
fn pointwise() {
    println!(
        "\npointwise kernels, {POINTWISE_LEN} elements, median of {POINTWISE_RUNS} calls; cpu = \
         sprout-cpu, 1 thread\n"
    );
    let header = format!(
        "{:<24} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "kernel", "reference", "cpu", "ref ns/el", "cpu ns/el", "speedup"
    );
    println!("{header}\n{}", "-".repeat(header.len()));
    let mut rng = SplitMix::new(7);
    let mut random = |len| (0..len).map(|_| rng.uniform(-8.0, 8.0)).collect::<Vec<f32>>();
    let (x, dy) = (random(POINTWISE_LEN), random(POINTWISE_LEN));
    let mut out = vec![0.0; POINTWISE_LEN];
    let activations = [
        ("sigmoid", Activation::Sigmoid),
        ("hard_sigmoid", Activation::HardSigmoid(HardSigmoidParams::PYTORCH)),
        ("hard_swish", Activation::HardSwish),
        ("leaky_relu", Activation::LeakyRelu(LeakyReluParams { alpha: 0.1 })),
    ];
    for (name, f) in activations {
        let mut y = vec![0.0; POINTWISE_LEN];
        Reference.activation(f, &x, &mut y);
        let saved = match f.gradient_reads() {
            GradientReads::Input => &x,
            GradientReads::Output => &y,
        };
        pointwise_line(name, |k| k.activation(f, &x, &mut out));
        pointwise_line(&format!("{name} grad"), |k| k.activation_grad(f, saved, &dy, &mut out));
    }
    let flat = ChannelDims { outer: 1, channels: 1, inner: POINTWISE_LEN };
    pointwise_line("mul", |k| k.mul(&x, &dy, &mut out, flat, false));
    // Squeeze-excitation's shape: 8 images of 64 channels of 2048 values, one factor each.
    let d = ChannelDims { outer: 8, channels: 64, inner: POINTWISE_LEN / 512 };
    let factor = random(d.outer * d.channels);
    let mut db = vec![0.0; factor.len()];
    pointwise_line("mul broadcast", |k| k.mul(&x, &factor, &mut out, d, true));
    pointwise_line("mul_grad_factor", |k| k.mul_grad_factor(&dy, &x, &mut db, d));
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
    pointwise();
    Ok(())
}
