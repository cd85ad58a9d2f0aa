//! One command-line vocabulary: `-o/--output`, `--batch-size` and `--lr` in every command
//! (the old spellings still parse, hidden from `--help`); options that would do nothing are
//! refused; missing and wrong-kind files are named once, without magic bytes; `--version`
//! names the commit; shell completions; `sprout plan MODEL.sprout` for trained and quantized
//! models.

mod common;

use std::fs;
use std::path::Path;

use common::{fails, ok, s, sprout, text, Scratch};
use serde_json::Value;

/// Runs `sprout ARGS`, which must fail after parsing (exit status 1, not clap's 2 for a
/// usage error); returns its standard error.
fn fails_after_parsing(args: &[&str]) -> String {
    let out = sprout(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "sprout {args:?}: {stderr}");
    stderr
}

/// Runs `sprout ARGS`, which must fail with exactly one error line, `error: MESSAGE`.
fn fails_once(args: &[&str], message: &str) {
    let stderr = fails_after_parsing(args);
    assert_eq!(stderr, format!("error: {message}\n"), "sprout {args:?}");
}

#[test]
fn help_shows_the_new_spellings_and_the_old_ones_still_parse() {
    let new_spellings: [(&[&str], &[&str]); 8] = [
        (&["convert"], &["-o, --output", "--batch-size"]),
        (&["export"], &["-o, --output"]),
        (&["bundle"], &["-o, --output", "--batch-size", "--lr"]),
        (&["plan"], &["--batch-size"]),
        (&["data", "leaves"], &["-o, --output"]),
        (&["device", "pull"], &["-o, --output"]),
        (&["device", "train"], &["--lr"]),
        (&["run"], &["-o, --output"]),
    ];
    for (command, flags) in new_spellings {
        let help = ok(&[command, &["--help"]].concat());
        for flag in flags {
            assert!(help.contains(flag), "sprout {command:?} --help lacks {flag}: {help}");
        }
        for old in ["--out <", "--batch <", "--learning-rate"] {
            assert!(!help.contains(old), "sprout {command:?} --help shows {old}: {help}");
        }
    }

    let scratch = Scratch::new("aliases");
    let missing = scratch.path("missing.sprout");
    let out = scratch.path("out");
    let (m, o) = (s(&missing), s(&out));
    let not_found = format!("error: not found: {m}\n");
    assert_eq!(fails_after_parsing(&["convert", m, "--out", o, "--batch", "2"]), not_found);
    assert_eq!(fails_after_parsing(&["export", m, "--format", "onnx", "--out", o]), not_found);
    assert_eq!(fails_after_parsing(&["bundle", m, "--batch", "2", "-o", o]), not_found);
    let train = ["train", "--zoo", "mlp", "--data", m, "--batch", "2", "-o", o];
    assert_eq!(fails_after_parsing(&train), not_found);
    assert!(ok(&["plan", "--zoo", "mlp", "--batch", "2"]).starts_with("mlp, batch 2,"));
    fs::write(scratch.path("taken"), b"").unwrap();
    let stderr = fails_after_parsing(&["data", "leaves", "--out", s(&scratch.0)]);
    assert!(stderr.contains("is not empty"), "{stderr}");
    // An unused local port: the command parses, then the connection fails.
    let port = "tcp:127.0.0.1:9";
    let pull = fails_after_parsing(&["device", "pull", "--port", port, "--out", o]);
    let train = ["device", "train", "--port", port, "--data", o, "--learning-rate", "0.1"];
    for stderr in [pull, fails_after_parsing(&train)] {
        assert!(stderr.contains("cannot connect to tcp:127.0.0.1:9"), "{stderr}");
    }
}

