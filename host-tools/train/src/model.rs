//! `Model`: a graph ready to train (input, labels, logits, loss, head) with its metadata,
//! from the zoo or a `.sprout` file, and `Inference`: its evaluation plan over any number
//! of samples (chunked into the recorded batch, the last chunk padded).

use std::path::Path;

use sprout_core::format::GraphRecord;
use sprout_core::op::Op;
use sprout_core::{
    compile_inference, Executor, HostMemory, Metadata, ModelFile, Operand, Plan, Role,
};
use sprout_data::Normalize;
use sprout_zoo::{Architecture, ZooModel};

use crate::kind::{read_kind, FileKind};
use crate::metrics::Metrics;
use crate::new_head::with_new_head;
use crate::source::DataSource;
use crate::TrainError;
use sprout_cpu::Cpu;

/// What a model file is called in messages.
const MODEL: &str = "a .sprout model";

/// A model ready to train or run.
#[derive(Clone)]
pub struct Model {
    /// The graph with its input, labels, logits, loss and head (zoo or rebuilt from a file).
    pub zoo: ZooModel,
    pub metadata: Metadata,
    /// Whether the class names are the model's own (a file) rather than placeholders that a
    /// folder data set may rename (a zoo model).
    pub names_fixed: bool,
}

fn mismatch(detail: impl Into<String>) -> TrainError {
    TrainError::Mismatch(detail.into())
}

impl Model {
    /// A zoo architecture recorded for `batch` samples, initial weights from `seed`.
    pub fn from_zoo(arch: Architecture, batch: usize, seed: u64) -> Result<Self, TrainError> {
        Self::from_zoo_for(arch, batch, arch.classes(), seed)
    }

    /// [`Model::from_zoo`] with a head for `classes` classes.
    pub fn from_zoo_for(
        arch: Architecture,
        batch: usize,
        classes: usize,
        seed: u64,
    ) -> Result<Self, TrainError> {
        let zoo = sprout_zoo::build_with_classes(arch, batch, classes, seed)?;
        let shape = zoo.graph.shape(zoo.input);
        let (class_names, names_fixed) = match arch {
            Architecture::LeafNet if classes == sprout_zoo::leafnet::CLASS_NAMES.len() => {
                (sprout_zoo::leafnet::CLASS_NAMES.iter().map(|s| s.to_string()).collect(), false)
            }
            _ => ((0..classes).map(|i| i.to_string()).collect(), false),
        };
        let preprocessing = match shape.dims() {
            [_, 3, h, w] => sprout_core::format::Preprocessing {
                mean: Normalize::IMAGENET.mean.to_vec(),
                std: Normalize::IMAGENET.std.to_vec(),
                resize: Some((*h as u32, *w as u32)),
                // Recorded by the data it is trained on (see `open_data`).
                fit: None,
            },
            _ => Default::default(),
        };
        let metadata = Metadata {
            class_names,
            input_shape: shape,
            preprocessing,
            provenance: format!("sprout zoo {arch} seed {seed}"),
        };
        Ok(Self { zoo, metadata, names_fixed })
    }

