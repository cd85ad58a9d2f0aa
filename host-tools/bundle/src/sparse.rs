//! Choosing a sparse backbone update under the device's byte budget, as MIT's Tiny
//! Training Engine does: besides the float head, the biases of the last int8 layers (cheap
//! to store, and they let the backward pass reach deep) and then the weights of the last
//! pointwise layers among them, as many as the budget allows.
//!
//! The candidates are the model's trainable int8 layers (`sprout quantize
//! --trainable-int8`). Each candidate is bundled; the bundle's split caches the backbone
//! only up to the first trained layer, so the device memory it needs is measured, not
//! estimated: the largest plan arena, the state four times (the firmware keeps the working
//! state, the best state, and a checkpoint's bytes going out and coming in) and the
//! feature cache.

use crate::{build, BundleBuildError, BundleOptions, HostBundle};
use sprout_core::format::bundle::read_header;
use sprout_core::op::Op;
use sprout_core::Graph;
use sprout_train::Model;

/// Copies of the state the firmware holds: working, best, checkpoint out, checkpoint in.
pub const STATE_COPIES: usize = 4;

/// What the device's trainer must hold besides its code and stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The trainable values and their optimizer state (kept four times on the device).
    pub state: usize,
    /// Gradients of the trainable values (they live in the training arena).
    pub gradients: usize,
    /// The training step's arena: activations and gradients of a head batch.
    pub training_arena: usize,
    /// The backbone's inference arena, up to the cached features.
    pub inference_arena: usize,
    /// The largest plan arena, what the device allocates.
    pub arena: usize,
    /// Bytes cached per sample: its features and its label.
    pub per_sample: usize,
    /// Samples the cache holds.
    pub samples: usize,
}

impl DeviceMemory {
    /// Bytes of the feature cache.
    pub fn cache(&self) -> usize {
        self.samples * self.per_sample
    }

    /// Everything the budget covers: arena, the four copies of the state, cache.
    pub fn total(&self) -> usize {
        self.arena + STATE_COPIES * self.state + self.cache()
    }
}

/// One trainable int8 layer: its bias, and its weight when it is pointwise (1x1 or dense).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Int8Layer {
    pub bias: String,
    pub pointwise_weight: Option<String>,
}

/// The chosen update and its bundle.
pub struct SparseChoice {
    /// Layers whose biases train, from the first trained one.
    pub biases: Vec<String>,
    /// Pointwise weights that train.
    pub weights: Vec<String>,
    /// The `--trainable` choice it amounts to.
    pub trainable: String,
    pub memory: DeviceMemory,
    pub bundle: HostBundle,
    /// Whether a larger update was left out only because a bundle names at most
    /// `MAX_TRAINABLE` tensors.
    pub capped_by_count: bool,
    /// The shallowest deeper update the budget left out: its first trained bias and the
    /// memory it needs.
    pub deeper: Option<(String, DeviceMemory)>,
}

/// The trainable int8 layers of `graph`, in graph order.
pub fn int8_layers(graph: &Graph) -> Vec<Int8Layer> {
    let name = |t| graph.tensor(t).name.clone();
    let mut layers = Vec::new();
    for node in graph.nodes() {
        if let (Op::RoundBias(_), [bias, scale]) = (node.op, &node.inputs[..]) {
            let weight = graph.nodes().iter().find_map(|w| match (w.op, &w.inputs[..]) {
                (Op::RoundWeights(_), [weight, s]) if s == scale => Some(*weight),
                _ => None,
            });
            let pointwise = weight.filter(|&w| match graph.shape(w).dims() {
                [_, _] => true,
                [_, i, 1, 1] => *i > 1,
                _ => false,
            });
            layers.push(Int8Layer { bias: name(*bias), pointwise_weight: pointwise.map(name) });
        }
    }
    layers
}

