//! Memory passes keep training exact: gradient checkpointing under a byte budget, early
//! updates, in-place element-wise ops, fused frozen batch norms and fused f16 round trips
//! all give bit-identical parameters after a step, while the arena shrinks.

use sprout_core::hyperparams::LossScaleConfig;
use sprout_core::{
    compile_training_step_with, Executor, GraphError, Host, HostMemory, Kernels, MemoryOptions,
    PlacementOptions, Reference, Role, TrainConfig, Training,
};
use sprout_cpu::Cpu;
use sprout_zoo::{build, select_trainable, Architecture, ZooModel};

fn compile(
    model: &ZooModel,
    trainable: &str,
    memory: MemoryOptions,
) -> Result<Training, GraphError> {
    let trainable = select_trainable(model, trainable).expect("known choice");
    compile_training_step_with(
        &model.graph,
        model.loss,
        &trainable,
        &TrainConfig::sgd(0.9),
        &memory,
    )
}

/// Trainable parameters by name, as bit patterns.
type Parameters = Vec<(String, Vec<u32>)>;

/// Trainable parameters after two SGD steps on fixed data, on the reference kernels.
fn train_twice(model: &ZooModel, training: &Training) -> Parameters {
    train_twice_on(model, training, Reference)
}

/// The trainable parameters of `training` in `memory`.
fn parameters(training: &Training, memory: &mut HostMemory) -> Parameters {
    let plan = &training.plan;
    let regions = memory.regions();
    plan.bindings
        .iter()
        .filter(|b| b.role == Role::TrainableParam)
        .map(|b| {
            let values = regions.read::<f32>(&b.operand).unwrap();
            (b.name.clone(), values.iter().map(|v| v.to_bits()).collect())
        })
        .collect()
}

/// [`train_twice`] on `backend`.
fn train_twice_on<K: Kernels<Memory = Host>>(
    model: &ZooModel,
    training: &Training,
    backend: K,
) -> Parameters {
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), backend).unwrap();
    let input = plan.operand("input").unwrap();
    let labels = plan.operand("labels").unwrap();
    let x: Vec<f32> = (0..input.len).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let y: Vec<i32> =
        (0..labels.len).map(|i| (i % model.graph.shape(model.logits).dims()[1]) as i32).collect();
    for _ in 0..2 {
        let mut regions = memory.regions();
        regions.write(&input, &x).unwrap();
        regions.write(&labels, &y).unwrap();
        exec.train_step(&mut regions, 0.05).unwrap();
    }
    parameters(training, &mut memory)
}

#[test]
fn checkpointing_under_a_budget_is_bit_identical_and_smaller() {
    let model = build(Architecture::LeafNet, 1, 3).unwrap();
    let plain = compile(&model, "all", MemoryOptions::default()).unwrap();
    let arena = plain.plan.sizes.arena;
    let budget = arena * 3 / 4;
    let memory = MemoryOptions { budget: Some(budget), ..MemoryOptions::default() };
    let checkpointed = compile(&model, "all", memory).unwrap();
    assert!(
        checkpointed.plan.sizes.arena <= budget,
        "{} > {budget}",
        checkpointed.plan.sizes.arena
    );
    assert!(!checkpointed.recomputed.is_empty());
    assert!(checkpointed.plan.stats.recompute_flops > 0);
    assert_eq!(plain.plan.stats.recompute_flops, 0);
    assert_eq!(train_twice(&model, &plain), train_twice(&model, &checkpointed));
}

#[test]
fn an_impossible_budget_names_the_smallest_reachable_one() {
    let model = build(Architecture::Mlp, 4, 3).unwrap();
    let memory = MemoryOptions { budget: Some(64), ..MemoryOptions::default() };
    match compile(&model, "all", memory) {
        Err(GraphError::BudgetUnreachable { budget: 64, smallest }) => {
            assert!(smallest > 64);
            // The smallest reachable budget is itself reachable.
            let memory = MemoryOptions { budget: Some(smallest), ..MemoryOptions::default() };
            assert!(compile(&model, "all", memory).unwrap().plan.sizes.arena <= smallest);
        }
        Err(other) => panic!("expected BudgetUnreachable, got {other}"),
        Ok(_) => panic!("64 bytes cannot hold an MLP training step"),
    }
}

