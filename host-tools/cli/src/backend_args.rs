//! `--backend` of the commands that compute (`train`, `eval`, `run`, `predict`): `cpu`, or
//! `auto` (the default), which takes CUDA when this build has a CUDA backend and a GPU is
//! present, and the CPU otherwise. No CUDA backend is built yet, so `auto` picks the CPU;
//! it says so on standard error, naming why, before the work starts.

use clap::{Args, ValueEnum};

/// What `--backend` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA when built in and a GPU is present, else the CPU.
    Auto,
    /// The CPU backend (sprout-cpu), on every machine.
    Cpu,
}

/// `--backend` of a computing command.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Where the work runs: auto (CUDA when this build has it and a GPU is present, else
    /// the CPU; the choice is printed) or cpu.
    #[arg(long, value_enum, value_name = "BACKEND", default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
}

impl BackendArgs {
    /// Tells, on standard error, which backend `auto` picked and why (`cpu` needs no word).
    pub fn announce(&self) {
        if self.backend == BackendChoice::Auto {
            eprintln!("backend: cpu (auto: this build has no CUDA backend)");
        }
    }
}
