//! `sprout train` -> `eval` -> `predict` -> `run` on a tiny image model and a 16x16 leaf set,
//! and each bad input: a clear message, a failing exit status and no output file.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use sprout_core::format::Preprocessing;
use sprout_core::{nn, save_model, Graph, Metadata, ModelFile, Shape};

use common::{fails, ok, s, Scratch};

/// A tiny image classifier at 16x16: flatten, linear 768 -> 8, ReLU, linear 8 -> 3.
fn tiny_model(path: &Path) {
    let mut g = Graph::new(1);
    let x = g.input("input", Shape::d4(4, 3, 16, 16)).unwrap();
    let y = g.labels("labels", 4).unwrap();
    let flat = g.flatten("flat", x).unwrap();
    let h = nn::linear(&mut g, "features.0", flat, 8).unwrap();
    let h = g.relu("features.1", h).unwrap();
    let logits = nn::linear(&mut g, "classifier", h, 3).unwrap();
    g.cross_entropy("loss", logits, y).unwrap();
    let metadata = Metadata {
        class_names: vec!["healthy".into(), "leaf_spot".into(), "rust".into()],
        input_shape: Shape::d4(4, 3, 16, 16),
        preprocessing: Preprocessing {
            mean: vec![0.485, 0.456, 0.406],
            std: vec![0.229, 0.224, 0.225],
            resize: Some((16, 16)),
        },
        provenance: "test".into(),
    };
    fs::write(path, save_model(&ModelFile::from_graph(&g, metadata)).unwrap()).unwrap();
}

/// Draws a 16x16 leaf set in `dir`, trains the tiny model on it for `epochs` with `extra`
/// options (run folder `dir/run`); returns the set, the trained model and the output.
fn train_tiny(dir: &Path, epochs: &str, extra: &[&str]) -> (PathBuf, PathBuf, String) {
    let leaves = dir.join("leaves");
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "10", "--size", "16"]);
    let tiny = dir.join("tiny.sprout");
    tiny_model(&tiny);
    let trained = dir.join("trained.sprout");
    let run_dir = dir.join("run");
    let options = ["--epochs", epochs, "--batch-size", "4", "--lr", "0.01"];
    let files = ["--out-dir", s(&run_dir), "-o", s(&trained)];
    let args = [&["train", "--model", s(&tiny), "--data", s(&leaves)], &options[..], extra, &files]
        .concat();
    let out = ok(&args);
    (leaves, trained, out)
}

#[test]
fn train_eval_predict_run_and_bad_inputs() {
    let scratch = Scratch::new("train");
    let dir = &scratch.0;
    let (leaves, trained, out) = train_tiny(dir, "3", &[]);
    let run_dir = dir.join("run");
    assert!(out.contains("final validation accuracy") && out.contains('%'), "{out}");
    for file in ["best.sprout", "curve.png", "checkpoint-epoch-003.ckpt"] {
        assert!(run_dir.join(file).is_file(), "{file} missing");
    }

    let out = ok(&["eval", s(&trained), "--data", s(&leaves)]);
    assert!(
        out.contains("accuracy") && out.contains("leaf_spot") && out.contains("confusion"),
        "{out}"
    );

    let image = leaves.join("val").join("rust").join(
        fs::read_dir(leaves.join("val").join("rust")).unwrap().next().unwrap().unwrap().file_name(),
    );
    let out = ok(&["predict", s(&trained), s(&image)]);
    assert!(out.contains("healthy") && out.contains("rust") && out.contains('%'), "{out}");

    // Five samples: more than the recorded batch of 4, run in two chunks.
    let x: Vec<f32> = (0..5 * 3 * 16 * 16).map(|i| (i % 7) as f32 / 7.0).collect();
    let input = dir.join("x.npy");
    fs::write(&input, sprout_train::encode_npy(&[5, 3, 16, 16], &x)).unwrap();
    let output = dir.join("y.npy");
    ok(&["run", s(&trained), "--input", s(&input), "--output", s(&output)]);
    let (shape, y) = sprout_train::read_npy(&output).unwrap();
    assert_eq!(shape, [5, 3]);
    assert!(y.iter().all(|v| v.is_finite()));

    // Bad inputs.
    let corrupt = dir.join("corrupt.png");
    fs::write(&corrupt, b"\x89PNG\r\n\x1a\nnot really").unwrap();
    fails(&["predict", s(&trained), s(&corrupt)], "corrupt.png");

    let wrong = dir.join("wrong.npy");
    fs::write(&wrong, sprout_train::encode_npy(&[2, 3, 8, 8], &[0.0; 2 * 3 * 64])).unwrap();
    let never = dir.join("never.npy");
    fails(&["run", s(&trained), "--input", s(&wrong), "--output", s(&never)], "wrong.npy");
    assert!(!never.exists());

    let other = dir.join("other");
    fs::create_dir_all(other.join("mystery")).unwrap();
    fs::copy(&image, other.join("mystery").join("a.png")).unwrap();
    fails(&["eval", s(&trained), "--data", s(&other)], "healthy");

    let truncated = dir.join("truncated.sprout");
    let bytes = fs::read(&trained).unwrap();
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    fails(&["eval", s(&truncated), "--data", s(&leaves)], "truncated");
    let not_written = dir.join("not-written.sprout");
    fails(
        &["train", "--model", s(&truncated), "--data", s(&leaves), "-o", s(&not_written)],
        "truncated.sprout",
    );
    fails(&["run", s(&truncated), "--input", s(&input), "--output", s(&never)], "truncated");
    assert!(!not_written.exists() && !never.exists());
}

