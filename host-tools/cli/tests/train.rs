//! `sprout train` -> `eval` -> `predict` -> `run` on a tiny image model and a 16x16 leaf set,
//! and each bad input: a clear message, a failing exit status and no output file.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{fails, ok, s, tiny_model, Scratch};

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
    // `--backend auto` (the default) names the backend it picked; `cpu` says nothing.
    for (backend, named) in [("auto", true), ("cpu", false)] {
        let out = common::sprout(&["predict", s(&trained), s(&image), "--backend", backend]);
        let stderr = common::text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let line = "backend: cpu (auto: this build has no CUDA backend)";
        assert_eq!(stderr.contains(line), named, "--backend {backend}: {stderr}");
    }

    // Five samples: more than the recorded batch of 4, run in two chunks.
    let x: Vec<f32> = (0..5 * 3 * 16 * 16).map(|i| (i % 7) as f32 / 7.0).collect();
    let input = dir.join("x.npy");
    fs::write(&input, sprout_train::encode_npy(&[5, 3, 16, 16], &x)).unwrap();
    let output = dir.join("y.npy");
    ok(&["run", s(&trained), "--input", s(&input), "--output", s(&output)]);
    let (shape, y) = sprout_train::read_npy(&output).unwrap();
    assert_eq!(shape, [5, 3]);
    // Passes of 2, 2 and 1 samples, each through two dense layers, timed and counted.
    let profiled = dir.join("y-profiled.npy");
    let args = ["--output", s(&profiled), "--batch-size", "2", "--profile"];
    let out = ok(&[&["run", s(&trained), "--input", s(&input)][..], &args].concat());
    let linear = out.lines().find(|l| l.split_whitespace().next() == Some("linear"));
    assert_eq!(linear.and_then(|l| l.split_whitespace().nth(1)), Some("6"), "{out}");
    let rebatched = sprout_train::read_npy(&profiled).unwrap().1;
    assert!(rebatched.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 1e-5), "{rebatched:?} {y:?}");
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
    let (leaves, trained, out) = train_tiny(dir, "2", &["--mixed-precision", "--profile"]);
    assert!(out.contains("mixed precision: loss scale"), "{out}");
    // The profile names the kernels the steps ran, the casts of f16 storage among them.
    let row = |kernel: &str| out.lines().find(|l| l.split_whitespace().next() == Some(kernel));
    let calls = |kernel| row(kernel).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    // 2 epochs of 6 batches of 4 (24 training photos), two dense layers' forwards each.
    assert_eq!(calls("linear"), Some(24), "{out}");
    // Each cast to f16 that is widened at once runs as one kernel with the widening.
    let narrowed = ["cast_f32_to_f16", "round_through_f16", "round_through_f16_in_place"];
    let narrowed: u64 = narrowed.into_iter().filter_map(calls).sum();
    assert!(narrowed >= 12, "{out}");

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
    let calib = leaves.join("train");
    let out = ok(&["quantize", s(&trained), "--calib", s(&calib), "-o", s(&int8)]);
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

/// Runs `sprout ARGS` in `dir`; returns (success, stdout, stderr).
fn sprout_in(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sprout"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (out.status.success(), common::text(&out.stdout), common::text(&out.stderr))
}

