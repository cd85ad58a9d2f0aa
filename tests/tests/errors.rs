//! Bad input gets a typed error that says what is wrong, never a panic: shape and type
//! mistakes while recording a graph, impossible `differentiate` and optimizer requests,
//! memory regions too small for a plan, out-of-range labels while training, corrupted plans,
//! and tensor values of the wrong length or type.

use sprout_core::error::KernelError;
use sprout_core::hyperparams::{BatchNormConfig, SgdConfig};
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::{
    compile_training_step, differentiate, DType, ExecError, Executor, Graph, GraphError,
    HostMemory, Init, Optimizer, Plan, Reference, Region, RegionSizes, Regions, Role, Shape,
    StepOutcome, TensorId, TrainConfig,
};
use sprout_tests::models::{random_batch, small_cnn, SmallCnnWeights, BATCH, CLASSES, IMAGE_LEN};

// ---- helpers ----

/// Runs a recording call that must fail, checks that the graph is left as it was (no
/// half-recorded node or tensor), and returns the error.
fn rejected(
    g: &mut Graph,
    record: impl FnOnce(&mut Graph) -> Result<TensorId, GraphError>,
) -> GraphError {
    let (tensors, nodes) = (g.tensors().len(), g.nodes().len());
    let err = record(g).expect_err("the call must be rejected");
    assert_eq!((g.tensors().len(), g.nodes().len()), (tensors, nodes), "graph changed by {err}");
    err
}

fn assert_mentions(err: &dyn std::fmt::Display, parts: &[&str]) {
    let text = err.to_string();
    for part in parts {
        assert!(text.contains(part), "'{text}' does not mention '{part}'");
    }
}

fn same3() -> ConvParams {
    ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 }
}

fn sgd_config(accumulation: u32) -> TrainConfig {
    let sgd = SgdConfig { momentum: 0.9, weight_decay: 1e-3, nesterov: false };
    TrainConfig {
        optimizer: Optimizer::Sgd(sgd),
        clip_grad_norm: None,
        accumulation,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    }
}

/// The small CNN, its compiled SGD training step (every parameter trainable) and its
/// initial memory.
fn trained_cnn(accumulation: u32) -> (Plan, HostMemory) {
    let model = small_cnn(&SmallCnnWeights::random(3)).expect("records");
    let training = compile_training_step(
        &model.graph,
        model.loss,
        &model.parameters,
        &sgd_config(accumulation),
    )
    .expect("compiles");
    let memory = training.plan.initial_memory(&training.graph);
    (training.plan, memory)
}

fn read_f32(plan: &Plan, memory: &mut HostMemory, name: &str) -> Vec<f32> {
    let op = plan.operand(name).expect("bound");
    memory.regions().read::<f32>(&op).expect("readable").to_vec()
}

// ---- (a) recording ----

#[test]
fn add_of_different_shapes_names_op_node_and_both_shapes() {
    let mut g = Graph::new(0);
    let a = g.input("a", Shape::d2(2, 3)).unwrap();
    let b = g.input("b", Shape::d2(2, 4)).unwrap();
    let err = rejected(&mut g, |g| g.add("res", a, b));
    match &err {
        GraphError::ShapeMismatch { op, node, left, right, .. } => {
            assert_eq!((*op, node.as_str()), ("add", "res"));
            assert_eq!((*left, *right), (Shape::d2(2, 3), Shape::d2(2, 4)));
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_mentions(&err, &["add", "res", "[2, 3]", "[2, 4]"]);
}

#[test]
fn linear_with_wrong_in_features_is_a_shape_mismatch() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d2(2, 5)).unwrap();
    let w = g.parameter("w", Shape::d2(3, 4), Init::Zeros).unwrap();
    let err = rejected(&mut g, |g| g.linear("fc", x, w, None));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "linear", node, left, right, .. }
            if node == "fc" && *left == Shape::d2(2, 5) && *right == Shape::d2(3, 4)),
        "{err:?}"
    );
    assert_mentions(&err, &["linear", "fc", "[2, 5]", "[3, 4]"]);

    // A bias of the wrong length.
    let w = g.parameter("w2", Shape::d2(3, 5), Init::Zeros).unwrap();
    let b = g.parameter("b2", Shape::d1(4), Init::Zeros).unwrap();
    let err = rejected(&mut g, |g| g.linear("fc2", x, w, Some(b)));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "linear", left, right, .. }
            if *left == Shape::d1(3) && *right == Shape::d1(4)),
        "{err:?}"
    );
}

