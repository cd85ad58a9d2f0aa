//! A device checkpoint back on the host: the trainable tensors the bundle names are read out
//! of the checkpoint's state bytes into the model the bundle was made from, so the host can
//! evaluate (or save) what the device trained.

use sprout_core::format::bundle::{self, BundleError};
use sprout_core::format::device_checkpoint::{self as checkpoint, CheckpointError, CheckpointInfo};
use sprout_core::{DType, GraphError};
use sprout_train::Model;

/// Why a device checkpoint cannot be applied to a model.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The bundle's frame or header is bad.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("the bundle was made from model {bundle:#018x}, not from this model ({model:#018x})")]
    OtherModel { bundle: u64, model: u64 },
    #[error("not a checkpoint of the bundle's model: {0}")]
    Checkpoint(#[from] CheckpointError),
    #[error("the bundle's trainable tensor '{name}' is not a float tensor of the model's state")]
    Tensor { name: String },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Sets `model`'s trainable tensors (as the bundle places them) to the values in the
/// device checkpoint; returns the checkpoint's record.
pub fn apply_device_checkpoint(
    model: &mut Model,
    bundle: &[u8],
    checkpoint_bytes: &[u8],
) -> Result<CheckpointInfo, ApplyError> {
    let (header, _) = bundle::read_header(bundle)?;
    let model_hash = model.graph_hash();
    if header.model_hash != model_hash {
        return Err(ApplyError::OtherModel { bundle: header.model_hash, model: model_hash });
    }
    let (info, state) =
        checkpoint::decode(checkpoint_bytes, header.model_hash, header.state.len as usize)?;
    for t in &header.trainable {
        let op = t.operand;
        let bad = || ApplyError::Tensor { name: t.name.to_string() };
        let bytes = state.get(op.offset..op.offset + op.len * 4).ok_or_else(bad)?;
        let id = model.zoo.graph.find(t.name).ok_or_else(bad)?;
        if op.dtype != DType::F32 || model.zoo.graph.shape(id).numel() != op.len {
            return Err(bad());
        }
        let values = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        model.zoo.graph.set_initial_values(id, values.collect())?;
    }
    Ok(info)
}