#[test]
fn one_folder_is_split_each_run_gets_a_folder_and_resume_refuses_changes() {
    let scratch = Scratch::new("runs");
    let dir = &scratch.0;
    let leaves = dir.join("leaves");
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "10", "--size", "16"]);
    let tiny = dir.join("tiny.sprout");
    tiny_model(&tiny);
    // One folder of classes (no val/): split 80/20 per class, printed.
    let photos = leaves.join("train");
    // --lr 0.01 --epochs 2 --batch-size 4 unless `extra` gives them.
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--model", "tiny.sprout", "--data", "leaves/train"];
        for pair in [["--lr", "0.01"], ["--epochs", "2"], ["--batch-size", "4"]] {
            if !extra.contains(&pair[0]) {
                args.extend(pair);
            }
        }
        sprout_in(dir, &[&args[..], extra].concat())
    };
    let (success, _, stderr) = train(&["-o", "a.sprout"]);
    assert!(success, "{stderr}");
    assert!(
        stderr.contains(
            "split leaves/train: 18 train / 6 validation images (stratified, 20%, seed 0)"
        ),
        "{stderr}"
    );
    // The default run folder, then a fresh one for the second run.
    let (success, stdout, stderr) = train(&["-o", "b.sprout"]);
    assert!(success, "{stderr}");
    assert!(stdout.contains("runs/tiny-2"), "{stdout}");
    let (first, second) = (dir.join("runs/tiny"), dir.join("runs/tiny-2"));
    for file in ["args.json", "metrics.csv", "best.sprout", "curve.png", "curve.svg"] {
        assert!(first.join(file).is_file() && second.join(file).is_file(), "{file} missing");
    }
    assert!(second.join("checkpoint-epoch-002.ckpt").is_file());

    let args: serde_json::Value =
        serde_json::from_slice(&fs::read(first.join("args.json")).unwrap()).unwrap();
    assert_eq!(args["options"]["--lr"], serde_json::json!(0.01));
    assert_eq!(args["options"]["--val-fraction"], serde_json::json!(0.2));
    assert_eq!(args["options"]["--batch-size"], serde_json::json!(4));
    let stratified = &args["data"]["kind"]["stratified"];
    assert_eq!(
        (stratified["fraction"].as_f64(), stratified["seed"].as_u64()),
        (Some(0.2), Some(0))
    );
    assert_eq!((args["data"]["train"].as_u64(), args["data"]["val"].as_u64()), (Some(18), Some(6)));
    assert!(args["sprout"].as_str().unwrap().starts_with(env!("CARGO_PKG_VERSION")));
    assert!(args["command_line"].as_array().unwrap().iter().any(|a| a == "leaves/train"));
    let metrics = fs::read_to_string(first.join("metrics.csv")).unwrap();
    let lines: Vec<&str> = metrics.lines().collect();
    assert_eq!(
        lines[0],
        "epoch,train_loss,val_loss,val_accuracy,learning_rate,images_per_second,seconds"
    );
    assert_eq!(lines.len(), 3);
    assert!(lines[2].starts_with("2,") && lines[2].split(',').count() == 7, "{metrics}");
    assert_eq!(image::image_dimensions(first.join("curve.png")).unwrap(), (800, 600));

    // Resume refuses another learning rate and another data set; --epochs may grow.
    let ckpt = "runs/tiny/checkpoint-epoch-002.ckpt";
    let (success, _, stderr) = train(&["--resume", ckpt, "--lr", "0.1", "-o", "c.sprout"]);
    assert!(!success && stderr.contains("--resume: --lr was 0.01, now 0.1"), "{stderr}");
    let extra = photos.join("rust").join("extra.png");
    fs::copy(
        photos.join("healthy").join(
            fs::read_dir(photos.join("healthy")).unwrap().next().unwrap().unwrap().file_name(),
        ),
        &extra,
    )
    .unwrap();
    let (success, _, stderr) = train(&["--resume", ckpt, "--epochs", "3", "-o", "c.sprout"]);
    assert!(!success && stderr.contains("the data changed: class 'rust'"), "{stderr}");
    fs::remove_file(&extra).unwrap();
    let (success, _, stderr) = train(&["--resume", ckpt, "--epochs", "3", "-o", "c.sprout"]);
    assert!(success && stderr.contains("resuming after epoch 2 of 3"), "{stderr}");
    assert_eq!(fs::read_to_string(first.join("metrics.csv")).unwrap().lines().count(), 4);

    // An exact --out-dir that is taken, an output that is an input, --val with a folder,
    // and a class folder the model does not know are refused before training.
    let (success, _, stderr) = train(&["--out-dir", "runs/tiny", "-o", "d.sprout"]);
    assert!(!success && stderr.contains("not empty"), "{stderr}");
    let (success, _, stderr) = train(&["-o", "tiny.sprout"]);
    assert!(!success && stderr.contains("is the --model input"), "{stderr}");
    let (success, _, stderr) = train(&["--val", "x.npz", "-o", "d.sprout"]);
    assert!(!success && stderr.contains("--val x.npz: is for tensor files"), "{stderr}");
    let (success, _, stderr) = train(&["-o", "missing/d.sprout"]);
    assert!(!success && stderr.contains("the folder missing does not exist"), "{stderr}");
    fs::create_dir_all(photos.join("mystery")).unwrap();
    fs::copy(
        photos.join("healthy").join(
            fs::read_dir(photos.join("healthy")).unwrap().next().unwrap().unwrap().file_name(),
        ),
        photos.join("mystery/a.png"),
    )
    .unwrap();
    let (success, _, stderr) = train(&["-o", "d.sprout"]);
    assert!(
        !success && stderr.contains("class folders the model does not have: mystery"),
        "{stderr}"
    );
    fails(&["eval", s(&dir.join("a.sprout")), "--data", s(&photos)], "does not have: mystery");
    assert!(!dir.join("d.sprout").exists());
    let runs: Vec<_> = fs::read_dir(dir.join("runs")).unwrap().collect();
    assert_eq!(runs.len(), 2, "refused runs leave no run folder");
}