#[test]
fn conv2d_groups_that_do_not_divide_the_channels_are_invalid() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d4(1, 3, 8, 8)).unwrap();
    let w = g.parameter("w", Shape::d4(4, 1, 3, 3), Init::Zeros).unwrap();
    let err =
        rejected(&mut g, |g| g.conv2d("conv", x, w, None, ConvParams { groups: 2, ..same3() }));
    assert!(
        matches!(&err, GraphError::Invalid { op: "conv2d", node, .. } if node == "conv"),
        "{err:?}"
    );
    assert_mentions(&err, &["conv2d", "conv", "groups 2", "3"]);
    let err =
        rejected(&mut g, |g| g.conv2d("conv", x, w, None, ConvParams { groups: 0, ..same3() }));
    assert!(matches!(err, GraphError::Invalid { op: "conv2d", .. }), "{err:?}");
}

#[test]
fn conv2d_weight_with_wrong_input_channels_is_a_shape_mismatch() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d4(1, 3, 8, 8)).unwrap();
    let w = g.parameter("w", Shape::d4(4, 2, 3, 3), Init::Zeros).unwrap();
    let err = rejected(&mut g, |g| g.conv2d("conv", x, w, None, same3()));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "conv2d", node, left, right, .. }
            if node == "conv" && *left == Shape::d4(1, 3, 8, 8) && *right == Shape::d4(4, 2, 3, 3)),
        "{err:?}"
    );
    assert_mentions(&err, &["conv2d", "conv", "[1, 3, 8, 8]", "[4, 2, 3, 3]"]);
}

#[test]
fn cross_entropy_needs_one_i32_label_per_row() {
    let mut g = Graph::new(0);
    let logits = g.input("logits", Shape::d2(4, 3)).unwrap();
    let five = g.labels("five", 5).unwrap();
    let err = rejected(&mut g, |g| g.cross_entropy("loss", logits, five));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "cross_entropy", node, left, right, .. }
            if node == "loss" && *left == Shape::d2(4, 3) && *right == Shape::d1(5)),
        "{err:?}"
    );
    assert_mentions(&err, &["cross_entropy", "loss", "[4, 3]", "[5]"]);

    let floats = g.target("floats", Shape::d1(4)).unwrap();
    let err = rejected(&mut g, |g| g.cross_entropy("loss", logits, floats));
    assert_eq!(
        err,
        GraphError::DType {
            op: "cross_entropy",
            node: "loss".into(),
            tensor: "floats".into(),
            expected: DType::I32,
            actual: DType::F32,
        }
    );
    assert_mentions(&err, &["cross_entropy", "loss", "floats", "I32", "F32"]);

    // Labels where a float operand belongs.
    let labels = g.labels("labels", 4).unwrap();
    let err = rejected(&mut g, |g| g.relu("relu", labels));
    assert!(
        matches!(
            err,
            GraphError::DType { op: "relu", expected: DType::F32, actual: DType::I32, .. }
        ),
        "{err:?}"
    );
}

#[test]
fn reshape_to_a_different_element_count_is_a_shape_mismatch() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d2(2, 3)).unwrap();
    let err = rejected(&mut g, |g| g.reshape("r", x, Shape::d1(7)));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "reshape", node, left, right, .. }
            if node == "r" && *left == Shape::d2(2, 3) && *right == Shape::d1(7)),
        "{err:?}"
    );
    assert_mentions(&err, &["reshape", "[2, 3]", "[7]"]);
}

#[test]
fn pooling_window_larger_than_the_input_is_invalid() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d4(1, 1, 2, 2)).unwrap();
    let big =
        PoolParams { kernel: (3, 3), stride: (1, 1), padding: (0, 0), count_include_pad: true };
    let err = rejected(&mut g, |g| g.max_pool2d("pool", x, big));
    assert!(
        matches!(&err, GraphError::Invalid { op: "max_pool2d", node, .. } if node == "pool"),
        "{err:?}"
    );
    assert_mentions(&err, &["max_pool2d", "pool", "(3, 3)", "(2, 2)"]);
    let err = rejected(&mut g, |g| g.avg_pool2d("avg", x, big));
    assert!(matches!(err, GraphError::Invalid { op: "avg_pool2d", .. }), "{err:?}");
    // A stride of zero never fits.
    let zero = PoolParams { kernel: (1, 1), stride: (0, 1), ..big };
    let err = rejected(&mut g, |g| g.max_pool2d("pool", x, zero));
    assert!(matches!(err, GraphError::Invalid { op: "max_pool2d", .. }), "{err:?}");
}

