//! f16 storage of the leaf classifier (LeafNet, batch 16): frozen weights in f16 halve the
//! frozen-weight region of a head fine-tune, and activations kept in f16 between the passes
//! shrink the arena of a full training step. Measured (bytes):
//!
//! | step | storage | frozen | arena |
//! | --- | --- | --- | --- |
//! | head fine-tune | f32 | 419 200 | 4 718 656 |
//! | head fine-tune | f16 frozen weights | 209 600 | 4 720 384 |
//! | train all | f32 | 0 | 33 098 244 |
//! | train all | f16 activations | 0 | 24 558 096 |
//!
//! The head fine-tune's arena peaks inside the forward pass, where every kernel computes in
//! f32, so f16 storage cannot lower it (a widened weight copy adds 1 728 bytes); a full
//! training step keeps activations for the backward pass, and those are what f16 halves.

use sprout_core::{
    compile_training_step_with, F16Storage, MemoryOptions, RegionSizes, TrainConfig,
};
use sprout_zoo::{build, select_trainable, Architecture, ZooModel};

fn sizes(model: &ZooModel, trainable: &str, storage: Option<F16Storage>) -> RegionSizes {
    let trainable = select_trainable(model, trainable).expect("a valid choice");
    let memory = MemoryOptions { f16_storage: storage, ..MemoryOptions::default() };
    let cfg = TrainConfig::sgd(0.9);
    compile_training_step_with(&model.graph, model.loss, &trainable, &cfg, &memory)
        .expect("the step compiles")
        .plan
        .sizes
}

#[test]
fn f16_storage_shrinks_the_leaf_classifiers_frozen_weights_and_training_arena() {
    let model = build(Architecture::LeafNet, 16, 1).expect("LeafNet records");
    let weights = F16Storage { frozen_weights: true, ..F16Storage::default() };
    let (head32, head16) = (sizes(&model, "head", None), sizes(&model, "head", Some(weights)));
    println!("head fine-tune: f32 {head32:?}, f16 frozen weights {head16:?}");
    // Every frozen tensor starts on a 16-byte boundary, so f16 halves the region exactly
    // when the tensors' f16 sizes stay multiples of 16 bytes, as LeafNet's do.
    assert_eq!(head16.frozen * 2, head32.frozen);
    assert_eq!(head16.state, head32.state, "the trained head stays f32");
    assert!(head16.arena <= head32.arena + head32.arena / 1000, "{head16:?} against {head32:?}");

    let activations = F16Storage { activations: true, ..F16Storage::default() };
    let (all32, all16) = (sizes(&model, "all", None), sizes(&model, "all", Some(activations)));
    println!("train all: f32 {all32:?}, f16 activations {all16:?}");
    assert!(all16.arena * 4 < all32.arena * 3, "{all16:?} against {all32:?}");
    assert_eq!(all16.state, all32.state);
}
