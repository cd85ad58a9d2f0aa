//! Every architecture compiles into a training step that runs on the reference kernels:
//! three SGD steps on random data move the head's weights and keep the loss finite.

use sprout_core::rng::SplitMix;
use sprout_core::{compile_training_step, Executor, Reference, TrainConfig};
use sprout_zoo::{build, select_trainable, Architecture};

/// Trains every parameter of `arch` for three steps on a random batch of `batch` samples.
fn three_steps_move_the_head(arch: Architecture, batch: usize) {
    let m = build(arch, batch, 11).unwrap();
    let trainable = select_trainable(&m, "all").unwrap();
    let training =
        compile_training_step(&m.graph, m.loss, &trainable, &TrainConfig::sgd(0.9)).unwrap();
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let (x_op, y_op, loss_op) = (
        plan.operand("input").unwrap(),
        plan.operand("labels").unwrap(),
        plan.operand("loss").unwrap(),
    );
    let head_ops: Vec<_> =
        m.head.iter().map(|&id| plan.operand(&m.graph.tensor(id).name).unwrap()).collect();
    let read_head = |regions: &sprout_core::Regions<'_>| -> Vec<Vec<f32>> {
        head_ops.iter().map(|op| regions.read::<f32>(op).unwrap().to_vec()).collect()
    };

    let mut rng = SplitMix::new(5);
    let x: Vec<f32> =
        (0..arch.input_shape(batch).numel()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let y: Vec<i32> = (0..batch).map(|_| (rng.next_u64() % arch.classes() as u64) as i32).collect();
    let mut regions = memory.regions();
    regions.write(&x_op, &x).unwrap();
    regions.write(&y_op, &y).unwrap();
    let before = read_head(&regions);
    for step in 0..3 {
        exec.train_step(&mut regions, 0.05).unwrap();
        let loss = regions.read::<f32>(&loss_op).unwrap()[0];
        assert!(loss.is_finite() && loss > 0.0, "{arch} step {step}: loss {loss}");
    }
    let after = read_head(&regions);
    for ((b, a), &id) in before.iter().zip(&after).zip(&m.head) {
        let moved = b.iter().zip(a).map(|(b, a)| (b - a).abs()).fold(0.0f32, f32::max);
        assert!(moved > 1e-6, "{arch}: '{}' did not change", m.graph.tensor(id).name);
        assert!(a.iter().all(|v| v.is_finite()), "{arch}");
    }
}

#[test]
fn mlp_trains() {
    three_steps_move_the_head(Architecture::Mlp, 8);
}

#[test]
fn resnet_trains() {
    three_steps_move_the_head(Architecture::ResNet, 1);
}

#[test]
fn leafnet_trains() {
    three_steps_move_the_head(Architecture::LeafNet, 2);
}