#[test]
fn operands_of_the_wrong_rank_are_rank_errors() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d2(2, 3)).unwrap();
    let w = g.parameter("w", Shape::d4(4, 3, 3, 3), Init::Zeros).unwrap();
    let err = rejected(&mut g, |g| g.conv2d("conv", x, w, None, same3()));
    assert_eq!(
        err,
        GraphError::Rank {
            op: "conv2d",
            node: "conv".into(),
            tensor: "x".into(),
            expected: 4,
            actual: Shape::d2(2, 3),
        }
    );
    assert_mentions(&err, &["conv2d", "conv", "'x'", "4 dimensions", "[2, 3]"]);
    let err = rejected(&mut g, |g| g.global_avg_pool("gap", x));
    assert!(matches!(err, GraphError::Rank { op: "global_avg_pool", expected: 4, .. }), "{err:?}");
    // Softmax takes `[N, ..., C]`: any rank from 2 on.
    let v = g.input("v", Shape::d1(3)).unwrap();
    let err = rejected(&mut g, |g| g.softmax("sm", v));
    assert!(matches!(err, GraphError::Rank { op: "softmax", expected: 2, .. }), "{err:?}");
}

#[test]
fn batch_norm_parameters_must_match_the_channels_and_settings_be_sane() {
    let mut g = Graph::new(0);
    let x = g.input("x", Shape::d4(2, 3, 4, 4)).unwrap();
    let c3 = g.parameter("c3", Shape::d1(3), Init::Zeros).unwrap();
    let c4 = g.parameter("c4", Shape::d1(4), Init::Zeros).unwrap();
    let cfg = BatchNormConfig::default();
    let err = rejected(&mut g, |g| g.batch_norm2d("bn", x, c3, c4, c3, c3, cfg));
    assert!(
        matches!(&err, GraphError::ShapeMismatch { op: "batch_norm2d", left, right, .. }
            if *left == Shape::d1(3) && *right == Shape::d1(4)),
        "{err:?}"
    );
    let bad = BatchNormConfig { eps: 0.0, momentum: 0.1 };
    let err = rejected(&mut g, |g| g.batch_norm2d("bn", x, c3, c3, c3, c3, bad));
    assert!(matches!(err, GraphError::Invalid { op: "batch_norm2d", .. }), "{err:?}");
}

#[test]
fn leaves_check_their_names_values_and_ids() {
    let mut g = Graph::new(0);
    g.input("image", Shape::d2(2, 2)).unwrap();
    let err = rejected(&mut g, |g| g.input("image", Shape::d2(2, 2)));
    assert_eq!(err, GraphError::DuplicateName { name: "image".into() });
    assert_mentions(&err, &["image"]);
    let err = rejected(&mut g, |g| g.parameter("image", Shape::d1(2), Init::Zeros));
    assert_eq!(err, GraphError::DuplicateName { name: "image".into() });
    let err = rejected(&mut g, |g| g.parameter("w", Shape::d2(2, 3), Init::Values(vec![0.0; 5])));
    assert_eq!(err, GraphError::ValueLength { tensor: "w".into(), expected: 6, actual: 5 });
    let err = rejected(&mut g, |g| g.relu("relu", TensorId(99)));
    assert_eq!(err, GraphError::UnknownTensor { id: 99 });
}

// ---- (e) differentiate and the optimizer ----

