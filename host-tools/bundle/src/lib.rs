//! sprout-bundle: turns a model into a device bundle for `sprout-firmware`. The model is
//! split into a frozen backbone (compiled for one sample: inference) and the trainable head
//! (compiled for a batch of feature vectors: a training step and an evaluation plan); the
//! three plans are placed on one shared layout and written with their weights as one
//! checked file (see `sprout_core::format::bundle` for the format). Int8 layers kept
//! trainable by `sprout quantize --trainable-int8` are bundled as plain int8 layers unless
//! the device trains them, and then only the trained weight or bias is wide. A checkpoint
//! the device trained goes back into the model with [`apply_device_checkpoint`].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = sprout_train::Model::open("leaf.sprout".as_ref())?;
//! let bundle = sprout_bundle::build(&model, &sprout_bundle::BundleOptions::default())?;
//! sprout_train::write_atomic("leaf.bundle".as_ref(), &bundle.bytes)?;
//! # Ok(())
//! # }
//! ```

mod device_checkpoint;
mod layout;
mod narrow;
pub mod sparse;
mod split;

pub use device_checkpoint::{apply_device_checkpoint, ApplyError};

use layout::{Layout, Placed};
use sprout_core::format::bundle::{
    BackboneIo, BundleHeader, EvalIo, PixelNormalization, PlanHeader, Section, TrainIo,
    TrainableTensor, FRAMING, MAX_CLASSES, MAX_TRAINABLE, SECTION_ALIGN,
};
use sprout_core::format::container::{self, FrameError, HEADER_BYTES};
use sprout_core::{
    compile_inference, compile_training_step, Graph, GraphError, Plan, Step, TrainConfig, Training,
};
use sprout_train::Model;

/// What to build.
#[derive(Clone, Debug)]
pub struct BundleOptions {
    /// `head`, `bias`, `all` or name patterns (as `sprout train --trainable`).
    pub trainable: String,
    /// Samples per head training and evaluation batch.
    pub batch: usize,
    pub config: TrainConfig,
    pub learning_rate: f32,
}

impl Default for BundleOptions {
    fn default() -> Self {
        Self {
            trainable: "head".into(),
            batch: 8,
            config: TrainConfig::sgd(0.9),
            learning_rate: 0.05,
        }
    }
}

/// Why a bundle could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BundleBuildError {
    #[error(transparent)]
    Select(#[from] sprout_zoo::SelectError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("cannot split the model into backbone and head: {detail}")]
    Split { detail: String },
    #[error("the model has {found} classes; a bundle holds at most {MAX_CLASSES}")]
    TooManyClasses { found: usize },
    #[error(
        "the model trains {found} tensors on the device; a bundle names at most {MAX_TRAINABLE}"
    )]
    TooManyTrainable { found: usize },
    #[error("a head batch holds at least one sample")]
    EmptyBatch,
    #[error("cannot frame the bundle: {0}")]
    Frame(#[from] FrameError),
    #[error("cannot encode the bundle: {0}")]
    Encode(#[from] postcard::Error),
    #[error("the written bundle does not decode: {0}")]
    Decode(#[from] sprout_core::format::bundle::BundleError),
    #[error(
        "the model has no trainable int8 layer to update sparsely; quantize it with \
         `sprout quantize --trainable-int8 CHOICE` (e.g. the last blocks)"
    )]
    NoTrainableInt8,
    #[error(
        "no update fits {budget} bytes of device memory: training the head alone needs \
         {smallest}"
    )]
    OverBudget { budget: usize, smallest: usize },
}

/// A built bundle, with the host plans it was made from (to check a device against).
pub struct HostBundle {
    /// The `.bundle` file.
    pub bytes: Vec<u8>,
    /// The backbone recorded for one sample, and its inference plan up to the features.
    pub backbone_graph: Graph,
    pub backbone: Plan,
    /// The head's training step, over the head graph recorded for a batch.
    pub training: Training,
    /// The head graph (features in) and its evaluation plan (logits out).
    pub head_graph: Graph,
    pub eval: Plan,
    /// Names of the features, labels, loss and logits tensors.
    pub features: String,
    pub labels: String,
    pub loss: String,
    pub logits: String,
}

