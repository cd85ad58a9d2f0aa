//! The memory a fine-tuning job will need, from its compiled training step (the arena, the
//! training state and the frozen weights of the plan) plus its resized images held in the
//! data pipeline's cache and a fixed allowance for the process, and the memory the machine
//! has for it.

use sprout_core::{compile_training_step_with, MemoryOptions, TrainConfig};
use sprout_train::Model;

/// What a `sprout train` process needs beyond its plan and images: code, threads, buffers.
pub const PROCESS_BYTES: u64 = 64 << 20;

/// The bytes a job training `model` (`trainable` as `sprout train --trainable` takes it)
/// on `images` pictures needs; AdamW keeps two moments where SGD keeps one.
pub fn training_bytes(
    model: &Model,
    trainable: &str,
    adamw: bool,
    images: u64,
) -> Result<u64, String> {
    let zoo = &model.zoo;
    let trainable = sprout_zoo::select_trainable(zoo, trainable).map_err(|e| e.to_string())?;
    let training = compile_training_step_with(
        &zoo.graph,
        zoo.loss,
        &trainable,
        &TrainConfig::sgd(0.9),
        &MemoryOptions::default(),
    )
    .map_err(|e| format!("cannot compile the training step: {e}"))?;
    let sizes = &training.plan.sizes;
    let state = sizes.state as u64 * if adamw { 2 } else { 1 };
    let side = u64::from(model.image_size().unwrap_or(0));
    let cache = images * 3 * side * side;
    Ok(sizes.arena as u64 + state + sizes.frozen as u64 + cache + PROCESS_BYTES)
}

/// The memory available to new jobs: `MemAvailable` of `/proc/meminfo`, or `None` where the
/// system does not say.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::{training_bytes, PROCESS_BYTES};
    use sprout_train::Model;
    use sprout_zoo::Architecture;

    #[test]
    fn the_estimate_grows_with_trainable_layers_images_and_optimizer_state() {
        let model = Model::from_zoo(Architecture::ResNet, 2, 0).unwrap();
        let head = training_bytes(&model, "head", false, 0).unwrap();
        let all = training_bytes(&model, "all", false, 0).unwrap();
        let adamw = training_bytes(&model, "all", true, 0).unwrap();
        let images = training_bytes(&model, "all", false, 100).unwrap();
        assert!(
            head > PROCESS_BYTES && head < all && all < adamw && all < images,
            "{head} {all} {adamw} {images}"
        );
        assert!(training_bytes(&model, "nothing.*", false, 0).unwrap_err().contains("nothing"));
    }
}
