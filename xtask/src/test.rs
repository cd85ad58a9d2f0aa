//! `cargo xtask test`: everything CI checks, in order, stopping at the first failure:
//! the microcontroller target, rustfmt, clippy, the workspace tests, and the no_std builds.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cmd::{Cmd, NotFound};
use crate::format_duration;

/// The microcontroller target every `no_std` crate must build for (Cortex-M4F/M7).
pub const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";

/// Every `no_std` build CI proves: (crate, features on top of `--no-default-features`).
/// A later crate (`sprout-planner`, `sprout-cortex-m`, the firmware, a board) is one line here.
pub const NO_STD_BUILDS: &[(&str, &[&str])] = &[
    // The executor and the kernels: no heap at all.
    ("sprout-core", &[]),
    // Building, differentiating and compiling graphs needs `alloc`.
    ("sprout-core", &["alloc"]),
    ("sprout-planner", &[]),
    // The on-device trainer: bundle decoding, training and checkpoint storage without a heap.
    ("sprout-firmware", &[]),
];

type StageFn = fn(&Path) -> Result<()>;

/// The stages, in the order they run.
const STAGES: &[(&str, StageFn)] = &[
    ("thumbv7em-none-eabihf target installed", ensure_target),
    ("formatting (cargo fmt --check)", fmt),
    ("lints (cargo clippy, host, all targets)", clippy),
    ("tests (cargo test --workspace)", workspace_tests),
    ("no_std builds (thumbv7em)", no_std_builds),
    ("no_std lints (clippy, thumbv7em)", no_std_clippy),
];

pub fn run(root: &Path) -> Result<()> {
    let start = Instant::now();
    let total = STAGES.len();
    for (index, (title, stage)) in STAGES.iter().enumerate() {
        let number = index + 1;
        println!("\n==> [{number}/{total}] {title}");
        let stage_start = Instant::now();
        stage(root).with_context(|| {
            format!(
                "xtask test: stage {number}/{total} \"{title}\" failed after {} (total {})",
                format_duration(stage_start.elapsed()),
                format_duration(start.elapsed()),
            )
        })?;
    }
    println!("\nxtask test: all {total} stages passed in {}", format_duration(start.elapsed()));
    Ok(())
}

/// Stage 1: installs the `no_std` target with rustup if it is missing.
pub fn ensure_target(root: &Path) -> Result<()> {
    let installed = match Cmd::new("rustup", root).args(["target", "list", "--installed"]).read() {
        Ok(installed) => installed,
        Err(error) if error.downcast_ref::<NotFound>().is_some() => {
            return Err(error.context(format!(
                "rustup is not installed, and the no_std stages need the `{NO_STD_TARGET}` \
                 target: install rustup from https://rustup.rs, then run \
                 `rustup target add {NO_STD_TARGET}`"
            )));
        }
        Err(error) => {
            return Err(error.context(format!(
                "could not list the installed Rust targets; check that \
                 `rustup target list --installed` works, then run \
                 `rustup target add {NO_STD_TARGET}` by hand"
            )));
        }
    };
    if is_installed(&installed, NO_STD_TARGET) {
        println!("{NO_STD_TARGET} is installed");
        return Ok(());
    }
    println!("{NO_STD_TARGET} is missing; installing it");
    Cmd::new("rustup", root).args(["target", "add", NO_STD_TARGET]).run().with_context(|| {
        format!(
            "could not install the `{NO_STD_TARGET}` target (offline?); install it by hand \
                 with `rustup target add {NO_STD_TARGET}` (rustup: https://rustup.rs)"
        )
    })
}

/// Whether `target` is a line of `rustup target list --installed`.
fn is_installed(installed: &str, target: &str) -> bool {
    installed.lines().any(|line| line.trim() == target)
}

fn fmt(root: &Path) -> Result<()> {
    Cmd::cargo(root).args(["fmt", "--all", "--", "--check"]).run()
}

fn clippy(root: &Path) -> Result<()> {
    Cmd::cargo(root)
        .args(["clippy", "--workspace", "--all-targets", "--locked"])
        .args(["--", "-D", "warnings"])
        .run()
}

fn workspace_tests(root: &Path) -> Result<()> {
    Cmd::cargo(root).args(["test", "--workspace", "--locked"]).run()
}

fn no_std_builds(root: &Path) -> Result<()> {
    for &(krate, features) in NO_STD_BUILDS {
        Cmd::cargo(root).args(["build"]).args(no_std_args(krate, features)).run()?;
    }
    Ok(())
}

fn no_std_clippy(root: &Path) -> Result<()> {
    for &(krate, features) in NO_STD_BUILDS {
        Cmd::cargo(root)
            .args(["clippy"])
            .args(no_std_args(krate, features))
            .args(["--", "-D", "warnings"])
            .run()?;
    }
    Ok(())
}

/// `-p CRATE --no-default-features [--features A,B] --target thumbv7em-none-eabihf --locked`
fn no_std_args(krate: &str, features: &[&str]) -> Vec<String> {
    let mut args = vec!["-p".into(), krate.into(), "--no-default-features".into()];
    if !features.is_empty() {
        args.push("--features".into());
        args.push(features.join(","));
    }
    args.extend(["--target".into(), NO_STD_TARGET.into(), "--locked".into()]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_target_among_installed_ones() {
        let listed = "thumbv7em-none-eabihf\nx86_64-unknown-linux-gnu\n";
        assert!(is_installed(listed, NO_STD_TARGET));
        assert!(!is_installed("x86_64-unknown-linux-gnu\n", NO_STD_TARGET));
        // A prefix of another target's name is not that target.
        assert!(!is_installed("thumbv7em-none-eabi\n", NO_STD_TARGET));
        assert!(!is_installed("", NO_STD_TARGET));
    }

    #[test]
    fn no_std_builds_pass_features_only_when_there_are_some() {
        assert_eq!(
            no_std_args("sprout-core", &[]).join(" "),
            "-p sprout-core --no-default-features --target thumbv7em-none-eabihf --locked"
        );
        assert_eq!(
            no_std_args("sprout-core", &["alloc", "x"]).join(" "),
            "-p sprout-core --no-default-features --features alloc,x \
             --target thumbv7em-none-eabihf --locked"
        );
    }

    #[test]
    fn six_stages_and_the_first_installs_the_target() {
        assert_eq!(STAGES.len(), 6);
        assert!(STAGES[0].0.contains(NO_STD_TARGET));
    }
}
