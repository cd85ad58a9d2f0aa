//! Device checkpoints in files on the host: the device's bytes
//! (`sprout_core::format::device_checkpoint`) unchanged, sealed in sprout's container
//! ([`FILE_FRAMING`]: magic, version, length, CRC-32) and written atomically, so a damaged
//! or foreign file is refused by name rather than pushed or evaluated; and the check
//! before a push that the file holds a whole checkpoint of the model the device runs.

use std::path::Path;

use sprout_core::format::device_checkpoint as checkpoint;
pub use sprout_core::format::device_checkpoint::FILE_FRAMING;
use sprout_core::link::DeviceInfo;

use crate::error::LinkError;

/// Writes the device's checkpoint `bytes` to `path`, sealed, whole or not at all.
pub fn write_checkpoint_file(path: &Path, bytes: &[u8]) -> Result<(), LinkError> {
    let sealed = checkpoint::seal_file(bytes)
        .map_err(|source| LinkError::CheckpointFile { path: path.to_path_buf(), source })?;
    Ok(sprout_train::write_atomic(path, &sealed)?)
}

/// The device checkpoint bytes a file written by [`write_checkpoint_file`] holds, its
/// framing and CRC-32 checked.
pub fn read_checkpoint_file(path: &Path) -> Result<Vec<u8>, LinkError> {
    let what = "a device checkpoint (from `sprout device pull`)";
    let file = sprout_train::read_kind(path, sprout_train::FileKind::DeviceCheckpoint, what)?;
    checkpoint::open_file(&file)
        .map(<[u8]>::to_vec)
        .map_err(|source| LinkError::CheckpointFile { path: path.to_path_buf(), source })
}

/// Reads the checkpoint file at `path` and checks that it decodes whole and was trained
/// for the device's model; returns its bytes, as they are to be pushed.
pub fn checkpoint_for(path: &Path, device: &DeviceInfo) -> Result<Vec<u8>, LinkError> {
    let bytes = read_checkpoint_file(path)?;
    let (info, state) = checkpoint::read(&bytes)
        .map_err(|source| LinkError::NotACheckpoint { path: path.to_path_buf(), source })?;
    let used = checkpoint::CHECKPOINT_HEADER_BYTES + state.len();
    if used != bytes.len() {
        return Err(LinkError::NotACheckpoint {
            path: path.to_path_buf(),
            source: checkpoint::CheckpointError::Truncated { needed: used, available: bytes.len() },
        });
    }
    if info.model_hash != device.model_hash {
        return Err(LinkError::ModelMismatch {
            device: device.model_hash,
            checkpoint: info.model_hash,
        });
    }
    Ok(bytes)
}
