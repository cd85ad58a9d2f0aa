//! Hostile inputs are refused quickly, by name, before anything big is allocated: models
//! declaring GBs of tensors or a batch of 0, settings a builder refuses (batch-norm eps -1,
//! dropout p NaN), images and arrays over the memory limit, ONNX models sprout cannot load
//! back, option values that are not finite; and NaN in training data stops training
//! loudly, naming the op, with nothing written.

mod common;

use std::path::Path;

use prost::Message;
use sprout_core::format::container::{seal, MODEL};
use sprout_core::format::Preprocessing;
use sprout_core::hyperparams::{BatchNormConfig, DropoutConfig};
use sprout_core::op::Op;
use sprout_core::{nn, save_model, Graph, Metadata, ModelFile, Shape};
use sprout_onnx::proto::{
    AttributeProto, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};

use common::{fails, s, sprout, text, tiny_model, Scratch};

fn metadata(input: Shape, classes: usize) -> Metadata {
    Metadata {
        class_names: (0..classes).map(|i| i.to_string()).collect(),
        input_shape: input,
        preprocessing: Preprocessing::default(),
        provenance: "test".into(),
    }
}

/// A classifier over `input`: ReLU, global average pooling to 3 channels, cross-entropy.
/// Tiny as a file, however big its input.
fn pooling_model(path: &Path, input: Shape) {
    let mut g = Graph::new(1);
    let x = g.input("input", input).unwrap();
    let y = g.labels("labels", input.dims()[0]).unwrap();
    let h = g.relu("act", x).unwrap();
    let logits = g.global_avg_pool("logits", h).unwrap();
    g.cross_entropy("loss", logits, y).unwrap();
    std::fs::write(path, save_model(&ModelFile::from_graph(&g, metadata(input, 3))).unwrap())
        .unwrap();
}

/// Writes `file` without the checks `save_model` makes: what a hostile file holds.
fn write_unchecked(path: &Path, file: &ModelFile) {
    std::fs::write(path, seal(MODEL, &postcard::to_allocvec(file).unwrap()).unwrap()).unwrap();
}

#[test]
fn a_model_declaring_gigabytes_is_refused_by_every_command_before_allocating() {
    let scratch = Scratch::new("limits-bomb");
    let png = scratch.path("a.png");
    image::RgbImage::new(8, 8).save(&png).unwrap();
    // 3.5 GB of input and activation at batch 1; and 4 GB at a batch of 40,000.
    for (name, input) in [
        ("wide.sprout", Shape::d4(1, 3, 12000, 12000)),
        ("batch.sprout", Shape::d4(40000, 3, 64, 64)),
    ] {
        let model = scratch.path(name);
        pooling_model(&model, input);
        assert!(std::fs::metadata(&model).unwrap().len() < 1000);
        let started = std::time::Instant::now();
        fails(&["predict", s(&model), s(&png)], "over the memory limit of 2147483648 bytes");
        fails(&["eval", s(&model), "--data", s(&png)], "over the memory limit");
        let out = scratch.path("out.sprout");
        let args = ["train", "--model", s(&model), "--data", s(&png), "-o", s(&out)];
        fails(&args, "over the memory limit");
        assert!(started.elapsed().as_secs() < 20, "refusing took {:?}", started.elapsed());
    }
    // --max-memory lowers the limit for the tiny model too, and names it.
    let tiny = scratch.path("tiny.sprout");
    tiny_model(&tiny);
    fails(&["predict", "--max-memory", "32K", s(&tiny), s(&png)], "memory limit of 32768 bytes");
    fails(&["predict", "--max-memory", "0", s(&tiny), s(&png)], "nothing to load");
    // The environment sets it too; the flag wins.
    let with_env = |value: &str, args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sprout"));
        let out = command.env("SPROUT_MAX_MEMORY", value).args(args).output().unwrap();
        (out.status.success(), text(&out.stderr))
    };
    let (ok, stderr) = with_env("32K", &["predict", s(&tiny), s(&png)]);
    assert!(!ok && stderr.contains("memory limit of 32768 bytes"), "{stderr}");
    let (ok, stderr) = with_env("32K", &["predict", "--max-memory", "1M", s(&tiny), s(&png)]);
    assert!(ok, "{stderr}");
    let (ok, stderr) = with_env("lots", &["predict", s(&tiny), s(&png)]);
    assert!(!ok && stderr.contains("SPROUT_MAX_MEMORY=lots: 'lots' is not a size"), "{stderr}");
}

