//! Checkpoints: everything a run needs to continue exactly where it stopped (the whole
//! training state region, step counters, epoch, seed, best metric, history, the model),
//! framed like a `.sprout` file under its own magic, written atomically, last three kept.
//!
//! Layout, little-endian: bytes `0..8` [`MAGIC`], `8..10` the version (`u16`), `10..14`
//! body length `n` (`u32`), `14..14+n` the postcard-encoded [`Checkpoint`], then a CRC-32
//! over everything before it: `sprout_core::format::container`'s framing.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sprout_core::format::container::{self, Framing};

use crate::error::CheckpointError;
use crate::files::write_atomic;
use crate::TrainError;

/// The first eight bytes of a checkpoint file.
pub const MAGIC: [u8; 8] = *b"\x89SPRCKPT";

/// Checkpoint files: their magic and the version this build writes and reads.
pub const FRAMING: Framing = Framing { magic: MAGIC, version: 1 };

/// How many `checkpoint-epoch-NNN.ckpt` files a run keeps.
pub const KEEP: usize = 3;

/// One finished epoch, as the curve and the progress report show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// 1-based.
    pub epoch: u32,
    pub train_loss: f32,
    pub val_loss: f32,
    pub val_accuracy: f32,
    /// The learning rate of the epoch's last update.
    pub learning_rate: f32,
}

/// A training run after `epoch` finished epochs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Epochs finished.
    pub epoch: u32,
    /// Optimizer updates made (the executor's counter: schedules and AdamW use it).
    pub updates: u32,
    /// Micro-batches run (the executor's counter: dropout masks use it).
    pub micro_batches: u64,
    /// Micro-batches accumulated since the last update.
    pub pending: u32,
    /// The data order and augmentation seed; epoch `e` draws from `(seed, e)`.
    pub seed: u64,
    /// Best validation accuracy so far.
    pub best_accuracy: Option<f32>,
    /// [`crate::Model::graph_hash`] of the model trained.
    pub graph_hash: u64,
    /// Size of the training plan's state region, checked before `state` is restored.
    pub state_size: u64,
    /// The training plan's whole state region: trainable weights, buffers (batch-norm
    /// running statistics), optimizer state (momentum, Adam moments).
    pub state: Vec<u8>,
    pub history: Vec<EpochRecord>,
    /// The `.sprout` file of the current weights.
    pub model: Vec<u8>,
}

impl Checkpoint {
    /// The framed file.
    pub fn encode(&self) -> Vec<u8> {
        let body = postcard::to_allocvec(self).expect("a checkpoint always encodes");
        container::seal(FRAMING, &body).expect("checkpoints stay below 4 GiB")
    }

    /// Decodes a framed file, checking magic, version, lengths and CRC-32.
    pub fn decode(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let body = container::open(FRAMING, bytes).map_err(CheckpointError::Container)?;
        let (checkpoint, rest) =
            postcard::take_from_bytes::<Checkpoint>(body).map_err(CheckpointError::Body)?;
        if !rest.is_empty() {
            return Err(CheckpointError::TrailingBytes { count: rest.len() });
        }
        if checkpoint.state.len() as u64 != checkpoint.state_size {
            return Err(CheckpointError::StateSize {
                expected: checkpoint.state_size as usize,
                found: checkpoint.state.len(),
            });
        }
        Ok(checkpoint)
    }

    /// Reads a checkpoint file.
    pub fn read(path: &Path) -> Result<Self, TrainError> {
        let bytes = fs::read(path).map_err(TrainError::io(path))?;
        Self::decode(&bytes)
            .map_err(|source| TrainError::Checkpoint { path: path.to_path_buf(), source })
    }
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
