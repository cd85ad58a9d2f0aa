//! Real architectures as PyTorch exports them (`tests/fixtures/pytorch`, made by its
//! `generate.py`): MobileNetV2, MobileNetV3-Small, ResNet-18, SqueezeNet 1.1,
//! EfficientNet-B0, ShuffleNetV2 and a classic conv -> pool -> ReLU CNN, narrowed and randomly
//! initialised, each from both exporters (TorchScript-based and dynamo-based). Every one
//! converts and its logits equal PyTorch's; one SGD step on the TorchScript export moves
//! every parameter as PyTorch's own step did; sprout's ONNX export of each reads back equal.

mod common;

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use sprout_train::read_npy;

use common::{ok, s, Scratch};

/// The largest logit error allowed, relative to the largest reference logit.
const LOGITS_RELATIVE: f32 = 1e-4;
/// The largest error allowed in a parameter after one SGD step.
const SGD_ABSOLUTE: f32 = 1e-5;
/// The learning rate `generate.py` took its SGD step with.
const LR: &str = "0.01";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pytorch")
}

/// Every architecture in the fixtures folder: each `NAME.sgd.npz` names one.
fn architectures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("the fixtures folder exists")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".sgd.npz").map(String::from))
        .collect();
    names.sort();
    assert!(names.len() >= 6, "expected six architectures, found {names:?}");
    names
}

fn fixture(name: &str, suffix: &str) -> PathBuf {
    fixtures().join(format!("{name}{suffix}"))
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn every_export_of_every_architecture_converts_and_equals_pytorch() {
    let dir = Scratch::new("pytorch-run");
    for name in architectures() {
        let (shape, expected) = read_npy(&fixture(&name, ".output.npy")).unwrap();
        let scale = expected.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for export in [".onnx", ".dynamo.onnx"] {
            let model = dir.path(&format!("{name}{export}.sprout"));
            ok(&["convert", s(&fixture(&name, export)), "-o", s(&model)]);
            let out = dir.path(&format!("{name}{export}.npy"));
            let input = fixture(&name, ".input.npy");
            ok(&["run", s(&model), "--input", s(&input), "-o", s(&out)]);
            let (got_shape, got) = read_npy(&out).unwrap();
            assert_eq!(got_shape, shape, "{name}{export}");
            let error = max_abs_diff(&got, &expected);
            println!("{name}{export}: logits max error {error:.2e} (largest logit {scale:.2e})");
            assert!(error <= LOGITS_RELATIVE * scale, "{name}{export}: {error} vs {scale}");
        }
        // sprout's own ONNX export of the converted model reads back to the same logits.
        let (model, exported) = (dir.path(&format!("{name}.onnx.sprout")), dir.path(&name));
        ok(&["export", s(&model), "--format", "onnx", "-o", s(&exported)]);
        let again = dir.path(&format!("{name}.again.sprout"));
        ok(&["convert", s(&exported), "-o", s(&again)]);
        let out = dir.path(&format!("{name}.again.npy"));
        ok(&["run", s(&again), "--input", s(&fixture(&name, ".input.npy")), "-o", s(&out)]);
        let error = max_abs_diff(&read_npy(&out).unwrap().1, &expected);
        assert!(error <= LOGITS_RELATIVE * scale, "{name} exported and read back: {error}");
    }
}

#[test]
fn one_sgd_step_moves_every_parameter_as_pytorch_does() {
    let dir = Scratch::new("pytorch-sgd");
    for name in architectures() {
        let model = dir.path(&format!("{name}.sprout"));
        ok(&["convert", s(&fixture(&name, ".onnx")), "-o", s(&model)]);
        let (trained, weights) = (dir.path(&format!("{name}.trained.sprout")), dir.path(&name));
        let data = fixture(&name, ".sgd.npz");
        let run = dir.path(&format!("{name}-run"));
        let args = ["--optimizer", "sgd", "--lr", LR, "--epochs", "1", "--batch-size", "4"];
        let order = ["--no-shuffle", "--no-augment", "--out-dir", s(&run), "-o", s(&trained)];
        let mut train = vec!["train", "--model", s(&model), "--data", s(&data)];
        train.extend(args.iter().chain(&order));
        ok(&train);
        ok(&["export", s(&trained), "--format", "safetensors", "-o", s(&weights)]);
        let (ours, reference) = (
            std::fs::read(&weights).unwrap(),
            std::fs::read(fixture(&name, ".after.safetensors")).unwrap(),
        );
        let (ours, reference) = (
            SafeTensors::deserialize(&ours).unwrap(),
            SafeTensors::deserialize(&reference).unwrap(),
        );
        let mut worst = (0.0f32, String::new());
        for (param, expected) in reference.tensors() {
            let got = ours.tensor(&param).unwrap_or_else(|_| panic!("{name}: no '{param}'"));
            assert_eq!(got.shape(), expected.shape(), "{name}: {param}");
            let floats = |b: &[u8]| -> Vec<f32> {
                b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
            };
            let error = max_abs_diff(&floats(got.data()), &floats(expected.data()));
            if error > worst.0 {
                worst = (error, param);
            }
        }
        println!(
            "{name}: {} parameters after one SGD step, max error {:.2e} ({})",
            reference.len(),
            worst.0,
            worst.1
        );
        assert!(worst.0 <= SGD_ABSOLUTE, "{name}: '{}' is off by {}", worst.1, worst.0);
    }
}

#[test]
fn every_architecture_quantizes_naming_the_ops_that_stay_float() {
    let dir = Scratch::new("pytorch-int8");
    for name in architectures() {
        let model = dir.path(&format!("{name}.sprout"));
        ok(&["convert", s(&fixture(&name, ".dynamo.onnx")), "-o", s(&model)]);
        let int8 = dir.path(&format!("{name}.int8.sprout"));
        let calib = fixture(&name, ".sgd.npz");
        let json = ok(&["quantize", s(&model), "--calib", s(&calib), "-o", s(&int8), "--json"]);
        let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
        let float_ops = summary["float_ops"].as_array().unwrap();
        let without_kernel: Vec<&str> = float_ops
            .iter()
            .filter(|f| f["reason"] == "it has no int8 kernel")
            .map(|f| f["op"].as_str().unwrap())
            .collect();
        println!("{name}: {} ops in float, {without_kernel:?} without a kernel", float_ops.len());
        // Sigmoid, hard swish, products and joins have no int8 kernel (what follows them
        // runs in float on their float output); everything else is int8.
        let expected: &[&str] = match name.as_str() {
            "mobilenet_v3_small" => &["hard_swish", "hard_sigmoid", "mul"],
            "efficientnet_b0" => &["sigmoid", "mul"],
            "squeezenet1_1" => &["concat"],
            "shufflenet_v2" => &["concat", "slice", "transpose"],
            _ => &[],
        };
        assert!(
            expected.iter().all(|op| without_kernel.contains(op)),
            "{name}: {without_kernel:?}"
        );
        assert!(
            without_kernel.iter().all(|op| expected.contains(op)),
            "{name}: {without_kernel:?}"
        );
        assert_eq!(float_ops.is_empty(), expected.is_empty(), "{name}: {float_ops:?}");
        let out = dir.path(&format!("{name}.int8.npy"));
        ok(&["run", s(&int8), "--input", s(&fixture(&name, ".input.npy")), "-o", s(&out)]);
        assert_eq!(read_npy(&out).unwrap().0, read_npy(&fixture(&name, ".output.npy")).unwrap().0);
    }
}
