//! `Network`: a `.sprout` file's forward graph with its output of any rank; `Model`: a
//! classifier ready to train (input, labels, logits, loss, head) with its metadata, from the
//! zoo or a `.sprout` file; `Inference`: either's output over any number of samples, in
//! passes re-recorded for the samples they hold.

use std::path::Path;

use sprout_core::format::GraphRecord;
use sprout_core::op::Op;
use sprout_core::{
    compile_inference, Executor, Graph, HostMemory, Metadata, ModelFile, Operand, Plan, Role,
    TensorId,
};
use sprout_data::Normalize;
use sprout_zoo::{Architecture, ZooModel};

use crate::kind::{read_kind, FileKind};
use crate::metrics::Metrics;
use crate::new_head::with_new_head;
use crate::source::DataSource;
use crate::TrainError;
use sprout_cpu::{Cpu, KernelProfile};

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

/// A model file's forward graph: its input and its output of any rank (logits `[N, C]`, a
/// feature map `[N, C, H, W]`, features `[N, F]`), without a loss: what inference runs.
#[derive(Clone)]
pub struct Network {
    pub graph: Graph,
    /// The tensor with role `Input`, `[N, ...]`.
    pub input: TensorId,
    /// The logits of the cross-entropy node, or without one the tensor named `logits`, else
    /// the last node's first output.
    pub output: TensorId,
    pub metadata: Metadata,
}

