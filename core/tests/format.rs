//! The `.sprout` model file end to end: a small CNN saved, loaded and rebuilt runs
//! bit-identically; trained weights survive; every kind of damage is a typed error.

#![cfg(feature = "alloc")]

use sprout_core::format::container::{seal, HEADER_BYTES, MODEL};
use sprout_core::format::{Fit, FrameError, Preprocessing, WeightValues};
use sprout_core::hyperparams::{AdamWConfig, BatchNormConfig};
use sprout_core::op::{ConvParams, Op, PoolParams};
use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_inference, compile_training_step, load_model, nn, save_model, to_f16_storage, DType,
    Executor, F16Storage, FormatError, Graph, HostMemory, Metadata, ModelFile, Optimizer, Plan,
    Reference, Shape, TensorId, TrainConfig,
};

const BATCH: usize = 4;
const CLASSES: usize = 3;

/// conv (bias) → batch norm → relu → max pool → flatten → linear → cross-entropy.
fn small_cnn(seed: u64) -> (Graph, TensorId) {
    let mut g = Graph::new(seed);
    let x = g.input("image", Shape::d4(BATCH, 2, 6, 6)).unwrap();
    let y = g.labels("label", BATCH).unwrap();
    let same3 = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv1", x, 4, 3, same3, true).unwrap();
    let h = nn::batch_norm2d(&mut g, "bn1", h).unwrap();
    let h = g.relu("relu1", h).unwrap();
    let pool =
        PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true };
    let h = g.max_pool2d("pool1", h, pool).unwrap();
    let h = g.flatten("flat", h).unwrap();
    let logits = nn::linear(&mut g, "fc", h, CLASSES).unwrap();
    let loss = g.cross_entropy("loss", logits, y).unwrap();
    (g, loss)
}

fn metadata() -> Metadata {
    Metadata {
        class_names: vec!["healthy".into(), "rust".into(), "blight".into()],
        input_shape: Shape::d4(BATCH, 2, 6, 6),
        preprocessing: Preprocessing {
            mean: vec![0.5, 0.25],
            std: vec![0.2, 0.1],
            resize: Some((6, 6)),
            fit: Some(Fit::Squash),
        },
        provenance: "sprout-core tests: small_cnn seed 3".into(),
    }
}

