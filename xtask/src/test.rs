//! `cargo xtask test`: everything CI checks, in order, stopping at the first failure:
//! the microcontroller targets, rustfmt, clippy, the workspace tests, the service's web page
//! in headless Chromium, Miri, the CPU backend's conformance on aarch64 under qemu-aarch64,
//! the no_std builds, the boards (built, run under QEMU, compared bit for bit with CMSIS-NN,
//! sizes compared with their snapshot), the leaf classifier fine-tuned on the emulated
//! microcontroller (head-only and a short sparse update), and a federated fine-tuning run
//! on Flower's deployment engine across three local `sprout serve` boxes.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::cmd::{Cmd, NotFound};
use crate::debian::{self, Tool};
use crate::format_duration;

/// The microcontroller target every `no_std` crate must build for (Cortex-M4F/M7).
pub const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";
/// Cortex-M0+ (no DSP extension): proves the Cortex-M backend's scalar fallback builds.
pub const SCALAR_TARGET: &str = "thumbv6m-none-eabi";
/// The targets installed by the first stage.
const TARGETS: [&str; 2] = [NO_STD_TARGET, SCALAR_TARGET];

/// Every `no_std` build CI proves: (crate, features on top of `--no-default-features`).
/// A later crate (`sprout-planner`, `sprout-cortex-m`, the firmware, a board) is one line here.
pub const NO_STD_BUILDS: &[(&str, &[&str])] = &[
    // The executor and the kernels: no heap at all.
    ("sprout-core", &[]),
    // Building, differentiating and compiling graphs needs `alloc`.
    ("sprout-core", &["alloc"]),
    // The host <-> device link: framing, device session and client, still without a heap.
    ("sprout-core", &["link"]),
    // The device's file formats (bundle, device checkpoint) decode without a heap.
    ("sprout-core", &["serde"]),
    ("sprout-planner", &[]),
    // The DSP int8 path and, with `conformance`, the checks the QEMU board runs.
    ("sprout-cortex-m", &[]),
    ("sprout-cortex-m", &["conformance"]),
    // The on-device trainer: bundle decoding, training and checkpoint storage without a heap.
    ("sprout-firmware", &[]),
];

type StageFn = fn(&Path) -> Result<()>;

/// One stage: the name `cargo xtask test NAME` selects it by, what it checks, and how.
struct Stage {
    name: &'static str,
    title: &'static str,
    run: StageFn,
}

const fn stage(name: &'static str, title: &'static str, run: StageFn) -> Stage {
    Stage { name, title, run }
}

/// The stages, in the order they run.
const STAGES: &[Stage] = &[
    stage(
        "targets",
        "thumbv7em-none-eabihf and thumbv6m-none-eabi targets installed",
        ensure_targets,
    ),
    stage("fmt", "formatting (cargo fmt --check)", fmt),
    stage("clippy", "lints (cargo clippy, host, all targets)", clippy),
    stage("tests", "tests (cargo test --workspace)", workspace_tests),
    stage("web", "the sprout serve web page in headless Chromium over WebDriver", web_page),
    stage(
        "miri",
        "Miri over the planner, the link and formats, the CPU backend's unsafe (nightly)",
        miri,
    ),
    stage(
        "aarch64",
        "CPU backend conformance under qemu-aarch64 (NEON), sprout-cli built for aarch64",
        aarch64,
    ),
    stage("no-std", "no_std builds (thumbv7em)", no_std_builds),
    stage("no-std-clippy", "no_std lints (clippy, thumbv7em)", no_std_clippy),
    stage("scalar", "Cortex-M scalar fallback (build and clippy, thumbv6m)", scalar_fallback),
    stage(
        "leaf-bundle",
        "leaf bundle for the trainer firmware: photos, short pretraining, int8",
        leaf_bundle,
    ),
    stage("boards", "boards: rustfmt, clippy, release build", boards_build),
    stage(
        "qemu",
        "boards: board-check, stack guard and kernel conformance under QEMU",
        crate::boards::run_on_qemu,
    ),
    stage(
        "cmsis-nn",
        "boards: leafnet's int8 convolutions bit for bit against CMSIS-NN under QEMU",
        crate::cmsis::side_by_side,
    ),
    stage(
        "sizes",
        "boards: flash/RAM sizes against boards/sizes.expected",
        crate::boards::check_sizes,
    ),
    stage(
        "on-device",
        "leafnet fine-tuned on the device under QEMU, head-only, sparse and stem, pulled, evaluated",
        crate::on_device::test,
    ),
    stage(
        "fleet",
        "federated fine-tuning on Flower: 3 sprout serve boxes, 3 rounds (flwr in target/fleet-venv)",
        crate::fleet::test,
    ),
];

