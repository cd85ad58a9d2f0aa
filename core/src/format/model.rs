//! The `.sprout` model file: the recorded graph, the values of its weights by name, and
//! what callers need around it (class names, input shape, preprocessing, provenance).
//!
//! Layout, little-endian: bytes `0..8` [`MAGIC`](super::MAGIC), `8..10` format
//! [`VERSION`](super::VERSION) (`u16`),
//! `10..14` body length `n` (`u32`), `14..14+n` the postcard-encoded [`ModelFile`], then
//! the CRC-32 (IEEE) of bytes `0..14+n`. A file is exactly `18 + n` bytes long.

use super::container;
use super::error::FormatError;
use crate::compile::{HostMemory, Plan};
use crate::graph::{Graph, Init, Node, TensorInfo};
use crate::shape::Shape;
use crate::tensor::{DType, Role};
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use half::f16;
use serde::{Deserialize, Serialize};

/// Everything a `.sprout` file holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub graph: GraphRecord,
    /// The values of every parameter, buffer and optimizer state tensor, by tensor name.
    pub weights: Vec<NamedWeight>,
    pub metadata: Metadata,
}

/// Encodes a model as a `.sprout` file, validated first as [`load_model`] validates it:
/// nothing sprout writes is a file sprout refuses.
pub fn save_model(model: &ModelFile) -> Result<Vec<u8>, FormatError> {
    model.to_graph()?;
    Ok(container::seal(container::MODEL, &postcard::to_allocvec(model)?)?)
}

/// Decodes and validates a `.sprout` file: on `Ok`, [`ModelFile::to_graph`] succeeds.
pub fn load_model(bytes: &[u8]) -> Result<ModelFile, FormatError> {
    let body = container::open(container::MODEL, bytes)?;
    let (model, rest): (ModelFile, _) = postcard::take_from_bytes(body)?;
    if !rest.is_empty() {
        return Err(FormatError::TrailingBytes { count: rest.len() });
    }
    model.to_graph()?;
    Ok(model)
}

/// A recorded graph without initial values: enough to rebuild an identical [`Graph`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphRecord {
    pub seed: u64,
    pub tensors: Vec<TensorRecord>,
    pub nodes: Vec<Node>,
}

impl GraphRecord {
    /// The structure of `graph`: its seed, tensors and nodes, without values.
    pub fn of(graph: &Graph) -> GraphRecord {
        let tensors = graph
            .tensors()
            .iter()
            .map(|t| TensorRecord {
                name: t.name.clone(),
                shape: t.shape,
                dtype: t.dtype,
                role: t.role,
            })
            .collect();
        GraphRecord { seed: graph.seed(), tensors, nodes: graph.nodes().to_vec() }
    }
}

/// One tensor of a [`GraphRecord`], in id order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorRecord {
    pub name: String,
    pub shape: Shape,
    pub dtype: DType,
    pub role: Role,
}

/// The stored values of one tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamedWeight {
    pub name: String,
    pub values: WeightValues,
}

/// Weight values tagged by element type. The tag is postcard's variant index, so new
/// encodings (f16, i8 with scale and zero point) are new variants appended here: an older
/// reader refuses them as a body error instead of misreading them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WeightValues {
    F32(Vec<f32>),
    /// IEEE half precision, two bytes per value.
    F16(HalfValues),
    /// Quantized weights (see `crate::quant`); their scales are tensors of their own.
    I8(Vec<i8>),
    /// Quantized biases and requantization multipliers.
    I32(Vec<i32>),
}

impl WeightValues {
    /// The values of a tensor of element type `dtype`, given as f32 (rounded to f16 when
    /// the tensor stores f16; every other type is stored as f32).
    pub fn encode(dtype: DType, values: Vec<f32>) -> Self {
        match dtype {
            DType::F16 => {
                WeightValues::F16(HalfValues(values.iter().map(|&v| f16::from_f32(v)).collect()))
            }
            _ => WeightValues::F32(values),
        }
    }

    /// The element type the values are stored in.
    pub fn dtype(&self) -> DType {
        match self {
            WeightValues::F32(_) => DType::F32,
            WeightValues::F16(_) => DType::F16,
            WeightValues::I8(_) => DType::I8,
            WeightValues::I32(_) => DType::I32,
        }
    }

