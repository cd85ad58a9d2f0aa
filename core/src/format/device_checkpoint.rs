//! The device trainer's checkpoint as bytes for the flash store or the link: which model,
//! how far training came, the metric it reached and the state region (trainable weights
//! and optimizer state); and the host's file of one ([`FILE_FRAMING`]). No heap.
//!
//! Layout, little-endian: model hash `u64`, epoch `u32`, updates `u32`, micro-batches
//! `u64`, pending `u32`, accuracy `f32`, state length `u32`, then the state bytes. The
//! flash store and the link add their own CRC; on the host (`sprout device pull -o FILE`)
//! the bytes are sealed unchanged in sprout's container under [`FILE_FRAMING`].

use super::container::{self, FrameError, Framing};
use crate::Progress;

/// The framing of a device checkpoint file on the host.
pub const FILE_FRAMING: Framing = Framing {
    magic: *b"\x89SPRDCK\n",
    version: 1,
    regenerate: "pull it from the device again with `sprout device pull`, or train again",
};

/// Bytes before the state.
pub const CHECKPOINT_HEADER_BYTES: usize = 36;

/// What a checkpoint records besides the state bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckpointInfo {
    pub model_hash: u64,
    /// Epochs completed when it was taken.
    pub epoch: u32,
    /// The executor's counters (optimizer updates, micro-batches, pending accumulation).
    pub progress: Progress,
    /// Held-out accuracy in `[0, 1]`.
    pub accuracy: f32,
}

/// Why checkpoint bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// Fewer bytes than the header and the state it announces.
    Truncated { needed: usize, available: usize },
    /// The buffer to write into is too small.
    BufferTooSmall { needed: usize, available: usize },
    /// Written for another model.
    OtherModel { found: u64, expected: u64 },
    /// Its state has another size than this model's.
    StateSize { found: usize, expected: usize },
}

impl core::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CheckpointError::Truncated { needed, available } => {
                write!(f, "truncated checkpoint: {needed} bytes needed, {available} given")
            }
            CheckpointError::BufferTooSmall { needed, available } => {
                write!(f, "a checkpoint needs {needed} bytes, the buffer holds {available}")
            }
            CheckpointError::OtherModel { found, expected } => {
                write!(f, "the checkpoint belongs to model {found:#018x}, not {expected:#018x}")
            }
            CheckpointError::StateSize { found, expected } => {
                write!(f, "the checkpoint holds {found} state bytes, the model {expected}")
            }
        }
    }
}

impl core::error::Error for CheckpointError {}

/// Writes `info` and `state` into the front of `out`; returns the bytes used.
pub fn encode(
    info: &CheckpointInfo,
    state: &[u8],
    out: &mut [u8],
) -> Result<usize, CheckpointError> {
    let needed = CHECKPOINT_HEADER_BYTES + state.len();
    let available = out.len();
    let out = out.get_mut(..needed).ok_or(CheckpointError::BufferTooSmall { needed, available })?;
    let p = &info.progress;
    let fields: [&[u8]; 7] = [
        &info.model_hash.to_le_bytes(),
        &info.epoch.to_le_bytes(),
        &p.updates.to_le_bytes(),
        &p.micro_batches.to_le_bytes(),
        &p.pending.to_le_bytes(),
        &info.accuracy.to_le_bytes(),
        &(state.len() as u32).to_le_bytes(),
    ];
    let mut at = 0;
    for field in fields.iter().chain([&state]) {
        out[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    Ok(needed)
}

/// Reads a checkpoint of the model `model_hash` whose state has `state_len` bytes.
pub fn decode(
    bytes: &[u8],
    model_hash: u64,
    state_len: usize,
) -> Result<(CheckpointInfo, &[u8]), CheckpointError> {
    let (info, state) = read(bytes)?;
    if info.model_hash != model_hash {
        return Err(CheckpointError::OtherModel { found: info.model_hash, expected: model_hash });
    }
    if state.len() != state_len {
        return Err(CheckpointError::StateSize { found: state.len(), expected: state_len });
    }
    Ok((info, state))
}

/// Reads a checkpoint of any model: its record and state bytes.
pub fn read(bytes: &[u8]) -> Result<(CheckpointInfo, &[u8]), CheckpointError> {
    let truncated = |needed| CheckpointError::Truncated { needed, available: bytes.len() };
    let header = bytes.get(..CHECKPOINT_HEADER_BYTES).ok_or(truncated(CHECKPOINT_HEADER_BYTES))?;
    let u32_at = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let u64_at = |at: usize| u64::from(u32_at(at)) | (u64::from(u32_at(at + 4)) << 32);
    let needed = CHECKPOINT_HEADER_BYTES.saturating_add(u32_at(32) as usize);
    let state = bytes.get(CHECKPOINT_HEADER_BYTES..needed).ok_or(truncated(needed))?;
    let info = CheckpointInfo {
        model_hash: u64_at(0),
        epoch: u32_at(8),
        progress: Progress { updates: u32_at(12), micro_batches: u64_at(16), pending: u32_at(24) },
        accuracy: f32::from_bits(u32_at(28)),
    };
    Ok((info, state))
}

/// Seals device checkpoint `bytes` as a host file (see [`FILE_FRAMING`]).
#[cfg(feature = "alloc")]
pub fn seal_file(bytes: &[u8]) -> Result<alloc::vec::Vec<u8>, FrameError> {
    container::seal(FILE_FRAMING, bytes)
}

/// The device checkpoint bytes inside a host file, its framing and CRC-32 checked.
pub fn open_file(file: &[u8]) -> Result<&[u8], FrameError> {
    container::open(FILE_FRAMING, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_and_refuses_the_wrong_model_or_size() {
        let info = CheckpointInfo {
            model_hash: 0x0123_4567_89ab_cdef,
            epoch: 3,
            progress: Progress { updates: 40, micro_batches: 41, pending: 1 },
            accuracy: 0.9375,
        };
        let state = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut out = [0u8; 64];
        let n = encode(&info, &state, &mut out).unwrap();
        assert_eq!(n, CHECKPOINT_HEADER_BYTES + 8);
        assert_eq!(decode(&out[..n], info.model_hash, 8), Ok((info, &state[..])));
        assert_eq!(
            decode(&out[..n], 7, 8),
            Err(CheckpointError::OtherModel { found: info.model_hash, expected: 7 })
        );
        assert_eq!(
            decode(&out[..n], info.model_hash, 9),
            Err(CheckpointError::StateSize { found: 8, expected: 9 })
        );
        assert_eq!(
            decode(&out[..n - 1], info.model_hash, 8),
            Err(CheckpointError::Truncated { needed: n, available: n - 1 })
        );
        assert_eq!(
            encode(&info, &state, &mut out[..10]),
            Err(CheckpointError::BufferTooSmall { needed: n, available: 10 })
        );
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn a_file_of_an_older_version_is_refused_with_how_to_pull_it_again() {
        use alloc::string::ToString;
        let mut file = seal_file(&[1, 2, 3]).unwrap();
        assert_eq!(open_file(&file), Ok(&[1u8, 2, 3][..]));
        file[8..10].copy_from_slice(&(FILE_FRAMING.version - 1).to_le_bytes());
        let err = open_file(&file).unwrap_err();
        assert!(matches!(err, FrameError::OutdatedVersion { found: 0, current: 1, .. }));
        assert!(err.to_string().contains("format version 0 is older"), "{err}");
        assert!(err.to_string().contains("`sprout device pull`"), "{err}");
    }
}
