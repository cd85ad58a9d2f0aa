//! Running external commands: each prints its command line (`$ cargo clippy ...`) before it runs,
//! and a failure names the command and its exit status.

use std::ffi::OsString;
use std::fmt;
use std::io::ErrorKind;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// A command line to run in a given directory.
pub struct Cmd {
    /// What is executed (for cargo, the full path from `$CARGO` when set).
    program: OsString,
    /// What is printed in its place (`cargo`, `rustup`).
    name: String,
    args: Vec<String>,
    /// Environment variables set for it (and printed before the command line).
    envs: Vec<(String, OsString)>,
    dir: std::path::PathBuf,
}

impl Cmd {
    pub fn new(program: &str, dir: &Path) -> Self {
        Self {
            program: program.into(),
            name: program.to_owned(),
            args: Vec::new(),
            envs: Vec::new(),
            dir: dir.to_path_buf(),
        }
    }

    /// `cargo`, taken from the `CARGO` environment variable when set (as it is under
    /// `cargo xtask`, so the same toolchain runs every stage).
    pub fn cargo(dir: &Path) -> Self {
        let mut cmd = Self::new("cargo", dir);
        if let Some(cargo) = std::env::var_os("CARGO") {
            cmd.program = cargo;
        }
        cmd
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the environment variable `key` for the command.
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.envs.push((key.to_owned(), value.into()));
        self
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.envs(self.envs.iter().map(|(k, v)| (k, v)));
        // CI runs with no stdin: nothing we run may wait for input.
        command.args(&self.args).current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    /// Runs the command with inherited stdout/stderr; fails unless it exits with status 0.
    pub fn run(&self) -> Result<()> {
        println!("$ {self}");
        let status = self.command().status().map_err(|e| self.spawn_error(e))?;
        if !status.success() {
            bail!("`{self}` failed: {status}");
        }
        Ok(())
    }

    /// Runs the command, capturing stdout (stderr is inherited) and returning it; fails unless it
    /// exits with status 0.
    pub fn read(&self) -> Result<String> {
        println!("$ {self}");
        let output =
            self.command().stderr(Stdio::inherit()).output().map_err(|e| self.spawn_error(e))?;
        if !output.status.success() {
            bail!("`{self}` failed: {}", output.status);
        }
        String::from_utf8(output.stdout)
            .with_context(|| format!("`{self}` printed non-UTF-8 output"))
    }

    fn spawn_error(&self, error: std::io::Error) -> anyhow::Error {
        if error.kind() == ErrorKind::NotFound {
            anyhow::Error::new(NotFound(self.name.clone()))
                .context(format!("could not run `{self}`: `{}` is not on PATH", self.name))
        } else {
            anyhow::Error::new(error).context(format!("could not run `{self}`"))
        }
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in &self.envs {
            write!(f, "{key}={} ", value.to_string_lossy())?;
        }
        f.write_str(&self.name)?;
        for arg in &self.args {
            if arg.is_empty() || arg.contains(char::is_whitespace) {
                write!(f, " '{arg}'")?;
            } else {
                write!(f, " {arg}")?;
            }
        }
        Ok(())
    }
}

/// The program was not found; callers can downcast to this to give install advice.
#[derive(Debug)]
pub struct NotFound(pub String);

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "program `{}` not found", self.0)
    }
}

impl std::error::Error for NotFound {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_a_shell_line_with_the_short_name() {
        let cmd = Cmd::cargo(Path::new("."))
            .args(["clippy", "--workspace", "--", "-D", "warnings"])
            .args(["a b"]);
        assert_eq!(cmd.to_string(), "cargo clippy --workspace -- -D warnings 'a b'");
    }

    #[test]
    fn a_missing_program_is_reported_as_not_found() {
        let error = Cmd::new("sprout-no-such-program", Path::new(".")).read().unwrap_err();
        assert!(error.downcast_ref::<NotFound>().is_some());
        assert!(format!("{error:#}").contains("sprout-no-such-program"));
    }

    #[cfg(unix)]
    #[test]
    fn a_failing_command_names_itself_and_its_status() {
        let error = Cmd::new("false", Path::new(".")).run().unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`false` failed"), "{message}");
        assert!(message.contains("exit status: 1"), "{message}");
    }
}
