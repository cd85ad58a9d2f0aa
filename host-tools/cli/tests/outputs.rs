//! Every command that writes a file checks its output path before any work: an output that
//! is one of the inputs (by any name) is refused and the input kept byte for byte, and a
//! folder that does not exist is named before a model is loaded or a device contacted; and
//! temporary files of killed runs are removed by the next write to their folder.

mod common;

use std::fs;

use common::{fails, ok, s, tiny_model, Scratch};

/// `sprout ARGS` fails naming the model input, and the model is left as it was.
fn refused_onto(args: &[&str], model: &std::path::Path) {
    let before = fs::read(model).unwrap();
    fails(args, "is the MODEL input; the output must not overwrite it");
    assert!(fs::read(model).unwrap() == before, "sprout {args:?} changed its input");
}

#[test]
fn no_command_writes_over_its_model() {
    let dir = Scratch::new("outputs-onto-input");
    let model = dir.path("m.sprout");
    tiny_model(&model);
    let m = s(&model);
    let hard = dir.path("hard.sprout");
    fs::hard_link(&model, &hard).unwrap();
    for output in [m, s(&hard)] {
        refused_onto(&["export", m, "--format", "onnx", "-o", output], &model);
        refused_onto(&["export", m, "--format", "safetensors", "--out", output], &model);
        refused_onto(&["quantize", m, "--dtype", "f16", "-o", output], &model);
        refused_onto(&["bundle", m, "-o", output], &model);
        refused_onto(&["plan", m, "--svg", output], &model);
        let input = dir.path("x.npy");
        refused_onto(&["run", m, "--input", s(&input), "--output", output], &model);
    }

    // convert: an ONNX file onto itself.
    let onnx = dir.path("m.onnx");
    ok(&["export", m, "--format", "onnx", "-o", s(&onnx)]);
    refused_onto(&["convert", s(&onnx), "-o", s(&onnx)], &onnx);
    let through = dir.0.join(".").join("m.onnx");
    refused_onto(&["convert", s(&onnx), "-o", s(&through)], &onnx);
    ok(&["convert", s(&onnx), "-o", s(&dir.path("back.sprout"))]);
    let mut files = dir.files();
    files.retain(|f| f.starts_with('.'));
    assert!(files.is_empty(), "temporary files left: {files:?}");
}

#[test]
fn a_missing_output_folder_is_named_before_any_work() {
    let dir = Scratch::new("outputs-missing-folder");
    let model = dir.path("m.sprout");
    tiny_model(&model);
    let m = s(&model);
    let out = dir.path("missing/out.bin");
    let o = s(&out);
    let needle = "missing does not exist";
    fails(&["export", m, "--format", "onnx", "-o", o], needle);
    fails(&["quantize", m, "--dtype", "f16", "-o", o], needle);
    fails(&["bundle", m, "-o", o], needle);
    fails(&["plan", m, "--svg", o], needle);
    fails(&["convert", s(&dir.path("none.onnx")), "-o", o], needle);
    // Checked before the port is opened: this port does not exist either.
    fails(&["device", "pull", "--port", "/dev/sprout-no-such-port", "-o", o], needle);
    fails(&["export", m, "--format", "onnx", "-o", s(&dir.0)], "is a folder, not a file name");
}

#[cfg(unix)]
#[test]
fn a_write_removes_what_killed_runs_left_in_its_folder() {
    let dir = Scratch::new("outputs-stale");
    let model = dir.path("m.sprout");
    tiny_model(&model);
    // A process id no process has any more: a child that exited and was reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!(".m.onnx.tmp-{dead}");
    fs::write(dir.path(&stale), b"half a model").unwrap();
    fs::write(dir.path("notes.tmp-1"), b"not sprout's").unwrap();
    ok(&["export", s(&model), "--format", "onnx", "-o", s(&dir.path("m.onnx"))]);
    assert_eq!(dir.files(), ["m.onnx", "m.sprout", "notes.tmp-1"]);
}
