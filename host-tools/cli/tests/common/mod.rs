//! What the CLI tests share: running the built `sprout` binary and reading its outcome, a
//! tiny image model, and scratch folders that clean up after themselves. Each test file
//! uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use sprout_core::format::Preprocessing;
use sprout_core::{nn, save_model, Graph, Metadata, ModelFile, Shape};

/// Runs the built `sprout` with `args`.
pub fn sprout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sprout")).args(args).output().expect("the sprout binary runs")
}

/// Runs `sprout ARGS`, which must succeed; returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = sprout(args);
    assert!(out.status.success(), "sprout {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs `sprout ARGS`, which must fail with `needle` in its standard error.
pub fn fails(args: &[&str], needle: &str) {
    let out = sprout(args);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "sprout {args:?} should fail");
    assert!(stderr.contains(needle), "sprout {args:?}: '{needle}' not in: {stderr}");
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// A tiny image classifier at 16x16: flatten, linear 768 -> 8, ReLU, linear 8 -> 3.
pub fn tiny_model(path: &Path) {
    deep_model(path, 1);
}

/// Like `tiny_model`, with `hidden` linear + ReLU layers of 8 units (`features.0`,
/// `features.1`, ... `features.{2 hidden - 1}`).
pub fn deep_model(path: &Path, hidden: usize) {
    let mut g = Graph::new(1);
    let x = g.input("input", Shape::d4(4, 3, 16, 16)).unwrap();
    let y = g.labels("labels", 4).unwrap();
    let mut h = g.flatten("flat", x).unwrap();
    for layer in 0..hidden {
        h = nn::linear(&mut g, &format!("features.{}", 2 * layer), h, 8).unwrap();
        h = g.relu(&format!("features.{}", 2 * layer + 1), h).unwrap();
    }
    let logits = nn::linear(&mut g, "classifier", h, 3).unwrap();
    g.cross_entropy("loss", logits, y).unwrap();
    let metadata = Metadata {
        class_names: vec!["healthy".into(), "leaf_spot".into(), "rust".into()],
        input_shape: Shape::d4(4, 3, 16, 16),
        preprocessing: Preprocessing {
            mean: vec![0.485, 0.456, 0.406],
            std: vec![0.229, 0.224, 0.225],
            resize: Some((16, 16)),
            fit: None,
        },
        provenance: "test".into(),
    };
    std::fs::write(path, save_model(&ModelFile::from_graph(&g, metadata)).unwrap()).unwrap();
}

/// A fresh scratch folder for one test, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sprout-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names of the files in the folder, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` pseudo-random values in [-1, 1), the same for the same `seed`.
pub fn values(seed: u32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) % 1000) as f32 / 500.0
                - 1.0
        })
        .collect()
}

/// Starts `sprout serve` on data folder `data` at a free loopback port (with `extra`
/// options): the child, and its base URL once it listens.
pub fn start_serve(data: &Path, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["serve", "--data-dir", s(data), "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base =
        line.trim().strip_prefix("listening on ").expect("the address is printed").to_string();
    (child, base)
}

/// A token of `scope` for data folder `data`.
pub fn serve_token(data: &Path, scope: &str) -> String {
    ok(&["serve", "token", "create", "--data-dir", s(data), "--scope", scope]).trim().to_string()
}