fn images(seed: u64) -> Vec<f32> {
    let mut rng = SplitMix::new(seed);
    (0..BATCH * 2 * 36).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// Runs an inference plan of `graph` and returns the logits; with `trained`, the weights
/// come from that plan's memory instead of the graph's initial values.
fn infer(graph: &Graph, trained: Option<(&Plan, &HostMemory)>) -> Vec<f32> {
    let logits = graph.find("fc").unwrap();
    let plan = compile_inference(graph, &[logits]).unwrap();
    let mut mem = plan.initial_memory(graph);
    if let Some((from, from_mem)) = trained {
        from.copy_weights(from_mem, &plan, &mut mem);
    }
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = mem.regions();
    regions.write(&plan.operand("image").unwrap(), &images(11)).unwrap();
    exec.run(&mut regions).unwrap();
    regions.read::<f32>(&plan.operand("fc").unwrap()).unwrap().to_vec()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn saved_cnn() -> Vec<u8> {
    save_model(&ModelFile::from_graph(&small_cnn(3).0, metadata())).unwrap()
}

#[test]
fn round_trip_rebuilds_an_identical_graph_with_bit_identical_logits() {
    let (g, _) = small_cnn(3);
    let model = ModelFile::from_graph(&g, metadata());
    // conv weight and bias, batch-norm weight, bias and running statistics, fc weight and bias.
    assert_eq!(model.weights.len(), 8);
    let bytes = save_model(&model).unwrap();
    let loaded = load_model(&bytes).unwrap();
    assert_eq!(loaded, model);
    assert_eq!(loaded.metadata.class_names[2], "blight");

    let rebuilt = loaded.to_graph().unwrap();
    assert_eq!(rebuilt.seed(), g.seed());
    assert_eq!(rebuilt.nodes(), g.nodes());
    assert_eq!(rebuilt.tensors().len(), g.tensors().len());
    for (a, b) in rebuilt.tensors().iter().zip(g.tensors()) {
        assert_eq!((&a.name, a.shape, a.dtype, a.role), (&b.name, b.shape, b.dtype, b.role));
        let values = |t: &sprout_core::graph::TensorInfo| {
            t.init.as_ref().map(|i| bits(&i.materialize(t.shape.numel())))
        };
        assert_eq!(values(a), values(b), "{}", a.name);
    }
    let (original, reloaded) = (infer(&g, None), infer(&rebuilt, None));
    assert_eq!(original.len(), BATCH * CLASSES);
    assert!(original.iter().any(|&v| v != 0.0));
    assert_eq!(bits(&original), bits(&reloaded));
}

#[test]
fn trained_weights_survive_a_save_load_round_trip() {
    let (g, loss) = small_cnn(3);
    let trainable: Vec<_> = g.parameters().collect();
    let training = compile_training_step(&g, loss, &trainable, &TrainConfig::sgd(0.9)).unwrap();
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    {
        let mut regions = memory.regions();
        regions.write(&plan.operand("image").unwrap(), &images(5)).unwrap();
        regions.write(&plan.operand("label").unwrap(), &[0i32, 1, 2, 1]).unwrap();
        for _ in 0..3 {
            exec.train_step(&mut regions, 0.1).unwrap();
        }
    }
    let mut model = ModelFile::from_graph(&g, metadata());
    assert_eq!(model.read_weights(plan, &memory), 8);
    let loaded = load_model(&save_model(&model).unwrap()).unwrap();

    for name in ["conv1.weight", "conv1.bias", "bn1.weight", "bn1.running_var", "fc.weight"] {
        let b = plan.binding(name).unwrap();
        let trained: Vec<f32> = memory.region(b.operand.region)[b.operand.offset..b.operand.end()]
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let stored = loaded.weight(name).unwrap();
        assert_eq!(stored.dtype(), DType::F32, "{name}");
        assert_eq!(bits(&stored.float_values().unwrap()), bits(&trained), "{name}");
        let init = g.tensor(g.find(name).unwrap()).init.as_ref().unwrap();
        assert_ne!(bits(&init.materialize(trained.len())), bits(&trained), "{name} did not train");
    }
    // The rebuilt graph starts from the trained weights: the same logits as an evaluation
    // plan handed the trained weights directly.
    let rebuilt = loaded.to_graph().unwrap();
    assert_eq!(bits(&infer(&rebuilt, None)), bits(&infer(&g, Some((plan, &memory)))));
}

#[test]
fn a_training_graph_with_backward_and_optimizer_ops_round_trips() {
    let (g, loss) = small_cnn(4);
    let trainable: Vec<_> = g.parameters().collect();
    let cfg = TrainConfig {
        optimizer: Optimizer::AdamW(AdamWConfig::default()),
        clip_grad_norm: Some(1.0),
        accumulation: 2,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let training = compile_training_step(&g, loss, &trainable, &cfg).unwrap();
    let model = ModelFile::from_graph(&training.graph, metadata());
    let rebuilt = load_model(&save_model(&model).unwrap()).unwrap().to_graph().unwrap();
    assert_eq!(rebuilt.nodes(), training.graph.nodes());
    let kinds: Vec<_> = rebuilt.nodes().iter().map(|n| n.op.kind()).collect();
    let expected = [
        "conv2d_grad_weight",
        "batch_norm_grad_params",
        "adamw_update",
        "clip_coefficient",
        "zero",
    ];
    for kind in expected {
        assert!(kinds.contains(&kind), "{kind} missing");
    }
}

#[test]
fn a_flipped_body_byte_is_a_checksum_mismatch() {
    let mut bytes = saved_cnn();
    bytes[HEADER_BYTES + 7] ^= 0x10;
    let err = load_model(&bytes).unwrap_err();
    assert!(
        matches!(err, FormatError::Frame(FrameError::ChecksumMismatch { stored, computed }) if stored != computed),
        "{err:?}"
    );
}

#[test]
fn truncation_anywhere_is_reported_with_the_bytes_needed() {
    let bytes = saved_cnn();
    let len = bytes.len();
    for cut in [0, 3, 8, 9, 12, HEADER_BYTES, HEADER_BYTES + 1, len / 2, len - 4, len - 1] {
        match load_model(&bytes[..cut]) {
            Err(FormatError::Frame(FrameError::Truncated { needed, available })) => {
                assert_eq!(available, cut);
                assert!(needed > cut && needed <= len, "cut {cut}: needed {needed}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn wrong_magic_and_future_version_are_refused() {
    let mut bytes = saved_cnn();
    bytes[1] = b'X';
    let err = load_model(&bytes).unwrap_err();
    assert!(
        matches!(err, FormatError::Frame(FrameError::BadMagic { found, .. }) if found[1] == b'X'),
        "{err:?}"
    );
    let mut bytes = saved_cnn();
    let future = sprout_core::format::VERSION + 1;
    bytes[8..10].copy_from_slice(&future.to_le_bytes());
    let err = load_model(&bytes).unwrap_err();
    let supported = sprout_core::format::VERSION;
    assert_eq!(
        err,
        FormatError::Frame(FrameError::UnsupportedVersion { found: future, supported })
    );
    assert!(err.to_string().contains(&format!("version {future}")), "{err}");
}

#[test]
fn an_older_version_is_refused_by_version_with_how_to_regenerate_the_model() {
    let old = sprout_core::format::VERSION - 1;
    let mut bytes = saved_cnn();
    bytes[8..10].copy_from_slice(&old.to_le_bytes());
    let err = load_model(&bytes).unwrap_err();
    let FormatError::Frame(FrameError::OutdatedVersion { found, current, .. }) = err else {
        panic!("{err:?}");
    };
    assert_eq!((found, current), (old, sprout_core::format::VERSION));
    let message = err.to_string();
    assert!(message.starts_with(&format!("bad .sprout file: format version {old} is older")));
    assert!(
        message.contains("`sprout convert`") && message.contains("`sprout train`"),
        "{message}"
    );
}

/// The bytes of `model` as a file, without the checks `save_model` makes: what a damaged or
/// hostile file holds.
fn seal_unchecked(model: &ModelFile) -> Vec<u8> {
    seal(MODEL, &postcard::to_allocvec(model).unwrap()).unwrap()
}

/// Writes a model damaged after `from_graph` (so with a valid checksum) and loads it; the
/// writer refuses it as the loader does.
fn load_damaged(damage: impl FnOnce(&mut ModelFile)) -> String {
    let mut model = ModelFile::from_graph(&small_cnn(3).0, metadata());
    damage(&mut model);
    assert!(save_model(&model).is_err(), "save_model writes a file load_model refuses");
    match load_model(&seal_unchecked(&model)) {
        Err(FormatError::BadGraph { detail }) => detail,
        other => panic!("expected BadGraph, got {other:?}"),
    }
}

#[test]
fn a_checksummed_body_with_an_invalid_graph_is_a_bad_graph() {
    let detail = load_damaged(|m| m.graph.nodes[0].inputs[0] = TensorId(9999));
    assert!(detail.contains("9999"), "{detail}");
    let detail = load_damaged(|m| m.weights.retain(|w| w.name != "bn1.running_mean"));
    assert!(detail.contains("bn1.running_mean") && detail.contains("no stored weight"), "{detail}");
    let detail = load_damaged(|m| m.weights[0].name = "nope".into());
    assert!(detail.contains("'nope'"), "{detail}");
    let detail = load_damaged(|m| {
        let WeightValues::F32(v) = &mut m.weights[0].values else { panic!("f32 weights") };
        v.pop();
    });
    assert!(detail.contains("conv1.weight") && detail.contains("elements"), "{detail}");
    // An op with the wrong operand count, and shapes that do not fit the op.
    let detail = load_damaged(|m| m.graph.nodes[0].inputs.truncate(1));
    assert!(detail.contains("conv2d") && detail.contains("inputs"), "{detail}");
    let detail = load_damaged(|m| m.graph.tensors[0].shape = Shape::d2(BATCH, 72));
    assert!(detail.contains("conv1"), "{detail}");
    // Nodes out of dependency order, an output produced twice, a shape too large to place.
    let detail = load_damaged(|m| m.graph.nodes.swap(0, 1));
    assert!(detail.contains("before a node produces it"), "{detail}");
    let detail = load_damaged(|m| m.graph.nodes[2].outputs[0] = m.graph.nodes[0].outputs[0]);
    assert!(detail.contains("produced twice"), "{detail}");
    let huge = Shape::d4(1 << 20, 1 << 20, 1 << 20, 1 << 20);
    let detail = load_damaged(|m| m.graph.tensors[0].shape = huge);
    assert!(detail.contains("exceeds"), "{detail}");
    let detail = load_damaged(|m| m.metadata.preprocessing.std.truncate(1));
    assert!(detail.contains("standard deviations"), "{detail}");
    // A batch of 0, and op settings a builder refuses.
    let detail = load_damaged(|m| m.graph.tensors[0].shape = Shape::d4(0, 3, 8, 8));
    assert!(detail.contains("dimension of 0"), "{detail}");
    let detail = load_damaged(|m| m.metadata.input_shape = Shape::d4(0, 3, 8, 8));
    assert!(detail.contains("dimension of 0"), "{detail}");
    let bn = |m: &mut ModelFile, eps| {
        let node = m.graph.nodes.iter_mut().find(|n| n.op.kind() == "batch_norm2d").unwrap();
        node.op = Op::BatchNorm2d(BatchNormConfig { eps, momentum: 0.1 });
    };
    for eps in [-1.0, f32::NAN, f32::INFINITY] {
        let detail = load_damaged(|m| bn(m, eps));
        assert!(detail.contains(&format!("eps {eps} must be > 0")), "{detail}");
    }
}

#[test]
fn a_rank_five_shape_or_junk_after_the_body_is_refused() {
    let model = ModelFile::from_graph(&small_cnn(3).0, metadata());
    let mut body = postcard::to_allocvec(&model).unwrap();
    // The first tensor record is "image": its shape's dimension count follows the name.
    let image = body.windows(5).position(|w| w == b"image").unwrap();
    assert_eq!(body[image + 5], 4);
    body[image + 5] = 5;
    let err = load_model(&seal(MODEL, &body).unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::Body(_)), "{err:?}");
    let mut body = postcard::to_allocvec(&model).unwrap();
    body.push(0);
    assert_eq!(
        load_model(&seal(MODEL, &body).unwrap()),
        Err(FormatError::TrailingBytes { count: 1 })
    );
}

/// Damaged files, with and without a repaired checksum, never panic the loader, and what
/// loads also rebuilds and compiles without panicking.
#[test]
fn random_damage_never_panics() {
    let model = ModelFile::from_graph(&small_cnn(3).0, metadata());
    let file = save_model(&model).unwrap();
    let body = postcard::to_allocvec(&model).unwrap();
    let mut rng = SplitMix::new(99);
    let mut below = |n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    let (mut ok, mut bad_graph, mut body_errors, mut framing) = (0, 0, 0, 0);
    for i in 0..2000 {
        // Odd rounds damage the body and repair the checksum, to reach the decoder.
        let repaired = i % 2 == 1;
        let mut bytes = if repaired { body.clone() } else { file.clone() };
        for _ in 0..1 + below(3) {
            let at = below(bytes.len());
            bytes[at] ^= 1 << below(8);
        }
        if below(4) == 0 {
            bytes.truncate(below(bytes.len()));
        }
        if repaired {
            bytes = seal(MODEL, &bytes).unwrap();
        }
        match load_model(&bytes) {
            Ok(loaded) => {
                ok += 1;
                let graph = loaded.to_graph().unwrap();
                if let Some(logits) = graph.find("fc") {
                    if let Ok(plan) = compile_inference(&graph, &[logits]) {
                        let _ = Executor::new(plan.view(), Reference);
                        let _ = plan.initial_memory(&graph);
                    }
                }
            }
            Err(FormatError::BadGraph { .. }) => bad_graph += 1,
            Err(FormatError::Body(_) | FormatError::TrailingBytes { .. }) => body_errors += 1,
            Err(_) => framing += 1,
        }
    }
    // Every layer of checks is reached.
    assert!(
        ok > 0 && bad_graph > 0 && body_errors > 0 && framing > 0,
        "{ok} {bad_graph} {body_errors} {framing}"
    );
}

#[test]
fn f16_weights_round_trip_at_two_bytes_each() {
    let (g, _) = small_cnn(8);
    let frozen = F16Storage { frozen_weights: true, ..F16Storage::default() };
    let half = to_f16_storage(&g, &[], frozen).unwrap();
    let model = ModelFile::from_graph(&half, metadata());
    let f16_file = save_model(&model).unwrap();
    // Every parameter value takes two bytes instead of four (a length prefix may grow by a
    // byte per tensor); batch-norm running statistics are buffers and stay f32.
    let weight_bytes = |m: &ModelFile| postcard::to_allocvec(&m.weights).unwrap().len();
    let saved = weight_bytes(&ModelFile::from_graph(&g, metadata())) - weight_bytes(&model);
    let values: usize = g.parameters().map(|p| g.shape(p).numel()).sum();
    let tensors = g.parameters().count();
    assert!((2 * values - tensors..=2 * values).contains(&saved), "saved {saved} of {values}");

    let loaded = load_model(&f16_file).unwrap();
    assert_eq!(loaded, model);
    let weight = loaded.weight("conv1.weight").unwrap();
    assert_eq!(weight.dtype(), DType::F16);
    let rounded: Vec<f32> = g
        .tensor(g.find("conv1.weight").unwrap())
        .init
        .as_ref()
        .unwrap()
        .materialize(weight.len())
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    assert_eq!(bits(&weight.float_values().unwrap()), bits(&rounded));
    // The loaded model stores the weights as f16 and runs to the same logits.
    let rebuilt = loaded.to_graph().unwrap();
    assert_eq!(rebuilt.tensor(rebuilt.find("fc.weight").unwrap()).dtype, DType::F16);
    assert_eq!(bits(&infer(&rebuilt, None)), bits(&infer(&half, None)));
    let exact = infer(&g, None);
    let close = exact.iter().zip(infer(&half, None)).all(|(a, b)| (a - b).abs() < 1e-2);
    assert!(close, "f16 weights change the logits by rounding only");

    // An odd number of f16 bytes is a body error, not a panic.
    let mut damaged = model.clone();
    if let WeightValues::F16(values) = &mut damaged.weights[0].values {
        values.0.pop();
    }
    let detail = match load_model(&seal_unchecked(&damaged)) {
        Err(FormatError::BadGraph { detail }) => detail,
        other => panic!("expected a bad graph, got {other:?}"),
    };
    assert!(detail.contains("conv1.weight"), "{detail}");
}