#[test]
fn options_that_would_do_nothing_are_refused() {
    let q = ["quantize", "m.sprout", "-o", "q.sprout"];
    let f16 = [&q[..], &["--dtype", "f16"]].concat();
    for (extra, flag) in [
        (&["--calib", "d"][..], "--calib"),
        (&["--calibration", "percentile"], "--calibration"),
        (&["--percentile", "99"], "--percentile"),
        (&["--keep-float", "head"], "--keep-float"),
        (&["--trainable-int8", "head", "--no-qas"], "--trainable-int8"),
        (&["--bias-correction"], "--bias-correction"),
    ] {
        let args = [&f16[..], extra].concat();
        fails_once(&args, &format!("{flag} applies to --dtype int8, not f16"));
    }
    let percentile = [&q[..], &["--percentile", "99"]].concat();
    fails_once(&percentile, "--percentile applies only with --calibration percentile");
    fails(&[&q[..], &["--no-qas"]].concat(), "--trainable-int8");

    let t = ["train", "--data", "d", "-o", "t.sprout"];
    let model_with = |extra: &[&'static str]| [&t[..], &["--model", "m.sprout"], extra].concat();
    fails(&model_with(&["--init-from", "b.sprout"]), "'--init-from <FILE>'");
    let adamw = [&t[..], &["--zoo", "mlp", "--optimizer", "adamw"]].concat();
    let momentum = [&adamw[..], &["--momentum", "0.5"]].concat();
    fails_once(&momentum, "--momentum applies to --optimizer sgd, not adamw");
    let nesterov = [&adamw[..], &["--nesterov"]].concat();
    fails_once(&nesterov, "--nesterov applies to --optimizer sgd, not adamw");

    fails(&["plan", "m.sprout", "--zoo", "mlp"], "cannot be used with");
    fails(&["plan"], "<MODEL.sprout|--zoo <NAME>>");
    fails(&["plan", "--zoo", "mlp", "--json", "--top", "3"], "'--top <N>'");

    let pull = ["device", "pull", "--port", "tcp:127.0.0.1:9", "--baud", "9600", "-o", "c"];
    fails_once(&pull, "--baud applies to serial ports, not to tcp:127.0.0.1:9");
}

#[test]
fn missing_and_wrong_kind_files_are_named_once() {
    let scratch = Scratch::new("kinds");
    let png = scratch.path("model.png");
    fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR").unwrap();
    let ckpt = scratch.path("checkpoint-epoch-001.ckpt");
    fs::write(&ckpt, b"\x89SPRCKPT\x01\0\0\0\0\0").unwrap();
    let odd = scratch.path("notes.txt");
    fs::write(&odd, b"not a model at all").unwrap();
    let missing = scratch.path("leavs");
    let out = scratch.path("out.sprout");
    let out = s(&out);

    let (p, c, m) = (s(&png), s(&ckpt), s(&missing));
    fails_once(&["eval", p, "--data", m], &format!("{p} is a PNG image, not a .sprout model"));
    fails_once(
        &["eval", c, "--data", m],
        &format!("{c} is a training checkpoint (.ckpt, for --resume), not a .sprout model"),
    );
    fails_once(
        &["quantize", s(&odd), "--dtype", "f16", "-o", out],
        &format!("{} is a file of unknown kind, not a .sprout model", s(&odd)),
    );
    fails_once(&["eval", m, "--data", m], &format!("not found: {m}"));
    fails_once(&["train", "--zoo", "mlp", "--data", m, "-o", out], &format!("not found: {m}"));
    fails_once(
        &["train", "--zoo", "mlp", "--data", p, "-o", out],
        &format!("{p} is a PNG image, not a class folder or a .npz / .safetensors tensor file"),
    );
    fails_once(&["convert", p, "-o", out], &format!("{p} is a PNG image, not an ONNX model"));
    fails_once(
        &["flash", "--board", "nrf52840-dk", c],
        &format!("{c} is a training checkpoint (.ckpt, for --resume), not an ELF firmware image"),
    );
}

#[test]
fn version_names_the_git_commit() {
    let version = ok(&["--version"]);
    let rest = version.trim_end().strip_prefix("sprout 0.1.0 (").expect("version and commit");
    let commit = rest.strip_suffix(')').expect("a closing parenthesis");
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    let is_hash = hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(is_hash || commit == "unknown", "{version}");
}

#[test]
fn completions_name_the_subcommands_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let script = ok(&["completions", shell]);
        for word in ["sprout", "plan", "train", "quantize", "completions", "batch-size"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    fails(&["completions", "tcsh"], "invalid value 'tcsh'");
}

/// Writes a safetensors file of `n` samples for the zoo MLP: x float32 [n, 64], y int64 [n].
fn mlp_data(path: &Path, n: usize) {
    use safetensors::tensor::{Dtype, TensorView};
    let x: Vec<u8> = (0..n * 64).flat_map(|i| ((i % 7) as f32 / 7.0).to_le_bytes()).collect();
    let y: Vec<u8> = (0..n as i64).flat_map(|i| (i % 10).to_le_bytes()).collect();
    let tensors = [
        ("x", TensorView::new(Dtype::F32, vec![n, 64], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, vec![n], &y).unwrap()),
    ];
    fs::write(path, safetensors::serialize(tensors, None).unwrap()).unwrap();
}

fn plan_json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(&[&["plan"], args, &["--json"]].concat())).unwrap()
}

