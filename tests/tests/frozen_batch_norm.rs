//! A frozen backbone's batch norms behave as in evaluation while the head trains: they use
//! their running statistics and leave them unchanged; trained ones use batch statistics.

use sprout_core::{compile_training_step, Executor, Reference, Role, TrainConfig, Training};
use sprout_zoo::{build, select_trainable, Architecture, ZooModel};

fn training(model: &ZooModel, trainable: &str) -> Training {
    let trainable = select_trainable(model, trainable).unwrap();
    compile_training_step(&model.graph, model.loss, &trainable, &TrainConfig::sgd(0.9)).unwrap()
}

/// Running statistics before and after one training step.
fn running_stats_around_a_step(model: &ZooModel, training: &Training) -> (Vec<f32>, Vec<f32>) {
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let stats: Vec<_> = plan.bindings.iter().filter(|b| b.role == Role::Buffer).collect();
    let read = |memory: &mut sprout_core::HostMemory| -> Vec<f32> {
        let regions = memory.regions();
        stats.iter().flat_map(|b| regions.read::<f32>(&b.operand).unwrap().to_vec()).collect()
    };
    let before = read(&mut memory);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let input = plan.operand("input").unwrap();
    let labels = plan.operand("labels").unwrap();
    let x: Vec<f32> = (0..input.len).map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0).collect();
    let classes = model.graph.shape(model.logits).dims()[1];
    let y: Vec<i32> = (0..labels.len).map(|i| (i % classes) as i32).collect();
    let mut regions = memory.regions();
    regions.write(&input, &x).unwrap();
    regions.write(&labels, &y).unwrap();
    exec.train_step(&mut regions, 0.1).unwrap();
    (before, read(&mut memory))
}

fn kernel_names(training: &Training) -> Vec<&'static str> {
    training.plan.steps.iter().map(|s| s.kernel.name()).collect()
}

#[test]
fn a_frozen_backbone_normalises_with_its_running_statistics() {
    let model = build(Architecture::ResNet, 2, 1).unwrap();
    let head = training(&model, "head");
    assert!(!kernel_names(&head).iter().any(|k| k.starts_with("batch_norm_train")));
    let (before, after) = running_stats_around_a_step(&model, &head);
    assert!(!before.is_empty());
    assert_eq!(before, after, "frozen batch norms must not move their running statistics");
}

#[test]
fn trained_batch_norms_use_batch_statistics_and_update_the_running_ones() {
    let model = build(Architecture::ResNet, 2, 1).unwrap();
    let all = training(&model, "all");
    assert!(!kernel_names(&all).iter().any(|k| k.starts_with("batch_norm_eval")));
    let (before, after) = running_stats_around_a_step(&model, &all);
    assert_ne!(before, after);
}