/// Builds the bundle of `model` (see the crate documentation).
pub fn build(model: &Model, options: &BundleOptions) -> Result<HostBundle, BundleBuildError> {
    if options.batch == 0 {
        return Err(BundleBuildError::EmptyBatch);
    }
    let classes = &model.metadata.class_names;
    if classes.len() > MAX_CLASSES {
        return Err(BundleBuildError::TooManyClasses { found: classes.len() });
    }
    let z = &model.zoo;
    let trainable = sprout_zoo::select_trainable(z, &options.trainable)?;
    let graph = narrow::narrow(&z.graph, &trainable)?;
    let split = split::split(&graph, &trainable)?;
    let name = |t| graph.tensor(t).name.clone();
    let (features, labels, loss, logits) =
        (name(split.features), name(z.labels), name(z.loss), name(z.logits));

    let backbone_graph = graph.with_batch(1)?;
    let find = |g: &Graph, n: &str| {
        g.find(n).ok_or_else(|| BundleBuildError::Split {
            detail: format!("'{n}' is lost when the model is rebatched"),
        })
    };
    let backbone = compile_inference(&backbone_graph, &[find(&backbone_graph, &features)?])?;

    let batched = graph.with_batch(options.batch)?;
    let head_graph = split::head_graph(&batched, &split)?;
    let head_trainable: Vec<_> =
        trainable.iter().map(|&t| find(&head_graph, &name(t))).collect::<Result<_, _>>()?;
    let training = compile_training_step(
        &head_graph,
        find(&head_graph, &loss)?,
        &head_trainable,
        &options.config,
    )?;
    let eval = compile_inference(&head_graph, &[find(&head_graph, &logits)?])?;

    let mut layout = Layout::new(&training.plan);
    let plans = [
        layout.place(&backbone, &backbone.initial_memory(&backbone_graph))?,
        layout.place(&training.plan, &training.plan.initial_memory(&training.graph))?,
        layout.place(&eval, &eval.initial_memory(&head_graph))?,
    ];
    let operand = |plan: &Plan, n: &str| {
        plan.operand(n).map_err(|e| BundleBuildError::Split { detail: e.to_string() })
    };
    let state = training.plan.initial_memory(&training.graph);
    let trainable_names: Vec<String> = trainable.iter().map(|&t| name(t)).collect();
    if trainable_names.len() > MAX_TRAINABLE {
        return Err(BundleBuildError::TooManyTrainable { found: trainable_names.len() });
    }
    let trainable_tensors = trainable_names
        .iter()
        .map(|n| Ok(TrainableTensor { name: n, operand: operand(&training.plan, n)? }))
        .collect::<Result<heapless::Vec<_, MAX_TRAINABLE>, BundleBuildError>>()?;
    let parts = Parts {
        header: BundleHeader {
            model_hash: model.graph_hash(),
            sample_shape: sample_shape(model),
            class_names: classes.iter().map(String::as_str).collect(),
            pixels: pixel_normalization(model),
            trainable: trainable_tensors,
            head_batch: options.batch as u32,
            learning_rate: options.learning_rate,
            backbone: plan_header(&plans[0], &layout),
            backbone_io: BackboneIo {
                sample: operand(&backbone, &name(z.input))?,
                features: operand(&backbone, &features)?,
            },
            train: plan_header(&plans[1], &layout),
            train_io: TrainIo {
                features: operand(&training.plan, &features)?,
                labels: operand(&training.plan, &labels)?,
                loss: operand(&training.plan, &loss)?,
            },
            eval: plan_header(&plans[2], &layout),
            eval_io: EvalIo {
                features: operand(&eval, &features)?,
                logits: operand(&eval, &logits)?,
            },
            frozen: Section { offset: 0, len: 0 },
            state: Section { offset: 0, len: 0 },
        },
        plans: &plans,
        frozen: layout.frozen(),
        state: state.region(sprout_core::Region::State),
    };
    let bytes = parts.encode()?;
    Ok(HostBundle {
        bytes,
        backbone_graph,
        backbone,
        training,
        head_graph,
        eval,
        features,
        labels,
        loss,
        logits,
    })
}

/// The model's per-channel normalization of RGB pixels; none for other inputs.
fn pixel_normalization(model: &Model) -> PixelNormalization {
    let p = &model.metadata.preprocessing;
    match (<[f32; 3]>::try_from(&p.mean[..]), <[f32; 3]>::try_from(&p.std[..])) {
        (Ok(mean), Ok(std)) => PixelNormalization { mean, std },
        _ => PixelNormalization::UNIT,
    }
}

/// The shape of one sample: the model's input shape without the batch.
fn sample_shape(model: &Model) -> sprout_core::Shape {
    let dims = model.zoo.graph.shape(model.zoo.input);
    let dims: Vec<usize> = dims.dims()[1..].to_vec();
    sprout_core::Shape::new(&dims).unwrap_or(sprout_core::Shape::SCALAR)
}

fn plan_header(placed: &Placed, layout: &Layout<'_>) -> PlanHeader {
    PlanHeader {
        steps: placed.steps.len() as u32,
        update_steps: placed.update_steps.len() as u32,
        accumulation: placed.accumulation,
        sizes: layout.sizes(placed),
    }
}

/// What goes into the file.
struct Parts<'a> {
    header: BundleHeader<'a>,
    plans: &'a [Placed; 3],
    frozen: &'a [u8],
    state: &'a [u8],
}

impl Parts<'_> {
    /// Header, steps, then the aligned sections. The header holds the sections' offsets,
    /// which depend on its own encoded length: encode until the layout stops moving.
    fn encode(mut self) -> Result<Vec<u8>, BundleBuildError> {
        let mut steps = Vec::new();
        for plan in self.plans {
            for step in plan.steps.iter().chain(&plan.update_steps) {
                steps.extend(postcard::to_allocvec::<Step>(step)?);
            }
        }
        loop {
            let header = postcard::to_allocvec(&self.header)?;
            let steps_end = HEADER_BYTES + header.len() + steps.len();
            let frozen_at = steps_end.next_multiple_of(SECTION_ALIGN);
            let state_at = (frozen_at + self.frozen.len()).next_multiple_of(SECTION_ALIGN);
            let frozen = Section { offset: frozen_at as u32, len: self.frozen.len() as u32 };
            let state = Section { offset: state_at as u32, len: self.state.len() as u32 };
            if (frozen, state) != (self.header.frozen, self.header.state) {
                (self.header.frozen, self.header.state) = (frozen, state);
                continue;
            }
            let mut body = header;
            body.extend(steps);
            body.resize(frozen_at - HEADER_BYTES, 0);
            body.extend_from_slice(self.frozen);
            body.resize(state_at - HEADER_BYTES, 0);
            body.extend_from_slice(self.state);
            return Ok(container::seal(FRAMING, &body)?);
        }
    }
}
