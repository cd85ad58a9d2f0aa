//! Build script: gives the crate the git commit it is built from as `SPROUT_GIT_COMMIT`
//! (12 hex digits, `-dirty` when tracked files have changes, `unknown` without git), for
//! `sprout --version` and the record of a training run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The trimmed standard output of `git ARGS` run in the crate's folder, if it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8(output.stdout).ok()?.trim().to_string())
}

fn main() {
    // Cargo runs build scripts in the package's folder: relative paths git prints start there.
    let here = std::env::current_dir().unwrap_or_default();
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|changes| !changes.is_empty());
            format!("{hash}{}", if dirty { "-dirty" } else { "" })
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=SPROUT_GIT_COMMIT={commit}");
    // Without a watched file cargo would rerun this script after any change in the crate.
    println!("cargo:rerun-if-changed=build.rs");
    for file in watched(&here) {
        // A missing file would make cargo rerun the script on every build.
        if file.exists() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
}

/// The git files whose change can change the commit: HEAD, the branch it points to (loose
/// or packed) and the index (committing or staging may change `-dirty`). A worktree's `.git`
/// is a file naming its git folder, so git is asked where they are.
fn watched(here: &Path) -> Vec<PathBuf> {
    let Some(git_dir) = git(&["rev-parse", "--git-dir"]).map(|d| here.join(d)) else {
        return Vec::new();
    };
    let mut files = vec![git_dir.join("HEAD"), git_dir.join("index")];
    let common = git(&["rev-parse", "--git-common-dir"]).map(|d| here.join(d));
    if let (Some(common), Some(branch)) = (common, git(&["symbolic-ref", "-q", "HEAD"])) {
        files.push(common.join(branch));
        files.push(common.join("packed-refs"));
    }
    files
}
