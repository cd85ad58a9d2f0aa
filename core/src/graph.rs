//! The recorded graph: tensors (shape, dtype, role, initial value) and the nodes that
//! produce them, in recording order. Model code builds it through [`crate::builder`].

use crate::op::Op;
use crate::rng::SplitMix;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::any::Any;
use core::fmt;

/// How a parameter or buffer starts out.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    Zeros,
    Constant(f32),
    /// Uniform in `[-bound, bound)`, drawn from `seed` (PyTorch's default for conv and linear
    /// layers uses `bound = 1 / sqrt(fan_in)`).
    Uniform {
        bound: f32,
        seed: u64,
    },
    /// Explicit values, e.g. loaded from a file or written by a test.
    Values(Vec<f32>),
    /// Explicit integer values of an int8 or int32 tensor (quantized weights, biases,
    /// requantization multipliers), kept exact.
    Ints(Vec<i32>),
}

impl Init {
    /// The initial values of a tensor of `numel` elements.
    pub fn materialize(&self, numel: usize) -> Vec<f32> {
        match self {
            Init::Zeros => vec![0.0; numel],
            Init::Constant(c) => vec![*c; numel],
            Init::Uniform { bound, seed } => {
                let mut rng = SplitMix::new(*seed);
                (0..numel).map(|_| rng.uniform(-bound, *bound)).collect()
            }
            Init::Values(v) => v.clone(),
            Init::Ints(v) => v.iter().map(|&i| i as f32).collect(),
        }
    }

    /// How many values an explicit initialiser holds (`None` for generated ones).
    pub fn explicit_len(&self) -> Option<usize> {
        match self {
            Init::Values(v) => Some(v.len()),
            Init::Ints(v) => Some(v.len()),
            _ => None,
        }
    }

    /// The initial values of a tensor of `numel` elements of `dtype`, as stored in memory
    /// (native byte order): f16 rounds to nearest even, integer tensors hold exact integer
    /// values or round float ones, saturating.
    pub fn to_bytes(&self, dtype: DType, numel: usize) -> Vec<u8> {
        let ints = || match self {
            Init::Ints(v) => v.clone(),
            other => other.materialize(numel).iter().map(|&x| libm::roundf(x) as i32).collect(),
        };
        match dtype {
            DType::F32 => bytemuck::cast_slice(&self.materialize(numel)).to_vec(),
            DType::F16 => {
                let halves: Vec<half::f16> =
                    self.materialize(numel).iter().map(|&v| half::f16::from_f32(v)).collect();
                bytemuck::cast_slice(&halves).to_vec()
            }
            DType::I8 => ints().iter().map(|&i| i.clamp(-128, 127) as i8 as u8).collect(),
            DType::I32 => bytemuck::cast_slice(&ints()).to_vec(),
        }
    }
}

/// Everything the graph knows about one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Shape,
    pub dtype: DType,
    pub role: Role,
    /// Initial value of parameters, buffers and optimizer state.
    pub init: Option<Init>,
}

impl TensorInfo {
    pub fn bytes(&self) -> usize {
        self.shape.numel() * self.dtype.size()
    }
}

/// When a node runs in a training plan: once per micro-batch, or once per optimizer update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    MicroBatch,
    Update,
}

/// Which part of a training step recorded a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stage {
    /// Model code.
    #[default]
    Forward,
    /// `differentiate`.
    Backward,
    /// Forward ops repeated in the backward pass by gradient checkpointing.
    Recompute,
    /// Gradient accumulation, clipping and parameter updates.
    Optimizer,
}

/// One recorded operation with its operands (see [`Op`] for each op's operand order).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    pub name: String,
    pub op: Op,
    pub inputs: Vec<TensorId>,
    /// Tensors read and written in place (running statistics, parameters, optimizer state).
    pub state: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub phase: Phase,
    pub stage: Stage,
}

/// For each of `tensors` tensors, the index in `nodes` of the node that writes it (the
/// last one, should several), if any.
pub(crate) fn producers(nodes: &[Node], tensors: usize) -> Vec<Option<usize>> {
    let mut producer = vec![None; tensors];
    for (i, node) in nodes.iter().enumerate() {
        for t in &node.outputs {
            producer[t.index()] = Some(i);
        }
    }
    producer
}