#[test]
fn an_image_over_the_memory_limit_after_expansion_to_rgb_is_refused() {
    let scratch = Scratch::new("limits-image");
    let (model, png) = (scratch.path("m.sprout"), scratch.path("grey.png"));
    tiny_model(&model);
    // 40,000 grey pixels: 40 KB as decoded, 160 KB with their expansion to RGB.
    image::GrayImage::new(200, 200).save(&png).unwrap();
    let args = ["predict", "--batch-size", "1", s(&model), s(&png)];
    let out = sprout(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let limited = [&["--max-memory", "100K"], &args[..]].concat();
    fails(&limited, "200x200 decoded to RGB) needs 160000 bytes");
}

#[test]
fn a_symlink_to_a_device_in_a_data_folder_is_refused_not_read() {
    let scratch = Scratch::new("limits-symlink");
    let model = scratch.path("m.sprout");
    tiny_model(&model);
    for class in ["healthy", "leaf_spot", "rust"] {
        let dir = scratch.path(class);
        std::fs::create_dir_all(&dir).unwrap();
        image::RgbImage::new(16, 16).save(dir.join("a.png")).unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", scratch.path("rust").join("x.png")).unwrap();
    fails(&["eval", s(&model), "--data", s(&scratch.0)], "not a regular file (a character device)");
}

#[test]
fn an_npy_whose_element_count_wraps_is_refused() {
    let scratch = Scratch::new("limits-npy");
    let (model, npy) = (scratch.path("m.sprout"), scratch.path("x.npy"));
    tiny_model(&model);
    let header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4503599627370496, 3, 64, 64), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<width$}\n", width = 95 - 10);
    bytes.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    bytes.extend_from_slice(padded.as_bytes());
    assert_eq!(bytes.len(), 96);
    std::fs::write(&npy, &bytes).unwrap();
    let out = scratch.path("y.npy");
    fails(&["run", s(&model), "--input", s(&npy), "--output", s(&out)], "more than 2^64 elements");
}

#[test]
fn a_model_with_a_zero_batch_or_bad_settings_is_refused_by_every_loader() {
    let scratch = Scratch::new("limits-settings");
    let good = scratch.path("good.sprout");
    tiny_model(&good);
    let file = sprout_core::load_model(&std::fs::read(&good).unwrap()).unwrap();
    let mut zero = file.clone();
    zero.metadata.input_shape = Shape::d4(0, 3, 16, 16);
    for t in &mut zero.graph.tensors {
        if t.shape.dims().first() == Some(&4) && t.name != "classifier.weight" {
            let mut dims = t.shape.dims().to_vec();
            dims[0] = 0;
            t.shape = Shape::new(&dims).unwrap();
        }
    }
    let path = scratch.path("zero.sprout");
    write_unchecked(&path, &zero);
    let out = scratch.path("out");
    let png = scratch.path("a.png");
    image::RgbImage::new(16, 16).save(&png).unwrap();
    for args in [
        vec!["predict", s(&path), s(&png)],
        vec!["eval", s(&path), "--data", s(&png)],
        vec!["quantize", "--dtype", "f16", s(&path), "-o", s(&out)],
        vec!["export", s(&path), "--format", "onnx", "--output", s(&out)],
        vec!["bundle", s(&path), "-o", s(&out)],
    ] {
        fails(&args, "dimension of 0");
    }
    assert!(!out.exists());

    // Settings its builder refuses, written into a file: batch-norm eps, dropout p.
    let mut g = Graph::new(1);
    let x = g.input("input", Shape::d4(2, 3, 4, 4)).unwrap();
    let h = nn::batch_norm2d(&mut g, "bn", x).unwrap();
    let h = g.dropout("drop", h, DropoutConfig { p: 0.5, seed: 1 }).unwrap();
    g.global_avg_pool("logits", h).unwrap();
    let base = ModelFile::from_graph(&g, metadata(Shape::d4(2, 3, 4, 4), 3));
    let cases = [
        (Op::BatchNorm2d(BatchNormConfig { eps: -1.0, momentum: 0.1 }), "eps -1 must be > 0"),
        (Op::BatchNorm2d(BatchNormConfig { eps: f32::NAN, momentum: 0.1 }), "eps NaN"),
        (Op::Dropout(DropoutConfig { p: 2.0, seed: 1 }), "p = 2 must be in [0, 1)"),
        (Op::Dropout(DropoutConfig { p: f32::NAN, seed: 1 }), "p = NaN"),
    ];
    for (op, needle) in cases {
        let mut bad = base.clone();
        let node = bad.graph.nodes.iter_mut().find(|n| n.op.kind() == op.kind()).unwrap();
        node.op = op;
        write_unchecked(&path, &bad);
        fails(&["predict", s(&path), s(&png)], needle);
        assert!(save_model(&bad).is_err(), "save_model writes what load_model refuses");
    }
}

