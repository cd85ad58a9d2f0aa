//! sprout's developer tasks, run as `cargo xtask <command>` from anywhere in the workspace.
//! This file parses the command line and dispatches to one module per command.

mod bench;
mod bench_cpu;
mod bench_data;
mod bench_fleet;
mod bench_kernels;
mod bench_quant;
mod bench_serve;
mod boards;
mod cmd;
mod cmsis;
mod core_distance;
mod debian;
mod demo;
mod fleet;
mod fuzz;
mod int8_layers;
mod on_device;
mod qemu;
mod sparse_update;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "\
Usage: cargo xtask <command>

Commands:
  bench   run a benchmark suite in a release build; `cargo xtask bench`
          lists the suites (`planner`: arena placement strategies and memory
          passes on the model zoo)
  demo    the leaf classifier end to end (release build): synthetic photos,
          pretraining, head fine-tuning on the host, then on the emulated
          microcontroller under QEMU with the checkpoint pulled back and evaluated
  test    everything CI checks: the thumbv7em-none-eabihf and thumbv6m-none-eabi
          targets (installed if missing), rustfmt, clippy, the workspace tests,
          Miri over a reduced test set (nightly, installed if missing), the CPU
          backend's tests on aarch64 under qemu-aarch64 (cross tools installed if
          missing), the no_std builds and clippy for the microcontroller targets, and the
          boards: built, run under QEMU (installed with apt-get if missing),
          leafnet's int8 convolutions compared bit for bit with CMSIS-NN's
          (../shared/peers/cmsis-nn or SPROUT_CMSIS_NN; arm-none-eabi-gcc installed
          if missing), and their sizes compared with boards/sizes.expected
          (SPROUT_BLESS=1 updates it), the leaf head fine-tuned on the emulated
          microcontroller, and a federated fine-tuning run on Flower (3 sprout
          serve boxes, 3 rounds; flwr is installed into target/fleet-venv with
          pip if missing);
          `cargo xtask test STAGE...` runs only the named stages (see
          `cargo xtask test --list`)
  fuzz    run the libFuzzer targets of fuzz/targets (cargo-fuzz, installed if
          missing; RUSTC_BOOTSTRAP=1 on a stable compiler) from their corpora:
          `cargo xtask fuzz [TARGET] [--seconds N]` (default 60 s per target);
          `--merge` adds what the last runs found that reaches new code to
          fuzz/corpus/TARGET
  help    print this message";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let result = match args.as_slice() {
        [] | ["help" | "-h" | "--help"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        ["bench"] => {
            print!("{}", bench::suites_help());
            return ExitCode::SUCCESS;
        }
        // Times the release CLI as a child: xtask's own profile does not matter.
        ["bench", "cpu", options @ ..] => bench_cpu::run(&workspace_root(), options),
        ["bench", "data", options @ ..] => bench_data::run(&workspace_root(), options),
        ["bench", "serve", options @ ..] => bench_serve::run(&workspace_root(), options),
        ["bench", "fleet", options @ ..] => bench_fleet::run(&workspace_root(), options),
        ["bench", suite] if bench::is_suite(suite) => bench::run(&workspace_root(), suite),
        ["bench", suite] => {
            eprintln!("error: unknown bench suite `{suite}`\n\n{}", bench::suites_help());
            return ExitCode::from(2);
        }
        // What `bench SUITE` runs in the release build.
        [bench::RUN_COMMAND, suite] => bench::run_suite(suite),
        ["test", "--list"] => {
            println!("{}", test::stage_names());
            return ExitCode::SUCCESS;
        }
        ["test", stages @ ..] => test::run(&workspace_root(), stages),
        ["demo"] => demo::run(&workspace_root()),
        ["fuzz", options @ ..] => fuzz::run(&workspace_root(), options),
        ["bench" | bench::RUN_COMMAND, _, extra, ..] => {
            Err(anyhow::anyhow!("`cargo xtask bench` takes one suite, got also `{extra}`"))
        }
        ["demo", extra, ..] => {
            Err(anyhow::anyhow!("`cargo xtask demo` takes no arguments, got `{extra}`"))
        }
        [unknown, ..] => {
            eprintln!("error: unknown command `{unknown}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The chain by hand rather than `{error:?}`, which adds a backtrace when
            // RUST_BACKTRACE is set and buries the message in CI logs.
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// Formats a wall time the way people read it: `42.3s`, `3m12s`.
fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_seconds_then_minutes() {
        assert_eq!(format_duration(Duration::from_millis(42_340)), "42.3s");
        assert_eq!(format_duration(Duration::from_secs(192)), "3m12s");
        assert_eq!(format_duration(Duration::from_secs(3605)), "60m05s");
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"));
    }
}