impl Network {
    /// The network of `.sprout` bytes; `path` names them in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, TrainError> {
        let model_error = |source| TrainError::Model { path: path.to_path_buf(), source };
        let file = sprout_core::load_model(bytes).map_err(model_error)?;
        let graph = file.to_graph().map_err(model_error)?;
        crate::memory::check_graph(&graph, &format!("model {}", path.display()))?;
        let input = graph.with_role(Role::Input).next().ok_or_else(|| {
            mismatch(format!("{}: the model has no input tensor", path.display()))
        })?;
        if graph.shape(input).dims().is_empty() {
            return Err(mismatch(format!(
                "{}: the model's input has no batch axis",
                path.display()
            )));
        }
        let loss = graph.nodes().iter().rev().find(|n| matches!(n.op, Op::CrossEntropy | Op::Mse));
        let output = loss
            .map(|n| n.inputs[0])
            .or_else(|| graph.find("logits"))
            .or_else(|| graph.nodes().last().and_then(|n| n.outputs.first().copied()))
            .ok_or_else(|| mismatch(format!("{}: the model has no nodes", path.display())))?;
        let mut metadata = file.metadata;
        metadata.input_shape = graph.shape(input);
        Ok(Self { graph, input, output, metadata })
    }

    /// Reads a `.sprout` file.
    pub fn open(path: &Path) -> Result<Self, TrainError> {
        let bytes = read_kind(path, FileKind::Model, MODEL)?;
        Self::from_bytes(&bytes, path)
    }

    /// The shape of one input sample.
    pub fn sample_dims(&self) -> Vec<usize> {
        self.graph.shape(self.input).dims()[1..].to_vec()
    }

    /// The shape of one sample's output.
    pub fn output_dims(&self) -> Vec<usize> {
        self.graph.shape(self.output).dims()[1..].to_vec()
    }
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

    /// A model read from `.sprout` bytes: the [`Network`] whose output must be `[N, classes]`
    /// logits; the loss and labels come from its cross-entropy node, or, without one, a
    /// cross-entropy with new labels is added. The head is the last linear layer.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, TrainError> {
        Self::from_network(Network::from_bytes(bytes, path)?, path)
    }

    /// [`Model::from_bytes`] of a network already read from `path`.
    fn from_network(network: Network, path: &Path) -> Result<Self, TrainError> {
        let Network { mut graph, input, output: logits, mut metadata } = network;
        let shape = graph.shape(logits);
        if shape.rank() != 2 {
            return Err(TrainError::NotClassifier {
                path: path.to_path_buf(),
                output: graph.tensor(logits).name.clone(),
                shape: shape.dims().to_vec(),
            });
        }
        let ce = graph.nodes().iter().rev().find(|n| n.op == Op::CrossEntropy).cloned();
        let (labels, loss) = match ce {
            Some(n) => (n.inputs[1], n.outputs[0]),
            None => {
                let labels = graph.labels("labels", shape.dims()[0])?;
                (labels, graph.cross_entropy("loss", logits, labels)?)
            }
        };
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
        let classes = shape.dims()[1];
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

    /// Reads a `.sprout` file whose output may be anything: a classifier as [`Model::open`]
    /// reads it; any other output (a backbone's feature map) is the prediction of a
    /// mean-squared-error loss against a float target of its shape (its own, or one added),
    /// which stands for `labels` and `loss`: what an int8 rewrite needs of a model is its
    /// output and a float reader that keeps it float.
    pub fn open_any_output(path: &Path) -> Result<Self, TrainError> {
        let network = Network::open(path)?;
        if network.graph.shape(network.output).rank() == 2 {
            return Self::from_network(network, path);
        }
        let Network { mut graph, input, output, metadata } = network;
        let mse = graph.nodes().iter().rev().find(|n| n.op == Op::Mse && n.inputs[0] == output);
        let (target, loss) = match mse.cloned() {
            Some(n) => (n.inputs[1], n.outputs[0]),
            None => {
                let target = graph.target("target", graph.shape(output))?;
                (target, graph.mse("loss", output, target)?)
            }
        };
        let zoo = ZooModel { graph, input, labels: target, logits: output, loss, head: Vec::new() };
        Ok(Self { zoo, metadata, names_fixed: true })
    }

    /// The same model re-recorded for batches of `batch` samples (before differentiation:
    /// training then steps on `batch` samples); every weight keeps its value.
    pub fn with_batch(&self, batch: usize) -> Result<Self, TrainError> {
        let mut model = self.clone();
        model.zoo.graph = self.zoo.graph.with_batch(batch)?;
        model.metadata.input_shape = model.zoo.graph.shape(model.zoo.input);
        Ok(model)
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
    /// that a folder data set names. `seed` draws the new classifier's initial values.
    pub fn new_head(&mut self, classes: usize, seed: u64) -> Result<(), TrainError> {
        let (graph, head) = with_new_head(&self.zoo.graph, self.zoo.logits, classes, seed)?;
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

/// A compiled pass over a fixed number of samples.
struct Pass {
    samples: usize,
    plan: Plan,
    memory: HostMemory,
    input: Operand,
    output: Operand,
}

/// Samples per inference pass (`run`, `eval`, `predict`) when the command line does not say.
pub const INFERENCE_BATCH: usize = 32;

/// A model's output in evaluation mode for any number of samples: the forward graph up to
/// the output (no loss, no labels), run in passes of at most `batch` samples, each recorded
/// for exactly the samples it holds (a remainder pass is re-recorded, never padded).
pub struct Inference {
    graph: Graph,
    input: TensorId,
    output: TensorId,
    /// The full pass; its memory holds the weights every pass uses.
    full: Pass,
    /// The last remainder pass, kept while the remainder stays the same.
    rest: Option<Pass>,
    per_sample: usize,
    per_output: usize,
    /// The backend every pass runs on: its worker threads start once and its scratch is
    /// grown once, not once per pass (absent only after a pass failed).
    cpu: Option<Cpu>,
    /// Every pass's time per kernel, once [`Inference::profile_kernels`] asked for it.
    profile: Option<KernelProfile>,
}

impl Inference {
    /// The logits of a model, in passes of its recorded batch size.
    pub fn new(model: &Model) -> Result<Self, TrainError> {
        let z = &model.zoo;
        Self::of(&z.graph, z.input, z.logits, model.batch())
    }

    /// A network's output, in passes of at most `batch` samples.
    pub fn of_network(network: &Network, batch: usize) -> Result<Self, TrainError> {
        Self::of(&network.graph, network.input, network.output, batch)
    }

    /// `output` of `graph` (a forward graph reading `input`) in passes of `batch` samples.
    fn of(
        graph: &Graph,
        input: TensorId,
        output: TensorId,
        batch: usize,
    ) -> Result<Self, TrainError> {
        let sample = |id| graph.shape(id).dims()[1..].iter().product::<usize>();
        let (per_sample, per_output) = (sample(input), sample(output));
        let graph = graph.clone();
        let full = Self::compile(&graph, input, output, batch)?;
        let cpu = Some(Cpu::new());
        let (rest, profile) = (None, None);
        Ok(Self { graph, input, output, full, rest, per_sample, per_output, cpu, profile })
    }

    fn compile(
        graph: &Graph,
        input: TensorId,
        output: TensorId,
        samples: usize,
    ) -> Result<Pass, TrainError> {
        let graph = graph.with_batch(samples)?;
        let what = format!("the model at batch {samples}");
        crate::memory::check_graph(&graph, &what)?;
        let plan = compile_inference(&graph, &[output])?;
        let memory = crate::memory::initial_memory(&plan, &graph, &what)?;
        let operand = |id| {
            plan.binding_of(id)
                .map(|b| b.operand)
                .ok_or_else(|| mismatch("the model's output does not depend on its input"))
        };
        let (input, output) = (operand(input)?, operand(output)?);
        Ok(Pass { samples, plan, memory, input, output })
    }

    /// Times every kernel call of the passes from now on ([`Inference::kernel_profile`]).
    pub fn profile_kernels(&mut self) {
        self.profile.get_or_insert_with(KernelProfile::new);
    }

    /// The passes' time per kernel since [`Inference::profile_kernels`].
    pub fn kernel_profile(&self) -> Option<&KernelProfile> {
        self.profile.as_ref()
    }

    /// Takes the parameters and buffers that `plan` holds in `memory` (a training plan's)
    /// wherever names and sizes match.
    pub fn load_weights(&mut self, plan: &Plan, memory: &HostMemory) {
        for pass in std::iter::once(&mut self.full).chain(&mut self.rest) {
            plan.copy_weights(memory, &pass.plan, &mut pass.memory);
        }
    }

    /// The outputs (`[n, ...]`, `n = x.len() / per_sample`) of the samples of `x`.
    pub fn run(&mut self, x: &[f32]) -> Result<Vec<f32>, TrainError> {
        let n = x.len() / self.per_sample;
        let mut out = Vec::with_capacity(n * self.per_output);
        for chunk in x[..n * self.per_sample].chunks(self.full.samples * self.per_sample) {
            let samples = chunk.len() / self.per_sample;
            if samples != self.full.samples
                && self.rest.as_ref().is_none_or(|r| r.samples != samples)
            {
                let mut rest = Self::compile(&self.graph, self.input, self.output, samples)?;
                let full = &self.full;
                full.plan.copy_weights(&full.memory, &rest.plan, &mut rest.memory);
                self.rest = Some(rest);
            }
            let pass = match &mut self.rest {
                Some(rest) if rest.samples == samples => rest,
                _ => &mut self.full,
            };
            // A pass that fails drops the backend; the next one starts a fresh backend.
            let cpu = self.cpu.take().unwrap_or_default();
            let mut exec = Executor::new(pass.plan.view(), cpu)?;
            let mut regions = pass.memory.regions();
            regions.write(&pass.input, chunk)?;
            exec.run_observed(&mut regions, &mut self.profile)?;
            out.extend_from_slice(regions.read::<f32>(&pass.output)?);
            self.cpu = Some(exec.into_kernels());
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
        let classes = self.per_output;
        let (mut metrics, total, mut done) = (Metrics::new(classes), data.len(), 0);
        for batch in data.epoch(0) {
            let batch = batch?;
            let logits = self.run(&batch.x)?;
            for (row, &label) in logits.chunks_exact(classes).zip(&batch.y) {
                metrics.add(row, label as usize);
            }
            done += batch.len();
            progress(done, total);
        }
        Ok(metrics)
    }
}
