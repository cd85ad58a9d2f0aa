//! `--json` on `train`, `eval`, `predict` and `quantize`: standard output holds one JSON
//! object with the documented fields and values that agree with each other; and with
//! standard error piped (not a terminal) no progress escape codes or carriage returns, and
//! epoch lines of at most 80 columns.

mod common;

use std::fs;
use std::path::Path;

use serde_json::Value;

use common::{ok, s, sprout, text, tiny_model, Scratch};

/// Runs `sprout ARGS`, which must succeed with nothing on standard output but one JSON
/// object and no progress drawing on standard error; returns the object and the error text.
fn run_json(args: &[&str]) -> (Value, String) {
    let out = sprout(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "sprout {args:?} failed: {stderr}");
    assert_quiet(&stderr);
    assert_eq!(stdout.lines().count(), 1, "one line of JSON: {stdout}");
    let value: Value = serde_json::from_str(&stdout).expect("standard output is JSON");
    assert!(value.is_object(), "{value}");
    (value, stderr)
}

/// No terminal drawing (escape sequences, carriage returns) in piped standard error.
fn assert_quiet(stderr: &str) {
    assert!(!stderr.contains("\x1b["), "escape codes on a pipe: {stderr:?}");
    assert!(!stderr.contains('\r'), "carriage returns on a pipe: {stderr:?}");
}