/// Arena bytes and trained parameters of leafnet for each combination of the two passes,
/// in the order (both, no early updates, no in-place, neither); frozen batch norms stay
/// unfused, which would leave nothing in place to run.
fn pass_variants(trainable: &str) -> Vec<(usize, Parameters)> {
    let model = build(Architecture::LeafNet, 1, 5).unwrap();
    [(true, true), (false, true), (true, false), (false, false)]
        .iter()
        .map(|&(update_early, in_place)| {
            let fuse_frozen_norms = false;
            let placement =
                PlacementOptions { in_place, fuse_frozen_norms, ..PlacementOptions::default() };
            let memory = MemoryOptions { update_early, placement, ..MemoryOptions::default() };
            let training = compile(&model, trainable, memory).unwrap();
            (training.plan.sizes.arena, train_twice(&model, &training))
        })
        .collect()
}

#[test]
fn early_updates_shrink_the_full_training_arena_without_changing_results() {
    let variants = pass_variants("all");
    let arenas: Vec<usize> = variants.iter().map(|v| v.0).collect();
    assert!(arenas[0] < arenas[1], "early updates must shrink the arena: {arenas:?}");
    assert!(arenas[2] < arenas[3], "early updates must shrink the arena: {arenas:?}");
    assert!(arenas[1] < arenas[3], "in-place ops must shrink the arena: {arenas:?}");
    assert!(variants.iter().all(|v| v.1 == variants[3].1), "results differ between passes");
}

#[test]
fn in_place_ops_shrink_the_head_fine_tuning_arena_without_changing_results() {
    let variants = pass_variants("head");
    let arenas: Vec<usize> = variants.iter().map(|v| v.0).collect();
    assert!(arenas[0] < arenas[2], "in-place ops must shrink the arena: {arenas:?}");
    assert!(variants.iter().all(|v| v.1 == variants[3].1), "results differ between passes");
}

/// Steps of `training` that run `kernel`.
fn steps_running(training: &Training, kernel: &str) -> usize {
    training.plan.steps.iter().filter(|s| s.kernel.name() == kernel).count()
}

/// LeafNet compiled for `trainable` with frozen batch norms fused into their convolutions
/// or not.
fn fused_and_separate(model: &ZooModel, trainable: &str) -> [Training; 2] {
    [true, false].map(|fuse_frozen_norms| {
        let placement = PlacementOptions { fuse_frozen_norms, ..PlacementOptions::default() };
        compile(model, trainable, MemoryOptions { placement, ..MemoryOptions::default() }).unwrap()
    })
}

#[test]
fn fused_frozen_batch_norms_keep_head_fine_tuning_exact() {
    let model = build(Architecture::LeafNet, 2, 3).unwrap();
    let [fused, separate] = fused_and_separate(&model, "head");
    // Every convolution of LeafNet's frozen backbone has a batch norm after it.
    let convolutions = steps_running(&separate, "conv2d");
    assert!(convolutions > 10, "{convolutions} convolutions");
    assert_eq!(steps_running(&fused, "conv2d_norm_act"), convolutions);
    for kernel in ["conv2d", "batch_norm_eval_in_place", "relu6_in_place"] {
        assert!(steps_running(&separate, kernel) > 0, "{kernel}");
        assert_eq!(steps_running(&fused, kernel), 0, "{kernel} left unfused");
    }
    assert!(fused.plan.sizes.arena <= separate.plan.sizes.arena);
    assert_eq!(train_twice(&model, &fused), train_twice(&model, &separate));
    let on_cpu = |training| train_twice_on(&model, training, Cpu::with_threads(2));
    assert_eq!(on_cpu(&fused), on_cpu(&separate));
}