#[test]
fn differentiate_rejects_impossible_requests() {
    let model = small_cnn(&SmallCnnWeights::random(1)).unwrap();
    let fc_w = model.parameter("fc.weight");

    let err = differentiate(&model.graph, model.logits, &[fc_w]).err().expect("not scalar");
    assert_eq!(
        err,
        GraphError::LossNotScalar { name: "fc".into(), shape: Shape::d2(BATCH, CLASSES) }
    );
    assert_mentions(&err, &["fc", "[4, 3]"]);

    let err = differentiate(&model.graph, model.loss, &[fc_w, model.image]).err().expect("input");
    assert_eq!(err, GraphError::NotAParameter { name: "image".into(), role: Role::Input });
    assert_mentions(&err, &["image", "Input"]);
    let running_mean = model.parameter("bn.running_mean");
    let err = differentiate(&model.graph, model.loss, &[running_mean]).err().expect("buffer");
    assert_eq!(
        err,
        GraphError::NotAParameter { name: "bn.running_mean".into(), role: Role::Buffer }
    );

    // A parameter the loss does not depend on.
    let mut g = model.graph.clone();
    let unused = g.parameter("unused", Shape::d1(3), Init::Zeros).unwrap();
    let err = differentiate(&g, model.loss, &[fc_w, unused]).err().expect("unused");
    assert!(
        matches!(&err, GraphError::Invalid { op: "differentiate", node, .. } if node == "unused"),
        "{err:?}"
    );
    let err = differentiate(&g, TensorId(1000), &[fc_w]).err().expect("unknown loss");
    assert_eq!(err, GraphError::UnknownTensor { id: 1000 });

    // The model graph is left alone: nothing became trainable.
    assert_eq!(model.graph.tensor(fc_w).role, Role::FrozenParam);
}

#[test]
fn impossible_optimizer_settings_are_invalid() {
    let model = small_cnn(&SmallCnnWeights::random(1)).unwrap();
    let sgd = |momentum, weight_decay, nesterov| SgdConfig { momentum, weight_decay, nesterov };
    let bad = [
        TrainConfig { optimizer: Optimizer::Sgd(sgd(1.0, 0.0, false)), ..sgd_config(1) },
        TrainConfig { optimizer: Optimizer::Sgd(sgd(0.0, 0.0, true)), ..sgd_config(1) },
        TrainConfig { optimizer: Optimizer::Sgd(sgd(0.9, -1.0, false)), ..sgd_config(1) },
        TrainConfig { accumulation: 0, ..sgd_config(1) },
        TrainConfig { clip_grad_norm: Some(0.0), ..sgd_config(1) },
        TrainConfig { clip_grad_norm: Some(f32::NAN), ..sgd_config(1) },
    ];
    for cfg in bad {
        let err = compile_training_step(&model.graph, model.loss, &model.parameters, &cfg)
            .err()
            .unwrap_or_else(|| panic!("{cfg:?} must be rejected"));
        assert!(matches!(err, GraphError::Invalid { op: "optimizer", .. }), "{cfg:?}: {err:?}");
    }
}

// ---- (b) memory regions ----

#[test]
fn an_arena_too_small_for_the_plan_says_how_many_bytes_it_needs() {
    let (plan, mut memory) = trained_cnn(1);
    let needed = plan.sizes.arena;
    let state_before = memory.region(Region::State).to_vec();
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let short = needed - 4;
    let Regions { frozen, state, arena } = memory.regions();
    let mut regions = Regions { frozen, state, arena: &mut arena[..short] };
    let expected = ExecError::RegionTooSmall { region: Region::Arena, needed, actual: short };
    assert_eq!(exec.train_step(&mut regions, 0.1), Err(expected));
    assert_eq!(exec.run(&mut regions), Err(expected));
    assert_eq!(exec.check_regions(&regions), Err(expected));
    let err = exec.train_step(&mut regions, 0.1).unwrap_err();
    assert_mentions(&err, &["arena", &format!("{needed} bytes"), &format!("{short} bytes")]);
    // Nothing ran: the weights and the step counter are untouched.
    assert_eq!(exec.updates(), 0);
    assert_eq!(memory.region(Region::State), state_before.as_slice());

    // The state region is checked the same way.
    let Regions { frozen, state, arena } = memory.regions();
    let state_size = state.len();
    let mut regions = Regions { frozen, state: &mut state[..state_size - 16], arena };
    assert_eq!(
        exec.train_step(&mut regions, 0.1),
        Err(ExecError::RegionTooSmall {
            region: Region::State,
            needed: plan.sizes.state,
            actual: plan.sizes.state - 16,
        })
    );
}