    /// A model read from `.sprout` bytes: the input is the tensor with role `Input`; the
    /// loss, labels and logits come from the cross-entropy node, or, without one, the
    /// logits are the tensor named `logits` (else the last node's output) and a
    /// cross-entropy with new labels is added. The head is the last linear layer.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, TrainError> {
        let model_error = |source| TrainError::Model { path: path.to_path_buf(), source };
        let file = sprout_core::load_model(bytes).map_err(model_error)?;
        let mut graph = file.to_graph().map_err(model_error)?;
        let input = graph.with_role(Role::Input).next().ok_or_else(|| {
            mismatch(format!("{}: the model has no input tensor", path.display()))
        })?;
        let ce = graph.nodes().iter().rev().find(|n| n.op == Op::CrossEntropy).cloned();
        let (labels, logits, loss) = match ce {
            Some(n) => (n.inputs[1], n.inputs[0], n.outputs[0]),
            None => {
                let logits = graph
                    .find("logits")
                    .or_else(|| graph.nodes().last().and_then(|n| n.outputs.first().copied()))
                    .ok_or_else(|| {
                        mismatch(format!("{}: the model has no nodes", path.display()))
                    })?;
                let batch = graph.shape(input).dims()[0];
                let labels = graph.labels("labels", batch)?;
                let loss = graph.cross_entropy("loss", logits, labels)?;
                (labels, logits, loss)
            }
        };
        if graph.shape(logits).rank() != 2 {
            return Err(mismatch(format!(
                "{}: the logits '{}' have shape {:?}, expected [N, classes]",
                path.display(),
                graph.tensor(logits).name,
                graph.shape(logits).dims()
            )));
        }
        let is_param = |r: Role| matches!(r, Role::FrozenParam | Role::TrainableParam);
        let head = graph
            .nodes()
            .iter()
            .rev()
            .find(|n| n.op == Op::Linear)
            .map(|n| {
                n.inputs[1..].iter().copied().filter(|&t| is_param(graph.tensor(t).role)).collect()
            })
            .unwrap_or_default();
        let mut metadata = file.metadata.clone();
        metadata.input_shape = graph.shape(input);
        let classes = graph.shape(logits).dims()[1];
        if metadata.class_names.len() != classes {
            metadata.class_names = (0..classes).map(|i| i.to_string()).collect();
        }
        let zoo = ZooModel { graph, input, labels, logits, loss, head };
        Ok(Self { zoo, metadata, names_fixed: true })
    }

    /// Reads a `.sprout` file.
    pub fn open(path: &Path) -> Result<Self, TrainError> {
        let bytes = read_kind(path, FileKind::Model, MODEL)?;
        Self::from_bytes(&bytes, path)
    }

    /// Samples per batch the graph was recorded for.
    pub fn batch(&self) -> usize {
        self.zoo.graph.shape(self.zoo.input).dims()[0]
    }

    /// Output classes.
    pub fn classes(&self) -> usize {
        self.zoo.graph.shape(self.zoo.logits).dims()[1]
    }

    /// The shape of one input sample.
    pub fn sample_dims(&self) -> Vec<usize> {
        self.zoo.graph.shape(self.zoo.input).dims()[1..].to_vec()
    }

    /// The image size (`H`, with `H == W`) of an image model `[N, 3, H, W]`.
    pub fn image_size(&self) -> Option<u32> {
        match self.sample_dims()[..] {
            [3, h, w] if h == w => Some(h as u32),
            _ => None,
        }
    }

    /// A stable hash (FNV-1a 64) of the graph's structure: tensors and nodes, not values.
    pub fn graph_hash(&self) -> u64 {
        let record = GraphRecord::of(&self.zoo.graph);
        let bytes = postcard::to_allocvec(&record).unwrap_or_default();
        bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The model file with the weights `plan` holds in `memory` (e.g. a training plan's).
    pub fn file_with(&self, plan: &Plan, memory: &HostMemory) -> ModelFile {
        let mut file = ModelFile::from_graph(&self.zoo.graph, self.metadata.clone());
        file.read_weights(plan, memory);
        file
    }

    /// Starts from the weights of a `.sprout` file wherever a parameter or buffer has the
    /// same name and size (a pretrained backbone under a new head), except the parameters
    /// the `fresh` choice selects (`--trainable` syntax, e.g. `head`), which keep their
    /// fresh initial values; returns how many tensors were taken from the file.
    pub fn init_from(&mut self, path: &Path, fresh: Option<&str>) -> Result<usize, TrainError> {
        let bytes = read_kind(path, FileKind::Model, MODEL)?;
        let model_error = |source| TrainError::Model { path: path.to_path_buf(), source };
        let file = sprout_core::load_model(&bytes).map_err(model_error)?;
        let fresh = match fresh {
            Some(choice) => sprout_zoo::select_trainable(&self.zoo, choice)?,
            None => Vec::new(),
        };
        let graph = &mut self.zoo.graph;
        let mut taken = 0;
        for stored in &file.weights {
            let Some(values) = stored.values.float_values() else { continue };
            let Some(id) = graph.find(&stored.name) else { continue };
            if fresh.contains(&id) {
                continue;
            }
            if graph.tensor(id).init.is_some() && graph.shape(id).numel() == values.len() {
                graph.set_initial_values(id, values)?;
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Replaces the classifier feeding the logits with a fresh one for `classes` classes
    /// (see [`with_new_head`]), which becomes the head; the class names become placeholders
    /// that a folder data set names.
    pub fn new_head(&mut self, classes: usize) -> Result<(), TrainError> {
        let (graph, head) = with_new_head(&self.zoo.graph, self.zoo.logits, classes)?;
        self.zoo.graph = graph;
        self.zoo.head = head;
        self.metadata.class_names = (0..classes).map(|i| i.to_string()).collect();
        self.names_fixed = false;
        Ok(())
    }

    /// Gives the model the class names of a folder data set: placeholders are replaced
    /// when the count matches; a model's own names must match exactly.
    pub fn adopt_classes(&mut self, names: &[String], origin: &Path) -> Result<(), TrainError> {
        if names == self.metadata.class_names.as_slice() {
            return Ok(());
        }
        if self.names_fixed || names.len() != self.classes() {
            return Err(mismatch(format!(
                "{}: the class folders {names:?} do not match the model's {} classes {:?}",
                origin.display(),
                self.classes(),
                self.metadata.class_names
            )));
        }
        self.metadata.class_names = names.to_vec();
        Ok(())
    }
}

/// The model's evaluation plan and memory.
pub struct Inference {
    pub plan: Plan,
    pub memory: HostMemory,
    input: Operand,
    logits: Operand,
    batch: usize,
    classes: usize,
    per_sample: usize,
}

impl Inference {
    /// Compiles the model's logits in evaluation mode, with the model's weights.
    pub fn new(model: &Model) -> Result<Self, TrainError> {
        let z = &model.zoo;
        let plan = compile_inference(&z.graph, &[z.logits])?;
        let memory = plan.initial_memory(&z.graph);
        let operand = |id| {
            plan.binding_of(id)
                .map(|b| b.operand)
                .ok_or_else(|| mismatch("the logits do not depend on the input"))
        };
        let (input, logits) = (operand(z.input)?, operand(z.logits)?);
        Ok(Self {
            input,
            logits,
            batch: model.batch(),
            classes: model.classes(),
            per_sample: model.sample_dims().iter().product(),
            plan,
            memory,
        })
    }

    /// Logits (`[n, classes]`) of `n = x.len() / per_sample` samples, run in batches of the
    /// recorded size, the last one padded with zeros.
    pub fn logits(&mut self, x: &[f32]) -> Result<Vec<f32>, TrainError> {
        let n = x.len() / self.per_sample;
        let mut out = Vec::with_capacity(n * self.classes);
        let mut exec = Executor::new(self.plan.view(), Cpu::new())?;
        let mut chunk = vec![0.0f32; self.batch * self.per_sample];
        for start in (0..n).step_by(self.batch) {
            let count = (n - start).min(self.batch);
            let values = &x[start * self.per_sample..(start + count) * self.per_sample];
            chunk[..values.len()].copy_from_slice(values);
            chunk[values.len()..].fill(0.0);
            let mut regions = self.memory.regions();
            regions.write(&self.input, &chunk)?;
            exec.run(&mut regions)?;
            out.extend_from_slice(&regions.read::<f32>(&self.logits)?[..count * self.classes]);
        }
        Ok(out)
    }

    /// Loss, accuracy, per-class accuracy and confusion matrix over every sample of `data`.
    pub fn evaluate(&mut self, data: &mut DataSource) -> Result<Metrics, TrainError> {
        self.evaluate_with_progress(data, &mut |_, _| {})
    }

    /// [`Self::evaluate`], calling `progress(samples done, samples in all)` after each batch.
    pub fn evaluate_with_progress(
        &mut self,
        data: &mut DataSource,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Metrics, TrainError> {
        let (mut metrics, total, mut done) = (Metrics::new(self.classes), data.len(), 0);
        for batch in data.epoch(0) {
            let batch = batch?;
            let logits = self.logits(&batch.x)?;
            for (row, &label) in logits.chunks_exact(self.classes).zip(&batch.y) {
                metrics.add(row, label as usize);
            }
            done += batch.len();
            progress(done, total);
        }
        Ok(metrics)
    }
}