/// LeafNet compiled for mixed-precision training of every layer, each cast to f16 and the
/// cast of its result back right after it fused into one kernel or not.
fn casts_fused_and_separate(model: &ZooModel) -> [Training; 2] {
    let trainable = select_trainable(model, "all").expect("known choice");
    // A scale the first steps' f16 gradients hold without overflowing: both steps update.
    let scaling = LossScaleConfig { init_scale: 256.0, ..LossScaleConfig::default() };
    let cfg = TrainConfig { mixed_precision: Some(scaling), ..TrainConfig::sgd(0.9) };
    [true, false].map(|fuse_casts| {
        let placement = PlacementOptions { fuse_casts, ..PlacementOptions::default() };
        let memory = MemoryOptions { placement, ..MemoryOptions::default() };
        compile_training_step_with(&model.graph, model.loss, &trainable, &cfg, &memory).unwrap()
    })
}

#[test]
fn fused_f16_round_trips_keep_mixed_precision_training_exact() {
    let model = build(Architecture::LeafNet, 2, 3).unwrap();
    let [fused, separate] = casts_fused_and_separate(&model);
    let casts =
        |t: &Training| steps_running(t, "cast_f32_to_f16") + steps_running(t, "cast_f16_to_f32");
    let in_place = steps_running(&fused, "round_through_f16_in_place");
    let round_trips = steps_running(&fused, "round_through_f16") + in_place;
    // Every activation and activation gradient makes a round trip.
    assert!(round_trips > 100 && in_place > 50, "{round_trips} round trips, {in_place} in place");
    // But for a rectifier's output and its input gradient (values on f16's grid): of each
    // output's two casts only the cast to f16 the backward pass reads is left, of each
    // gradient's none.
    let rectifiers = steps_running(&separate, "relu6_grad_in_place");
    assert!(rectifiers > 10, "{rectifiers} rectifiers");
    let skipped = casts(&separate) - casts(&fused) - 2 * round_trips;
    assert!(skipped >= 3 * rectifiers, "{skipped} casts skipped");
    // Each rectifier after a training batch norm: its recomputation and gradient folded
    // into the batch norm's parameter gradient, which reads the f16 copy of its input.
    assert_eq!(steps_running(&fused, "batch_norm_grad_params_rectified_f16"), rectifiers);
    // Each training batch norm's input gradient reads the f16 copy of its input and rounds
    // its output itself.
    let norms = steps_running(&separate, "batch_norm_grad_input_from_sums");
    assert_eq!(steps_running(&fused, "batch_norm_grad_input_from_sums_f16"), norms);
    // And in the forward pass each of those rectifiers, its input's round trip and the
    // cast of its output run as one kernel, but for the last: only the global pooling
    // reads its output, whose gradient does not, so nothing casts it to f16.
    assert_eq!(steps_running(&fused, "rectify_through_f16_in_place"), rectifiers - 1);
    assert_eq!(steps_running(&fused, "relu6_in_place"), 1);
    for kernel in ["relu6_grad_in_place", "batch_norm_grad_params_rectified"] {
        assert_eq!(steps_running(&fused, kernel), 0, "{kernel}");
    }
    assert!(fused.plan.sizes.arena <= separate.plan.sizes.arena);
    let trained = train_twice(&model, &fused);
    let mut initial = fused.plan.initial_memory(&fused.graph);
    assert_ne!(trained, parameters(&fused, &mut initial), "the steps must update");
    assert_eq!(trained, train_twice(&model, &separate));
    let on_cpu = |training| train_twice_on(&model, training, Cpu::with_threads(2));
    assert_eq!(on_cpu(&fused), on_cpu(&separate));
}

#[test]
fn batch_norms_that_train_are_not_fused() {
    let model = build(Architecture::LeafNet, 2, 3).unwrap();
    let [fused, separate] = fused_and_separate(&model, "all");
    assert_eq!(steps_running(&fused, "conv2d_norm_act"), 0);
    assert_eq!(fused.plan.steps.len(), separate.plan.steps.len());
}
