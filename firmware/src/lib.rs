//! sprout-firmware: the board-agnostic on-device trainer. It holds what a device needs to
//! fine-tune a model's head where it runs, with no heap:
//!
//! - [`trainer`]: caches backbone features per sample, trains the head for epochs,
//!   evaluates held-out samples and keeps the best checkpoint;
//! - [`storage`]: checkpoints in two flash slots that survive a power cut at any moment;
//! - [`device`]: the link's device app: samples from the host, training runs, checkpoints;
//! - [`controls`]: a status LED and a start button over the board's `embedded-hal` pins.
//!
//! The files it reads and writes (the bundle, the checkpoint bytes) are
//! `sprout_core::format::{bundle, device_checkpoint}`, shared with the host tools.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod controls;
pub mod device;
pub mod storage;
pub mod trainer;
