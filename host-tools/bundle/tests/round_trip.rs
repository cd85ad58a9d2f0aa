//! A bundle written on the host and decoded by the firmware runs bit for bit like the host's
//! own compiled plans; damaged bundles are typed errors, never panics.

use sprout_bundle::{build, BundleOptions, HostBundle};
use sprout_core::format::bundle::{decode, Bundle, BundleError, BundleHeader, FRAMING};
use sprout_core::format::container::{seal, HEADER_BYTES};
use sprout_core::format::FrameError;
use sprout_core::rng::SplitMix;
use sprout_core::{DType, Executor, Reference, Region, Regions, Step};
use sprout_train::Model;
use sprout_zoo::Architecture;

type Steps = heapless::Vec<Step, 64>;

fn mlp_bundle() -> HostBundle {
    let model = Model::from_zoo(Architecture::Mlp, 16, 3).unwrap();
    build(&model, &BundleOptions { batch: 8, ..BundleOptions::default() }).unwrap()
}

/// 16-byte-aligned bytes, as a board's linker places an embedded bundle.
fn aligned(bytes: &[u8]) -> Vec<u128> {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

fn decoded<'b, 's>(bytes: &'b [u8], steps: &'s mut Steps) -> Bundle<'b, 's> {
    decode(bytes, steps).unwrap()
}

/// The device's regions: frozen weights in place in the bundle, state and arena in "RAM".
fn device_regions<'m>(
    bundle: &Bundle<'m, '_>,
    state: &'m mut [u128],
    arena: &'m mut [u128],
) -> Regions<'m> {
    Regions {
        frozen: bundle.frozen,
        state: &mut bytemuck::cast_slice_mut(state)[..bundle.initial_state.len()],
        arena: bytemuck::cast_slice_mut(arena),
    }
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn decoded_plans_run_bit_for_bit_like_the_host_plans() {
    let host = mlp_bundle();
    let words = aligned(&host.bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..host.bytes.len()];
    let mut steps = Steps::new();
    let bundle = decoded(file, &mut steps);
    assert_eq!(bundle.classes(), 10);
    assert_eq!((bundle.head_batch(), bundle.feature_len()), (8, 64));
    let h = &bundle.header;

    let mut state = aligned(bundle.initial_state);
    let mut arena = vec![0u128; bundle.arena_bytes().div_ceil(16)];

    // Backbone: one sample in, features out, on both sides.
    let mut rng = SplitMix::new(5);
    let input_name = &host.backbone_graph.tensor(host.backbone_graph.find("input").unwrap()).name;
    let mut host_backbone_memory = host.backbone.initial_memory(&host.backbone_graph);
    let mut host_backbone = Executor::new(host.backbone.view(), Reference).unwrap();
    let mut device_backbone = Executor::new(bundle.backbone, Reference).unwrap();
    let mut features = Vec::new();
    for _ in 0..16 {
        let sample: Vec<f32> = (0..64).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut r = host_backbone_memory.regions();
        r.write(&host.backbone.operand(input_name).unwrap(), &sample).unwrap();
        host_backbone.run(&mut r).unwrap();
        let expected =
            r.read::<f32>(&host.backbone.operand(&host.features).unwrap()).unwrap().to_vec();
        let mut r = device_regions(&bundle, &mut state, &mut arena);
        r.write(&h.backbone_io.sample, &sample).unwrap();
        device_backbone.run(&mut r).unwrap();
        let got = r.read::<f32>(&h.backbone_io.features).unwrap();
        assert_eq!(bits(got), bits(&expected));
        assert!(expected.iter().any(|&v| v != 0.0));
        features.extend(expected);
    }

    // Head training: the same losses step by step, the same state afterwards.
    let plan = &host.training.plan;
    let mut host_train_memory = plan.initial_memory(&host.training.graph);
    let mut host_train = Executor::new(plan.view(), Reference).unwrap();
    let mut device_train = Executor::new(bundle.train, Reference).unwrap();
    let labels: Vec<i32> = (0..16).map(|i| i % 10).collect();
    let mut losses = Vec::new();
    for step in 0..6 {
        let half = step % 2;
        let batch = &features[half * 8 * 64..(half + 1) * 8 * 64];
        let batch_labels = &labels[half * 8..(half + 1) * 8];
        let mut r = host_train_memory.regions();
        r.write(&plan.operand(&host.features).unwrap(), batch).unwrap();
        r.write(&plan.operand(&host.labels).unwrap(), batch_labels).unwrap();
        host_train.train_step(&mut r, h.learning_rate).unwrap();
        let expected = r.read::<f32>(&plan.operand(&host.loss).unwrap()).unwrap()[0];
        let mut r = device_regions(&bundle, &mut state, &mut arena);
        r.write(&h.train_io.features, batch).unwrap();
        r.write(&h.train_io.labels, batch_labels).unwrap();
        device_train.train_step(&mut r, h.learning_rate).unwrap();
        let got = r.read::<f32>(&h.train_io.loss).unwrap()[0];
        assert_eq!(got.to_bits(), expected.to_bits(), "step {step}");
        losses.push(got);
    }
    assert!(losses[4] < losses[0], "the head learns: {losses:?}");
    let trained = host_train_memory.region(sprout_core::Region::State).to_vec();
    let device_state = &bytemuck::cast_slice::<u128, u8>(&state)[..trained.len()];
    assert_eq!(device_state, trained.as_slice());

    // Evaluation with the trained weights: the same logits.
    let mut host_eval_memory = host.eval.initial_memory(&host.head_graph);
    assert!(plan.copy_weights(&host_train_memory, &host.eval, &mut host_eval_memory) >= 2);
    let mut host_eval = Executor::new(host.eval.view(), Reference).unwrap();
    let mut r = host_eval_memory.regions();
    r.write(&host.eval.operand(&host.features).unwrap(), &features[..8 * 64]).unwrap();
    host_eval.run(&mut r).unwrap();
    let expected = r.read::<f32>(&host.eval.operand(&host.logits).unwrap()).unwrap().to_vec();
    let mut device_eval = Executor::new(bundle.eval, Reference).unwrap();
    let mut r = device_regions(&bundle, &mut state, &mut arena);
    r.write(&h.eval_io.features, &features[..8 * 64]).unwrap();
    device_eval.run(&mut r).unwrap();
    assert_eq!(bits(r.read::<f32>(&h.eval_io.logits).unwrap()), bits(&expected));
}

