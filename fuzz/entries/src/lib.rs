//! What each fuzz target does with its input, one function per target: the libFuzzer
//! targets in `fuzz/fuzz_targets/` call these, and `tests/replay.rs` feeds them every
//! file under `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` on stable, so a
//! crash once found stays fixed. A function returns whether its decoder accepted the input
//! (the replay checks that every seed still is); a panic, an abort or a hang is the bug
//! the fuzzer looks for.

mod files;
mod formats;
mod link;

pub use files::{image, tensors};
pub use formats::{bundle, device_checkpoint, graph, host_checkpoint, model, onnx};
pub use link::{conversation, link_device, link_host};

/// What a fuzz target runs: its input in, whether the decoder accepted it out.
pub type Entry = fn(&[u8]) -> bool;

/// Every target by name: its folder under `fuzz/corpus/` and `fuzz/regressions/`, and
/// its file under `fuzz/fuzz_targets/`.
pub const TARGETS: &[(&str, Entry)] = &[
    ("model", model),
    ("graph", graph),
    ("bundle", bundle),
    ("host_checkpoint", host_checkpoint),
    ("device_checkpoint", device_checkpoint),
    ("onnx", onnx),
    ("tensors", tensors),
    ("image", image),
    ("link_device", link_device),
    ("link_host", link_host),
];