#[test]
fn misaligned_regions_are_rejected() {
    let (plan, mut memory) = trained_cnn(1);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    // A large enough arena that starts one byte past an aligned address.
    let mut spare = HostMemory::zeroed(RegionSizes { arena: plan.sizes.arena + 16, ..plan.sizes });
    let Regions { arena: spare_arena, .. } = spare.regions();
    let Regions { frozen, state, .. } = memory.regions();
    let mut regions = Regions { frozen, state, arena: &mut spare_arena[1..] };
    assert_eq!(
        exec.train_step(&mut regions, 0.1),
        Err(ExecError::Misaligned { region: Region::Arena })
    );
    assert_mentions(&exec.run(&mut regions).unwrap_err(), &["arena", "4-byte"]);
}

// ---- (c) out-of-range labels ----

/// Runs one training step on a fixed random batch with the given labels.
fn step_with_labels(
    plan: &Plan,
    exec: &mut Executor<'_, Reference>,
    memory: &mut HostMemory,
    labels: &[i32],
) -> Result<StepOutcome, ExecError> {
    let (x, _) = random_batch(9, IMAGE_LEN, BATCH, CLASSES);
    let mut regions = memory.regions();
    regions.write(&plan.operand("image").unwrap(), &x)?;
    regions.write(&plan.operand("label").unwrap(), labels)?;
    exec.train_step(&mut regions, 0.1)
}

/// Every tensor of a plan that persists between steps (trainable weights, buffers,
/// optimizer state), by name.
fn persistent_state(plan: &Plan, memory: &mut HostMemory) -> Vec<(String, Vec<f32>)> {
    plan.bindings
        .iter()
        .filter(|b| matches!(b.role, Role::TrainableParam | Role::OptimizerState | Role::Buffer))
        .map(|b| (b.name.clone(), read_f32(plan, memory, &b.name)))
        .collect()
}

#[test]
fn out_of_range_labels_fail_the_step_before_any_update() {
    let (plan, mut memory) = trained_cnn(1);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let before = persistent_state(&plan, &mut memory);
    let ce_step = plan.steps.iter().position(|s| s.kernel.name() == "cross_entropy").unwrap();
    for (labels, row, label) in [([0, 1, 3, 2], 2, 3), ([-1, 0, 0, 0], 0, -1)] {
        let err = step_with_labels(&plan, &mut exec, &mut memory, &labels).unwrap_err();
        assert_eq!(
            err,
            ExecError::Kernel {
                step: ce_step,
                kernel: "cross_entropy",
                error: KernelError::LabelOutOfRange { row, label, classes: CLASSES },
            }
        );
        assert_mentions(&err, &["cross_entropy", &format!("label {label}"), "3 classes"]);
    }
    // Labels are checked before the step runs: weights, momentum buffers and batch-norm
    // running statistics are exactly as they were, and no update was counted.
    assert_eq!(persistent_state(&plan, &mut memory), before);
    assert_eq!(exec.updates(), 0);
    // The executor is still usable.
    let ok = step_with_labels(&plan, &mut exec, &mut memory, &[0, 1, 2, 0]);
    assert_eq!(ok, Ok(StepOutcome::Updated { update: 1 }));
    assert_ne!(persistent_state(&plan, &mut memory), before);
}

#[test]
fn a_failed_micro_batch_is_not_accumulated() {
    let (plan, mut memory) = trained_cnn(2);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let good = [0, 1, 2, 0];
    let first = step_with_labels(&plan, &mut exec, &mut memory, &good);
    assert_eq!(first, Ok(StepOutcome::Accumulated { remaining: 1 }));
    let accumulated = persistent_state(&plan, &mut memory);
    let err = step_with_labels(&plan, &mut exec, &mut memory, &[0, 7, 2, 0]).unwrap_err();
    assert!(matches!(err, ExecError::Kernel { error: KernelError::LabelOutOfRange { .. }, .. }));
    assert_eq!(persistent_state(&plan, &mut memory), accumulated, "accumulators changed");
    let second = step_with_labels(&plan, &mut exec, &mut memory, &good);
    assert_eq!(second, Ok(StepOutcome::Updated { update: 1 }));
}

// ---- (d) corrupted plans ----

/// One way to damage a plan.
type Corruption<'a> = Box<dyn Fn(&mut Plan) + 'a>;

/// A copy of `plan` with `corrupt` applied.
fn corrupted(plan: &Plan, corrupt: impl FnOnce(&mut Plan)) -> Plan {
    let mut bad = plan.clone();
    corrupt(&mut bad);
    bad
}

