//! Debian packages the test and bench stages need: checks that a program runs and, when it
//! does not, installs its package with apt-get (through `sudo` unless root), failing with the
//! command to run by hand when that is not possible.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::cmd::Cmd;

/// A program a stage runs and the Debian package that provides it.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    /// The program, run as `PROGRAM --version` to see whether it works.
    pub program: &'static str,
    /// The package apt-get installs when it does not.
    pub package: &'static str,
}

/// Returns once every tool runs, installing the packages of those that do not in one
/// apt-get call.
pub fn ensure(root: &Path, tools: &[Tool]) -> Result<()> {
    let missing: Vec<Tool> = tools.iter().copied().filter(|tool| !runs(tool.program)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|tool| tool.package).collect();
    install(root, &packages, &programs(&missing))?;
    let still_missing: Vec<Tool> =
        missing.iter().copied().filter(|tool| !runs(tool.program)).collect();
    if !still_missing.is_empty() {
        bail!(
            "apt-get installed {} but {} still does not run (`PROGRAM --version` fails)",
            packages.join(" "),
            programs(&still_missing)
        );
    }
    Ok(())
}

/// Installs `packages` in one apt-get call (through `sudo` unless root), for `what` (the
/// missing things, as messages name them).
pub fn install(root: &Path, packages: &[&str], what: &str) -> Result<()> {
    let listed = packages.join(" ");
    println!("{what} missing; installing {listed} with apt-get");
    let as_root = Cmd::new("id", root).args(["-u"]).read().is_ok_and(|uid| uid.trim() == "0");
    let apt = |args: &[&str]| match as_root {
        true => Cmd::new("apt-get", root).args(args.iter().copied()),
        false => Cmd::new("sudo", root).args(["apt-get"]).args(args.iter().copied()),
    };
    apt(&["update", "-q"])
        .run()
        .and_then(|()| apt(&["install", "-y", "-q"]).args(packages.iter().copied()).run())
        .with_context(|| {
            format!(
                "could not install {what}; install by hand with `sudo apt-get install -y \
                 {listed}` (Debian/Ubuntu) and run again"
            )
        })
}

fn programs(tools: &[Tool]) -> String {
    tools.iter().map(|tool| format!("`{}`", tool.program)).collect::<Vec<_>>().join(", ")
}

/// Whether `PROGRAM --version` runs and succeeds.
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