/// The stage names, for the usage text and error messages.
pub fn stage_names() -> String {
    STAGES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// Runs every stage (no names) or the named ones, in CI's order; a later stage relies on
/// what earlier ones built (the on-device stage on the boards stage's firmware).
pub fn run(root: &Path, names: &[&str]) -> Result<()> {
    if let Some(unknown) = names.iter().find(|n| !STAGES.iter().any(|s| s.name == **n)) {
        bail!("unknown test stage `{unknown}` (stages: {})", stage_names());
    }
    let start = Instant::now();
    let selected: Vec<&Stage> =
        STAGES.iter().filter(|s| names.is_empty() || names.contains(&s.name)).collect();
    let total = selected.len();
    for (index, stage) in selected.iter().enumerate() {
        let number = index + 1;
        println!("\n==> [{number}/{total}] {} ({})", stage.title, stage.name);
        let stage_start = Instant::now();
        (stage.run)(root).with_context(|| {
            format!(
                "xtask test: stage {number}/{total} \"{}\" failed after {} (total {})",
                stage.title,
                format_duration(stage_start.elapsed()),
                format_duration(start.elapsed()),
            )
        })?;
        println!("<== {} passed in {}", stage.name, format_duration(stage_start.elapsed()));
    }
    println!("\nxtask test: all {total} stages passed in {}", format_duration(start.elapsed()));
    Ok(())
}

/// Stage 1: installs the microcontroller targets with rustup where missing.
fn ensure_targets(root: &Path) -> Result<()> {
    TARGETS.iter().try_for_each(|target| ensure_target(root, target))
}

/// Installs `target` with rustup if it is missing.
pub fn ensure_target(root: &Path, target: &str) -> Result<()> {
    let installed = match Cmd::new("rustup", root).args(["target", "list", "--installed"]).read() {
        Ok(installed) => installed,
        Err(error) if error.downcast_ref::<NotFound>().is_some() => {
            return Err(error.context(format!(
                "rustup is not installed, and the no_std stages need the `{target}` \
                 target: install rustup from https://rustup.rs, then run \
                 `rustup target add {target}`"
            )));
        }
        Err(error) => {
            return Err(error.context(format!(
                "could not list the installed Rust targets; check that \
                 `rustup target list --installed` works, then run \
                 `rustup target add {target}` by hand"
            )));
        }
    };
    if is_installed(&installed, target) {
        println!("{target} is installed");
        return Ok(());
    }
    println!("{target} is missing; installing it");
    Cmd::new("rustup", root).args(["target", "add", target]).run().with_context(|| {
        format!(
            "could not install the `{target}` target (offline?); install it by hand \
                 with `rustup target add {target}` (rustup: https://rustup.rs)"
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

/// The tests stage's cargo command; the stages that need the sprout CLI build it with the
/// same arguments (and `--no-run`), so that they reuse this build instead of redoing it.
pub const WORKSPACE_TESTS: [&str; 3] = ["test", "--workspace", "--locked"];

fn workspace_tests(root: &Path) -> Result<()> {
    Cmd::cargo(root).args(WORKSPACE_TESTS).run()
}

/// The programs the browser test drives, and their Debian packages.
const BROWSER: [Tool; 2] = [
    Tool { program: "chromium", package: "chromium" },
    Tool { program: "chromedriver", package: "chromium-driver" },
];

/// Installs Chromium and its WebDriver when missing, then runs the browser test of the
/// service's page, which may not skip here (`SPROUT_REQUIRE_BROWSER`).
fn web_page(root: &Path) -> Result<()> {
    debian::ensure(root, &BROWSER)?;
    // `--workspace` keeps the features the tests stage built with, so nothing is rebuilt.
    Cmd::cargo(root)
        .args(["test", "--workspace", "--test", "web", "--locked"])
        .env("SPROUT_REQUIRE_BROWSER", "1")
        .run()
}

/// The nightly toolchain Miri comes with.
const MIRI_TOOLCHAIN: &str = "nightly";

/// What Miri runs: (crate, features, the arguments of its unit tests: name filters, none for
/// all, `--skip`). Miri interprets every step, so the lists stay short: the planner whole,
/// the link's frames and the file formats (not the 800 KB random-bytes sweep, which the
/// `link_device` fuzz target does far faster), the CPU backend's `unsafe` sites (the GEMM
/// call, the multiversioned loops' feature-checked calls, the thread pool's job hand-off,
/// the rows batch norm's threads write through raw pointers). The Cortex-M DSP kernels are
/// inline ARM assembly, which Miri cannot run: the QEMU conformance stage checks them.
const MIRI_TESTS: &[(&str, &str, &[&str])] = &[
    ("sprout-planner", "", &[]),
    ("sprout-core", "link", &["link::", "format::", "--skip", "random_bytes"]),
    (
        "sprout-cpu",
        "",
        &[
            "gemm::",
            "pool::",
            "pointwise::tests::dot",
            "pointwise::tests::sigmoid",
            "same_depthwise::",
            "norm::tests::rectified",
            "parallel::tests::sums_over_the_batch",
            "parallel::tests::span_pairs",
        ],
    ),
];

/// Runs [`MIRI_TESTS`] under Miri (installing the nightly toolchain's `miri` and `rust-src`
/// components when missing). AVX2 is switched on at compile time so the CPU backend takes
/// its AVX2 branch, whose `unsafe` call Miri then checks too.
fn miri(root: &Path) -> Result<()> {
    let nightly = |args: &[&str]| {
        Cmd::new("rustup", root).args(["run", MIRI_TOOLCHAIN]).args(args.iter().copied())
    };
    if nightly(&["cargo", "miri", "--version"]).read().is_err() {
        println!(
            "Miri is missing; installing the {MIRI_TOOLCHAIN} toolchain with miri and rust-src"
        );
        Cmd::new("rustup", root)
            .args(["toolchain", "install", MIRI_TOOLCHAIN, "--profile", "minimal"])
            .args(["--component", "miri", "--component", "rust-src"])
            .run()
            .context(
                "could not install Miri (offline?); install it by hand with \
                 `rustup toolchain install nightly --component miri --component rust-src`",
            )?;
    }
    for &(krate, features, filters) in MIRI_TESTS {
        nightly(&["cargo", "miri", "test", "-p", krate, "--lib", "--locked"])
            .args(["--features", features, "--"])
            .args(filters.iter().copied())
            .env("RUSTFLAGS", "-C target-feature=+avx2")
            .run()?;
    }
    Ok(())
}

/// The Jetson's target, whose CPU runs the backend's NEON path.
pub const AARCH64_TARGET: &str = "aarch64-unknown-linux-gnu";

/// The cross linker (also the C compiler of build scripts) and the user-mode emulator.
const AARCH64_TOOLS: &[Tool] = &[
    Tool { program: "aarch64-linux-gnu-gcc", package: "gcc-aarch64-linux-gnu" },
    Tool { program: "qemu-aarch64", package: "qemu-user" },
];

/// Where the cross toolchain keeps aarch64's C library, for qemu-aarch64's dynamic loader.
const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// The aarch64 stage: the CPU backend's unit tests and the conformance suite
/// (`tests/tests/backend_cpu.rs`) cross-built and run under `qemu-aarch64`, then the CLI
/// cross-built, so that it is known to link for the Jetson.
fn aarch64(root: &Path) -> Result<()> {
    ensure_target(root, AARCH64_TARGET)?;
    debian::ensure(root, AARCH64_TOOLS)?;
    let cross = |args: &[&str]| {
        aarch64_env()
            .into_iter()
            .fold(Cmd::cargo(root).args(args.iter().copied()), |cmd, (key, value)| {
                cmd.env(key, value)
            })
            .args(["--target", AARCH64_TARGET, "--locked"])
    };
    cross(&["test", "-p", "sprout-cpu", "--lib"]).run()?;
    cross(&["test", "-p", "sprout-tests", "--test", "backend_cpu"]).run()?;
    // The CLI only has to compile and link here, so it skips optimisation and debug info,
    // which take most of a cross build's time.
    CLI_LINK_PROFILE
        .iter()
        .fold(cross(&["build", "-p", "sprout-cli"]), |cmd, &(key, value)| cmd.env(key, value))
        .run()
}

/// Profile overrides for the aarch64 CLI build, which is linked but never run.
const CLI_LINK_PROFILE: &[(&str, &str)] =
    &[("CARGO_PROFILE_DEV_OPT_LEVEL", "0"), ("CARGO_PROFILE_DEV_DEBUG", "0")];

/// The environment of an aarch64 cross build whose tests run under `qemu-aarch64`.
fn aarch64_env() -> [(&'static str, String); 4] {
    let gcc = AARCH64_TOOLS[0].program;
    [
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", gcc.into()),
        ("CC_aarch64_unknown_linux_gnu", gcc.into()),
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", AARCH64_TOOLS[1].program.into()),
        ("QEMU_LD_PREFIX", AARCH64_SYSROOT.into()),
    ]
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

fn scalar_fallback(root: &Path) -> Result<()> {
    let args = ["-p", "sprout-cortex-m", "--target", SCALAR_TARGET, "--locked"];
    Cmd::cargo(root).args(["build"]).args(args).run()?;
    Cmd::cargo(root).args(["clippy"]).args(args).args(["--", "-D", "warnings"]).run()
}

fn leaf_bundle(root: &Path) -> Result<()> {
    crate::on_device::prepare_ci(root).map(|_| ())
}

fn boards_build(root: &Path) -> Result<()> {
    let bundle = crate::on_device::ci_bundle(root)?;
    crate::boards::lint(root, &bundle)?;
    crate::boards::build(root, Some(&bundle))
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
    fn aarch64_builds_link_with_the_cross_gcc_and_run_under_qemu() {
        let env = aarch64_env();
        let get = |key: &str| env.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
        // Cargo reads these by the target's name, upper-cased (the cc crate's, as written).
        let upper = AARCH64_TARGET.to_uppercase().replace('-', "_");
        assert_eq!(get(&format!("CARGO_TARGET_{upper}_LINKER")), Some("aarch64-linux-gnu-gcc"));
        assert_eq!(get(&format!("CARGO_TARGET_{upper}_RUNNER")), Some("qemu-aarch64"));
        let cc = format!("CC_{}", AARCH64_TARGET.replace('-', "_"));
        assert_eq!(get(&cc), Some("aarch64-linux-gnu-gcc"));
        assert_eq!(get("QEMU_LD_PREFIX"), Some(AARCH64_SYSROOT));
        // Every program the builds name is one the stage installs.
        assert!(env.iter().all(|(k, v)| !k.ends_with("_LINKER") && !k.ends_with("_RUNNER")
            || AARCH64_TOOLS.iter().any(|tool| tool.program == v)));
    }

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
    fn seventeen_stages_and_the_first_installs_the_targets() {
        assert_eq!(STAGES.len(), 17);
        assert!(TARGETS.iter().all(|target| STAGES[0].title.contains(target)));
    }

    #[test]
    fn stages_have_distinct_names_and_an_unknown_one_is_refused_before_anything_runs() {
        let mut names: Vec<&str> = STAGES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), STAGES.len());
        let error = run(Path::new("/nonexistent"), &["fmt", "bogus"]).unwrap_err().to_string();
        assert!(error.contains("`bogus`") && error.contains("on-device"), "{error}");
    }
}
