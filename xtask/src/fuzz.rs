//! `cargo xtask fuzz [TARGET] [--seconds N] [--merge]`: runs the libFuzzer targets of
//! `fuzz/targets` (installing cargo-fuzz when missing) from their committed corpora, one
//! after another; with `--merge`, adds to `fuzz/corpus/TARGET` the inputs of the last runs
//! that reach new code instead.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::Cmd;

/// Seconds each target runs unless `--seconds` says otherwise.
const DEFAULT_SECONDS: u64 = 60;

/// What `cargo xtask fuzz` was asked to do.
#[derive(Debug, PartialEq)]
struct Options {
    /// One target, or every target when `None`.
    target: Option<String>,
    seconds: u64,
    merge: bool,
}

fn parse(args: &[&str]) -> Result<Options> {
    let mut options = Options { target: None, seconds: DEFAULT_SECONDS, merge: false };
    let mut args = args.iter();
    while let Some(&arg) = args.next() {
        match arg {
            "--seconds" => {
                let value = args.next().context("--seconds needs a number of seconds")?;
                options.seconds = value.parse().ok().filter(|&s| s > 0).with_context(|| {
                    format!("--seconds takes a positive whole number, got `{value}`")
                })?;
            }
            "--merge" => options.merge = true,
            flag if flag.starts_with('-') => {
                bail!("unknown option `{flag}` for `cargo xtask fuzz`")
            }
            target if options.target.is_none() => options.target = Some(target.to_owned()),
            extra => bail!("`cargo xtask fuzz` takes one target, got also `{extra}`"),
        }
    }
    Ok(options)
}

/// The fuzz targets: the files of `fuzz/targets/fuzz_targets`, by name.
pub fn targets(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("fuzz/targets/fuzz_targets");
    let entries =
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let path = entry.with_context(|| format!("cannot list {}", dir.display()))?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            names.extend(path.file_stem().map(|s| s.to_string_lossy().into_owned()));
        }
    }
    names.sort();
    Ok(names)
}

pub fn run(root: &Path, args: &[&str]) -> Result<()> {
    let options = parse(args)?;
    let all = targets(root)?;
    let selected = match &options.target {
        Some(target) if all.contains(target) => vec![target.clone()],
        Some(target) => bail!("unknown fuzz target `{target}` (targets: {})", all.join(", ")),
        None => all,
    };
    ensure_cargo_fuzz(root)?;
    for target in &selected {
        println!("\n==> fuzz target {target}");
        let dirs = Dirs::of(root, target);
        let command = if options.merge {
            // Keeps in the committed corpus only what adds coverage to it.
            fuzz_run(root, target, &[&dirs.corpus, &dirs.work]).args(["--", "-merge=1"])
        } else {
            std::fs::create_dir_all(&dirs.work)
                .with_context(|| format!("cannot create {}", dirs.work.display()))?;
            std::fs::create_dir_all(&dirs.artifacts)
                .with_context(|| format!("cannot create {}", dirs.artifacts.display()))?;
            // New inputs go to the first folder (scratch); the corpus and regressions are read.
            fuzz_run(root, target, &[&dirs.work, &dirs.corpus, &dirs.regressions]).args([
                "--".to_owned(),
                format!("-max_total_time={}", options.seconds),
                format!("-artifact_prefix={}/", dirs.artifacts.display()),
                "-print_final_stats=1".to_owned(),
            ])
        };
        command.run().with_context(|| {
            format!(
                "fuzz target {target} failed; a crash is saved under {}: reproduce it with \
                 `cargo fuzz run --fuzz-dir fuzz/targets {target} FILE`, fix it, and move the \
                 file to {} so `cargo test -p sprout-fuzz` replays it",
                dirs.artifacts.display(),
                dirs.regressions.display()
            )
        })?;
    }
    Ok(())
}

/// A target's folders: committed corpus and regressions, scratch corpus, crash files.
struct Dirs {
    corpus: PathBuf,
    regressions: PathBuf,
    work: PathBuf,
    artifacts: PathBuf,
}

impl Dirs {
    fn of(root: &Path, target: &str) -> Self {
        let fuzz = root.join("fuzz");
        Self {
            corpus: fuzz.join("corpus").join(target),
            regressions: fuzz.join("regressions").join(target),
            work: fuzz.join("targets/target/corpus").join(target),
            artifacts: fuzz.join("artifacts").join(target),
        }
    }
}

/// `cargo fuzz run` of `target` over `corpora` (existing folders only), optimised, with
/// debug assertions (overflow checks) and without a sanitizer: the decoders are safe Rust,
/// so speed buys more than AddressSanitizer would.
fn fuzz_run(root: &Path, target: &str, corpora: &[&Path]) -> Cmd {
    let dirs = corpora.iter().filter(|d| d.is_dir()).map(|d| d.display().to_string());
    Cmd::cargo(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "--fuzz-dir", "fuzz/targets", "-O", "-a", "-s", "none", target])
        .args(dirs)
}

/// Installs cargo-fuzz when `cargo fuzz` is not there.
fn ensure_cargo_fuzz(root: &Path) -> Result<()> {
    if Cmd::cargo(root).args(["fuzz", "--version"]).read().is_ok() {
        return Ok(());
    }
    println!("cargo-fuzz is missing; installing it with `cargo install cargo-fuzz --locked`");
    Cmd::cargo(root).args(["install", "cargo-fuzz", "--locked"]).run().context(
        "could not install cargo-fuzz (offline?); install it by hand with \
         `cargo install cargo-fuzz --locked`",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_a_target_seconds_and_merge() {
        assert_eq!(
            parse(&["model", "--seconds", "30"]).unwrap(),
            Options { target: Some("model".into()), seconds: 30, merge: false }
        );
        assert_eq!(
            parse(&["--merge"]).unwrap(),
            Options { target: None, seconds: DEFAULT_SECONDS, merge: true }
        );
        for (args, error) in [
            (&["--seconds", "0"][..], "positive"),
            (&["--seconds"], "needs"),
            (&["a", "b"], "`b`"),
            (&["--fast"], "`--fast`"),
        ] {
            let message = parse(args).unwrap_err().to_string();
            assert!(message.contains(error), "{message}");
        }
    }

    #[test]
    fn the_targets_are_the_files_of_fuzz_targets() {
        let names = targets(&crate::workspace_root()).unwrap();
        assert!(names.contains(&"model".to_owned()) && names.contains(&"link_host".to_owned()));
        let error = run(&crate::workspace_root(), &["no_such_target"]).unwrap_err().to_string();
        assert!(error.contains("no_such_target") && error.contains("model"), "{error}");
    }
}
