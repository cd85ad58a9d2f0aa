//! `sprout data leaves` end to end: the built binary writes the train/val folder layout and
//! its summary, refuses a non-empty folder unless forced, and names unknown classes.

mod common;

use std::path::Path;
use std::process::Output;

use common::{sprout, text, Scratch};

/// Runs `sprout data leaves ARGS`.
fn sprout_leaves(args: &[&str]) -> Output {
    sprout(&[&["data", "leaves"], args].concat())
}

fn count(folder: &Path) -> usize {
    std::fs::read_dir(folder).map(|entries| entries.count()).unwrap_or(0)
}

#[test]
fn leaves_writes_the_layout_and_a_summary() {
    let scratch = Scratch::new("layout");
    let out = scratch.0.join("leaves");
    let dir = out.to_str().unwrap();
    let args = [
        "--out",
        dir,
        "--classes",
        "healthy,rust",
        "--per-class",
        "5",
        "--size",
        "32",
        "--seed",
        "3",
    ];
    let output =
        sprout_leaves(&[&args[..], &["--domain", "target", "--val-fraction", "0.4"]].concat());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("target domain, 32x32 PNG, seed 3"), "{stdout}");
    assert!(stdout.contains("10 images"), "{stdout}");
    for class in ["healthy", "rust"] {
        assert_eq!(count(&out.join("train").join(class)), 3, "{class}");
        assert_eq!(count(&out.join("val").join(class)), 2, "{class}");
        assert!(out.join("val").join(class).join("00001.png").is_file());
    }
    assert_eq!(count(&out), 2, "only train/ and val/ are written");
    assert_eq!(count(&out.join("train")), 2);
}

#[test]
fn leaves_refuses_a_non_empty_folder_unless_forced() {
    let scratch = Scratch::new("refuse");
    let dir = scratch.0.to_str().unwrap();
    std::fs::write(scratch.0.join("keep.txt"), "mine").unwrap();
    let args = ["--out", dir, "--classes", "rust", "--per-class", "2", "--size", "16"];
    let refused = sprout_leaves(&args);
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("is not empty") && stderr.contains("--force"), "{stderr}");
    assert_eq!(count(&scratch.0), 1, "a refused run wrote files");

    // Forced: train/ and val/ are replaced, other files stay.
    std::fs::create_dir_all(scratch.0.join("train/old_class")).unwrap();
    let forced = sprout_leaves(&[&args[..], &["--force"]].concat());
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(scratch.0.join("keep.txt").is_file());
    assert!(!scratch.0.join("train/old_class").exists());
    assert_eq!(count(&scratch.0.join("train/rust")), 2);
}

#[test]
fn leaves_names_an_unknown_class_and_writes_nothing() {
    let scratch = Scratch::new("unknown");
    let out = scratch.0.join("leaves");
    let output = sprout_leaves(&[
        "--out",
        out.to_str().unwrap(),
        "--classes",
        "healthy,blight",
        "--domain",
        "target",
    ]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "unknown class 'blight' for the target domain (known: healthy, leaf_spot, rust)"
        ),
        "{stderr}"
    );
    assert!(!out.exists());
}
