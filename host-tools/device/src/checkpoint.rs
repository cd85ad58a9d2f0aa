//! Checking a checkpoint file before it is pushed: it must be a sprout checkpoint of the
//! model the device runs.

use std::path::Path;

use sprout_core::link::DeviceInfo;
use sprout_train::Checkpoint;

use crate::error::LinkError;

/// Reads the checkpoint at `path` and checks that it decodes (magic, version, CRC-32) and
/// was trained for the device's model; returns its bytes, as they are to be pushed.
pub fn checkpoint_for(path: &Path, device: &DeviceInfo) -> Result<Vec<u8>, LinkError> {
    let bytes =
        std::fs::read(path).map_err(|source| LinkError::Io { path: path.to_path_buf(), source })?;
    let checkpoint = Checkpoint::decode(&bytes)
        .map_err(|source| LinkError::NotACheckpoint { path: path.to_path_buf(), source })?;
    if checkpoint.graph_hash != device.model_hash {
        return Err(LinkError::ModelMismatch {
            device: device.model_hash,
            checkpoint: checkpoint.graph_hash,
        });
    }
    Ok(bytes)
}
