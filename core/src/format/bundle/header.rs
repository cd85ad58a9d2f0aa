//! The device bundle's wire types, shared by the host's writer (`sprout-bundle`) and the
//! device's decoder ([`super::decode`]).
//!
//! A bundle is a sprout frame ([`FRAMING`]: magic, version, length, CRC-32) whose body is
//! a postcard [`BundleHeader`], then the postcard-encoded steps of the backbone, training
//! and evaluation plans (each plan's steps, then its update steps), then the frozen-weight
//! and initial-state sections at file offsets that are multiples of [`SECTION_ALIGN`], so a
//! bundle embedded at an aligned address is run in place.

use crate::format::container::Framing;
use crate::{Operand, RegionSizes, Shape};
use serde::{Deserialize, Serialize};

/// Magic and version of a `.bundle` file.
/// Version 3: kernels carry explicit wire tags.
pub const FRAMING: Framing = Framing {
    magic: *b"\x89SPRBDL\n",
    version: 3,
    regenerate: "run `sprout bundle` again on the model with this sprout",
};

/// Class names a bundle may carry.
pub const MAX_CLASSES: usize = 32;

/// Trainable tensors a bundle may name.
pub const MAX_TRAINABLE: usize = 32;

/// Sections start at file offsets that are multiples of this (the plans' operand alignment).
pub const SECTION_ALIGN: usize = crate::plan::ALIGN;

/// A run of bytes of the file: `len` bytes from file offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    pub offset: u32,
    pub len: u32,
}

/// How many steps a plan has and what memory it runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanHeader {
    pub steps: u32,
    pub update_steps: u32,
    pub accumulation: u32,
    pub sizes: RegionSizes,
}

/// How RGB8 pixels become the model's input: `(byte / 255 - mean[c]) / std[c]`, channel
/// planes first (CHW), as the host's data pipeline does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PixelNormalization {
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl PixelNormalization {
    /// Pixels scaled to `[0, 1]` and nothing else.
    pub const UNIT: Self = Self { mean: [0.0; 3], std: [1.0; 3] };
}

/// A trainable tensor in the state region, by name, so the host can read a device
/// checkpoint's weights back into the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainableTensor<'a> {
    pub name: &'a str,
    pub operand: Operand,
}

/// The backbone's inference plan: one sample in, its feature vector out (f32, or int8
/// for a quantized backbone: the head then starts with its dequantize).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackboneIo {
    pub sample: Operand,
    pub features: Operand,
}

/// The head's training step: a batch of features and labels in, the loss out; the
/// optimizer updates the state region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainIo {
    pub features: Operand,
    pub labels: Operand,
    pub loss: Operand,
}

/// The head's evaluation plan (dropout off): a batch of features in, logits out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalIo {
    pub features: Operand,
    pub logits: Operand,
}

/// Everything about a bundle except its steps and sections' bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BundleHeader<'a> {
    /// The host's hash of the model graph, so a checkpoint is matched to its model.
    pub model_hash: u64,
    /// The shape of one input sample (e.g. `[3, 64, 64]`).
    pub sample_shape: Shape,
    /// In logit order.
    #[serde(borrow)]
    pub class_names: heapless::Vec<&'a str, MAX_CLASSES>,
    /// How a picture's RGB8 pixels become the input sample.
    pub pixels: PixelNormalization,
    /// The trainable tensors in the state region.
    #[serde(borrow)]
    pub trainable: heapless::Vec<TrainableTensor<'a>, MAX_TRAINABLE>,
    /// Samples per training and evaluation batch of the head.
    pub head_batch: u32,
    pub learning_rate: f32,
    pub backbone: PlanHeader,
    pub backbone_io: BackboneIo,
    pub train: PlanHeader,
    pub train_io: TrainIo,
    pub eval: PlanHeader,
    pub eval_io: EvalIo,
    /// Read by every plan; the training and evaluation plans share the state region.
    pub frozen: Section,
    /// The state region's initial image: trainable head weights and optimizer state.
    pub state: Section,
}

impl BundleHeader<'_> {
    /// Whether the bundle trains from its input, one sample a step: its first trained layer
    /// is the model's first, so the backbone plan hands on the (quantized) sample itself.
    /// A device cannot cache such features for every sample: the host streams the samples
    /// every epoch instead.
    pub fn streams(&self) -> bool {
        self.backbone_io.features.len == self.sample_shape.numel() && self.head_batch == 1
    }
}