/// One ONNX node on a `[1, 1, h, w]` input, at `opset`.
fn onnx(node: NodeProto, init: Vec<TensorProto>, h: i64, w: i64, opset: i64) -> Vec<u8> {
    let dims = [Dim::Fixed(1), Dim::Fixed(1), Dim::Fixed(h), Dim::Fixed(w)];
    let graph = GraphProto {
        node: vec![node],
        initializer: init,
        input: vec![ValueInfoProto::f32("x", &dims)],
        output: vec![ValueInfoProto::f32("y", &[Dim::Symbolic("any".into())])],
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

#[test]
fn convert_refuses_what_sprout_could_not_load_back() {
    let scratch = Scratch::new("limits-convert");
    let (input, out) = (scratch.path("m.onnx"), scratch.path("m.sprout"));
    let relu = || NodeProto::new("Relu", "relu", &["x"], &["y"]);
    let huge = 1i64 << 40;
    let conv = NodeProto::new("Conv", "conv", &["x", "w"], &["y"])
        .with(AttributeProto::ints("pads", &[huge; 4]));
    let weight = || vec![TensorProto::f32("w", &[1, 1, 1, 1], &[1.0])];
    let cases: [(Vec<u8>, &[&str], &str); 5] = [
        (onnx(relu(), vec![], huge, huge, 13), &[], "exceeds 2147483648 bytes"),
        (onnx(conv, weight(), 2, 3, 13), &[], "exceeds 2147483648 bytes"),
        (onnx(relu(), vec![], 2, 3, 13), &["--batch-size", "4000000000"], "exceeds"),
        (onnx(relu(), vec![], 2, 3, 1), &[], "opset 1"),
        (onnx(relu(), vec![], 2, 3, 1_000_000_000_000), &[], "opset 1000000000000"),
    ];
    for (bytes, extra, needle) in cases {
        std::fs::write(&input, bytes).unwrap();
        fails(&[&["convert", s(&input), "-o", s(&out)], extra].concat(), needle);
        assert!(!out.exists());
    }
}

/// A safetensors file of `n` samples for the zoo MLP (x float32 [n, 64], y int64 [n]),
/// `x[poison]` set to NaN when given.
fn mlp_data(path: &Path, n: usize, poison: Option<usize>) {
    use safetensors::tensor::{Dtype, TensorView};
    let mut x: Vec<f32> = common::values(3, n * 64);
    if let Some(i) = poison {
        x[i] = f32::NAN;
    }
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let y: Vec<u8> = (0..n as i64).flat_map(|i| (i % 10).to_le_bytes()).collect();
    let tensors = [
        ("x", TensorView::new(Dtype::F32, vec![n, 64], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, vec![n], &y).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(tensors, None).unwrap()).unwrap();
}

#[test]
fn learning_rates_that_are_not_finite_or_in_range_are_refused_at_parse_time() {
    let scratch = Scratch::new("limits-lr");
    let (model, data, out) = (scratch.path("m.sprout"), scratch.path("d.st"), scratch.path("o"));
    tiny_model(&model);
    mlp_data(&data, 8, None);
    for lr in ["nan", "inf", "1e30", "-1"] {
        let lr = format!("--lr={lr}");
        let train = ["train", "--zoo", "mlp", "--data", s(&data), &lr, "-o", s(&out)];
        fails(&train, "is not a number in [0, 10]");
        fails(&["bundle", s(&model), &lr, "-o", s(&out)], "is not a number in [0, 10]");
    }
    let momentum = ["train", "--zoo", "mlp", "--data", s(&data), "--momentum", "nan"];
    fails(&momentum, "'nan' is not a number in [0, 1)");
    assert!(!out.exists());
}

#[test]
fn nan_in_training_data_stops_training_naming_the_op_and_writes_nothing() {
    let scratch = Scratch::new("limits-nan");
    let (data, out, run) =
        (scratch.path("d.safetensors"), scratch.path("m.sprout"), scratch.path("run"));
    // The NaN is in sample 5: the second batch of 4 in file order.
    mlp_data(&data, 8, Some(5 * 64 + 3));
    let args = ["train", "--zoo", "mlp", "--data", s(&data), "--val", s(&data), "--epochs", "2"];
    let rest =
        ["--batch-size", "4", "--no-shuffle", "--lr", "0.01", "-o", s(&out), "--out-dir", s(&run)];
    let output = sprout(&[&args[..], &rest[..]].concat());
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "training on NaN succeeded");
    assert!(stderr.contains("the loss is NaN at epoch 1, batch 2"), "{stderr}");
    assert!(stderr.contains("first appeared in linear"), "{stderr}");
    assert!(stderr.contains("[4, 64] holds NaN") || stderr.contains("holds NaN"), "{stderr}");
    assert!(!out.exists(), "a model was written from NaN weights");
    let written: Vec<String> = std::fs::read_dir(&run)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!written.iter().any(|f| f.ends_with(".ckpt") || f.ends_with(".sprout")), "{written:?}");
}
