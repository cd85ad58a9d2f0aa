//! Inference is inference: converted ONNX models whose output is a feature map or features
//! run with `sprout run` for any number of samples and equal convolutions computed here by
//! direct loops, also after `export` and `convert` back; `eval` and `predict` refuse them
//! by their output shape; `train --batch-size` re-records a `.sprout` file for the batch
//! asked; inputs larger than memory stream through.

mod common;

use std::path::Path;

use prost::Message;
use sprout_core::load_model;
use sprout_onnx::proto::{
    AttributeProto, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use sprout_train::{encode_npy, read_npy};

use common::{fails, ok, s, values, Scratch};

/// Input `[N, 2, 5, 4]`, a 3x3 convolution to 3 channels with padding 1.
const C: usize = 2;
const H: usize = 5;
const W: usize = 4;
const K: usize = 3;
const OUT: usize = 3;

fn dims(d: &[usize]) -> Vec<Dim> {
    let batch = Dim::Symbolic("batch".into());
    std::iter::once(batch).chain(d.iter().map(|&d| Dim::Fixed(d as i64))).collect()
}

/// `Conv(x)` alone (output `[N, 3, 5, 4]`), or with `pooled` then `Relu`,
/// `GlobalAveragePool` and `Flatten` (output `[N, 3]` features), on a dynamic batch axis.
fn conv_onnx(weight: &[f32], bias: &[f32], pooled: bool) -> Vec<u8> {
    let conv = NodeProto::new("Conv", "conv", &["x", "conv.weight", "conv.bias"], &["c"])
        .with(AttributeProto::ints("kernel_shape", &[K as i64, K as i64]))
        .with(AttributeProto::ints("pads", &[1, 1, 1, 1]))
        .with(AttributeProto::ints("strides", &[1, 1]));
    let (node, output) = if pooled {
        let tail = vec![
            NodeProto::new("Relu", "relu", &["c"], &["r"]),
            NodeProto::new("GlobalAveragePool", "pool", &["r"], &["p"]),
            NodeProto::new("Flatten", "flatten", &["p"], &["y"]),
        ];
        ([vec![conv], tail].concat(), ValueInfoProto::f32("y", &dims(&[OUT])))
    } else {
        (vec![conv], ValueInfoProto::f32("c", &dims(&[OUT, H, W])))
    };
    let graph = GraphProto {
        node,
        initializer: vec![
            TensorProto::f32("conv.weight", &[OUT as i64, C as i64, K as i64, K as i64], weight),
            TensorProto::f32("conv.bias", &[OUT as i64], bias),
        ],
        input: vec![ValueInfoProto::f32("x", &dims(&[C, H, W]))],
        output: vec![output],
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

/// The convolution of `n` samples by direct loops, `[n, 3, 5, 4]`, in f64.
fn conv_reference(x: &[f32], weight: &[f32], bias: &[f32], n: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; n * OUT * H * W];
    for (b, o, i, j) in (0..n).flat_map(|b| {
        (0..OUT).flat_map(move |o| (0..H).flat_map(move |i| (0..W).map(move |j| (b, o, i, j))))
    }) {
        let mut sum = f64::from(bias[o]);
        for (c, ki, kj) in
            (0..C).flat_map(|c| (0..K).flat_map(move |ki| (0..K).map(move |kj| (c, ki, kj))))
        {
            let (r, q) = ((i + ki) as isize - 1, (j + kj) as isize - 1);
            if (0..H as isize).contains(&r) && (0..W as isize).contains(&q) {
                let xv = x[((b * C + c) * H + r as usize) * W + q as usize];
                sum += f64::from(xv) * f64::from(weight[((o * C + c) * K + ki) * K + kj]);
            }
        }
        y[((b * OUT + o) * H + i) * W + j] = sum;
    }
    y
}

/// Converts `onnx` (recorded for `batch`, or the default) into `model` in `dir`.
fn convert(dir: &Scratch, onnx: &[u8], model: &str, batch: Option<&str>) -> std::path::PathBuf {
    let (src, out) = (dir.path(&format!("{model}.onnx")), dir.path(model));
    std::fs::write(&src, onnx).unwrap();
    let batch: Vec<&str> = batch.map(|b| vec!["--batch-size", b]).unwrap_or_default();
    ok(&[&["convert", s(&src), "-o", s(&out)], &batch[..]].concat());
    out
}

/// `sprout run MODEL` on `n` samples (with `extra` options): the output's shape and values.
fn run(dir: &Scratch, model: &Path, x: &[f32], n: usize, extra: &[&str]) -> (Vec<usize>, Vec<f32>) {
    let (input, output) = (dir.path(&format!("x{n}.npy")), dir.path(&format!("y{n}.npy")));
    std::fs::write(&input, encode_npy(&[n, C, H, W], &x[..n * C * H * W])).unwrap();
    let printed = ok(&[&["run", s(model), "--input", s(&input), "-o", s(&output)], extra].concat());
    assert!(printed.contains(&format!("{n} samples")), "{printed}");
    read_npy(&output).unwrap()
}

fn assert_close(found: &[f32], expected: &[f64], what: &str) {
    assert_eq!(found.len(), expected.len(), "{what}");
    for (i, (&f, &e)) in found.iter().zip(expected).enumerate() {
        assert!((f64::from(f) - e).abs() < 1e-5, "{what}[{i}]: {f} vs {e}");
    }
}

#[test]
fn a_single_conv_layer_runs_for_any_number_of_samples() {
    let dir = Scratch::new("run-conv");
    let (weight, bias) = (values(1, OUT * C * K * K), values(2, OUT));
    // Converted for the dynamic axis's default batch of 1.
    let model = convert(&dir, &conv_onnx(&weight, &bias, false), "conv.sprout", None);
    let x = values(3, 7 * C * H * W);
    for (n, extra) in [(1, &[][..]), (3, &[][..]), (7, &["--batch-size", "3"][..])] {
        let (shape, y) = run(&dir, &model, &x, n, extra);
        assert_eq!(shape, [n, OUT, H, W]);
        assert_close(&y, &conv_reference(&x, &weight, &bias, n), &format!("{n} samples"));
    }
    // Exported to ONNX and converted back, the feature map comes out the same.
    let (exported, back) = (dir.path("exported.onnx"), dir.path("back.sprout"));
    ok(&["export", s(&model), "--format", "onnx", "-o", s(&exported)]);
    ok(&["convert", s(&exported), "-o", s(&back)]);
    let (shape, y) = run(&dir, &back, &x, 3, &[]);
    assert_eq!(shape, [3, OUT, H, W]);
    assert_close(&y, &conv_reference(&x, &weight, &bias, 3), "exported and converted back");
}

/// A backbone quantizes too: calibrated on unlabelled samples (a safetensors file with only
/// `x`), its int8 feature map keeps the float one's shape and stays within int8 rounding of
/// it, and a conv -> ReLU -> pool -> flatten feature extractor likewise.
#[test]
fn a_feature_map_model_quantizes_to_int8() {
    use safetensors::tensor::{Dtype, TensorView};
    let dir = Scratch::new("run-quantize-backbone");
    let (weight, bias) = (values(1, OUT * C * K * K), values(2, OUT));
    let x = values(3, 40 * C * H * W);
    let calib = dir.path("calib.safetensors");
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, vec![40, C, H, W], &bytes).unwrap();
    std::fs::write(&calib, safetensors::serialize([("x", view)], None).unwrap()).unwrap();
    for pooled in [false, true] {
        let model = convert(&dir, &conv_onnx(&weight, &bias, pooled), "m.sprout", None);
        let int8 = dir.path("m.int8.sprout");
        let printed = ok(&["quantize", s(&model), "--calib", s(&calib), "-o", s(&int8)]);
        assert!(printed.contains("calibrating on 40 samples"), "{printed}");
        // A feature map has no answers to agree on ([N, F] features look like class scores).
        assert_eq!(printed.contains("agreement"), pooled, "{printed}");
        let (float_shape, float) = run(&dir, &model, &x, 7, &[]);
        let (int8_shape, quantized) = run(&dir, &int8, &x, 7, &[]);
        assert_eq!(int8_shape, float_shape);
        let largest = float.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = float.iter().zip(&quantized).fold(0f32, |m, (f, q)| m.max((f - q).abs()));
        // Input, weights and output each round to 1/255 of their range or finer.
        assert!(worst > 0.0 && worst < 0.05 * largest, "pooled {pooled}: {worst} of {largest}");
        if !pooled {
            let agree = ["--min-agreement", "90", "-o", "never.sprout"];
            let quantize = ["quantize", s(&model), "--calib", s(&calib)];
            fails(&[&quantize[..], &agree].concat(), "is not class scores");
        }
    }
}

/// Input and output stream through in chunks: 700 samples (112 KB in, 168 KB out) run
/// under a 64 KiB memory limit, in passes of 3 and a remainder of 1 per chunk's end.
#[test]
fn an_input_over_the_memory_limit_streams_through() {
    let dir = Scratch::new("run-stream");
    let (weight, bias) = (values(7, OUT * C * K * K), values(8, OUT));
    let model = convert(&dir, &conv_onnx(&weight, &bias, false), "conv.sprout", None);
    let n = 700;
    let x = values(9, n * C * H * W);
    let (shape, y) = run(&dir, &model, &x, n, &["--max-memory", "64K", "--batch-size", "3"]);
    assert_eq!(shape, [n, OUT, H, W]);
    assert_close(&y, &conv_reference(&x, &weight, &bias, n), "streamed");
}

#[test]
fn pooled_features_run_as_n_by_f() {
    let dir = Scratch::new("run-features");
    let (weight, bias) = (values(4, OUT * C * K * K), values(5, OUT));
    let model = convert(&dir, &conv_onnx(&weight, &bias, true), "features.sprout", Some("2"));
    let x = values(6, 5 * C * H * W);
    let (shape, y) = run(&dir, &model, &x, 5, &[]);
    assert_eq!(shape, [5, OUT]);
    let conv = conv_reference(&x, &weight, &bias, 5);
    let expected: Vec<f64> = conv
        .chunks(H * W)
        .map(|plane| plane.iter().map(|v| v.max(0.0)).sum::<f64>() / (H * W) as f64)
        .collect();
    assert_close(&y, &expected, "features");
}

#[test]
fn eval_and_predict_name_the_output_shape_of_a_non_classifier() {
    let dir = Scratch::new("run-not-classifier");
    let onnx = conv_onnx(&values(1, OUT * C * K * K), &values(2, OUT), false);
    let model = convert(&dir, &onnx, "conv.sprout", Some("2"));
    let data = dir.path("never-read.safetensors");
    let said = "the model's output 'c' has shape [2, 3, 5, 4], not [N, classes] logits";
    fails(&["eval", s(&model), "--data", s(&data)], said);
    fails(&["predict", s(&model), s(&data)], said);
}

/// Flatten → Gemm(40 → 2) on `[batch, 2, 5, 4]`: a classifier.
fn classifier_onnx(weight: &[f32]) -> Vec<u8> {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Flatten", "flatten", &["x"], &["f"]),
            NodeProto::new("Gemm", "fc", &["f", "fc.weight", "fc.bias"], &["logits"])
                .with(AttributeProto::int("transB", 1)),
        ],
        initializer: vec![
            TensorProto::f32("fc.weight", &[2, (C * H * W) as i64], weight),
            TensorProto::f32("fc.bias", &[2], &[0.1, -0.1]),
        ],
        input: vec![ValueInfoProto::f32("x", &dims(&[C, H, W]))],
        output: vec![ValueInfoProto::f32("logits", &dims(&[2]))],
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

/// `fc.weight` of a `.sprout` file and the batch size it is recorded for.
fn trained(path: &Path) -> (Vec<f32>, usize) {
    let file = load_model(&std::fs::read(path).unwrap()).unwrap();
    let weight = file.weights.iter().find(|w| w.name == "fc.weight").unwrap();
    (weight.values.float_values().unwrap().to_vec(), file.metadata.input_shape.dims()[0])
}

#[test]
fn train_batch_size_re_records_a_sprout_file() {
    let dir = Scratch::new("run-train-batch");
    let onnx = classifier_onnx(&values(7, 2 * C * H * W));
    let (one, eight) =
        (convert(&dir, &onnx, "one.sprout", None), convert(&dir, &onnx, "eight.sprout", Some("8")));
    let data = dir.path("d.safetensors");
    {
        use safetensors::tensor::{Dtype, TensorView};
        let x: Vec<u8> = values(8, 8 * C * H * W).iter().flat_map(|v| v.to_le_bytes()).collect();
        let y: Vec<u8> = (0..8i64).flat_map(|i| (i % 2).to_le_bytes()).collect();
        let tensors = [
            ("x", TensorView::new(Dtype::F32, vec![8, C, H, W], &x).unwrap()),
            ("y", TensorView::new(Dtype::I64, vec![8], &y).unwrap()),
        ];
        std::fs::write(&data, safetensors::serialize(tensors, None).unwrap()).unwrap();
    }
    let train = |model: &Path, out: &str, batch: &[&str]| {
        let (output, run) = (dir.path(out), dir.path(&format!("{out}.run")));
        let options = ["--data", s(&data), "--epochs", "1", "--lr", "0.1", "--no-shuffle"];
        let rest = ["--out-dir", s(&run), "-o", s(&output)];
        ok(&[&["train", "--model", s(model)], &options[..], batch, &rest[..]].concat());
        trained(&output)
    };
    // One step of 8 samples, whichever batch the file was recorded for.
    let (asked, asked_batch) = train(&one, "asked.sprout", &["--batch-size", "8"]);
    let (recorded, recorded_batch) = train(&eight, "recorded.sprout", &[]);
    assert_eq!((asked_batch, recorded_batch), (8, 8));
    assert_eq!(asked, recorded, "the same first step");
    // Without --batch-size the file keeps its batch of 1: eight steps, other weights.
    let (kept, kept_batch) = train(&one, "kept.sprout", &[]);
    assert_eq!(kept_batch, 1);
    let moved = kept.iter().zip(&asked).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(moved > 1e-3, "batch 1 and batch 8 steps differ by only {moved}");
}
