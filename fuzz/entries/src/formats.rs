//! The in-memory decoders: `.sprout` models (whole files, and bodies sealed with a valid
//! CRC so mutations reach graph validation), bundles, host and device checkpoints, ONNX.

use std::path::Path;

use sprout_core::format::bundle::{self, FRAMING as BUNDLE};
use sprout_core::format::container::{seal, Framing, MODEL};
use sprout_core::format::device_checkpoint::{self as device, FILE_FRAMING};
use sprout_core::format::host_checkpoint::{Checkpoint, FRAMING as HOST_CHECKPOINT};
use sprout_core::link::{DeviceInfo, SampleShape};
use sprout_core::Step;
use sprout_train::Model;

use crate::files::with_file;

/// Steps a fuzzed bundle may hold: more than any real bundle (LeafNet's has about 400).
const BUNDLE_STEPS: usize = 1024;

/// A `.sprout` file as `sprout train`, `eval` and `predict` load it.
pub fn model(file: &[u8]) -> bool {
    Model::from_bytes(file, Path::new("fuzz.sprout")).is_ok()
}

/// A `.sprout` file body (postcard graph, weights and metadata) in a valid frame: graph
/// validation and the weights' checks, past the CRC that random edits would break.
pub fn graph(body: &[u8]) -> bool {
    sealed(MODEL, body, model)
}

/// A device bundle body in a valid frame, decoded as the firmware decodes it.
pub fn bundle(body: &[u8]) -> bool {
    sealed(BUNDLE, body, |file| {
        let mut steps = Box::new(heapless::Vec::<Step, BUNDLE_STEPS>::new());
        let Ok(bundle) = bundle::decode(file, &mut steps) else { return false };
        // What the firmware sizes its buffers by must be computable.
        let _ = (bundle.arena_bytes(), bundle.feature_bytes(), bundle.classes());
        true
    })
}

/// A host training checkpoint body in a valid frame; the model it carries is loaded too.
pub fn host_checkpoint(body: &[u8]) -> bool {
    sealed(HOST_CHECKPOINT, body, |file| {
        Checkpoint::decode(file).is_ok_and(|checkpoint| model(&checkpoint.model))
    })
}

/// A device checkpoint, sealed into its host file as `sprout device pull` writes it, then
/// read back as `sprout device push` does before sending it.
pub fn device_checkpoint(bytes: &[u8]) -> bool {
    sealed(FILE_FRAMING, bytes, |file| {
        with_file("device.ckpt", file, |path| {
            let hash = device::read(bytes).map_or(0, |(info, _)| info.model_hash);
            let info = DeviceInfo {
                model_hash: hash,
                classes: 4,
                sample: SampleShape { width: 8, height: 8 },
                samples: 0,
                checkpoint: None,
                streams: false,
            };
            let Ok(read) = sprout_device::checkpoint_for(path, &info) else { return false };
            assert_eq!(read, bytes, "a checkpoint file must read back as written");
            true
        })
    })
}

/// An ONNX model, imported as `sprout convert` imports it.
pub fn onnx(bytes: &[u8]) -> bool {
    let Ok(imported) = sprout_onnx::import(bytes) else { return false };
    // What `convert` writes must load.
    let saved = sprout_core::save_model(&imported.model_file()).expect("an imported model encodes");
    sprout_core::load_model(&saved).expect("sprout loads what its ONNX importer makes");
    true
}

/// What `decode` says of `body` sealed in `framing` (bodies over 4 GiB cannot be sealed).
fn sealed(framing: Framing, body: &[u8], decode: impl FnOnce(&[u8]) -> bool) -> bool {
    seal(framing, body).is_ok_and(|file| decode(&file))
}
