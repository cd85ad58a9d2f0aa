//! `cargo xtask demo`: the main job. Trains a small CNN on a generated task in release mode;
//! the example prints the loss falling and the final accuracy.

use std::path::Path;

use anyhow::Result;

use crate::cmd::Cmd;

/// The example in `core/examples/` that the demo runs.
pub const DEMO_EXAMPLE: &str = "train_small_cnn";

pub fn run(root: &Path) -> Result<()> {
    Cmd::cargo(root)
        .args(["run", "--release", "--locked", "-p", "sprout-core"])
        .args(["--example", DEMO_EXAMPLE])
        .run()
}
