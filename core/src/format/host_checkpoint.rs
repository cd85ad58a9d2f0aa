//! The host trainer's checkpoint: everything a run needs to continue exactly where it
//! stopped (the whole training state region, step counters, epoch, seed, best metric,
//! history, the model), framed like a `.sprout` file under its own magic.
//!
//! Layout, little-endian: bytes `0..8` [`MAGIC`], `8..10` the version (`u16`), `10..14`
//! body length `n` (`u32`), `14..14+n` the postcard-encoded [`Checkpoint`], then a CRC-32
//! over everything before it: [`super::container`]'s framing.

use super::container::{self, FrameError, Framing};
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

/// The first eight bytes of a checkpoint file.
pub const MAGIC: [u8; 8] = *b"\x89SPRCKPT";

/// Checkpoint files: their magic and the version this build writes and reads.
pub const FRAMING: Framing = Framing {
    magic: MAGIC,
    version: 1,
    regenerate: "train again with `sprout train` (this sprout cannot --resume from it)",
};

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
    /// The host's hash of the model graph trained (`sprout_train::Model::graph_hash`).
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
}

/// Why a checkpoint was refused.
#[derive(Debug)]
pub enum CheckpointError {
    /// The framing (magic, version, length, CRC-32) is damaged or truncated, or the file
    /// is not a checkpoint.
    Container(FrameError),
    /// Bytes follow the encoded body inside the frame.
    TrailingBytes { count: usize },
    /// The body does not decode.
    Body(postcard::Error),
    /// The checkpoint was written for another model graph.
    ModelHash { expected: u64, found: u64 },
    /// The training plan's state region differs (another trainable selection or optimizer).
    StateSize { expected: usize, found: usize },
    /// The run it continues asked for fewer epochs than are done.
    Finished { done: u32, requested: u32 },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Container(e) => write!(f, "not a readable sprout checkpoint: {e}"),
            CheckpointError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the checkpoint body")
            }
            CheckpointError::Body(e) => write!(f, "malformed checkpoint body: {e}"),
            CheckpointError::ModelHash { expected, found } => write!(
                f,
                "it was written for another model (graph hash {found:#018x}, this model {expected:#018x})"
            ),
            CheckpointError::StateSize { expected, found } => write!(
                f,
                "its training state is {found} bytes, this training step has {expected} (another --trainable or --optimizer?)"
            ),
            CheckpointError::Finished { done, requested } => {
                write!(f, "it already holds {done} epochs, --epochs is {requested}")
            }
        }
    }
}

impl core::error::Error for CheckpointError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn a_checkpoint_of_an_older_version_is_refused_with_how_to_train_again() {
        let checkpoint = Checkpoint {
            epoch: 2,
            updates: 10,
            micro_batches: 10,
            pending: 0,
            seed: 7,
            best_accuracy: Some(0.5),
            graph_hash: 1,
            state_size: 2,
            state: vec![1, 2],
            history: Vec::new(),
            model: Vec::new(),
        };
        let mut file = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&file).unwrap(), checkpoint);
        file[8..10].copy_from_slice(&(FRAMING.version - 1).to_le_bytes());
        let err = Checkpoint::decode(&file).unwrap_err();
        assert!(matches!(
            err,
            CheckpointError::Container(FrameError::OutdatedVersion { found: 0, current: 1, .. })
        ));
        assert_eq!(
            err.to_string(),
            "not a readable sprout checkpoint: format version 0 is older than the version 1 this \
             build reads; to regenerate the file, train again with `sprout train` (this sprout \
             cannot --resume from it)"
        );
    }
}