/// A recorded model. Cloning it is how a training graph is derived from a model graph.
#[derive(Clone, Default)]
pub struct Graph {
    tensors: Vec<TensorInfo>,
    nodes: Vec<Node>,
    seed: u64,
    /// Stamped on every node recorded from now on.
    pub(crate) stage: Stage,
    /// Sees every tensor and node as it is recorded (an eager graph's values).
    pub(crate) observer: Option<Box<dyn Observer>>,
}

/// Something that runs alongside recording, e.g. eager execution ([`crate::eager`]): it sees
/// every tensor as it is added and every node right after it is recorded.
pub(crate) trait Observer: Any {
    /// Tensor `info` has just been added.
    fn tensor_added(&mut self, info: &TensorInfo);
    /// Node `index` of `graph` has just been recorded; an error undoes nothing but is
    /// returned by the recording call.
    fn node_recorded(&mut self, graph: &Graph, index: usize) -> Result<(), GraphError>;
    /// A copy for a cloned graph.
    fn boxed_clone(&self) -> Box<dyn Observer>;
}

impl Clone for Box<dyn Observer> {
    fn clone(&self) -> Self {
        self.boxed_clone()
    }
}

impl Graph {
    /// An empty graph; `seed` drives every default initialiser so a model is reproducible.
    pub fn new(seed: u64) -> Self {
        Self { seed, ..Self::default() }
    }

    /// A graph of `tensors` and no nodes yet, for [`Graph::from_parts`] to check and fill.
    pub(crate) fn from_checked_tensors(seed: u64, tensors: Vec<TensorInfo>) -> Self {
        Self { tensors, ..Graph::new(seed) }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, id: TensorId) -> &TensorInfo {
        &self.tensors[id.index()]
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn shape(&self, id: TensorId) -> Shape {
        self.tensor(id).shape
    }

    /// The tensor with this name, if any.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name).map(|i| TensorId(i as u32))
    }

    /// Ids of every tensor with the given role, in creation order.
    pub fn with_role(&self, role: Role) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.role == role)
            .map(|(i, _)| TensorId(i as u32))
    }

    /// All parameters (frozen and trainable), in creation order.
    pub fn parameters(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| matches!(t.role, Role::FrozenParam | Role::TrainableParam))
            .map(|(i, _)| TensorId(i as u32))
    }

    pub(crate) fn check_id(&self, id: TensorId) -> Result<(), GraphError> {
        if id.index() < self.tensors.len() {
            Ok(())
        } else {
            Err(GraphError::UnknownTensor { id: id.0 })
        }
    }

    /// Adds a tensor; names are unique within a graph, and sizes checked as a decoded
    /// graph's are (see `Graph::from_parts`).
    pub(crate) fn add_tensor(&mut self, info: TensorInfo) -> Result<TensorId, GraphError> {
        crate::validate::check_tensor(&info)?;
        if self.find(&info.name).is_some() {
            return Err(GraphError::DuplicateName { name: info.name });
        }
        let id = TensorId(self.tensors.len() as u32);
        if let Some(observer) = self.observer.as_mut() {
            observer.tensor_added(&info);
        }
        self.tensors.push(info);
        Ok(id)
    }

    /// A name not yet used in this graph, derived from `base`.
    pub(crate) fn fresh_name(&self, base: &str) -> String {
        if self.find(base).is_none() {
            return String::from(base);
        }
        (1..)
            .map(|i| alloc::format!("{base}#{i}"))
            .find(|n| self.find(n).is_none())
            .expect("an unused name exists")
    }

    /// Replaces the node list with a reordered or extended one (compiler passes). The new
    /// list must still be in dependency order.
    pub(crate) fn set_nodes(&mut self, nodes: Vec<Node>) {
        self.nodes = nodes;
    }

    /// Gives a parameter or buffer new initial values (a pretrained weight, say).
    pub fn set_initial_values(&mut self, id: TensorId, values: Vec<f32>) -> Result<(), GraphError> {
        self.check_id(id)?;
        let t = &mut self.tensors[id.index()];
        if values.len() != t.shape.numel() {
            let (tensor, expected, actual) = (t.name.clone(), t.shape.numel(), values.len());
            return Err(GraphError::ValueLength { tensor, expected, actual });
        }
        if t.init.is_none() {
            return Err(GraphError::NotAParameter { name: t.name.clone(), role: t.role });
        }
        t.init = Some(Init::Values(values));
        Ok(())
    }

    pub(crate) fn set_role(&mut self, id: TensorId, role: Role) {
        self.tensors[id.index()].role = role;
    }

    /// Appends a node whose operand shapes have already been checked, then runs it when
    /// the graph is eager (tells its observer).
    pub(crate) fn push_node(&mut self, node: Node) -> Result<(), GraphError> {
        self.nodes.push(node);
        if let Some(mut observer) = self.observer.take() {
            let result = observer.node_recorded(self, self.nodes.len() - 1);
            self.observer = Some(observer);
            result?;
        }
        Ok(())
    }
}