    /// The values widened to f32 (exactly), when they are stored as a float type.
    pub fn float_values(&self) -> Option<Vec<f32>> {
        match self {
            WeightValues::F32(v) => Some(v.clone()),
            WeightValues::F16(v) => Some(v.0.iter().map(|h| h.to_f32()).collect()),
            WeightValues::I8(_) | WeightValues::I32(_) => None,
        }
    }

    /// How many values are stored.
    pub fn len(&self) -> usize {
        match self {
            WeightValues::F32(v) => v.len(),
            WeightValues::F16(v) => v.0.len(),
            WeightValues::I8(v) => v.len(),
            WeightValues::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values of a `dtype` tensor from their in-memory bytes (native byte order).
    fn from_bytes(dtype: DType, bytes: &[u8]) -> Option<Self> {
        let words = |n: usize| bytes.chunks_exact(n);
        Some(match dtype {
            DType::F32 => WeightValues::F32(
                words(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ),
            DType::I8 => WeightValues::I8(bytes.iter().map(|&b| b as i8).collect()),
            DType::I32 => WeightValues::I32(
                words(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ),
            DType::F16 => WeightValues::F16(HalfValues(
                words(2).map(|c| f16::from_ne_bytes([c[0], c[1]])).collect(),
            )),
        })
    }

    /// The initial value these stored values give their tensor.
    fn to_init(&self) -> Init {
        match self {
            WeightValues::F32(v) => Init::Values(v.clone()),
            WeightValues::F16(v) => Init::Values(v.0.iter().map(|h| h.to_f32()).collect()),
            WeightValues::I8(v) => Init::Ints(v.iter().map(|&q| i32::from(q)).collect()),
            WeightValues::I32(v) => Init::Ints(v.clone()),
        }
    }
}

/// f16 values, written as their two little-endian bytes each (a plain `u16` would become a
/// varint of up to three bytes in postcard).
#[derive(Clone, Debug, PartialEq)]
pub struct HalfValues(pub Vec<f16>);

impl Serialize for HalfValues {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = self.0.iter().flat_map(|h| h.to_le_bytes()).collect();
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for HalfValues {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(HalfBytes)
    }
}

/// Reads [`HalfValues`] from their bytes.
struct HalfBytes;

impl serde::de::Visitor<'_> for HalfBytes {
    type Value = HalfValues;

    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("f16 values, two bytes each")
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<HalfValues, E> {
        if !bytes.len().is_multiple_of(2) {
            return Err(E::invalid_length(bytes.len(), &self));
        }
        Ok(HalfValues(bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()))
    }
}

/// What a caller needs to use the model besides the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Class names in logit order.
    pub class_names: Vec<String>,
    /// The shape of one input batch the graph was recorded with (NCHW for images).
    pub input_shape: Shape,
    pub preprocessing: Preprocessing,
    /// Where the model came from, e.g. `"sprout zoo leafnet seed 1"`.
    pub provenance: String,
}

/// How raw inputs become the graph's input: resize, then `(x - mean[c]) / std[c]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Preprocessing {
    /// Per-channel mean; empty when inputs are used as they are.
    pub mean: Vec<f32>,
    /// Per-channel standard deviation, as many as `mean`.
    pub std: Vec<f32>,
    /// Height and width images are resized to, if any.
    pub resize: Option<(u32, u32)>,
    /// How a picture of another aspect ratio is fitted to `resize`, when recorded.
    pub fit: Option<Fit>,
}

/// How a picture of another aspect ratio becomes the model's input size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fit {
    /// Shorter side to the size, keeping the aspect ratio, then the centre (torchvision's
    /// `Resize` + `CenterCrop`).
    Crop,
    /// Both sides to the size, distorting the aspect ratio.
    Squash,
}

fn bad(detail: String) -> FormatError {
    FormatError::BadGraph { detail }
}

/// Roles whose tensors carry stored values: what persists between steps, and frozen weights.
fn stores_values(role: Role) -> bool {
    role == Role::FrozenParam || role.is_state()
}

