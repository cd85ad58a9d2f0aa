//! Training end to end on tiny models and tensor files written here: one SGD step (plain and
//! logit-adjusted) against an independent f64 computation, bit-identical resume, checkpoint
//! retention and corruption, and tensor files of the wrong shape.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sprout_core::format::WeightValues;
use sprout_core::{nn, save_model, Graph, Metadata, ModelFile, Shape};
use sprout_train::{
    calibrate_with_progress, encode_npy, even_pick, open_calibration, open_data, read_metrics,
    train, CheckpointError, DataOptions, Inference, LogitAdjust, Model, OptimizerChoice, Outcome,
    RangeMethod, TrainData, TrainError, TrainEvent, TrainOptions,
};
use sprout_zoo::Architecture;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-train-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn npy_i64(shape: &[u64], values: &[i64]) -> Vec<u8> {
    use npyz::WriterBuilder;
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::<i64>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    w.extend(values.iter().copied()).unwrap();
    w.finish().unwrap();
    out
}

/// Writes an `.npz` holding the given `.npy` entries.
fn write_npz(path: &Path, entries: &[(&str, Vec<u8>)]) {
    let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
    for (name, bytes) in entries {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        zip.start_file(format!("{name}.npy"), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// Deterministic features and labels of `n` samples with `features` values each.
fn samples(n: usize, features: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    let mut state = seed;
    let mut next = || {
        state = sprout_core::rng::splitmix64(state);
        sprout_core::rng::unit_f32(state) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..n * features).map(|_| next()).collect();
    let y = (0..n).map(|i| (i % classes) as i64).collect();
    (x, y)
}

fn write_set(path: &Path, n: usize, features: usize, classes: usize, seed: u64) {
    let (x, y) = samples(n, features, classes, seed);
    write_npz(path, &[("x", encode_npy(&[n, features], &x)), ("y", npy_i64(&[n as u64], &y))]);
}

fn f32_weight(file: &ModelFile, name: &str) -> Vec<f32> {
    match file.weight(name).unwrap_or_else(|| panic!("no weight {name}")) {
        WeightValues::F32(v) => v.clone(),
        other => panic!("{name} is stored as {:?}, not f32", other.dtype()),
    }
}

#[test]
fn one_sgd_step_matches_an_independent_f64_computation() {
    sgd_step_against_f64("sgd", None);
}

#[test]
fn a_logit_adjusted_step_matches_its_definition_in_f64() {
    // Counts unlike the data's (balanced) so the adjustment changes the step.
    let adjust = LogitAdjust { tau: 1.5, class_counts: vec![5, 1, 2] };
    let adjusted = sgd_step_against_f64("logit-adjust", Some(adjust));
    let plain = sgd_step_against_f64("logit-plain", None);
    let moved = adjusted.iter().zip(&plain).map(|(a, p)| (a - p).abs()).fold(0.0, f32::max);
    assert!(moved > 1e-3, "the adjustment must change the step: {moved}");
}

/// One SGD step (lr 0.1, no momentum) of a two-layer network on 4 samples of 3 classes,
/// checked against the same step in f64 whose loss reads `logits + tau * ln(prior)` with
/// `adjust` (the plain loss without); returns the head's bias after the step.
fn sgd_step_against_f64(name: &str, adjust: Option<LogitAdjust>) -> Vec<f32> {
    let dir = temp_dir(name);
    let (n, k, h, c) = (4, 6, 5, 3);
    let mut g = Graph::new(3);
    let x = g.input("x", Shape::d2(n, k)).unwrap();
    let y = g.labels("y", n).unwrap();
    let hidden = nn::linear(&mut g, "hidden", x, h).unwrap();
    let act = g.relu("act", hidden).unwrap();
    let logits = nn::linear(&mut g, "head", act, c).unwrap();
    g.cross_entropy("loss", logits, y).unwrap();
    let metadata = Metadata {
        class_names: vec!["a".into(), "b".into(), "c".into()],
        input_shape: Shape::d2(n, k),
        preprocessing: Default::default(),
        provenance: "test".into(),
    };
    let file = ModelFile::from_graph(&g, metadata);
    let model_path = dir.join("tiny.sprout");
    fs::write(&model_path, save_model(&file).unwrap()).unwrap();
    let data = dir.join("data.npz");
    write_set(&data, n, k, c, 11);

    let mut model = Model::open(&model_path).unwrap();
    let fixed = DataOptions { augment: false, shuffle: false, ..DataOptions::default() };
    let TrainData { train: mut train_set, mut val, .. } =
        open_data(&mut model, &data, &fixed).unwrap();
    let lr = 0.1;
    let options = TrainOptions {
        optimizer: OptimizerChoice::Sgd { momentum: 0.0, weight_decay: 0.0, nesterov: false },
        learning_rate: lr,
        epochs: 1,
        logit_adjust: adjust.clone(),
        ..TrainOptions::default()
    };
    let out = train(&model, &mut train_set, &mut val, &options, &mut |_| {}).unwrap();
    // The definition: tau * ln(n_c / sum n) per class.
    let shift: Vec<f64> = match &adjust {
        None => vec![0.0; c],
        Some(a) => {
            let total: usize = a.class_counts.iter().sum();
            let prior = |m: usize| a.class_counts[m] as f64 / total as f64;
            (0..c).map(|m| f64::from(a.tau) * prior(m).ln()).collect()
        }
    };

    // The same step in f64: forward, mean cross-entropy, backward, w -= lr * grad.
    let w1: Vec<f64> = f32_weight(&file, "hidden.weight").into_iter().map(f64::from).collect();
    let b1: Vec<f64> = f32_weight(&file, "hidden.bias").into_iter().map(f64::from).collect();
    let w2: Vec<f64> = f32_weight(&file, "head.weight").into_iter().map(f64::from).collect();
    let b2: Vec<f64> = f32_weight(&file, "head.bias").into_iter().map(f64::from).collect();
    let (xs, ys) = samples(n, k, c, 11);
    let (mut gw1, mut gb1) = (vec![0.0; h * k], vec![0.0; h]);
    let (mut gw2, mut gb2) = (vec![0.0; c * h], vec![0.0; c]);
    for s in 0..n {
        let xi: Vec<f64> = xs[s * k..(s + 1) * k].iter().map(|&v| f64::from(v)).collect();
        let z: Vec<f64> =
            (0..h).map(|j| b1[j] + (0..k).map(|i| w1[j * k + i] * xi[i]).sum::<f64>()).collect();
        let a: Vec<f64> = z.iter().map(|&v| v.max(0.0)).collect();
        let o: Vec<f64> = (0..c)
            .map(|m| shift[m] + b2[m] + (0..h).map(|j| w2[m * h + j] * a[j]).sum::<f64>())
            .collect();
        let max = o.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = o.iter().map(|v| (v - max).exp()).sum();
        let d_o: Vec<f64> = (0..c)
            .map(|m| ((o[m] - max).exp() / sum - f64::from(ys[s] as u8 == m as u8)) / n as f64)
            .collect();
        for m in 0..c {
            gb2[m] += d_o[m];
            for j in 0..h {
                gw2[m * h + j] += d_o[m] * a[j];
            }
        }
        for j in 0..h {
            let da: f64 = (0..c).map(|m| d_o[m] * w2[m * h + j]).sum();
            let dz = if z[j] > 0.0 { da } else { 0.0 };
            gb1[j] += dz;
            for i in 0..k {
                gw1[j * k + i] += dz * xi[i];
            }
        }
    }
    let check = |name: &str, before: &[f64], grad: &[f64]| {
        let after = f32_weight(&out.model, name);
        for (i, ((&b, &g), &a)) in before.iter().zip(grad).zip(&after).enumerate() {
            let expected = b - f64::from(lr) * g;
            assert!((f64::from(a) - expected).abs() < 1e-5, "{name}[{i}]: {a} vs {expected}");
        }
        assert!(grad.iter().any(|g| g.abs() > 1e-4), "{name}: the step must change something");
    };
    check("hidden.weight", &w1, &gw1);
    check("hidden.bias", &b1, &gb1);
    check("head.weight", &w2, &gw2);
    check("head.bias", &b2, &gb2);
    let _ = fs::remove_dir_all(&dir);
    f32_weight(&out.model, "head.bias")
}

fn run_mlp(data: &Path, epochs: u32, out_dir: &Path, resume: Option<PathBuf>) -> Outcome {
    let mut model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
    let TrainData { train: mut t, val: mut v, .. } =
        open_data(&mut model, data, &DataOptions { seed: 9, ..DataOptions::default() }).unwrap();
    let options = TrainOptions {
        optimizer: OptimizerChoice::AdamW { weight_decay: 0.01 },
        learning_rate: 0.01,
        epochs,
        seed: 9,
        out_dir: Some(out_dir.to_path_buf()),
        resume,
        ..TrainOptions::default()
    };
    train(&model, &mut t, &mut v, &options, &mut |_| {}).unwrap()
}

#[test]
fn resuming_is_bit_identical_to_an_uninterrupted_run_and_keeps_three_checkpoints() {
    let dir = temp_dir("resume");
    let data = dir.join("data.npz");
    write_set(&data, 44, 64, 10, 1); // 5 batches of 8, the last 4 samples dropped
    let straight = run_mlp(&data, 4, &dir.join("a"), None);
    let first = run_mlp(&data, 2, &dir.join("b"), None);
    let resumed =
        run_mlp(&data, 4, &dir.join("b"), Some(dir.join("b").join("checkpoint-epoch-002.ckpt")));
    assert_ne!(first.model.weights, straight.model.weights);
    assert_eq!(resumed.model.weights, straight.model.weights, "resumed weights differ");
    assert_eq!(resumed.history, straight.history);

    let mut names: Vec<String> = fs::read_dir(dir.join("a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "best.sprout",
            "checkpoint-epoch-002.ckpt",
            "checkpoint-epoch-003.ckpt",
            "checkpoint-epoch-004.ckpt",
            "curve.png",
            "curve.svg",
            "metrics.csv"
        ]
    );
    let png = fs::read(dir.join("a").join("curve.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The resumed run's metrics.csv keeps the first run's rows and adds its own.
    let rows = read_metrics(&dir.join("b").join("metrics.csv")).unwrap();
    let records: Vec<_> = rows.iter().map(|r| r.record.clone()).collect();
    assert_eq!(records, straight.history);
    assert!(rows.iter().all(
        |r| r.seconds.is_some_and(|s| s > 0.0) && r.images_per_second.is_some_and(|v| v > 0.0)
    ));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_checkpoint_is_a_typed_error() {
    let dir = temp_dir("corrupt");
    let data = dir.join("data.npz");
    write_set(&data, 16, 64, 10, 2);
    run_mlp(&data, 1, &dir, None);
    let path = dir.join("checkpoint-epoch-001.ckpt");
    let good = fs::read(&path).unwrap();
    assert!(sprout_train::Checkpoint::decode(&good).is_ok());
    type Expect = fn(&CheckpointError) -> bool;
    let cases: [(Vec<u8>, Expect); 3] = [
        (good[..good.len() - 9].to_vec(), |e| {
            matches!(
                e,
                CheckpointError::Container(sprout_core::format::FrameError::Truncated { .. })
            )
        }),
        (
            {
                let mut b = good.clone();
                b[40] ^= 0xff;
                b
            },
            |e| {
                matches!(
                    e,
                    CheckpointError::Container(
                        sprout_core::format::FrameError::ChecksumMismatch { .. }
                    )
                )
            },
        ),
        (good[..5].to_vec(), |e| matches!(e, CheckpointError::Container(_))),
    ];
    for (bytes, expected) in cases {
        fs::write(&path, &bytes).unwrap();
        match sprout_train::read_checkpoint(&path) {
            Err(TrainError::Checkpoint { path: p, source }) => {
                assert_eq!(p, path);
                assert!(expected(&source), "{source:?}");
            }
            other => panic!("expected a checkpoint error, got {:?}", other.err()),
        }
    }
    // A model given as a checkpoint is named for what it is.
    fs::copy(dir.join("best.sprout"), &path).unwrap();
    match sprout_train::read_checkpoint(&path) {
        Err(TrainError::WrongKind { path: p, found, .. }) => {
            assert_eq!((p, found), (path.clone(), "a .sprout model"));
        }
        other => panic!("expected a wrong-kind error, got {:?}", other.err()),
    }
    // A checkpoint of another model is refused by its graph hash.
    fs::write(&path, &good).unwrap();
    let mut model = Model::from_zoo(Architecture::Mlp, 4, 5).unwrap();
    let options = DataOptions { augment: false, seed: 9, ..DataOptions::default() };
    let TrainData { train: mut t, val: mut v, .. } =
        open_data(&mut model, &data, &options).unwrap();
    let options = TrainOptions { resume: Some(path.clone()), seed: 9, ..Default::default() };
    let err = train(&model, &mut t, &mut v, &options, &mut |_| {}).err().unwrap();
    assert!(
        matches!(err, TrainError::Checkpoint { source: CheckpointError::ModelHash { .. }, .. }),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn tensor_files_of_the_wrong_shape_or_type_are_named_errors() {
    let dir = temp_dir("shapes");
    let (x, y) = samples(4, 63, 10, 3);
    let wrong_x = dir.join("wrong_x.npz");
    write_npz(&wrong_x, &[("x", encode_npy(&[4, 63], &x)), ("y", npy_i64(&[4], &y))]);
    let float_y = dir.join("float_y.npz");
    let (x64, _) = samples(4, 64, 10, 3);
    write_npz(&float_y, &[("x", encode_npy(&[4, 64], &x64)), ("y", encode_npy(&[4], &[0.0; 4]))]);
    let bad_label = dir.join("bad_label.npz");
    write_npz(
        &bad_label,
        &[("x", encode_npy(&[4, 64], &x64)), ("y", npy_i64(&[4], &[0, 1, 10, 2]))],
    );
    let st = dir.join("wrong.safetensors");
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let yb: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        (
            "x",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 63], &xb)
                .unwrap(),
        ),
        ("y", safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![4], &yb).unwrap()),
    ];
    fs::write(&st, safetensors::serialize(views, None).unwrap()).unwrap();

    for (path, tensor, needle) in [
        (&wrong_x, "x", "[N, 64]"),
        (&float_y, "y", "int64"),
        (&bad_label, "y", "10 at index 2"),
        (&st, "x", "[N, 64]"),
    ] {
        let mut model = Model::from_zoo(Architecture::Mlp, 4, 0).unwrap();
        let err = open_data(&mut model, path, &DataOptions::default()).err().unwrap();
        let message = err.to_string();
        assert!(matches!(&err, TrainError::Tensor { tensor: t, .. } if t == tensor), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(needle), "{message}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn init_from_keeps_the_fresh_choice_at_its_new_initial_values() {
    let dir = temp_dir("init-from");
    let file = |model: &Model| ModelFile::from_graph(&model.zoo.graph, model.metadata.clone());
    let pretrained = Model::from_zoo(Architecture::Mlp, 4, 1).unwrap();
    let path = dir.join("pretrained.sprout");
    fs::write(&path, save_model(&file(&pretrained)).unwrap()).unwrap();
    let fresh = file(&Model::from_zoo(Architecture::Mlp, 4, 2).unwrap());

    let mut model = Model::from_zoo(Architecture::Mlp, 4, 2).unwrap();
    let taken = model.init_from(&path, Some("head")).unwrap();
    let (started, pretrained) = (file(&model), file(&pretrained));
    for name in ["classifier.1.weight", "classifier.1.bias"] {
        assert_eq!(f32_weight(&started, name), f32_weight(&fresh, name), "{name}");
        assert_ne!(f32_weight(&started, name), f32_weight(&pretrained, name), "{name}");
    }
    for name in ["features.0.weight", "features.0.bias"] {
        assert_eq!(f32_weight(&started, name), f32_weight(&pretrained, name), "{name}");
    }
    let all = Model::from_zoo(Architecture::Mlp, 4, 2).unwrap().init_from(&path, None).unwrap();
    assert_eq!(taken + 2, all);

    let mut model = Model::from_zoo(Architecture::Mlp, 4, 2).unwrap();
    let error = model.init_from(&path, Some("nothing.*")).unwrap_err().to_string();
    assert!(error.contains("nothing.*"), "{error}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn evaluation_and_calibration_report_their_progress_in_samples() {
    let dir = temp_dir("progress");
    let data = dir.join("data.npz");
    write_set(&data, 20, 64, 10, 3); // batches of 8, 8 and 4
    let mut model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
    let fixed = DataOptions { augment: false, shuffle: false, ..DataOptions::default() };
    let TrainData { mut val, .. } = open_data(&mut model, &data, &fixed).unwrap();
    let mut seen = Vec::new();
    let metrics = Inference::new(&model)
        .unwrap()
        .evaluate_with_progress(&mut val, &mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!(metrics.samples(), 20);
    assert_eq!(seen, [(8, 20), (16, 20), (20, 20)]);

    // A percentile or MSE calibration reads every sample twice.
    for method in [RangeMethod::Percentile(99.0), RangeMethod::Mse] {
        seen.clear();
        calibrate_with_progress(&model, &mut val, method, &mut |d, t| seen.push((d, t))).unwrap();
        assert_eq!(seen, [(8, 40), (16, 40), (20, 40), (28, 40), (36, 40), (40, 40)]);
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn inference_passes_of_any_size_agree_and_all_take_loaded_weights() {
    let (x, _) = samples(20, 64, 10, 9);
    let model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
    // Passes of 8, 8 and a re-recorded 4, against 20 passes of one sample.
    let mut eights = Inference::new(&model).unwrap();
    let together = eights.run(&x).unwrap();
    let alone = Inference::new(&model.with_batch(1).unwrap()).unwrap().run(&x).unwrap();
    assert_eq!(together.len(), 20 * 10);
    let gap = together.iter().zip(&alone).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(gap < 1e-6, "{gap}");

    // Other weights reach the full pass and the remainder pass alike.
    let other = Model::from_zoo(Architecture::Mlp, 8, 6).unwrap();
    let plan = sprout_core::compile_inference(&other.zoo.graph, &[other.zoo.logits]).unwrap();
    eights.load_weights(&plan, &plan.initial_memory(&other.zoo.graph));
    let loaded = eights.run(&x).unwrap();
    assert_ne!(loaded, together);
    assert_eq!(loaded, Inference::new(&other).unwrap().run(&x).unwrap());
}

#[test]
fn calibration_reads_only_x_and_takes_an_even_pick() {
    let dir = temp_dir("calib-x");
    let (x, _) = samples(20, 64, 10, 5);
    let data = dir.join("x-only.npz");
    write_npz(&data, &[("x", encode_npy(&[20, 64], &x))]);
    let model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
    let pipeline = Default::default();
    let mut picked = open_calibration(&model, &data, 6, &pipeline, None).unwrap();
    assert_eq!(picked.len(), 6);
    let rows: Vec<f32> = picked.epoch(0).flat_map(|b| b.unwrap().x).collect();
    let expected: Vec<f32> =
        even_pick(20, 6, 0x5eed).iter().flat_map(|&i| x[i * 64..(i + 1) * 64].to_vec()).collect();
    assert_eq!(rows, expected);
    let mut seen = 0;
    calibrate_with_progress(&model, &mut picked, RangeMethod::MinMax, &mut |d, _| seen = d)
        .unwrap();
    assert_eq!(seen, 6);
    let all = open_calibration(&model, &data, 512, &pipeline, None).unwrap();
    assert_eq!(all.len(), 20);
    // A file whose x does not fit the model is refused by name.
    write_npz(&data, &[("x", encode_npy(&[20, 32], &x[..640]))]);
    let error = open_calibration(&model, &data, 6, &pipeline, None).err().unwrap().to_string();
    assert!(error.contains("'x'") || error.contains(" x"), "{error}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_new_head_resizes_the_classifier_and_keeps_the_backbone() {
    let model = Model::from_zoo(Architecture::Mlp, 4, 1).unwrap();
    let file = |model: &Model| ModelFile::from_graph(&model.zoo.graph, model.metadata.clone());
    let before = file(&model);
    let mut headed = model.clone();
    headed.new_head(3, 11).unwrap();
    assert_eq!(headed.classes(), 3);
    assert_eq!(headed.metadata.class_names, ["0", "1", "2"]);
    let after = file(&headed);
    for name in ["features.0.weight", "features.0.bias"] {
        assert_eq!(f32_weight(&after, name), f32_weight(&before, name), "{name}");
    }
    let head: Vec<&str> =
        headed.zoo.head.iter().map(|&t| headed.zoo.graph.tensor(t).name.as_str()).collect();
    assert_eq!(head, ["classifier.1.weight", "classifier.1.bias"]);
    let in_features = f32_weight(&before, "classifier.1.weight").len() / model.classes();
    assert_eq!(f32_weight(&after, "classifier.1.weight").len(), 3 * in_features);
    // Seeded: the same new head twice.
    let mut again = model.clone();
    again.new_head(3, 11).unwrap();
    assert_eq!(
        f32_weight(&file(&again), "classifier.1.weight"),
        f32_weight(&after, "classifier.1.weight")
    );
    // Another seed, another head.
    let mut other = model.clone();
    other.new_head(3, 12).unwrap();
    assert_ne!(
        f32_weight(&file(&other), "classifier.1.weight"),
        f32_weight(&after, "classifier.1.weight")
    );
    let error = model.clone().new_head(0, 11).unwrap_err().to_string();
    assert!(error.contains("--new-head"), "{error}");
}

/// Squared distance between the f32 weights of two model files.
fn distance(a: &ModelFile, b: &ModelFile) -> f64 {
    a.weights
        .iter()
        .filter(|w| matches!(w.values, WeightValues::F32(_)))
        .map(|w| {
            let (x, y) = (f32_weight(a, &w.name), f32_weight(b, &w.name));
            x.iter().zip(&y).map(|(&p, &q)| f64::from(p - q).powi(2)).sum::<f64>()
        })
        .sum()
}

/// An mlp trained on `data` with SGD (momentum 0.9) at lr [`SGD_LR`], seed 2, and `options`
/// otherwise: the model and the number of updates.
fn sgd_run(data: &Path, options: TrainOptions) -> Result<(ModelFile, usize), TrainError> {
    let mut model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
    let TrainData { train: mut t, val: mut v, .. } =
        open_data(&mut model, data, &DataOptions { seed: 2, ..DataOptions::default() }).unwrap();
    let options = TrainOptions {
        optimizer: OptimizerChoice::Sgd { momentum: 0.9, weight_decay: 0.0, nesterov: false },
        learning_rate: SGD_LR,
        seed: 2,
        ..options
    };
    let mut updates = 0;
    let outcome = train(&model, &mut t, &mut v, &options, &mut |event| {
        updates += usize::from(matches!(event, TrainEvent::Batch { .. }));
    });
    outcome.map(|o| (o.model, updates))
}

const SGD_LR: f32 = 0.1;

#[test]
fn the_proximal_term_keeps_weights_near_their_start() {
    let dir = temp_dir("proximal");
    let data = dir.join("data.npz");
    write_set(&data, 40, 64, 10, 3);
    let lr = SGD_LR;
    let run = |epochs: u32, proximal_mu: f32| {
        let options = TrainOptions { epochs, proximal_mu, ..TrainOptions::default() };
        sgd_run(&data, options).map(|(model, _)| model)
    };
    let start = run(0, 0.0).unwrap();
    let free = distance(&start, &run(3, 0.0).unwrap());
    let held = distance(&start, &run(3, 2.0).unwrap());
    assert!(free > 1e-3, "plain training must move the weights: {free}");
    assert!(held < 0.5 * free, "mu 2 moved {held}, mu 0 {free}");
    // lr * mu = 1 pulls every weight all the way back after each update.
    assert!(distance(&start, &run(3, 1.0 / lr).unwrap()) < 1e-10);
    let refused = run(1, -1.0).expect_err("a negative mu is refused").to_string();
    assert!(refused.contains("--proximal-mu -1"), "{refused}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_gradient_offset_moves_its_weights_by_lr_times_it_per_update() {
    let dir = temp_dir("offset");
    let data = dir.join("data.npz");
    write_set(&data, 40, 64, 10, 3);
    let lr = SGD_LR;
    let run = |gradient_offset: Vec<(String, Vec<usize>, Vec<f32>)>| {
        sgd_run(&data, TrainOptions { epochs: 2, gradient_offset, ..TrainOptions::default() })
    };
    let bias = "classifier.1.bias".to_string();
    let (plain, updates) = run(Vec::new()).unwrap();
    // The same offset on every logit's bias leaves the softmax, so every gradient, as it
    // was: the bias moves by -lr * offset per update more, the rest as without it.
    let (offset, _) = run(vec![(bias.clone(), vec![10], vec![2.0; 10])]).unwrap();
    assert!(updates > 0);
    for (p, q) in f32_weight(&plain, &bias).iter().zip(f32_weight(&offset, &bias)) {
        let moved = f64::from(q - p);
        let expected = -f64::from(lr) * 2.0 * updates as f64;
        assert!((moved - expected).abs() < 1e-3, "moved {moved}, expected {expected}");
    }
    // Other weights only by the rounding of the shifted logits.
    let weight = "classifier.1.weight";
    let (w0, w1) = (f32_weight(&plain, weight), f32_weight(&offset, weight));
    let most = w0.iter().zip(&w1).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    assert!(most < 1e-5, "'{weight}' moved by up to {most}");
    let refused = |offsets: Vec<(String, Vec<usize>, Vec<f32>)>| {
        run(offsets).expect_err("a bad offset is refused").to_string()
    };
    let unknown = refused(vec![("classifier.9.bias".into(), vec![10], vec![0.0; 10])]);
    assert!(unknown.contains("'classifier.9.bias': not a trainable parameter"), "{unknown}");
    let shape = refused(vec![(bias.clone(), vec![5], vec![0.0; 5])]);
    assert!(shape.contains("shape [5] (5 values), the parameter's is [10]"), "{shape}");
    let mut values = vec![0.0; 10];
    values[3] = f32::NAN;
    let nan = refused(vec![(bias, vec![10], values)]);
    assert!(nan.contains("'classifier.1.bias': holds NaN"), "{nan}");
    let _ = fs::remove_dir_all(&dir);
}
