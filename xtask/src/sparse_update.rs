//! Why training inside the int8 backbone matters on a microcontroller: from one int8 model
//! (LeafNet pretrained on a narrow source, a fresh head for the field's classes), the
//! emulated board fine-tunes the head alone, then on the same firmware, each bundle written
//! into its image, a sparse update that `sprout bundle --sparse-budget` picks (the head and
//! the biases of the last int8 blocks, with QAS) and the stem update (the head and the
//! biases of `features.0` to `features.2`, which trains from the input: `sprout device
//! train` streams its samples every epoch). The host evaluates every pulled checkpoint on
//! target photos the device never saw; the memory figures come from the bundles and the
//! firmware image. `cargo xtask bench cortex-m` compares them on the same photos, from a
//! backbone pretrained on the soil domain's seven classes; `cargo xtask test on-device`
//! runs a short sparse and stem update after CI's head-only fine-tune, their paths end to
//! end.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cmd::Cmd;
use crate::demo::{LeafSet, SOURCE_CLASSES};
use crate::format_duration;
use crate::on_device::{self, Leaf, Outcome};

/// The device memory the sparse update must fit: the largest arena, the state four times
/// and the cached samples (what the leaf-trainer firmware holds).
const BUDGET: &str = "200KiB";
/// Samples the device caches, training and held out (the firmware's room for deeper
/// features: 90 + 30).
const CACHE_SAMPLES: &str = "120";
/// SGD on the device for the sparse update: one sample per step and no momentum, which
/// keeps the state and the training arena within the firmware's buffers.
const SPARSE_SGD: &[&str] = &["--batch-size", "1", "--momentum", "0"];
/// The stem update's trainable tensors (`sprout bundle --trainable`): what the host
/// measurements say the domain shift needs.
pub const STEM: &str = "head,features.0.*.bias,features.1.*.bias,features.2.*.bias";
/// The RAM of the emulated board (mps2-an386 with sprout's 256 KiB budget).
const BOARD_RAM: u64 = 262_144;
/// The most the sparse update's training arena may take against the int8 backbone's
/// inference arena.
const ARENA_RATIO: f64 = 1.25;
/// Instructions per tick of the QEMU board's clock (SysTick at 25 MHz) under `-icount
/// shift=0`, which runs one instruction per virtual nanosecond.
const INSTRUCTIONS_PER_TICK: f64 = 40.0;

/// `cargo xtask bench cortex-m`'s source: the soil domain's seven classes, the pretraining
/// under which a new head alone reached only 74-84% on the field's classes (8439efa).
const BENCH_SOURCE: LeafSet = LeafSet {
    folder: "soil",
    domain: "soil",
    classes: SOURCE_CLASSES,
    per_class: "200",
    seed: "1",
};

/// The bench's pretraining: as CI's, 20 epochs.
const BENCH_PRETRAIN_EPOCHS: u32 = 20;

/// Where the bench keeps its photos, backbone and bundles.
const BENCH_DIR: &str = "target/sprout-bench-sparse";

/// `leaf` with the sparse update's bundle and checkpoint in place of the head-only ones.
pub fn sparse_files(leaf: &Leaf) -> Leaf {
    Leaf {
        bundle: leaf.bundle.with_file_name("leaf-sparse.bundle"),
        checkpoint: leaf.checkpoint.with_file_name("device-sparse.ckpt"),
        ..leaf.clone()
    }
}

/// The sparse update's bundle of `leaf`'s model, picked under [`BUDGET`].
pub fn sparse_bundle(root: &Path, sprout: &str, leaf: &Leaf) -> Result<Leaf> {
    let sparse = sparse_files(leaf);
    Cmd::new(sprout, root)
        .args(["bundle", &leaf.model.to_string_lossy(), "--sparse-budget", BUDGET])
        .args(["--cache-samples", CACHE_SAMPLES])
        .args(SPARSE_SGD.iter().copied())
        .args(["-o", &sparse.bundle.to_string_lossy()])
        .run()?;
    Ok(sparse)
}

/// `leaf` with the stem update's bundle and checkpoint in place of the head-only ones.
pub fn stem_files(leaf: &Leaf) -> Leaf {
    Leaf {
        bundle: leaf.bundle.with_file_name("leaf-stem.bundle"),
        checkpoint: leaf.checkpoint.with_file_name("device-stem.ckpt"),
        ..leaf.clone()
    }
}

/// The stem update's bundle of `leaf`'s model ([`STEM`], one sample a step as the sparse
/// update's).
pub fn stem_bundle(root: &Path, sprout: &str, leaf: &Leaf) -> Result<Leaf> {
    let stem = stem_files(leaf);
    Cmd::new(sprout, root)
        .args(["bundle", &leaf.model.to_string_lossy(), "--trainable", STEM])
        .args(SPARSE_SGD.iter().copied())
        .args(["-o", &stem.bundle.to_string_lossy()])
        .run()?;
    Ok(stem)
}