/// The update that trains the biases of the most last int8 layers, then the weights of
/// the most last pointwise layers among them, whose device memory (with a cache of
/// `samples` samples) fits `budget` bytes. Every reach is tried, since a deeper one may
/// need less (the cached features shrink where a block's input has fewer channels than
/// its output); the deepest that fits wins. Candidates the split refuses (a residual join
/// the head would read twice) are skipped, and the search stops where an update would name
/// more tensors than a bundle holds. The choice also names the shallowest deeper update
/// the budget left out, with the memory it needs.
pub fn choose(
    model: &Model,
    options: &BundleOptions,
    budget: usize,
    samples: usize,
) -> Result<SparseChoice, BundleBuildError> {
    let layers = int8_layers(&model.zoo.graph);
    if layers.is_empty() {
        return Err(BundleBuildError::NoTrainableInt8);
    }
    let mut best = None;
    let mut deeper = None;
    let mut smallest = usize::MAX;
    let mut capped = false;
    for depth in 0..=layers.len() {
        let biased = &layers[layers.len() - depth..];
        let choice = match candidate(model, options, biased, 0, samples)? {
            Candidate::Built(choice) => *choice,
            Candidate::Unsplittable => continue,
            // Every deeper reach names more tensors still.
            Candidate::TooManyTensors => {
                capped = true;
                break;
            }
        };
        smallest = smallest.min(choice.memory.total());
        if choice.memory.total() <= budget {
            best = Some((biased, choice));
            deeper = None;
        } else if deeper.is_none() {
            deeper = choice.biases.first().map(|bias| (bias.clone(), choice.memory));
        }
    }
    let Some((biased, mut chosen)) = best else {
        return Err(BundleBuildError::OverBudget { budget, smallest });
    };
    let pointwise = biased.iter().filter(|l| l.pointwise_weight.is_some()).count();
    for weights in 1..=pointwise {
        match candidate(model, options, biased, weights, samples)? {
            Candidate::Built(choice) if choice.memory.total() <= budget => chosen = *choice,
            Candidate::Built(_) => break,
            Candidate::Unsplittable => continue,
            Candidate::TooManyTensors => {
                capped = true;
                break;
            }
        }
    }
    chosen.capped_by_count = capped;
    chosen.deeper = deeper;
    Ok(chosen)
}

/// One update tried by [`choose`].
enum Candidate {
    /// Its bundle, measured.
    Built(Box<SparseChoice>),
    /// The model does not split where it starts.
    Unsplittable,
    /// It names more tensors than a bundle holds.
    TooManyTensors,
}

/// The bundle training the head, the biases of `biased` and the last `weights` pointwise
/// weights among them.
fn candidate(
    model: &Model,
    options: &BundleOptions,
    biased: &[Int8Layer],
    weights: usize,
    samples: usize,
) -> Result<Candidate, BundleBuildError> {
    let biases: Vec<String> = biased.iter().map(|l| l.bias.clone()).collect();
    let pointwise: Vec<&String> =
        biased.iter().filter_map(|l| l.pointwise_weight.as_ref()).collect();
    let weights: Vec<String> =
        pointwise[pointwise.len() - weights..].iter().map(|w| (*w).clone()).collect();
    let trainable = ["head".to_string()].into_iter().chain(biases.clone()).chain(weights.clone());
    let trainable = trainable.collect::<Vec<_>>().join(",");
    let bundle =
        match build(model, &BundleOptions { trainable: trainable.clone(), ..options.clone() }) {
            Ok(bundle) => bundle,
            Err(BundleBuildError::Split { .. }) => return Ok(Candidate::Unsplittable),
            Err(BundleBuildError::TooManyTrainable { .. }) => return Ok(Candidate::TooManyTensors),
            Err(e) => return Err(e),
        };
    let memory = measure(&bundle, samples)?;
    let choice = SparseChoice {
        biases,
        weights,
        trainable,
        memory,
        bundle,
        capped_by_count: false,
        deeper: None,
    };
    Ok(Candidate::Built(Box::new(choice)))
}

/// The device memory `bundle` needs with a cache of `samples` samples, from the sizes its
/// header promises the device.
pub fn measure(bundle: &HostBundle, samples: usize) -> Result<DeviceMemory, BundleBuildError> {
    let (header, _) = read_header(&bundle.bytes)?;
    let graph = &bundle.training.graph;
    let gradients = bundle
        .training
        .gradients
        .iter()
        .map(|&(_, grad)| graph.shape(grad).numel() * std::mem::size_of::<f32>())
        .sum();
    let features = header.backbone_io.features;
    let arenas = [header.backbone, header.train, header.eval].map(|p| p.sizes.arena);
    Ok(DeviceMemory {
        state: header.state.len as usize,
        gradients,
        training_arena: header.train.sizes.arena,
        inference_arena: header.backbone.sizes.arena,
        arena: arenas.into_iter().max().unwrap_or(0),
        per_sample: features.len * features.dtype.size() + std::mem::size_of::<i32>(),
        samples,
    })
}