impl ModelFile {
    /// Records `graph` with the initial values of its parameters, buffers and optimizer state.
    pub fn from_graph(graph: &Graph, metadata: Metadata) -> ModelFile {
        let weights = graph
            .tensors()
            .iter()
            .filter_map(|t| {
                let bytes = t.init.as_ref()?.to_bytes(t.dtype, t.shape.numel());
                let values = WeightValues::from_bytes(t.dtype, &bytes)?;
                Some(NamedWeight { name: t.name.clone(), values })
            })
            .collect();
        ModelFile { graph: GraphRecord::of(graph), weights, metadata }
    }

    /// Replaces each stored weight that `plan` also binds (by name) with its value in
    /// `memory`, e.g. the weights a training plan has learned; returns how many it replaced.
    /// A binding of another size (a different model's tensor of the same name) is skipped.
    pub fn read_weights(&mut self, plan: &Plan, memory: &HostMemory) -> usize {
        let mut replaced = 0;
        for weight in &mut self.weights {
            let Some(b) = plan.binding(&weight.name) else { continue };
            let bytes = &memory.region(b.operand.region)[b.operand.offset..b.operand.end()];
            let dtype = weight.values.dtype();
            if b.operand.dtype != dtype || bytes.len() != weight.values.len() * dtype.size() {
                continue;
            }
            if let Some(values) = WeightValues::from_bytes(dtype, bytes) {
                weight.values = values;
                replaced += 1;
            }
        }
        replaced
    }

    /// The stored values of the weight named `name`.
    pub fn weight(&self, name: &str) -> Option<&WeightValues> {
        self.weights.iter().find(|w| w.name == name).map(|w| &w.values)
    }

    /// Rebuilds the graph with [`Init::Values`] for every stored weight, validating
    /// everything: this is where an untrusted file's graph is checked.
    pub fn to_graph(&self) -> Result<Graph, FormatError> {
        let prep = &self.metadata.preprocessing;
        if prep.mean.len() != prep.std.len() {
            return Err(bad(alloc::format!(
                "preprocessing has {} means but {} standard deviations",
                prep.mean.len(),
                prep.std.len()
            )));
        }
        let input = self.metadata.input_shape;
        if input.dims().is_empty() || input.dims().contains(&0) {
            return Err(bad(alloc::format!(
                "the recorded input shape {input} has no batch dimension or a dimension of 0"
            )));
        }
        let mut by_name = BTreeMap::new();
        for (i, t) in self.graph.tensors.iter().enumerate() {
            if by_name.insert(t.name.as_str(), i).is_some() {
                return Err(bad(alloc::format!("two tensors are named '{}'", t.name)));
            }
        }
        let mut values: Vec<Option<&WeightValues>> = alloc::vec![None; self.graph.tensors.len()];
        for w in &self.weights {
            let Some(&i) = by_name.get(w.name.as_str()) else {
                return Err(bad(alloc::format!("a weight is named '{}', no tensor is", w.name)));
            };
            let t = &self.graph.tensors[i];
            if !stores_values(t.role) {
                return Err(bad(alloc::format!(
                    "'{}' is a {:?} tensor: it has no stored weight",
                    t.name,
                    t.role
                )));
            }
            if w.values.dtype() != t.dtype {
                return Err(bad(alloc::format!(
                    "weight '{}' is stored as {:?}, the tensor is {:?}",
                    t.name,
                    w.values.dtype(),
                    t.dtype
                )));
            }
            if values[i].replace(&w.values).is_some() {
                return Err(bad(alloc::format!("weight '{}' is stored twice", w.name)));
            }
        }
        let mut tensors = Vec::with_capacity(self.graph.tensors.len());
        for (t, v) in self.graph.tensors.iter().zip(values) {
            let init = match (v, stores_values(t.role)) {
                (Some(values), _) => Some(values.to_init()),
                (None, true) => {
                    return Err(bad(alloc::format!(
                        "the {:?} tensor '{}' has no stored weight",
                        t.role,
                        t.name
                    )))
                }
                (None, false) => None,
            };
            let (name, shape, dtype, role) = (t.name.clone(), t.shape, t.dtype, t.role);
            tensors.push(TensorInfo { name, shape, dtype, role, init });
        }
        Graph::from_parts(self.graph.seed, tensors, self.graph.nodes.clone())
            .map_err(|e| bad(e.to_string()))
    }
}
