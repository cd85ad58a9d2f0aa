//! Runs LeafNet training steps (AdamW, every parameter trainable) on `Cpu`: the workload to
//! profile the kernels with, e.g. under `valgrind --tool=callgrind`, whose instruction counts
//! stay meaningful on a busy machine.
//!
//! `cargo run --release -p sprout-cpu --example leafnet_steps -- BATCH STEPS THREADS
//! [head|all] [mixed] [profile]` (defaults: 32, 2, 1, all; `head` trains the classifier
//! alone, `mixed` trains in mixed precision, `profile` prints each kernel's share of the
//! steps after the first).

use sprout_core::hyperparams::AdamWConfig;
use sprout_core::hyperparams::LossScaleConfig;
use sprout_core::rng::SplitMix;
use sprout_core::{compile_training_step, Executor, Optimizer, TrainConfig};
use sprout_cpu::{Cpu, KernelProfile};
use sprout_zoo::{build, select_trainable, Architecture};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| {
        args.get(i).map_or(default, |a| a.parse().expect("BATCH STEPS THREADS are numbers"))
    };
    let (batch, steps, threads) = (number(0, 32), number(1, 2), number(2, 1));
    let trainable = args.get(3).map_or("all", String::as_str);
    let flag = |name: &str| args.iter().skip(4).any(|a| a == name);
    let model = build(Architecture::LeafNet, batch, 7).expect("leafnet records");
    let trainable = select_trainable(&model, trainable).expect("a trainable choice");
    let cfg = TrainConfig {
        optimizer: Optimizer::AdamW(AdamWConfig::default()),
        mixed_precision: flag("mixed").then(LossScaleConfig::default),
        ..TrainConfig::sgd(0.0)
    };
    let training = compile_training_step(&model.graph, model.loss, &trainable, &cfg)
        .expect("the training step compiles");
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    sprout_cpu::advise_huge_pages(&mut memory);
    let mut exec = Executor::new(plan.view(), Cpu::with_threads(threads)).expect("a valid plan");
    let operand = |name| plan.operand(name).expect("a zoo tensor");
    let (input, labels, loss) = (operand("input"), operand("labels"), operand("loss"));
    let mut rng = SplitMix::new(11);
    let mut profile = KernelProfile::new();
    let start = std::time::Instant::now();
    for step in 0..steps {
        let x: Vec<f32> = (0..input.len).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let y: Vec<i32> = (0..batch).map(|i| (i % 3) as i32).collect();
        let mut regions = memory.regions();
        regions.write(&input, &x).expect("the input fits");
        regions.write(&labels, &y).expect("the labels fit");
        // The first step grows the backend's scratch: not what later steps cost.
        match step > 0 && flag("profile") {
            true => exec.train_step_observed(&mut regions, 0.001, &mut profile),
            false => exec.train_step(&mut regions, 0.001),
        }
        .expect("a training step");
        println!("step {step}: loss {}", regions.read::<f32>(&loss).expect("the loss")[0]);
    }
    let seconds = start.elapsed().as_secs_f64();
    println!("{:.1} img/s", (batch * steps) as f64 / seconds);
    if flag("profile") {
        println!("{profile}");
    }
}