/// The bundle's body with its header replaced by `edit(header)`, resealed.
fn with_header(bytes: &[u8], edit: impl FnOnce(&mut BundleHeader<'_>)) -> Vec<u8> {
    let body = &bytes[HEADER_BYTES..bytes.len() - 4];
    let (mut header, rest): (BundleHeader<'_>, _) = postcard::take_from_bytes(body).unwrap();
    let old_len = body.len() - rest.len();
    edit(&mut header);
    let mut new_body = postcard::to_allocvec(&header).unwrap();
    assert_eq!(new_body.len(), old_len, "the edit keeps the header's length");
    new_body.extend_from_slice(rest);
    seal(FRAMING, &new_body).unwrap()
}

fn decode_err(bytes: &[u8]) -> BundleError {
    let words = aligned(bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..bytes.len()];
    let mut steps = Steps::new();
    decode(file, &mut steps).unwrap_err()
}

#[test]
fn damaged_bundles_are_typed_errors() {
    let good = mlp_bundle().bytes;
    let mut bytes = good.clone();
    bytes[2] = b'X';
    assert!(matches!(decode_err(&bytes), BundleError::Frame(FrameError::BadMagic { .. })));
    let mut bytes = good.clone();
    bytes[8] = 9;
    assert!(matches!(
        decode_err(&bytes),
        BundleError::Frame(FrameError::UnsupportedVersion { found: 9, supported: 3 })
    ));
    let mut bytes = good.clone();
    bytes[HEADER_BYTES + 40] ^= 0x04;
    assert!(matches!(decode_err(&bytes), BundleError::Frame(FrameError::ChecksumMismatch { .. })));
    assert!(matches!(
        decode_err(&good[..good.len() - 1]),
        BundleError::Frame(FrameError::Truncated { .. })
    ));

    let mut few = heapless::Vec::<Step, 4>::new();
    let words = aligned(&good);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..good.len()];
    match decode(file, &mut few) {
        Err(BundleError::TooManySteps { needed, capacity: 4 }) => assert!(needed > 4),
        other => panic!("{other:?}"),
    }

    // An unknown kernel: the first step's variant index (its first byte) out of range.
    let body = &good[HEADER_BYTES..good.len() - 4];
    let (_, rest): (BundleHeader<'_>, _) = postcard::take_from_bytes(body).unwrap();
    let first_step = body.len() - rest.len();
    let mut body = body.to_vec();
    body[first_step] = 120;
    assert!(matches!(
        decode_err(&seal(FRAMING, &body).unwrap()),
        BundleError::Step { index: 0, .. }
    ));

    let misaligned = with_header(&good, |h| h.frozen.offset += 4);
    assert!(matches!(decode_err(&misaligned), BundleError::Section { section: "frozen", .. }));
    let past_end = with_header(&good, |h| h.state.len += 16);
    assert!(matches!(decode_err(&past_end), BundleError::Section { section: "state", .. }));
    let float_labels = with_header(&good, |h| h.train_io.labels.dtype = DType::F32);
    assert_eq!(decode_err(&float_labels), BundleError::Operand { operand: "training labels" });
    let mixed_features = with_header(&good, |h| h.eval_io.features.dtype = DType::I8);
    assert_eq!(
        decode_err(&mixed_features),
        BundleError::Operand { operand: "evaluation features" }
    );
    let stray_weight = with_header(&good, |h| h.trainable[0].operand.region = Region::Arena);
    assert_eq!(decode_err(&stray_weight), BundleError::Operand { operand: "trainable" });
    let small_state = with_header(&good, |h| h.train.sizes.state += 64);
    assert!(matches!(decode_err(&small_state), BundleError::Plan { plan: "training", .. }));
    let message = decode_err(&float_labels).to_string();
    assert!(message.contains("training labels"), "{message}");
}

/// Random damage, with and without a repaired checksum, never panics the decoder, and every
/// layer of checks is reached.
#[test]
fn random_damage_never_panics() {
    let good = mlp_bundle().bytes;
    let body = good[HEADER_BYTES..good.len() - 4].to_vec();
    let mut rng = SplitMix::new(17);
    let mut below = |n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    let (mut frame, mut inner, mut ok) = (0, 0, 0);
    for i in 0..1500 {
        let repaired = i % 2 == 1;
        let mut bytes = if repaired { body.clone() } else { good.clone() };
        // Damage the header and steps more often than the weights: that is where the
        // decoder has work to do.
        let hot = if below(4) == 0 { bytes.len() } else { 600.min(bytes.len()) };
        for _ in 0..1 + below(3) {
            let at = below(hot);
            bytes[at] ^= 1 << below(8);
        }
        if repaired {
            bytes = seal(FRAMING, &bytes).unwrap();
        }
        let words = aligned(&bytes);
        let file = &bytemuck::cast_slice::<u128, u8>(&words)[..bytes.len()];
        let mut steps = Steps::new();
        match decode(file, &mut steps) {
            Ok(b) => {
                ok += 1;
                let _ = Executor::new(b.train, Reference);
            }
            Err(BundleError::Frame(_)) => frame += 1,
            Err(_) => inner += 1,
        };
    }
    assert!(frame > 0 && inner > 0, "frame {frame}, inner {inner}, ok {ok}");
}

#[test]
fn a_bundle_of_an_older_version_is_refused_by_version_with_how_to_rebuild_it() {
    let mut bytes = mlp_bundle().bytes;
    bytes[8..10].copy_from_slice(&(FRAMING.version - 1).to_le_bytes());
    let err = decode_err(&bytes);
    assert!(matches!(
        err,
        BundleError::Frame(FrameError::OutdatedVersion { found: 2, current: 3, .. })
    ));
    assert_eq!(
        err.to_string(),
        "bad bundle frame: format version 2 is older than the version 3 this build reads; to \
         regenerate the file, run `sprout bundle` again on the model with this sprout"
    );
}
