//! Checkpoint files of a run: read and written atomically under `checkpoint-epoch-NNN.ckpt`,
//! the last [`KEEP`] kept. The format is `sprout_core::format::host_checkpoint`.

use std::fs;
use std::path::{Path, PathBuf};

pub use sprout_core::format::host_checkpoint::{Checkpoint, EpochRecord, MAGIC};

use crate::files::write_atomic;
use crate::kind::{read_kind, FileKind};
use crate::TrainError;

/// How many `checkpoint-epoch-NNN.ckpt` files a run keeps.
pub const KEEP: usize = 3;

/// Reads a checkpoint file.
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint, TrainError> {
    let bytes = read_kind(path, FileKind::HostCheckpoint, "a training checkpoint (.ckpt)")?;
    Checkpoint::decode(&bytes)
        .map_err(|source| TrainError::Checkpoint { path: path.to_path_buf(), source })
}

/// The file name of the checkpoint after `epoch` finished epochs.
pub fn checkpoint_name(epoch: u32) -> String {
    format!("checkpoint-epoch-{epoch:03}.ckpt")
}
/// Writes `checkpoint` into `dir` atomically and removes all but the last [`KEEP`]
/// checkpoints there; returns the path written.
pub fn write_checkpoint(dir: &Path, checkpoint: &Checkpoint) -> Result<PathBuf, TrainError> {
    let path = dir.join(checkpoint_name(checkpoint.epoch));
    write_atomic(&path, &checkpoint.encode())?;
    let mut epochs: Vec<(u32, PathBuf)> = fs::read_dir(dir)
        .map_err(TrainError::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let n = name.strip_prefix("checkpoint-epoch-")?.strip_suffix(".ckpt")?;
            Some((n.parse().ok()?, p))
        })
        .collect();
    epochs.sort();
    let excess = epochs.len().saturating_sub(KEEP);
    for (_, old) in &epochs[..excess] {
        fs::remove_file(old).map_err(TrainError::io(old))?;
    }
    Ok(path)
}
