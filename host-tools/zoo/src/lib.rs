//! sprout-zoo: ready-made models recorded into a [`Graph`] for any batch size, and the
//! `--trainable` choices that pick which of their parameters a training step updates.
//!
//! | architecture | input | classes | parameters |
//! | --- | --- | --- | --- |
//! | [`mlp`] | `[N, 64]` (an 8x8 image, flattened) | 10 | 17 226 |
//! | [`resnet`] | `[N, 3, 32, 32]` | 10 | 175 258 |
//! | [`leafnet`] (MobileNetV2-style leaf-disease classifier) | `[N, 3, 64, 64]` | 3 | 105 379 |
//!
//! Every model names its input `input` (f32), its labels `labels` (i32 class indices, one per
//! sample) and its mean cross-entropy `loss`, and ends in a dropout + linear classifier
//! head. Parameters carry the names PyTorch's `state_dict` gives the matching torchvision
//! model (`features.3.conv.1.0.weight`, `layer2.0.downsample.1.bias`, `classifier.1.weight`;
//! the MLP borrows MobileNet's `features` / `classifier` split), so weights can be exchanged
//! with a torchvision-style export; each module documents its names. The initial weights
//! (PyTorch's default initialisation) and the dropout masks are drawn from the model seed.
//!
//! ```
//! use sprout_core::{compile_training_step, TrainConfig};
//! use sprout_zoo::{build, select_trainable, Architecture};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let arch = Architecture::from_name("leafnet").expect("a zoo architecture");
//! let model = build(arch, 4, 42)?;
//! // Fine-tune the head and the last 1x1 convolution on top of a frozen backbone:
//! // classifier.1.{weight,bias}, features.10.0.weight, features.10.1.{weight,bias}.
//! let trainable = select_trainable(&model, "head,features.10.*")?;
//! assert_eq!(trainable.len(), 5);
//! let sgd = TrainConfig::sgd(0.9);
//! let training = compile_training_step(&model.graph, model.loss, &trainable, &sgd)?;
//! assert!(training.plan.binding("classifier.1.weight").is_some());
//! # Ok(())
//! # }
//! ```

mod blocks;
pub mod leafnet;
pub mod mlp;
pub mod resnet;
mod trainable;

pub use trainable::{select_trainable, SelectError};

use blocks::Head;
use sprout_core::{Graph, GraphError, Shape, TensorId};
use std::fmt;

/// A model of the zoo, recorded for one batch size and ready to compile.
#[derive(Clone)]
pub struct ZooModel {
    pub graph: Graph,
    /// Named `input`: f32 `[N, C, H, W]` images or `[N, F]` features.
    pub input: TensorId,
    /// Named `labels`: i32 class indices `[N]`.
    pub labels: TensorId,
    /// `[N, classes]`.
    pub logits: TensorId,
    /// Mean cross-entropy of the logits against the labels, named `loss`.
    pub loss: TensorId,
    /// Parameters of the classifier head (what `--trainable head` means): the final
    /// dropout + linear layer's weight and bias.
    pub head: Vec<TensorId>,
}

impl ZooModel {
    /// Number of parameter values (weights, biases, batch-norm scales and shifts; running
    /// statistics are buffers and not counted).
    pub fn parameter_count(&self) -> usize {
        self.graph.parameters().map(|id| self.graph.shape(id).numel()).sum()
    }
}

/// The architectures of the zoo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    Mlp,
    ResNet,
    LeafNet,
}

impl Architecture {
    pub const ALL: [Architecture; 3] =
        [Architecture::Mlp, Architecture::ResNet, Architecture::LeafNet];

    /// The name tools use: `mlp`, `resnet` or `leafnet`.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Mlp => "mlp",
            Architecture::ResNet => "resnet",
            Architecture::LeafNet => "leafnet",
        }
    }

    /// The architecture with this [`name`](Self::name), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// One line saying what the model is.
    pub fn description(self) -> &'static str {
        match self {
            Architecture::Mlp => "3-layer perceptron: 64 features (an 8x8 image) -> 10 classes",
            Architecture::ResNet => {
                "small ResNet, 3 stages of 2 basic blocks: 3x32x32 -> 10 classes"
            }
            Architecture::LeafNet => {
                "MobileNetV2-style leaf-disease classifier: 3x64x64 -> 3 classes"
            }
        }
    }

    /// Output classes.
    pub fn classes(self) -> usize {
        match self {
            Architecture::Mlp => mlp::CLASSES,
            Architecture::ResNet => resnet::CLASSES,
            Architecture::LeafNet => leafnet::CLASS_NAMES.len(),
        }
    }

    /// The shape of the model's input for `batch` samples.
    pub fn input_shape(self, batch: usize) -> Shape {
        match self {
            Architecture::Mlp => Shape::d2(batch, mlp::FEATURES),
            Architecture::ResNet => Shape::d4(batch, resnet::CHANNELS, resnet::SIZE, resnet::SIZE),
            Architecture::LeafNet => {
                Shape::d4(batch, leafnet::CHANNELS, leafnet::SIZE, leafnet::SIZE)
            }
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Records `arch` for batches of `batch` samples; `seed` drives the initial weights and the
/// dropout masks.
pub fn build(arch: Architecture, batch: usize, seed: u64) -> Result<ZooModel, GraphError> {
    build_with_classes(arch, batch, arch.classes(), seed)
}

/// [`build`] with a head for `classes` classes (pretraining on another label set, say).
pub fn build_with_classes(
    arch: Architecture,
    batch: usize,
    classes: usize,
    seed: u64,
) -> Result<ZooModel, GraphError> {
    let mut graph = Graph::new(seed);
    let input = graph.input("input", arch.input_shape(batch))?;
    let labels = graph.labels("labels", batch)?;
    let Head { logits, params: head } = match arch {
        Architecture::Mlp => mlp::record(&mut graph, input, classes)?,
        Architecture::ResNet => resnet::record(&mut graph, input, classes)?,
        Architecture::LeafNet => leafnet::record(&mut graph, input, classes)?,
    };
    let loss = graph.cross_entropy("loss", logits, labels)?;
    Ok(ZooModel { graph, input, labels, logits, loss, head })
}