/// An update of the backbone the board ran, and what it needed.
pub struct Update {
    /// What it trains, for its line.
    pub name: &'static str,
    pub outcome: Outcome,
    /// Static RAM of its firmware image, in bytes.
    pub static_ram: u64,
    /// Its training arena, in bytes.
    pub training_arena: usize,
    /// Instructions its training took per training sample and epoch (held-out evaluation
    /// included; for a streamed update, the link requests that carried its samples), in
    /// millions.
    pub insn_per_sample: f64,
    /// The whole run on the board: transfer, training, pull and evaluation.
    pub wall: Duration,
}

impl fmt::Display for Update {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "on-device update {}: {:.1}% on unseen photos ({:.1}% held out on the device), \
             static RAM {} B, training arena {} B, insn per sample {:.1} M, wall {}",
            self.name,
            self.outcome.unseen_accuracy,
            self.outcome.device_accuracy,
            self.static_ram,
            self.training_arena,
            self.insn_per_sample,
            format_duration(self.wall)
        )
    }
}

/// The head alone against the best update the board holds (issue 18's line).
pub struct Comparison<'u> {
    pub head_only: &'u Outcome,
    pub best: &'u Update,
    /// The int8 backbone's inference arena (the head-only bundle's backbone plan).
    pub inference_arena: usize,
}

impl fmt::Display for Comparison<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "on-device leafnet: head-only {:.1}%, sparse update {:.1}%, static RAM {} B of \
             {BOARD_RAM}, training arena {} B, int8 inference arena {} B, insn per sample {:.1} M",
            self.head_only.unseen_accuracy,
            self.best.outcome.unseen_accuracy,
            self.best.static_ram,
            self.best.training_arena,
            self.inference_arena,
            self.best.insn_per_sample
        )
    }
}

