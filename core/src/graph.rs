//! The recorded graph: tensors (shape, dtype, role, initial value) and the nodes that
//! produce them, in recording order. Model code builds it through [`crate::builder`].

use crate::eager::Eager;
use crate::lower::{lower, Mode};
use crate::ops::Op;
use crate::rng::SplitMix;
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::boxed::Box;
use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
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

/// A recorded model. Cloning it is how a training graph is derived from a model graph.
#[derive(Clone, Default)]
pub struct Graph {
    tensors: Vec<TensorInfo>,
    nodes: Vec<Node>,
    seed: u64,
    /// Stamped on every node recorded from now on.
    pub(crate) stage: Stage,
    pub(crate) eager: Option<Box<Eager>>,
}

impl Graph {
    /// An empty graph; `seed` drives every default initialiser so a model is reproducible.
    pub fn new(seed: u64) -> Self {
        Self { seed, ..Self::default() }
    }

    /// A graph from its parts, e.g. decoded from a file. Nothing is trusted: every tensor
    /// must have a unique name, a size that fits [`MAX_TENSOR_BYTES`] and initial values of
    /// its own length; every node must have its op's operand counts, refer to existing
    /// tensors, read only leaves or outputs of earlier nodes, produce each output once, and
    /// lower to a kernel whose geometry and operands check out.
    pub fn from_parts(
        seed: u64,
        tensors: Vec<TensorInfo>,
        nodes: Vec<Node>,
    ) -> Result<Self, GraphError> {
        let mut names = BTreeSet::new();
        for info in &tensors {
            check_tensor(info)?;
            if !names.insert(info.name.as_str()) {
                return Err(GraphError::DuplicateName { name: info.name.clone() });
            }
        }
        let mut graph = Graph { tensors, ..Graph::new(seed) };
        // `Some(false)`: produced by a node not yet reached; `Some(true)`: already produced.
        let mut produced: Vec<Option<bool>> = vec![None; graph.tensors.len()];
        for node in &nodes {
            let invalid = |detail: String| GraphError::Invalid {
                op: node.op.kind(),
                node: node.name.clone(),
                detail,
            };
            let counts = node.op.operand_counts();
            let sizes = [
                ("inputs", &counts.inputs, node.inputs.len()),
                ("state tensors", &counts.state, node.state.len()),
                ("outputs", &counts.outputs, node.outputs.len()),
            ];
            for (what, range, actual) in sizes {
                if !range.contains(&actual) {
                    return Err(invalid(alloc::format!(
                        "takes {}..={} {what}, the node has {actual}",
                        range.start(),
                        range.end()
                    )));
                }
            }
            for &id in node.inputs.iter().chain(&node.state).chain(&node.outputs) {
                graph.check_id(id)?;
            }
            for &id in &node.outputs {
                if produced[id.index()].is_some() {
                    let name = &graph.tensors[id.index()].name;
                    return Err(invalid(alloc::format!("'{name}' is produced twice")));
                }
                produced[id.index()] = Some(false);
            }
        }
        for node in &nodes {
            for &id in node.inputs.iter().chain(&node.state) {
                if produced[id.index()] == Some(false) {
                    let name = &graph.tensors[id.index()].name;
                    return Err(GraphError::Invalid {
                        op: node.op.kind(),
                        node: node.name.clone(),
                        detail: alloc::format!("reads '{name}' before a node produces it"),
                    });
                }
            }
            for &id in &node.outputs {
                produced[id.index()] = Some(true);
            }
        }
        for node in &nodes {
            for mode in [Mode::Train, Mode::Eval] {
                check_kernel(&graph, node, mode)?;
            }
        }
        graph.nodes = nodes;
        Ok(graph)
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

    /// Adds a tensor; names are unique within a graph.
    pub(crate) fn add_tensor(&mut self, info: TensorInfo) -> Result<TensorId, GraphError> {
        if self.find(&info.name).is_some() {
            return Err(GraphError::DuplicateName { name: info.name });
        }
        let id = TensorId(self.tensors.len() as u32);
        if let Some(eager) = self.eager.as_mut() {
            eager.on_new_tensor(&info);
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
    /// the graph is eager.
    pub(crate) fn push_node(&mut self, node: Node) -> Result<(), GraphError> {
        self.nodes.push(node);
        if self.eager.is_some() {
            let index = self.nodes.len() - 1;
            let mut eager = self.eager.take().expect("checked above");
            let result = eager.run_node(self, index);
            self.eager = Some(eager);
            result?;
        }
        Ok(())
    }
}

/// The largest tensor [`Graph::from_parts`] accepts, in bytes (2 GiB): far above any model
/// sprout runs, and low enough that no size computed from shapes overflows.
pub const MAX_TENSOR_BYTES: usize = 1 << 31;

/// A decoded tensor's size fits and its initial values (if explicit) have its length.
fn check_tensor(info: &TensorInfo) -> Result<(), GraphError> {
    let bytes = info.shape.dims().iter().try_fold(info.dtype.size(), |acc, &d| acc.checked_mul(d));
    if bytes.is_none_or(|b| b > MAX_TENSOR_BYTES) {
        return Err(GraphError::Invalid {
            op: "tensor",
            node: info.name.clone(),
            detail: alloc::format!(
                "shape {} of {:?} exceeds {MAX_TENSOR_BYTES} bytes",
                info.shape,
                info.dtype
            ),
        });
    }
    match info.init.as_ref().and_then(Init::explicit_len) {
        Some(len) if len != info.shape.numel() => Err(GraphError::ValueLength {
            tensor: info.name.clone(),
            expected: info.shape.numel(),
            actual: len,
        }),
        _ => Ok(()),
    }
}

/// The node lowers (in `mode`) to a kernel whose geometry is sound and whose operands have
/// the element types and lengths the kernel expects: what the executor checks of a plan.
fn check_kernel(graph: &Graph, node: &Node, mode: Mode) -> Result<(), GraphError> {
    let invalid = |detail: String| GraphError::Invalid {
        op: node.op.kind(),
        node: node.name.clone(),
        detail,
    };
    let (kernel, operands) = lower(graph, node, mode);
    kernel.check().map_err(|e| invalid(String::from(e)))?;
    let slots = kernel.signature().slots;
    if slots.len() != operands.len() {
        return Err(invalid(alloc::format!(
            "its kernel takes {} operands, the node has {}",
            slots.len(),
            operands.len()
        )));
    }
    for (slot, &id) in slots.iter().zip(&operands) {
        let t = graph.tensor(id);
        if (slot.dtype, slot.len) != (t.dtype, t.shape.numel()) {
            return Err(invalid(alloc::format!(
                "'{}' must hold {} {:?} elements, it holds {} {:?}",
                t.name,
                slot.len,
                slot.dtype,
                t.shape.numel(),
                t.dtype
            )));
        }
    }
    Ok(())
}

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
