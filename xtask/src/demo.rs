//! `cargo xtask demo`: the main job, the leaf-disease classifier end to end on the desktop.
//! Draws the synthetic leaf photos, pretrains LeafNet's backbone on the source domain (once;
//! later runs reuse it), fine-tunes only the head on the three target classes with the
//! backbone frozen, and prints the validation accuracy, all through the `sprout` CLI; then
//! fine-tunes the head once more on the emulated microcontroller (an int8 backbone under
//! QEMU, see [`crate::on_device`]) and compares the device's accuracy with the host's
//! evaluation of the checkpoint it sends back.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cmd::Cmd;
use crate::format_duration;
use crate::on_device::{fresh_run_folder, is_current_model};

/// Where the demo keeps its data, backbone and classifier (reused between runs).
const WORK_DIR: &str = "target/sprout-demo";

/// The source domain: seven leaf conditions on broad leaves, for pretraining.
pub const SOURCE_CLASSES: &str = "healthy,leaf_spot,rust,powdery_mildew,blight,mosaic,scorch";
/// The target domain: the three field classes on narrower leaves and other backgrounds.
pub const TARGET_CLASSES: &str = "healthy,leaf_spot,rust";

/// One data set to draw: folder name, domain, classes, images per class, seed.
pub struct LeafSet {
    pub folder: &'static str,
    pub domain: &'static str,
    pub classes: &'static str,
    pub per_class: &'static str,
    pub seed: &'static str,
}

const SOURCE: LeafSet = LeafSet {
    folder: "source",
    domain: "source",
    classes: SOURCE_CLASSES,
    per_class: "200",
    seed: "1",
};

const TARGET: LeafSet = LeafSet {
    folder: "target",
    domain: "target",
    classes: TARGET_CLASSES,
    per_class: "200",
    seed: "2",
};

/// Pretraining: every parameter, AdamW with a cosine schedule.
const PRETRAIN: &[(&str, &str)] = &[
    ("--trainable", "all"),
    ("--optimizer", "adamw"),
    ("--lr", "0.003"),
    ("--weight-decay", "0.0001"),
    ("--schedule", "cosine"),
    ("--epochs", "16"),
    ("--batch-size", "16"),
    ("--seed", "1"),
];

/// Fine-tuning: the head only (dropout + linear), the backbone frozen.
const FINE_TUNE: &[(&str, &str)] = &[
    ("--trainable", "head"),
    ("--optimizer", "sgd"),
    ("--lr", "0.1"),
    ("--schedule", "cosine"),
    ("--epochs", "15"),
    ("--batch-size", "16"),
    ("--seed", "2"),
];

pub fn run(root: &Path) -> Result<()> {
    let started = Instant::now();
    println!("==> building the sprout CLI (release)");
    Cmd::cargo(root).args(["build", "--release", "--locked", "-p", "sprout-cli"]).run()?;
    let sprout = root.join("target/release/sprout");
    let sprout = sprout.to_str().context("the workspace path is not UTF-8")?;
    let work = root.join(WORK_DIR);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let path = |name: &str| work.join(name).to_string_lossy().into_owned();

    println!("\n==> [1/5] synthetic leaf photos in {}", work.display());
    for set in [SOURCE, TARGET] {
        draw(root, sprout, &work.join(set.folder), &set)?;
    }

    let backbone = work.join("backbone.sprout");
    if is_current_model(&backbone) {
        println!("\n==> [2/5] reusing the pretrained backbone {}", backbone.display());
    } else {
        println!("\n==> [2/5] pretraining LeafNet on the source domain (7 classes)");
        Cmd::new(sprout, root)
            .args(["train", "--zoo", "leafnet", "--data", &path(SOURCE.folder)])
            .args(flags(PRETRAIN))
            .args(["--out-dir", &fresh_run_folder(&work.join("pretrain-run"))?])
            .args(["-o", &path("backbone.sprout")])
            .run()?;
    }

    println!("\n==> [3/5] fine-tuning the head on the target domain (backbone frozen)");
    Cmd::new(sprout, root)
        .args(["train", "--zoo", "leafnet", "--init-from", &path("backbone.sprout")])
        .args(["--data", &path(TARGET.folder)])
        .args(flags(FINE_TUNE))
        .args(["--out-dir", &fresh_run_folder(&work.join("fine-tune-run"))?])
        .args(["-o", &path("leaf-classifier.sprout")])
        .run()?;

    println!("\n==> [4/5] validation on held-out target photos");
    let val = work.join(TARGET.folder).join("val");
    Cmd::new(sprout, root)
        .args(["eval", &path("leaf-classifier.sprout"), "--data"])
        .args([val.to_string_lossy().as_ref()])
        .run()?;

    println!("\n==> [5/5] the head fine-tuned on the emulated Cortex-M4 (int8 backbone, QEMU)");
    let device = work.join("on-device");
    std::fs::create_dir_all(&device).with_context(|| format!("creating {}", device.display()))?;
    let leaf = crate::on_device::bundle_for_device(root, sprout, &backbone, &device)?;
    crate::boards::build(root, Some(&leaf.bundle))?;
    let elf = crate::boards::elf(root, "leaf-trainer");
    let outcome = crate::on_device::fine_tune(root, sprout, &elf, &leaf)?;
    println!(
        "\nsprout demo: the fine-tuned leaf classifier is {}; on the device the head reached \
         {:.1}% held-out accuracy, {:.1}% in the host's evaluation of the pulled checkpoint, \
         {:.1}% on target photos the device never saw ({} in all)",
        path("leaf-classifier.sprout"),
        outcome.device_accuracy,
        outcome.host_accuracy,
        outcome.unseen_accuracy,
        format_duration(started.elapsed())
    );
    Ok(())
}

/// `--flag value` pairs as arguments.
fn flags(pairs: &'static [(&'static str, &'static str)]) -> impl Iterator<Item = &'static str> {
    pairs.iter().flat_map(|&(flag, value)| [flag, value])
}

/// Draws a leaf data set unless an earlier run already did.
pub fn draw(root: &Path, sprout: &str, dir: &Path, set: &LeafSet) -> Result<()> {
    if dir.join("train").is_dir() && dir.join("val").is_dir() {
        println!("{} domain: reusing {}", set.domain, dir.display());
        return Ok(());
    }
    Cmd::new(sprout, root)
        .args(["data", "leaves", "--out", &dir.to_string_lossy(), "--domain", set.domain])
        .args(["--classes", set.classes, "--per-class", set.per_class, "--seed", set.seed])
        .args(["--size", "64", "--val-fraction", "0.25", "--force"])
        .run()
}