#[test]
fn plan_reports_a_zoo_trained_and_a_quantized_model_file() {
    let scratch = Scratch::new("plan-files");
    let data = scratch.path("d.safetensors");
    mlp_data(&data, 8);
    let (trained, run) = (scratch.path("mlp.sprout"), scratch.path("run"));
    let train = ["--data", s(&data), "--epochs", "1", "--batch-size", "4", "--lr", "0.01"];
    ok(&[&["train", "--zoo", "mlp"], &train[..], &["--out-dir", s(&run), "-o", s(&trained)]]
        .concat());

    // The trained file plans as the zoo model recorded for its batch size.
    let file = plan_json(&[s(&trained)]);
    let zoo = plan_json(&["--zoo", "mlp", "--batch-size", "4"]);
    assert_eq!(file["model"], s(&trained));
    for key in ["batch", "arena_bytes", "lower_bound_bytes", "forward_flops", "model_params"] {
        assert_eq!(file[key], zoo[key], "{key}");
    }
    let text = ok(&["plan", s(&trained), "--trainable", "head", "--svg", s(&run.join("a.svg"))]);
    assert!(text.contains("arena") && text.contains("picture of the arena written"), "{text}");
    assert!(ok(&["plan", s(&trained), "--dtypes"]).contains("int8"));
    // --batch-size re-records the file: it plans as the zoo model recorded for that batch.
    let rebatched = plan_json(&[s(&trained), "--batch-size", "2"]);
    let zoo = plan_json(&["--zoo", "mlp", "--batch-size", "2"]);
    for key in ["batch", "arena_bytes", "forward_flops", "model_params"] {
        assert_eq!(rebatched[key], zoo[key], "{key}");
    }
    assert_eq!(rebatched["batch"], 2);

    let int8 = scratch.path("int8.sprout");
    let calib = ["--calib", s(&data), "--keep-float", "head", "-o", s(&int8)];
    ok(&[&["quantize", s(&trained)], &calib[..]].concat());
    let quantized = plan_json(&[s(&int8), "--trainable", "head"]);
    let float = plan_json(&[s(&trained), "--trainable", "head"]);
    assert_eq!(quantized["trainable_params"], float["trainable_params"]);
    let frozen = |report: &Value| report["frozen_bytes"].as_u64().unwrap();
    assert!(frozen(&quantized) < frozen(&float), "{quantized}");
    fails_once(
        &["plan", s(&int8), "--dtypes"],
        &format!(
            "--dtypes compares f32 storage with f16 and int8, but {} already stores weights \
             as int8: plan the float model it was quantized from",
            s(&int8)
        ),
    );
}
