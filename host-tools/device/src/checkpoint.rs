//! Checking a checkpoint file before it is pushed: it must be a device checkpoint (what
//! `sprout device pull` saves, `sprout_firmware::trainer::checkpoint`) of the model the
//! device runs.

use std::path::Path;

use sprout_core::link::DeviceInfo;
use sprout_firmware::trainer::checkpoint;

use crate::error::LinkError;

/// Reads the checkpoint at `path` and checks that it decodes whole and was trained for
/// the device's model; returns its bytes, as they are to be pushed.
pub fn checkpoint_for(path: &Path, device: &DeviceInfo) -> Result<Vec<u8>, LinkError> {
    let bytes =
        std::fs::read(path).map_err(|source| LinkError::Io { path: path.to_path_buf(), source })?;
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