/// Fine-tunes on the emulated board with each update's bundle written into the leaf
/// trainer `elf` (built with `head_only`'s bundle, which ran as `head_only_outcome`),
/// prints one line per update and the comparison with the best of them (on photos the
/// device never saw), and checks what holds whatever the accuracies: each run completes
/// with a checkpoint that scores what the device recorded, the device ran the update's
/// bundle, the firmware fits the board's RAM and each training arena stays within
/// [`ARENA_RATIO`] of the inference arena.
pub fn compare(
    root: &Path,
    sprout: &str,
    elf: &Path,
    (head_only, head_only_outcome): (&Leaf, Outcome),
    updates: &[(&'static str, &Leaf)],
) -> Result<()> {
    let inference_arena = arenas(&head_only.bundle)?.1;
    let mut done = Vec::new();
    for &(name, leaf) in updates {
        let update = run_update(root, sprout, elf, name, leaf)?;
        println!("{update}");
        if update.static_ram > BOARD_RAM {
            bail!("the {name} firmware's static RAM exceeds the board's {BOARD_RAM} bytes");
        }
        if update.training_arena as f64 > ARENA_RATIO * inference_arena as f64 {
            bail!("the {name} training arena exceeds {ARENA_RATIO}x the int8 inference arena");
        }
        done.push(update);
    }
    for update in &done {
        println!("{update}");
    }
    // On a tie the first (the cheaper) update wins.
    let best = done
        .iter()
        .reduce(|best, u| match u.outcome.unseen_accuracy > best.outcome.unseen_accuracy {
            true => u,
            false => best,
        })
        .context("no update to compare with")?;
    println!("best update: {}", best.name);
    println!("{}", Comparison { head_only: &head_only_outcome, best, inference_arena });
    Ok(())
}

/// Runs `leaf`'s update on `elf` with its bundle written in, and measures it.
fn run_update(
    root: &Path,
    sprout: &str,
    elf: &Path,
    name: &'static str,
    leaf: &Leaf,
) -> Result<Update> {
    let image_path = leaf.bundle.with_extension("elf");
    crate::boards::with_bundle(elf, &leaf.bundle, &image_path)?;
    let started = Instant::now();
    let (outcome, log) = on_device::run_on_board(root, sprout, &image_path, leaf)?;
    let wall = started.elapsed();
    check_bundle_size(&log, &leaf.bundle)?;
    let image =
        std::fs::read(&image_path).with_context(|| format!("reading {}", image_path.display()))?;
    let (_, static_ram) = crate::boards::sizes(&image)?;
    Ok(Update {
        name,
        outcome,
        static_ram,
        training_arena: arenas(&leaf.bundle)?.0,
        insn_per_sample: instructions_per_sample(&log)?,
        wall,
    })
}

/// Checks that the device decoded a bundle of `bundle`'s size (its log line `...: bundle N
/// bytes`), so that it ran the bundle written into its image.
fn check_bundle_size(log: &[String], bundle: &Path) -> Result<()> {
    let expected =
        std::fs::metadata(bundle).with_context(|| format!("reading {}", bundle.display()))?.len();
    let logged = log
        .iter()
        .find_map(|line| on_device::field(line, ": bundle ", " bytes")?.parse::<u64>().ok())
        .context("the device logged no bundle size")?;
    if logged != expected {
        bail!("the device ran a {logged}-byte bundle, not {}'s {expected} bytes", bundle.display());
    }
    Ok(())
}

/// Millions of instructions per training sample and epoch, from the device's log line
/// `training took T clock ticks for E epochs of S samples`.
fn instructions_per_sample(log: &[String]) -> Result<f64> {
    let parsed = log.iter().find_map(|line| {
        let ticks: f64 = on_device::field(line, "training took ", " clock ticks")?.parse().ok()?;
        let epochs: f64 = on_device::field(line, " for ", " epochs")?.parse().ok()?;
        let samples: f64 = on_device::field(line, " epochs of ", " samples")?.parse().ok()?;
        Some((ticks, epochs * samples))
    });
    match parsed {
        Some((ticks, samples)) if samples > 0.0 => {
            Ok(ticks * INSTRUCTIONS_PER_TICK / samples / 1e6)
        }
        _ => bail!("the device logged no training ticks for a finished run"),
    }
}

/// `(training arena, backbone inference arena)` in bytes, from the header of `bundle`.
fn arenas(bundle: &Path) -> Result<(usize, usize)> {
    let bytes = std::fs::read(bundle).with_context(|| format!("reading {}", bundle.display()))?;
    let (header, _) = sprout_core::format::bundle::read_header(&bytes)
        .with_context(|| format!("reading the header of {}", bundle.display()))?;
    Ok((header.train.sizes.arena, header.backbone.sizes.arena))
}

/// `cargo xtask bench cortex-m`'s comparison: the release CLI, a backbone pretrained on
/// [`BENCH_SOURCE`], the boards built with its head-only bundle, both fine-tunes on the same
/// photos for as many epochs.
pub fn bench(root: &Path) -> Result<()> {
    let sprout = crate::bench::release_sprout(root)?;
    let sprout = sprout.to_str().context("the workspace path is not UTF-8")?;
    let work = root.join(BENCH_DIR);
    let backbone = on_device::pretrain(root, sprout, &work, &BENCH_SOURCE, BENCH_PRETRAIN_EPOCHS)?;
    let head_only = on_device::bundle_for_device(root, sprout, &backbone, &work)?;
    let sparse = sparse_bundle(root, sprout, &head_only)?;
    let stem = stem_bundle(root, sprout, &head_only)?;
    crate::boards::build(root, Some(&head_only.bundle))?;
    let elf = crate::boards::elf(root, "leaf-trainer");
    let (outcome, _) = on_device::run_on_board(root, sprout, &elf, &head_only)?;
    let updates = [(SPARSE_NAME, &sparse), (STEM_NAME, &stem)];
    compare(root, sprout, &elf, (&head_only, outcome), &updates)
}

/// The updates' names in their lines.
pub const SPARSE_NAME: &str = "sparse (head, biases picked by --sparse-budget)";
pub const STEM_NAME: &str = "stem (head, biases of features.0-2, streamed)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_size_the_device_logged_must_be_the_files() {
        let bundle =
            std::env::temp_dir().join(format!("sprout-xtask-{}.bundle", std::process::id()));
        std::fs::write(&bundle, [0u8; 1234]).unwrap();
        let log = |line: &str| vec![line.to_string(), "INFO training ended".to_string()];
        let line = "INFO leaf-trainer on qemu: bundle 1234 bytes, arena 1 of 2 bytes";
        assert!(check_bundle_size(&log(line), &bundle).is_ok());
        let other = check_bundle_size(&log(&line.replace("1234", "1200")), &bundle);
        assert!(other.unwrap_err().to_string().contains("a 1200-byte bundle"));
        assert!(check_bundle_size(&log("INFO nothing"), &bundle).is_err());
        std::fs::remove_file(&bundle).unwrap();
    }

    #[test]
    fn instructions_per_sample_come_from_the_device_log() {
        let log = |line: &str| vec!["INFO training ended".to_string(), line.to_string()];
        let line = "INFO training took 1500000 clock ticks for 10 epochs of 60 samples";
        assert_eq!(instructions_per_sample(&log(line)).unwrap(), 0.1);
        let none = "INFO training took 1500000 clock ticks for 0 epochs of 60 samples";
        assert!(instructions_per_sample(&log(none)).is_err());
        assert!(instructions_per_sample(&log("INFO nothing")).is_err());
    }
}