fn f64_at(value: &Value, key: &str) -> f64 {
    value[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {value}"))
}

fn u64_at(value: &Value, key: &str) -> u64 {
    value[key].as_u64().unwrap_or_else(|| panic!("{key} is not a count in {value}"))
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

#[test]
fn json_summaries_of_train_eval_predict_and_quantize() {
    let scratch = Scratch::new("json");
    let dir = &scratch.0;
    let leaves = dir.join("leaves");
    // 10 per class: 8 train and 2 val images of each of 3 classes.
    let out = sprout(&["data", "leaves", "--out", s(&leaves), "--per-class", "10", "--size", "16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_quiet(&text(&out.stderr));
    let tiny = dir.join("tiny.sprout");
    tiny_model(&tiny);

    // train
    let (trained, run_dir) = (dir.join("trained.sprout"), dir.join("run"));
    let (train, stderr) = run_json(&[
        "train",
        "--model",
        s(&tiny),
        "--data",
        s(&leaves),
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--lr",
        "0.01",
        "--out-dir",
        s(&run_dir),
        "-o",
        s(&trained),
        "--json",
    ]);
    let epoch_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("epoch ")).collect();
    assert_eq!(epoch_lines.len(), 2, "{stderr}");
    for line in &epoch_lines {
        assert!(line.chars().count() <= 80, "{} columns: {line}", line.chars().count());
        assert!(line.contains("acc ") && line.ends_with(" img/s"), "{line}");
    }
    assert_eq!(u64_at(&train, "samples"), 6);
    assert_eq!(u64_at(&train, "epochs_run"), 2);
    assert_eq!(train["output"], s(&trained));
    assert_eq!(train["run_folder"], s(&run_dir));
    assert!(train["loss_scale"].is_null());
    assert!(f64_at(&train, "seconds") > 0.0);
    let history = train["history"].as_array().expect("a history array");
    assert_eq!(history.len(), 2);
    for (k, epoch) in history.iter().enumerate() {
        assert_eq!(u64_at(epoch, "epoch"), k as u64 + 1);
        assert!(f64_at(epoch, "train_loss") > 0.0 && f64_at(epoch, "val_loss") > 0.0);
        assert!((f64_at(epoch, "learning_rate") - 0.01).abs() < 1e-6);
        assert!(f64_at(epoch, "images_per_second") > 0.0);
    }
    let final_accuracy = f64_at(&train, "final_accuracy");
    assert!((final_accuracy - f64_at(&history[1], "val_accuracy")).abs() < 1e-6);
    let best = history.iter().map(|e| f64_at(e, "val_accuracy")).fold(0.0, f64::max);
    assert!((f64_at(&train, "best_accuracy") - best).abs() < 1e-6);
    assert!(trained.is_file());

    // eval: the same validation images as training's last epoch.
    let (eval, _) = run_json(&["eval", s(&trained), "--data", s(&leaves), "--json"]);
    assert_eq!(u64_at(&eval, "samples"), 6);
    assert!((f64_at(&eval, "accuracy") - final_accuracy).abs() < 1e-6);
    assert!((f64_at(&eval, "loss") - f64_at(&train, "final_loss")).abs() < 1e-4);
    assert!(eval["device_checkpoint"].is_null());
    let names: Vec<&str> =
        eval["classes"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["healthy", "leaf_spot", "rust"]);
    let confusion: Vec<Vec<u64>> = serde_json::from_value(eval["confusion"].clone()).unwrap();
    assert_eq!(confusion.len(), 3);
    for (c, class) in eval["classes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(u64_at(class, "samples"), 2);
        assert_eq!(confusion[c].iter().sum::<u64>(), 2);
        let right = confusion[c][c] as f64 / 2.0;
        assert!((f64_at(class, "accuracy") - right).abs() < 1e-9, "{class}");
    }
    let right: u64 = (0..3).map(|c| confusion[c][c]).sum();
    assert!((f64_at(&eval, "accuracy") - right as f64 / 6.0).abs() < 1e-9);

    // predict: one entry per image, in order.
    let rust = leaves.join("val").join("rust");
    let mut images: Vec<_> = fs::read_dir(&rust).unwrap().map(|e| e.unwrap().path()).collect();
    images.sort();
    let (predict, _) = run_json(&["predict", s(&trained), s(&images[0]), s(&images[1]), "--json"]);
    let predictions = predict["predictions"].as_array().expect("a predictions array");
    assert_eq!(predictions.len(), 2);
    for (prediction, image) in predictions.iter().zip(&images) {
        assert_eq!(prediction["path"], s(image));
        let all = prediction["probabilities"].as_array().unwrap();
        let classes: Vec<&str> = all.iter().map(|c| c["class"].as_str().unwrap()).collect();
        assert_eq!(classes, names);
        let p: Vec<f64> = all.iter().map(|c| f64_at(c, "probability")).collect();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-5, "{p:?}");
        let best = u64_at(prediction, "class_index") as usize;
        assert!(p.iter().all(|&q| q <= p[best]), "{prediction}");
        assert_eq!(prediction["class"], names[best]);
        assert!((f64_at(prediction, "probability") - p[best]).abs() < 1e-9);
    }

    // quantize: int8 from every image under the folder (train/ and val/: 30), then f16.
    let int8 = dir.join("int8.sprout");
    let (quantized, stderr) =
        run_json(&["quantize", s(&trained), "--calib", s(&leaves), "-o", s(&int8), "--json"]);
    assert!(stderr.contains("calibrating on 30 samples"), "{stderr}");
    assert_eq!(quantized["dtype"], "int8");
    assert_eq!(u64_at(&quantized, "calibration_samples"), 30);
    assert_eq!(quantized["calibration_data"], s(&leaves));
    assert_eq!(u64_at(&quantized, "bytes"), file_len(&int8));
    assert_eq!(u64_at(&quantized, "model_bytes"), file_len(&trained));
    assert!(quantized["frozen_f32_bytes"].is_null() && quantized["frozen_f16_bytes"].is_null());
    let half = dir.join("half.sprout");
    let (quantized, _) =
        run_json(&["quantize", s(&trained), "--dtype", "f16", "-o", s(&half), "--json"]);
    assert_eq!(quantized["dtype"], "f16");
    // 768·8 + 8 + 8·3 + 3 = 6179 weights.
    assert_eq!(u64_at(&quantized, "frozen_f32_bytes"), 6179 * 4);
    assert_eq!(u64_at(&quantized, "frozen_f16_bytes"), 6179 * 2);
    assert_eq!(u64_at(&quantized, "bytes"), file_len(&half));
    assert!(quantized["calibration_samples"].is_null());

    // Without --json the summaries stay text.
    let text_eval = ok(&["eval", s(&trained), "--data", s(&leaves)]);
    assert!(
        text_eval.starts_with("accuracy ") && serde_json::from_str::<Value>(&text_eval).is_err()
    );
}