/// The index of the first step with an arena operand, and that operand's slot.
fn first_arena_operand(plan: &Plan) -> (usize, usize) {
    plan.steps
        .iter()
        .enumerate()
        .find_map(|(i, s)| {
            s.operands.iter().position(|o| o.region == Region::Arena).map(|j| (i, j))
        })
        .expect("some step uses the arena")
}

#[test]
fn corrupted_plans_are_rejected_before_they_run() {
    let (plan, _) = trained_cnn(1);
    let (s, o) = first_arena_operand(&plan);
    let kernel = plan.steps[s].kernel.name();
    let arena = plan.sizes.arena;

    let moved = corrupted(&plan, |p| p.steps[s].operands[o].offset = arena.next_multiple_of(16));
    let err = Executor::new(moved.view(), Reference).err().expect("out of bounds");
    assert!(
        matches!(err, ExecError::OutOfBounds { step, region: Region::Arena, size, end, kernel: k }
            if step == s && size == arena && end > arena && k == kernel),
        "{err:?}"
    );
    assert_mentions(&err, &[kernel, "arena", &arena.to_string()]);

    let shrunk = corrupted(&plan, |p| p.sizes.arena -= 4);
    let err = Executor::new(shrunk.view(), Reference).err().expect("out of bounds");
    assert!(matches!(err, ExecError::OutOfBounds { region: Region::Arena, .. }), "{err:?}");

    let malformed: [(&str, Corruption<'_>); 5] = [
        ("a longer operand", Box::new(|p| p.steps[s].operands[o].len += 1)),
        ("another element type", Box::new(|p| p.steps[s].operands[o].dtype = DType::I8)),
        (
            "a missing operand",
            Box::new(|p| {
                p.steps[s].operands.pop();
            }),
        ),
        ("a misaligned operand", Box::new(|p| p.steps[s].operands[o].offset += 4)),
        (
            "a write into frozen weights",
            Box::new(|p| {
                let last = p.steps[s].operands.len() - 1;
                p.steps[s].operands[last].region = Region::Frozen;
            }),
        ),
    ];
    for (what, corrupt) in malformed {
        let bad = corrupted(&plan, corrupt);
        let err = Executor::new(bad.view(), Reference).err().unwrap_or_else(|| panic!("{what}"));
        assert!(
            matches!(err, ExecError::MalformedStep { step, kernel: k, .. } if step == s && k == kernel),
            "{what}: {err:?}"
        );
    }

    let never = corrupted(&plan, |p| p.accumulation = 0);
    assert_eq!(Executor::new(never.view(), Reference).err(), Some(ExecError::ZeroAccumulation));
}

#[test]
fn corrupted_update_steps_are_numbered_after_the_micro_batch_steps() {
    let (plan, _) = trained_cnn(2);
    assert!(!plan.update_steps.is_empty());
    let bad = corrupted(&plan, |p| {
        let op = &mut p.update_steps[0].operands[0];
        op.offset = p.sizes.get(op.region).next_multiple_of(16) + 16;
    });
    let err = Executor::new(bad.view(), Reference).err().expect("out of bounds");
    assert!(
        matches!(err, ExecError::OutOfBounds { step, .. } if step == plan.steps.len()),
        "{err:?}"
    );
}

#[test]
fn a_step_writing_over_its_own_input_is_an_overlap_error() {
    let (plan, mut memory) = trained_cnn(1);
    let pool = plan.steps.iter().position(|s| s.kernel.name() == "max_pool2d").unwrap();
    let bad = corrupted(&plan, |p| {
        let input = p.steps[pool].operands[0];
        p.steps[pool].operands[1].offset = input.offset;
    });
    let mut exec = Executor::new(bad.view(), Reference).expect("bounds and types still hold");
    let err = exec.train_step(&mut memory.regions(), 0.1).unwrap_err();
    assert_eq!(err, ExecError::Overlap { step: pool, kernel: "max_pool2d" });
}

// ---- (f) tensor values ----

#[test]
fn values_of_the_wrong_length_or_type_are_refused() {
    let model = small_cnn(&SmallCnnWeights::random(4)).unwrap();
    // Only the head trains: the convolution stays in the read-only frozen region.
    let head = [model.parameter("fc.weight"), model.parameter("fc.bias")];
    let training = compile_training_step(&model.graph, model.loss, &head, &sgd_config(1)).unwrap();
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let before = memory.clone();
    let image = plan.operand("image").unwrap();
    let label = plan.operand("label").unwrap();
    let conv_w = plan.operand("conv.weight").unwrap();
    assert_eq!(conv_w.region, Region::Frozen);

    {
        let mut regions = memory.regions();
        let short = vec![0.0f32; IMAGE_LEN - 1];
        assert_eq!(
            regions.write(&image, &short),
            Err(ExecError::ValueLength { expected: IMAGE_LEN, actual: IMAGE_LEN - 1 })
        );
        let err = regions.write(&image, &vec![0.0f32; IMAGE_LEN + 1]).unwrap_err();
        assert_eq!(err, ExecError::ValueLength { expected: IMAGE_LEN, actual: IMAGE_LEN + 1 });
        assert_mentions(&err, &[&IMAGE_LEN.to_string(), &(IMAGE_LEN + 1).to_string()]);
        assert_eq!(
            regions.write(&label, &[0.0f32; BATCH]),
            Err(ExecError::WrongDType { expected: DType::I32, actual: DType::F32 })
        );
        assert_eq!(
            regions.write(&image, &vec![0i32; IMAGE_LEN]),
            Err(ExecError::WrongDType { expected: DType::F32, actual: DType::I32 })
        );
        assert_eq!(
            regions.read::<i32>(&image).err(),
            Some(ExecError::WrongDType { expected: DType::F32, actual: DType::I32 })
        );
        let zeros = vec![0.0f32; conv_w.len];
        assert_eq!(
            regions.write(&conv_w, &zeros),
            Err(ExecError::ReadOnly { region: Region::Frozen })
        );
        // An operand that does not belong to this memory.
        let beyond = sprout_core::Operand { offset: plan.sizes.arena, ..label };
        assert!(
            matches!(regions.write(&beyond, &[0i32; BATCH]), Err(ExecError::OutOfBounds { .. })),
            "writing past the arena"
        );
        assert!(matches!(regions.read::<i32>(&beyond), Err(ExecError::OutOfBounds { .. })));
    }
    assert_eq!(memory, before, "a refused write changed memory");
}

// ---- corrupted plans from the far end of the value range ----

#[test]
fn operand_offsets_near_the_end_of_the_address_space_are_out_of_bounds() {
    let (plan, mut memory) = trained_cnn(1);
    let pool = plan.steps.iter().position(|s| s.kernel.name() == "max_pool2d").unwrap();
    let bad = corrupted(&plan, |p| p.steps[pool].operands[0].offset = (usize::MAX & !15) - 64);
    let err = Executor::new(bad.view(), Reference).err();
    assert!(matches!(err, Some(ExecError::OutOfBounds { .. })), "{err:?}");
    let label = plan.operand("label").unwrap();
    let far = sprout_core::Operand { offset: usize::MAX & !15, ..label };
    let written = memory.regions().write(&far, &[0i32; BATCH]);
    assert!(matches!(written, Err(ExecError::OutOfBounds { .. })), "{written:?}");
}

#[test]
fn conv_geometry_with_impossible_groups_is_malformed() {
    use sprout_core::kernel::KernelCall;
    let (plan, mut memory) = trained_cnn(1);
    let conv = plan.steps.iter().position(|s| s.kernel.name() == "conv2d").unwrap();
    let set_groups = |groups: usize| {
        corrupted(&plan, |p| {
            if let KernelCall::Conv2d { geometry, .. } = &mut p.steps[conv].kernel {
                geometry.groups = groups;
                // Keep the weight operand consistent with the corrupted signature.
                p.steps[conv].operands[1].len =
                    geometry.c_out * (geometry.c_in / groups.max(1)) * 9;
            }
        })
    };
    // 2 input channels and 3 output channels: neither 0 nor 2 groups is possible.
    for groups in [0, 2] {
        let bad = set_groups(groups);
        let result = Executor::new(bad.view(), Reference)
            .and_then(|mut exec| exec.train_step(&mut memory.regions(), 0.1));
        assert!(matches!(result, Err(ExecError::MalformedStep { .. })), "{groups}: {result:?}");
    }
}