#[test]
fn patience_stops_when_validation_accuracy_stalls() {
    let scratch = Scratch::new("patience");
    let dir = &scratch.0;
    // A learning rate of 0: epoch 1 stays the best, so patience 2 stops after epoch 3.
    let leaves = dir.join("leaves");
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "10", "--size", "16"]);
    let tiny = dir.join("tiny.sprout");
    tiny_model(&tiny);
    let run_dir = dir.join("run");
    let args = ["train", "--model", s(&tiny), "--data", s(&leaves), "--batch-size", "4"];
    let out = common::sprout(
        &[
            &args[..],
            &["--lr", "0", "--epochs", "10", "--patience", "2", "--out-dir", s(&run_dir)],
            &["-o", s(&dir.join("t.sprout"))],
        ]
        .concat(),
    );
    let stderr = common::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "stopping after epoch 3: no better validation accuracy for 2 epochs (best: epoch 1"
        ),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(run_dir.join("metrics.csv")).unwrap().lines().count(), 4);
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

    // The model records the resize mode it was trained with: eval uses it unasked, and
    // refuses another.
    let out = ok(&["eval", s(&trained), "--data", s(&leaves)]);
    assert!(out.contains("accuracy"), "{out}");
    let crop = ["eval", s(&trained), "--data", s(&leaves), "--resize", "crop"];
    fails(&crop, "--resize crop disagrees with the model, which was made for --resize squash");
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

/// The parameters and buffers of `model` by name, through `sprout export --format safetensors`.
fn weights(dir: &Path, model: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let file = dir.join("weights.safetensors");
    ok(&["export", s(model), "--format", "safetensors", "-o", s(&file)]);
    let bytes = fs::read(&file).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let floats = |data: &[u8]| {
        data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    tensors.tensors().into_iter().map(|(name, view)| (name, floats(view.data()))).collect()
}

#[test]
fn batch_norms_normalising_with_running_statistics_leave_them_as_they_are() {
    let scratch = Scratch::new("train-batch-norm");
    let leaves = scratch.path("leaves");
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "8", "--size", "16"]);
    let train = |name: &str, from: &[&str], epochs: &str, extra: &[&str]| {
        let (out, runs) = (scratch.path(&format!("{name}.sprout")), scratch.path(name));
        let common = ["train", "--data", s(&leaves), "--epochs", epochs, "--batch-size", "4"];
        let rest = ["--lr", "0.05", "--out-dir", s(&runs), "-o", s(&out)];
        ok(&[&common[..], from, extra, &rest].concat());
        (weights(&scratch.path(""), &out), out)
    };
    // Fine-tuning a trained model: a fresh one's statistics describe nothing yet.
    let (start, trained) = train("trained", &["--zoo", "leafnet"], "3", &[]);
    let from = ["--model", s(&trained)];
    let (batch, _) = train("batch", &from, "1", &[]);
    let (running, _) = train("running", &from, "1", &["--batch-norm", "running"]);
    let statistics: Vec<&String> = start.keys().filter(|k| k.contains("running_")).collect();
    assert!(!statistics.is_empty(), "leafnet has batch norms");
    for name in statistics {
        assert_eq!(running[name], start[name], "{name} moved under --batch-norm running");
        if name.ends_with("running_var") {
            assert_ne!(batch[name], start[name], "{name} did not move under batch statistics");
        }
    }
    // The layers around them, and their own scale and shift, still trained.
    for name in ["features.0.0.weight", "features.0.1.weight", "features.0.1.bias"] {
        assert_ne!(running[name], start[name], "{name} did not train");
    }
    let (ok_run, _, error) = sprout_in(&scratch.path(""), &["train", "--batch-norm", "frozen"]);
    assert!(!ok_run && error.contains("frozen"), "{error}");
}
