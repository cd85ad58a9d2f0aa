//! End to end: leafnet (depthwise, pointwise, strided and plain convolutions, batch norm,
//! dropout, a linear head) trained a few SGD steps with `Cpu` and with `Reference`.
//!
//! Tolerance. The kernels agree to f32 summation-order error (about 1e-6 relative to the
//! summed magnitudes). Weight gradients of early layers are sums of thousands of cancelling
//! terms, and batch norm divides by batch standard deviations, so an element's relative
//! error can grow far beyond a kernel's. Hence: every step's loss agrees to 1e-4 relative;
//! after the first step every state tensor (weights, momentum, running statistics) agrees
//! element-wise to `|cpu − ref| <= 1e-4 + 1e-3 · |ref|`; after the last, each tensor's
//! largest difference stays under `1e-5 + 2 %` of its largest value (momentum compounds the
//! difference step by step; the absolute part covers biases that feed a batch norm, whose
//! gradient is zero up to rounding). The weights move by far more than these bounds.

use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_training_step, DType, Executor, Host, Kernels, Reference, Region, TrainConfig,
};
use sprout_cpu::Cpu;
use sprout_zoo::{build, select_trainable, Architecture};

const BATCH: usize = 2;
const STEPS: usize = 3;
const LEARNING_RATE: f32 = 0.01;

/// Every f32 state tensor: name, values.
type State = Vec<(String, Vec<f32>)>;

/// A training run: the loss of each step and the state before training, after the first
/// step and after the last.
struct Run {
    losses: Vec<f32>,
    initial: State,
    first: State,
    last: State,
}

fn train(kernels: impl Kernels<Memory = Host>) -> Run {
    let model = build(Architecture::LeafNet, BATCH, 7).expect("leafnet records");
    let trainable = select_trainable(&model, "all").expect("all parameters");
    let sgd = TrainConfig::sgd(0.9);
    let training = compile_training_step(&model.graph, model.loss, &trainable, &sgd)
        .expect("the training step compiles");
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), kernels).expect("a valid plan");
    let operand = |name| plan.operand(name).expect("a zoo tensor");
    let (input, labels, loss) = (operand("input"), operand("labels"), operand("loss"));
    let state = |memory: &mut sprout_core::HostMemory| -> State {
        let regions = memory.regions();
        let f32_state = |b: &&sprout_core::Binding| {
            b.operand.region == Region::State && b.operand.dtype == DType::F32
        };
        let read = |b: &sprout_core::Binding| regions.read::<f32>(&b.operand).unwrap().to_vec();
        plan.bindings.iter().filter(f32_state).map(|b| (b.name.clone(), read(b))).collect()
    };
    let initial = state(&mut memory);
    let mut first = Vec::new();
    let mut rng = SplitMix::new(11);
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let x: Vec<f32> = (0..input.len).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let y: Vec<i32> = (0..BATCH).map(|i| (i % 3) as i32).collect();
        let mut regions = memory.regions();
        regions.write(&input, &x).unwrap();
        regions.write(&labels, &y).unwrap();
        exec.train_step(&mut regions, LEARNING_RATE).unwrap();
        losses.push(regions.read::<f32>(&loss).unwrap()[0]);
        if step == 0 {
            first = state(&mut memory);
        }
    }
    Run { losses, initial, first, last: state(&mut memory) }
}

fn largest(values: impl Iterator<Item = f32>) -> f32 {
    values.fold(0.0, |m, v| m.max(v.abs()))
}

#[test]
fn leafnet_trains_the_same_on_cpu_and_reference() {
    let want = train(Reference);
    for cpu in [Cpu::new(), Cpu::with_threads(1)] {
        let threads = cpu.threads();
        let got = train(cpu);
        for (step, (a, b)) in got.losses.iter().zip(&want.losses).enumerate() {
            assert!((a - b).abs() <= 1e-4 * b.abs(), "{threads} threads, step {step}: {a} vs {b}");
        }
        assert_eq!(got.first.len(), want.first.len());
        for ((name, a), (_, b)) in got.first.iter().zip(&want.first) {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                let ok = (a - b).abs() <= 1e-4 + 1e-3 * b.abs();
                assert!(ok, "{threads} threads, first step: {name}[{i}]: {a} vs {b}");
            }
        }
        for ((name, a), (_, b)) in got.last.iter().zip(&want.last) {
            let worst = largest(a.iter().zip(b).map(|(a, b)| a - b));
            let scale = largest(b.iter().copied());
            assert!(
                worst <= 1e-5 + 2e-2 * scale,
                "{threads} threads: {name}: off by {worst} of {scale}"
            );
        }
    }
    let moved = want
        .last
        .iter()
        .zip(&want.initial)
        .map(|((_, after), (_, before))| largest(after.iter().zip(before).map(|(a, b)| a - b)));
    assert!(largest(moved) > 0.02, "training moved the weights");
}