/// The largest tensor [`Graph::from_parts`] accepts, in bytes (2 GiB): far above any model
/// sprout runs, and low enough that no size computed from shapes overflows.
pub const MAX_TENSOR_BYTES: usize = 1 << 31;

/// What went wrong while building, differentiating or compiling a graph.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphError {
    /// Two operands of an op do not fit together.
    ShapeMismatch {
        op: &'static str,
        node: String,
        detail: &'static str,
        left: Shape,
        right: Shape,
    },
    /// An operand has the wrong number of dimensions.
    Rank {
        op: &'static str,
        node: String,
        tensor: String,
        expected: usize,
        actual: Shape,
    },
    /// An operand has the wrong element type.
    DType {
        op: &'static str,
        node: String,
        tensor: String,
        expected: DType,
        actual: DType,
    },
    /// An op's settings are impossible for its operands.
    Invalid {
        op: &'static str,
        node: String,
        detail: String,
    },
    DuplicateName {
        name: String,
    },
    UnknownTensor {
        id: u32,
    },
    /// `differentiate` was asked to train something that is not a parameter.
    NotAParameter {
        name: String,
        role: Role,
    },
    /// The loss of `differentiate` must be a scalar.
    LossNotScalar {
        name: String,
        shape: Shape,
    },
    /// Anomaly mode: the first op whose output holds NaN or infinity.
    Anomaly {
        op: &'static str,
        node: String,
        tensor: String,
        shape: Shape,
        index: usize,
        value: f32,
    },
    /// No choice of recomputed activations fits the training step in the byte budget.
    BudgetUnreachable {
        budget: usize,
        smallest: usize,
    },
    /// Eager execution reached a tensor nobody gave a value.
    MissingValue {
        tensor: String,
    },
    /// A value given to an eager tensor has the wrong length.
    ValueLength {
        tensor: String,
        expected: usize,
        actual: usize,
    },
    /// A kernel refused its data while running eagerly.
    Kernel {
        op: &'static str,
        node: String,
        error: crate::error::KernelError,
    },
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GraphError::*;
        match self {
            ShapeMismatch { op, node, detail, left, right } => {
                write!(f, "{op} '{node}': {detail}: {left} vs {right}")
            }
            Rank { op, node, tensor, expected, actual } => write!(
                f,
                "{op} '{node}': '{tensor}' must have {expected} dimensions, it has shape {actual}"
            ),
            DType { op, node, tensor, expected, actual } => {
                write!(f, "{op} '{node}': '{tensor}' must be {expected:?}, it is {actual:?}")
            }
            Invalid { op, node, detail } => write!(f, "{op} '{node}': {detail}"),
            DuplicateName { name } => write!(f, "a tensor named '{name}' already exists"),
            UnknownTensor { id } => write!(f, "tensor #{id} does not belong to this graph"),
            NotAParameter { name, role } => {
                write!(f, "'{name}' cannot be trained: it is a {role:?}, not a parameter")
            }
            LossNotScalar { name, shape } => {
                write!(f, "the loss '{name}' must be a scalar, it has shape {shape}")
            }
            Anomaly { op, node, tensor, shape, index, value } => write!(
                f,
                "anomaly: {op} '{node}' produced {value} at element {index} of '{tensor}' (shape {shape})"
            ),
            BudgetUnreachable { budget, smallest } => write!(
                f,
                "the training step cannot fit in {budget} bytes of arena: the smallest reachable \
                 with gradient checkpointing is {smallest} bytes"
            ),
            MissingValue { tensor } => {
                write!(f, "eager: '{tensor}' has no value; feed it before using it")
            }
            ValueLength { tensor, expected, actual } => write!(
                f,
                "'{tensor}' holds {expected} elements, {actual} were given"
            ),
            Kernel { op, node, error } => write!(f, "{op} '{node}': {error}"),
        }
    }
}

impl core::error::Error for GraphError {}