/// The accuracy `sprout eval` prints, in percent.
fn accuracy(eval_output: &str) -> f64 {
    let line = eval_output.lines().find(|l| l.starts_with("accuracy")).expect("an accuracy line");
    line.split_whitespace().nth(1).and_then(|a| a.trim_end_matches('%').parse().ok()).unwrap()
}

#[test]
fn mixed_precision_training_then_f16_and_int8_quantization_and_bad_inputs() {
    let scratch = Scratch::new("quantize");
    let dir = &scratch.0;
    let (leaves, trained, out) = train_tiny(dir, "2", &["--mixed-precision"]);
    assert!(out.contains("mixed precision: loss scale"), "{out}");

    let half = dir.join("half.sprout");
    let out = ok(&["quantize", s(&trained), "--dtype", "f16", "-o", s(&half)]);
    // 768·8 + 8 + 8·3 + 3 = 6179 weights: 24 716 bytes as f32, half of it as f16.
    assert!(out.contains("24716 bytes as f32 -> 12358 bytes as f16"), "{out}");
    assert!(fs::metadata(&half).unwrap().len() < fs::metadata(&trained).unwrap().len() * 6 / 10);
    let full = accuracy(&ok(&["eval", s(&trained), "--data", s(&leaves)]));
    let rounded = accuracy(&ok(&["eval", s(&half), "--data", s(&leaves)]));
    assert!((full - rounded).abs() <= 10.0, "f32 {full}% against f16 {rounded}%");
    let x: Vec<f32> = (0..3 * 16 * 16).map(|i| (i % 5) as f32 / 5.0).collect();
    let input = dir.join("x.npy");
    fs::write(&input, sprout_train::encode_npy(&[1, 3, 16, 16], &x)).unwrap();
    let (y32, y16) = (dir.join("y32.npy"), dir.join("y16.npy"));
    ok(&["run", s(&trained), "--input", s(&input), "--output", s(&y32)]);
    ok(&["run", s(&half), "--input", s(&input), "--output", s(&y16)]);
    let (exact, rounded) =
        (sprout_train::read_npy(&y32).unwrap().1, sprout_train::read_npy(&y16).unwrap().1);
    assert!(exact.iter().zip(&rounded).all(|(a, b)| (a - b).abs() < 2e-2), "{exact:?} {rounded:?}");

    let int8 = dir.join("int8.sprout");
    let out = ok(&["quantize", s(&trained), "--calib", s(&leaves), "-o", s(&int8)]);
    assert!(out.contains("calibrating on 24 samples"), "{out}");
    assert!(fs::metadata(&int8).unwrap().len() < fs::metadata(&trained).unwrap().len() * 4 / 10);
    let quantized = accuracy(&ok(&["eval", s(&int8), "--data", s(&leaves)]));
    assert!((full - quantized).abs() <= 10.0, "f32 {full}% against int8 {quantized}%");

    let never = dir.join("never.sprout");
    fails(&["quantize", s(&trained), "-o", s(&never)], "needs calibration data: give --calib");
    fails(
        &["quantize", s(&trained), "--dtype", "f16", "--percentile", "120", "-o", s(&never)],
        "120",
    );
    let truncated = dir.join("truncated.sprout");
    fs::write(&truncated, &fs::read(&trained).unwrap()[..100]).unwrap();
    fails(&["quantize", s(&truncated), "--dtype", "f16", "-o", s(&never)], "truncated.sprout");
    assert!(!never.exists());
}

#[test]
fn image_pipeline_options_reach_train_eval_predict_and_quantize() {
    let scratch = Scratch::new("pipeline");
    let dir = &scratch.0;
    let cache = dir.join("cache");
    let extra =
        ["--workers", "2", "--resize", "squash", "--cache", "disk", "--cache-dir", s(&cache)];
    let (leaves, trained, _) = train_tiny(dir, "1", &extra);
    // 8 training and 2 validation images per class, each resized once into the cache.
    let entries: Vec<_> = fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries.len(), 30, "{entries:?}");
    assert!(entries.iter().all(|n| n.to_string_lossy().ends_with(".rgb")), "{entries:?}");

    for resize in ["crop", "squash"] {
        let out = ok(&["eval", s(&trained), "--data", s(&leaves), "--resize", resize]);
        assert!(out.contains("accuracy"), "{out}");
    }
    let image = leaves
        .join("val/rust")
        .join(fs::read_dir(leaves.join("val/rust")).unwrap().next().unwrap().unwrap().file_name());
    let out = ok(&["predict", s(&trained), s(&image), "--resize", "squash"]);
    assert!(out.contains("rust") && out.contains('%'), "{out}");
    let quantized = dir.join("q.sprout");
    let calib = ["--calib", s(&leaves), "--resize", "squash", "-o", s(&quantized)];
    ok(&[&["quantize", s(&trained)], &calib[..]].concat());
    assert!(quantized.is_file());

    // A FIFO named like a photo is refused, not waited on.
    #[cfg(unix)]
    {
        let fifo = dir.join("pipe.png");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        fails(&["predict", s(&trained), s(&fifo)], "not a regular file (a FIFO)");
    }
    let never = dir.join("never.sprout");
    let tiny = dir.join("tiny.sprout");
    let base = ["train", "--model", s(&tiny), "--data", s(&leaves), "-o", s(&never)];
    fails(&[&base[..], &["--cache-dir", s(&cache)]].concat(), "--cache-dir needs --cache disk");
    fails(&[&base[..], &["--cache", "disk"]].concat(), "--cache disk needs --cache-dir");
    fails(&[&base[..], &["--cache", "none", "--cache-mib", "9"]].concat(), "--cache-mib needs");
    fails(&[&base[..], &["--resize", "stretch"]].concat(), "crop");
    assert!(!never.exists());
}
