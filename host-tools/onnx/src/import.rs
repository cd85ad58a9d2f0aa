//! ONNX → sprout: decodes a `ModelProto` and records its graph with sprout's builder, one
//! ONNX node at a time, keeping initializer names as sprout weight names.

use crate::error::{malformed, tensor_error, OnnxError};
use crate::fold;
use crate::metadata::read_metadata_props;
use crate::patterns::{self, Fused};
use crate::proto::{self, tensor_shape_proto::dimension, type_proto, AttributeProto, NodeProto};
use prost::Message;
use sprout_core::format::{Metadata, ModelFile, Preprocessing};
use sprout_core::hyperparams::{BatchNormConfig, DropoutConfig};
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::shape::MAX_RANK;
use sprout_core::{Graph, GraphError, Init, Shape, TensorId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

mod composed;
mod resize;

/// The oldest default-domain operator set imported (PyTorch's exporters default to newer).
pub const MIN_OPSET: i64 = 11;
/// The newest default-domain operator set imported: the operators mapped here keep their
/// meaning up to it.
pub const MAX_OPSET: i64 = 24;

/// The most elements one initializer or constant may announce (1 Gi values, 4 GiB as f32).
const MAX_ELEMENTS: usize = 1 << 30;

/// The bytes of constants the importer computes itself (interpolation matrices) when the
/// options set no limit: 2 GiB, the command line's default memory limit.
pub const DEFAULT_MAX_MEMORY: u64 = 2 << 30;

/// How to import.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Samples per batch the graph is recorded for. `None`: the input's first dimension
    /// when it is fixed, 1 when it is symbolic (a dynamic batch axis).
    pub batch: Option<usize>,
    /// The most bytes the constants the importer computes may take together (a bilinear
    /// `Resize`'s interpolation matrices), refused before they are allocated. `None`:
    /// [`DEFAULT_MAX_MEMORY`].
    pub max_memory: Option<u64>,
}

/// A recorded sprout graph and what a caller needs around it.
pub struct Imported {
    /// The forward graph. Every initializer an op reads is a parameter (batch-norm
    /// running statistics: buffers) under its ONNX name, with the ONNX values.
    pub graph: Graph,
    /// The graph input (f32), named as in the ONNX model.
    pub input: TensorId,
    /// The graph outputs in ONNX order, each named as in the ONNX model.
    pub outputs: Vec<TensorId>,
    /// Input shape and provenance; class names and preprocessing when the model's
    /// `metadata_props` hold them under sprout's keys (see [`crate::metadata`]).
    pub metadata: Metadata,
    /// The default-domain operator set the model imports.
    pub opset: i64,
}

impl Imported {
    /// The model as a `.sprout` file body.
    pub fn model_file(&self) -> ModelFile {
        ModelFile::from_graph(&self.graph, self.metadata.clone())
    }
}

/// Imports an ONNX model with the default options (a dynamic batch axis becomes 1).
pub fn import(bytes: &[u8]) -> Result<Imported, OnnxError> {
    import_with(bytes, &ImportOptions::default())
}

/// Imports an ONNX model.
pub fn import_with(bytes: &[u8], options: &ImportOptions) -> Result<Imported, OnnxError> {
    let model = proto::ModelProto::decode(bytes)?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .ok_or_else(|| malformed("the model imports no default-domain (ai.onnx) operator set"))?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(OnnxError::Opset { found: opset, min: MIN_OPSET, max: MAX_OPSET });
    }
    let graph = model.graph.as_ref().ok_or_else(|| malformed("the model has no graph"))?;
    let mut importer = Importer::new(graph, opset);
    importer.max_memory = options.max_memory.unwrap_or(DEFAULT_MAX_MEMORY);
    let input = importer.input(graph, options)?;
    let (chains, inside) = patterns::find(graph, opset);
    importer.fused.extend(inside);
    for (index, node) in graph.node.iter().enumerate() {
        if let Some(chain) = chains.get(&index) {
            importer.chain(index, node, chain)?;
        } else if !importer.fused.contains(&index) {
            importer.node(graph, index, node)?;
        }
    }
    let outputs = importer.outputs(graph)?;
    let input_name = importer.g.tensor(input).name.clone();
    let output_names: Vec<_> = outputs.iter().map(|&o| importer.g.tensor(o).name.clone()).collect();
    let provenance = format!(
        "ONNX import of graph '{}' ({} {}), opset {opset}, input '{input_name}', outputs '{}'",
        graph.name.as_deref().unwrap_or(""),
        model.producer_name.as_deref().unwrap_or("unknown producer"),
        model.producer_version.as_deref().unwrap_or(""),
        output_names.join("', '"),
    );
    let mut metadata = Metadata {
        class_names: Vec::new(),
        input_shape: importer.g.shape(input),
        preprocessing: Preprocessing::default(),
        provenance,
    };
    read_metadata_props(&model.metadata_props, &mut metadata)?;
    Ok(Imported { graph: importer.g, input, outputs, metadata, opset })
}

/// A decoded initializer or constant.
#[derive(Debug)]
pub(crate) struct Const {
    pub(crate) name: String,
    pub(crate) dims: Vec<usize>,
    pub(crate) data: ConstData,
}

#[derive(Clone, Debug)]
pub(crate) enum ConstData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl Const {
    pub(crate) fn f32(&self) -> Result<&[f32], OnnxError> {
        match &self.data {
            ConstData::F32(v) => Ok(v),
            ConstData::I64(_) => Err(tensor_error(&self.name, "must be float, it is an integer")),
        }
    }

    pub(crate) fn i64(&self) -> Result<&[i64], OnnxError> {
        match &self.data {
            ConstData::I64(v) => Ok(v),
            ConstData::F32(_) => Err(tensor_error(&self.name, "must be an integer, it is float")),
        }
    }

    pub(crate) fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// What an ONNX value name stands for while importing.
#[derive(Clone, Debug)]
enum Value {
    /// A sprout tensor, with the ONNX shape it has (sprout may store it under another shape
    /// with as many elements: global average pooling gives `[N,C]` for ONNX's `[N,C,1,1]`).
    Tensor { id: TensorId, dims: Vec<usize> },
    /// A constant not (yet) in the graph: an initializer or a `Constant` node's value.
    Const(Rc<Const>),
    /// A zero `Pad` of the NCHW tensor `id`, waiting to be folded into the `Conv` that
    /// reads it: `dims` is the padded ONNX shape, `pads` `[top, left, bottom, right]`.
    Padded { id: TensorId, dims: Vec<usize>, pads: [usize; 4] },
    /// A `Transpose` that moves the batch axis, kept aside for the nodes that can read it
    /// (another `Transpose` putting the batch axis back first, a `GatherND` of other axes):
    /// axis `i` of the ONNX value is axis `perm[i]` of the tensor `id`, whose ONNX shape is
    /// `stored`. Any other reader is refused with the error `(node, detail)` of the
    /// Transpose node that moved the batch axis.
    Permuted { id: TensorId, stored: Vec<usize>, perm: Vec<usize>, refusal: Rc<(String, String)> },
}

impl Value {
    /// The value's ONNX shape.
    fn dims(&self) -> Vec<usize> {
        match self {
            Value::Tensor { dims, .. } | Value::Padded { dims, .. } => dims.clone(),
            Value::Const(c) => c.dims.clone(),
            Value::Permuted { stored, perm, .. } => perm.iter().map(|&a| stored[a]).collect(),
        }
    }
}

/// The error of the `Transpose` node `(node, detail)` whose output a node cannot read.
fn batch_moved(refusal: &(String, String)) -> OnnxError {
    OnnxError::Unsupported {
        op_type: "Transpose".into(),
        node_name: refusal.0.clone(),
        detail: refusal.1.clone(),
    }
}

/// Decodes a tensor's dims and data (float, double, int32, int64 or bool), refusing data
/// whose length differs from what the dims announce.
pub(crate) fn parse_tensor(
    t: &proto::TensorProto,
    fallback_name: &str,
) -> Result<Const, OnnxError> {
    let name = t.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| fallback_name.into());
    let err = |detail: String| tensor_error(&name, detail);
    if t.data_location == Some(1) {
        return Err(err(
            "external data is not supported: save the model with its weights inside".into()
        ));
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        dims.push(
            usize::try_from(d)
                .map_err(|_| err(format!("negative dimension {d} in {:?}", t.dims)))?,
        );
    }
    let numel = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| err(format!("dims {:?} exceed {MAX_ELEMENTS} elements", t.dims)))?;
    let data_type = t.data_type.unwrap_or(0);
    let raw = t.raw_data.as_deref();
    let check = |len: usize, what: &str| match len == numel {
        true => Ok(()),
        false => Err(err(format!("dims {:?} announce {numel} values, {what} holds {len}", t.dims))),
    };
    let raw_values = |size: usize| -> Result<Option<Vec<&[u8]>>, OnnxError> {
        match raw {
            Some(r) => {
                if r.len() != numel.saturating_mul(size) {
                    return Err(err(format!(
                        "dims {:?} announce {numel} values of {size} bytes, raw_data holds {} bytes",
                        t.dims,
                        r.len()
                    )));
                }
                Ok(Some(r.chunks_exact(size).collect()))
            }
            None => Ok(None),
        }
    };
    let data = match data_type {
        proto::FLOAT => match raw_values(4)? {
            Some(chunks) => ConstData::F32(
                chunks.iter().map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ),
            None => {
                check(t.float_data.len(), "float_data")?;
                ConstData::F32(t.float_data.clone())
            }
        },
        proto::DOUBLE => match raw_values(8)? {
            Some(chunks) => ConstData::F32(
                chunks
                    .iter()
                    .map(|c| f64::from_le_bytes(c[..8].try_into().expect("8 bytes")) as f32)
                    .collect(),
            ),
            None => {
                check(t.double_data.len(), "double_data")?;
                ConstData::F32(t.double_data.iter().map(|&v| v as f32).collect())
            }
        },
        proto::INT64 => match raw_values(8)? {
            Some(chunks) => ConstData::I64(
                chunks
                    .iter()
                    .map(|c| i64::from_le_bytes(c[..8].try_into().expect("8 bytes")))
                    .collect(),
            ),
            None => {
                check(t.int64_data.len(), "int64_data")?;
                ConstData::I64(t.int64_data.clone())
            }
        },
        proto::INT32 => match raw_values(4)? {
            Some(chunks) => ConstData::I64(
                chunks
                    .iter()
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
            ),
            None => {
                check(t.int32_data.len(), "int32_data")?;
                ConstData::I64(t.int32_data.iter().map(|&v| v as i64).collect())
            }
        },
        proto::BOOL => match raw_values(1)? {
            Some(chunks) => ConstData::I64(chunks.iter().map(|c| c[0] as i64).collect()),
            None => {
                check(t.int32_data.len(), "int32_data")?;
                ConstData::I64(t.int32_data.iter().map(|&v| v as i64).collect())
            }
        },
        other => {
            return Err(err(format!(
                "data type {other} is not supported (float, double, int32, int64 and bool are)"
            )))
        }
    };
    Ok(Const { name, dims, data })
}

/// The node being imported, for error messages.
struct Ctx<'a> {
    op_type: &'a str,
    name: String,
    node: &'a NodeProto,
}

impl<'a> Ctx<'a> {
    /// Node `index`, named by its name, else by its type, index and first output.
    fn of(index: usize, node: &'a NodeProto) -> Self {
        let op_type = node.op_type.as_deref().unwrap_or("");
        let name = match node.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match node.output.first().filter(|o| !o.is_empty()) {
                Some(o) => format!("{op_type} #{index} -> {o}"),
                None => format!("{op_type} #{index}"),
            },
        };
        Ctx { op_type, name, node }
    }

    fn err(&self, detail: impl Into<String>) -> OnnxError {
        OnnxError::Unsupported {
            op_type: self.op_type.into(),
            node_name: self.name.clone(),
            detail: detail.into(),
        }
    }

    fn graph(&self) -> impl Fn(GraphError) -> OnnxError + '_ {
        move |source| OnnxError::Graph {
            context: format!("{} node '{}'", self.op_type, self.name),
            source,
        }
    }

    /// The name of input `i`, if present (an empty name is an omitted optional input).
    fn input(&self, i: usize) -> Option<&str> {
        self.node.input.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// The first output's name: the sprout node and tensor name.
    fn output(&self) -> Result<&str, OnnxError> {
        self.node
            .output
            .first()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.err("has no output"))
    }

    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name.as_deref() == Some(name))
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) => a.i.ok_or_else(|| self.err(format!("attribute '{name}' must be an int"))),
        }
    }

    fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) => a.f.ok_or_else(|| self.err(format!("attribute '{name}' must be a float"))),
        }
    }

    fn ints(&self, name: &str) -> Option<&[i64]> {
        self.attr(name).map(|a| a.ints.as_slice())
    }

    fn string(&self, name: &str) -> Option<String> {
        self.attr(name).and_then(|a| a.s.as_ref()).map(|s| String::from_utf8_lossy(s).into_owned())
    }

    /// A pair of non-negative ints (`strides`, `kernel_shape`) with a default.
    fn pair(
        &self,
        name: &str,
        default: Option<(usize, usize)>,
    ) -> Result<(usize, usize), OnnxError> {
        match (self.ints(name), default) {
            (None, Some(d)) => Ok(d),
            (None, None) => Err(self.err(format!("attribute '{name}' is required"))),
            (Some([a, b]), _) if *a >= 0 && *b >= 0 => Ok((*a as usize, *b as usize)),
            (Some(v), _) => Err(self.err(format!(
                "attribute '{name}' must hold 2 non-negative values (2-D only), it holds {v:?}"
            ))),
        }
    }

    /// Explicit `[top, left, bottom, right]` padding for a `kernel` moved by `stride` over
    /// an input of `input` (h, w): `pads`, or what `auto_pad` (VALID, SAME_UPPER,
    /// SAME_LOWER) computes.
    fn pads(
        &self,
        input: (usize, usize),
        kernel: (usize, usize),
        stride: (usize, usize),
    ) -> Result<[usize; 4], OnnxError> {
        let p = match self.string("auto_pad").as_deref() {
            None | Some("") | Some("NOTSET") => match self.ints("pads") {
                None => [0; 4],
                Some(&[t, l, b, r]) if t >= 0 && l >= 0 && b >= 0 && r >= 0 => {
                    [t as usize, l as usize, b as usize, r as usize]
                }
                Some(p) => {
                    return Err(self.err(format!(
                        "pads must hold 4 non-negative values (2-D), it holds {p:?}"
                    )))
                }
            },
            Some("VALID") => [0; 4],
            Some(mode @ ("SAME_UPPER" | "SAME_LOWER")) => {
                let total = |i: usize, k: usize, s: usize| {
                    (i.div_ceil(s.max(1)).saturating_sub(1) * s + k).saturating_sub(i)
                };
                let split = |t: usize| match mode {
                    "SAME_LOWER" => (t.div_ceil(2), t / 2),
                    _ => (t / 2, t.div_ceil(2)),
                };
                let (t, b) = split(total(input.0, kernel.0, stride.0));
                let (l, r) = split(total(input.1, kernel.1, stride.1));
                [t, l, b, r]
            }
            Some(other) => {
                return Err(self.err(format!(
                    "auto_pad '{other}' is not supported (NOTSET, VALID, SAME_UPPER and SAME_LOWER are)"
                )))
            }
        };
        Ok(p)
    }

    /// The trailing padding (bottom, right) a pool with `ceil_mode = 1` adds to `pads` so
    /// that its output rounds up: the last window must still start inside the input or the
    /// leading padding (ONNX's and PyTorch's rule).
    fn ceil_extra(
        &self,
        input: (usize, usize),
        kernel: (usize, usize),
        stride: (usize, usize),
        p: [usize; 4],
    ) -> Result<(usize, usize), OnnxError> {
        if self.int("ceil_mode", 0)? == 0 {
            return Ok((0, 0));
        }
        let extra = |i: usize, lead: usize, trail: usize, k: usize, s: usize| {
            let span = (i + lead + trail).saturating_sub(k);
            let ceil = span.div_ceil(s) + 1;
            let ceil = if (ceil - 1) * s >= i + lead { ceil - 1 } else { ceil };
            ((ceil.max(1) - 1) * s + k).saturating_sub(i + lead + trail)
        };
        Ok((
            extra(input.0, p[0], p[2], kernel.0, stride.0.max(1)),
            extra(input.1, p[1], p[3], kernel.1, stride.1.max(1)),
        ))
    }

    /// Dilations, when given, must all be 1.
    fn no_dilation(&self) -> Result<(), OnnxError> {
        match self.ints("dilations") {
            Some(d) if d.iter().any(|&v| v != 1) => {
                Err(self.err(format!("dilations {d:?} are not supported: expected all 1")))
            }
            _ => Ok(()),
        }
    }
}

struct Importer<'m> {
    g: Graph,
    opset: i64,
    values: HashMap<String, Value>,
    /// Weights already in the graph, by initializer name.
    weights: HashMap<String, TensorId>,
    /// How many nodes (and graph outputs) read each value.
    uses: HashMap<&'m str, usize>,
    /// Nodes folded into an earlier one (an `Add` bias into its `MatMul`) or inside a chain
    /// recorded as one op (see [`patterns`]).
    fused: HashSet<usize>,
    /// The initializers' names: the model's weights, as opposed to `Constant` nodes.
    initializers: HashSet<String>,
    /// The graph outputs' names: a tensor sprout stores under another shape than ONNX's
    /// takes a staging name when it is one, so that the output keeps the ONNX name.
    graph_outputs: HashSet<&'m str>,
    /// Bytes of the constants computed so far (see [`Importer::reserve`]), and the limit.
    computed_bytes: u64,
    max_memory: u64,
}

impl<'m> Importer<'m> {
    fn new(graph: &'m proto::GraphProto, opset: i64) -> Self {
        let mut uses: HashMap<&str, usize> = HashMap::new();
        let names = graph.node.iter().flat_map(|n| n.input.iter());
        for name in names.chain(graph.output.iter().filter_map(|o| o.name.as_ref())) {
            *uses.entry(name.as_str()).or_default() += 1;
        }
        Self {
            g: Graph::new(0),
            opset,
            values: HashMap::new(),
            weights: HashMap::new(),
            uses,
            fused: HashSet::new(),
            initializers: HashSet::new(),
            graph_outputs: graph.output.iter().filter_map(|o| o.name.as_deref()).collect(),
            computed_bytes: 0,
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }

    /// Counts `bytes` of constants the node `ctx` computes (`what`) against the memory
    /// limit, refusing them before they are allocated when all computed so far exceed it.
    fn reserve(&mut self, ctx: &Ctx, bytes: u64, what: &str) -> Result<(), OnnxError> {
        let total = self.computed_bytes.saturating_add(bytes);
        if total > self.max_memory {
            return Err(ctx.err(format!(
                "{what} take {bytes} bytes, {total} with the constants computed before, above the memory limit of {} bytes (--max-memory raises it)",
                self.max_memory
            )));
        }
        self.computed_bytes = total;
        Ok(())
    }

    /// Records the initializers as constants and the one real input as a sprout input.
    fn input(
        &mut self,
        graph: &proto::GraphProto,
        options: &ImportOptions,
    ) -> Result<TensorId, OnnxError> {
        for (i, t) in graph.initializer.iter().enumerate() {
            let c = parse_tensor(t, &format!("initializer #{i}"))?;
            if t.name.as_deref().is_none_or(str::is_empty) {
                return Err(tensor_error(&c.name, "initializers must be named"));
            }
            self.initializers.insert(c.name.clone());
            self.values.insert(c.name.clone(), Value::Const(Rc::new(c)));
        }
        let real: Vec<_> = graph
            .input
            .iter()
            .filter(|i| !self.values.contains_key(i.name.as_deref().unwrap_or("")))
            .collect();
        let [info] = real.as_slice() else {
            let names: Vec<_> = real.iter().map(|i| i.name.as_deref().unwrap_or("")).collect();
            return Err(malformed(format!(
                "sprout imports models with exactly one input besides the initializers, this one has {}: {names:?}",
                real.len()
            )));
        };
        let name = info.name.as_deref().unwrap_or("");
        let err = |detail: String| tensor_error(name, detail);
        let Some(type_proto::Value::TensorType(tt)) =
            info.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            return Err(err("the input must be a tensor".into()));
        };
        if tt.elem_type != Some(proto::FLOAT) {
            return Err(err(format!(
                "the input must be float (elem_type {}), it has elem_type {:?}",
                proto::FLOAT,
                tt.elem_type
            )));
        }
        let shape = tt.shape.as_ref().ok_or_else(|| err("the input has no shape".into()))?;
        if shape.dim.is_empty() || shape.dim.len() > 4 {
            return Err(err(format!(
                "the input must have 1 to 4 dimensions, it has {}",
                shape.dim.len()
            )));
        }
        let mut dims = Vec::with_capacity(shape.dim.len());
        for (axis, d) in shape.dim.iter().enumerate() {
            let fixed = match &d.value {
                Some(dimension::Value::DimValue(v)) if *v > 0 => Some(*v as usize),
                _ => None,
            };
            dims.push(match (axis, fixed) {
                (0, fixed) => options.batch.or(fixed).unwrap_or(1),
                (_, Some(v)) => v,
                (_, None) => {
                    return Err(err(format!(
                        "dimension {axis} must be fixed: only the batch axis (0) may be dynamic"
                    )))
                }
            });
        }
        let sprout_shape = Shape::new(&dims).map_err(|e| err(e.to_string()))?;
        let id = self
            .g
            .input(name, sprout_shape)
            .map_err(|source| OnnxError::Graph { context: format!("input '{name}'"), source })?;
        self.values.insert(name.into(), Value::Tensor { id, dims });
        Ok(id)
    }

    /// The graph outputs, each a sprout tensor named and shaped as in the ONNX model (an
    /// identity reshape gives one that is an alias or stored under another shape its name).
    fn outputs(&mut self, graph: &proto::GraphProto) -> Result<Vec<TensorId>, OnnxError> {
        if graph.output.is_empty() {
            return Err(malformed("the graph has no outputs"));
        }
        let mut ids = Vec::new();
        for out in &graph.output {
            let name = out.name.as_deref().unwrap_or("");
            let (id, dims) =
                match self.values.get(name) {
                    Some(Value::Tensor { id, dims }) => (*id, dims.clone()),
                    Some(Value::Const(_)) => return Err(tensor_error(
                        name,
                        "a graph output must be computed from the input, this one is a constant",
                    )),
                    Some(Value::Padded { .. }) => {
                        return Err(tensor_error(
                            name,
                            "a graph output must not be a Pad: sprout folds Pad only into a Conv",
                        ))
                    }
                    Some(Value::Permuted { refusal, .. }) => return Err(batch_moved(refusal)),
                    None => return Err(tensor_error(name, "a graph output no node produces")),
                };
            let shape = Shape::new(&dims).map_err(|e| tensor_error(name, e.to_string()))?;
            let t = self.g.tensor(id);
            let id = if t.name == name && t.shape == shape {
                id
            } else {
                self.g.reshape(name, id, shape).map_err(|source| OnnxError::Graph {
                    context: format!("output '{name}'"),
                    source,
                })?
            };
            ids.push(id);
        }
        Ok(ids)
    }

    fn value(&self, ctx: &Ctx, name: &str) -> Result<&Value, OnnxError> {
        self.values.get(name).ok_or_else(|| OnnxError::UnknownValue {
            node_name: ctx.name.clone(),
            value: name.into(),
        })
    }

    /// Input `i` as a computed tensor.
    fn act(&self, ctx: &Ctx, i: usize) -> Result<(TensorId, Vec<usize>), OnnxError> {
        let name = ctx.input(i).ok_or_else(|| ctx.err(format!("input {i} is missing")))?;
        match self.value(ctx, name)? {
            Value::Tensor { id, dims } => Ok((*id, dims.clone())),
            Value::Const(_) => Err(ctx.err(format!(
                "input {i} '{name}' is a constant: sprout needs a tensor computed from the graph input here"
            ))),
            Value::Padded { .. } => Err(ctx.err(format!(
                "input {i} '{name}' is the output of a Pad: sprout folds a zero Pad only into the Conv that reads it"
            ))),
            Value::Permuted { refusal, .. } => Err(batch_moved(refusal)),
        }
    }

    /// Input `i` as a constant (initializer or `Constant` output), if present.
    fn constant(&self, ctx: &Ctx, i: usize) -> Result<Option<Rc<Const>>, OnnxError> {
        let Some(name) = ctx.input(i) else { return Ok(None) };
        match self.value(ctx, name)? {
            Value::Const(c) => Ok(Some(c.clone())),
            Value::Tensor { .. } | Value::Padded { .. } | Value::Permuted { .. } => Err(ctx.err(
                format!("input {i} '{name}' must be an initializer or constant, it is computed"),
            )),
        }
    }

    fn required_constant(&self, ctx: &Ctx, i: usize) -> Result<Rc<Const>, OnnxError> {
        self.constant(ctx, i)?.ok_or_else(|| ctx.err(format!("input {i} is missing")))
    }

    /// A scalar float constant input (one element, any rank).
    fn scalar(&self, ctx: &Ctx, i: usize) -> Result<Option<f32>, OnnxError> {
        let Some(c) = self.constant(ctx, i)? else { return Ok(None) };
        match c.f32()? {
            [v] => Ok(Some(*v)),
            v => Err(tensor_error(&c.name, format!("must hold one value, it holds {}", v.len()))),
        }
    }

    /// The constant as a graph weight of `shape` (values possibly rearranged) under its
    /// ONNX name; a weight read by several nodes is added once.
    fn weight(
        &mut self,
        c: &Const,
        shape: Shape,
        values: Vec<f32>,
        buffer: bool,
    ) -> Result<TensorId, OnnxError> {
        if let Some(&id) = self.weights.get(&c.name) {
            let info = self.g.tensor(id);
            if info.shape != shape || info.init.as_ref() != Some(&Init::Values(values)) {
                return Err(tensor_error(
                    &c.name,
                    format!(
                        "is read by two nodes in different layouts ({} and {shape}): sprout stores a weight once",
                        info.shape
                    ),
                ));
            }
            return Ok(id);
        }
        let context = || format!("initializer '{}'", c.name);
        let id = if buffer {
            self.g.buffer(&c.name, shape, Init::Values(values))
        } else {
            self.g.parameter(&c.name, shape, Init::Values(values))
        }
        .map_err(|source| OnnxError::Graph { context: context(), source })?;
        self.weights.insert(c.name.clone(), id);
        Ok(id)
    }

    /// A per-channel weight of `len` values (bias, batch-norm scale, ...).
    fn vector(
        &mut self,
        ctx: &Ctx,
        c: &Const,
        len: usize,
        buffer: bool,
    ) -> Result<TensorId, OnnxError> {
        check_vector(ctx, c, len)?;
        self.weight(c, Shape::d1(len), c.f32()?.to_vec(), buffer)
    }

    /// `id` stored under exactly `dims` (a reshape named `{base}.view` when it is not).
    fn view(
        &mut self,
        ctx: &Ctx,
        id: TensorId,
        dims: &[usize],
        base: &str,
    ) -> Result<TensorId, OnnxError> {
        let shape = Shape::new(dims).map_err(|e| ctx.err(e.to_string()))?;
        if self.g.shape(id) == shape {
            return Ok(id);
        }
        self.g.reshape(&format!("{base}.view"), id, shape).map_err(ctx.graph())
    }

    fn define(&mut self, name: &str, id: TensorId, dims: Vec<usize>) {
        self.values.insert(name.into(), Value::Tensor { id, dims });
    }

    /// Defines the output as `id` with the sprout shape.
    fn define_sprout(&mut self, name: &str, id: TensorId) {
        let dims = self.g.shape(id).dims().to_vec();
        self.define(name, id, dims);
    }

    fn node(
        &mut self,
        graph: &'m proto::GraphProto,
        index: usize,
        node: &'m NodeProto,
    ) -> Result<(), OnnxError> {
        let ctx = Ctx::of(index, node);
        let op_type = ctx.op_type;
        if !matches!(node.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
            return Err(OnnxError::UnsupportedOp {
                op_type: format!("{}.{op_type}", node.domain.as_deref().unwrap_or("")),
                node_name: ctx.name.clone(),
            });
        }
        if op_type == "Shape" {
            return self.shape(&ctx);
        }
        if fold::folds(op_type) && self.all_constant(&ctx)? {
            return self.fold(&ctx);
        }
        match op_type {
            "Conv" => self.conv(&ctx),
            "Gemm" => self.gemm(&ctx),
            "MatMul" => self.matmul(&ctx, graph, index),
            "Relu" => self.unary(&ctx, Graph::relu),
            "Sigmoid" => self.unary(&ctx, Graph::sigmoid),
            "HardSigmoid" => {
                let (alpha, beta) = (ctx.float("alpha", 0.2)?, ctx.float("beta", 0.5)?);
                self.unary(&ctx, |g, name, x| g.hard_sigmoid(name, x, alpha, beta))
            }
            "HardSwish" => self.unary(&ctx, Graph::hard_swish),
            "Gelu" => {
                let tanh = match ctx.string("approximate").as_deref() {
                    None | Some("none") => false,
                    Some("tanh") => true,
                    Some(other) => {
                        return Err(ctx.err(format!("approximate '{other}' is not GELU's")))
                    }
                };
                self.unary(&ctx, |g, name, x| g.gelu(name, x, tanh))
            }
            "LayerNormalization" => self.layer_normalization(&ctx),
            "InstanceNormalization" => self.instance_normalization(&ctx),
            "GroupNormalization" => self.group_normalization(&ctx),
            "PRelu" => self.prelu(&ctx),
            "Resize" => self.resize(&ctx),
            "DepthToSpace" => self.depth_to_space(&ctx),
            "LeakyRelu" => {
                let alpha = ctx.float("alpha", 0.01)?;
                self.unary(&ctx, |g, name, x| g.leaky_relu(name, x, alpha))
            }
            "Elu" => {
                let alpha = ctx.float("alpha", 1.0)?;
                self.unary(&ctx, |g, name, x| g.elu(name, x, alpha))
            }
            "Softplus" => self.unary(&ctx, Graph::softplus),
            "Tanh" => self.unary(&ctx, Graph::tanh),
            "Selu" => self.selu(&ctx),
            "Mish" => self.mish(&ctx),
            "Add" | "Sub" | "Mul" | "Div" => self.arithmetic(&ctx, graph, index),
            "Expand" => self.expand_node(&ctx),
            "Clip" => self.clip(&ctx),
            "MaxPool" | "AveragePool" => self.pool(&ctx),
            "GlobalAveragePool" => self.global_pool(&ctx),
            "ReduceMean" => self.reduce_mean(&ctx),
            "BatchNormalization" => self.batch_norm(&ctx),
            "Flatten" => self.flatten(&ctx),
            "Reshape" => self.reshape(&ctx),
            "Squeeze" | "Unsqueeze" => self.squeeze(&ctx),
            "Transpose" => self.transpose(&ctx),
            "GatherND" => self.gather_nd(&ctx),
            "Gather" => self.gather(&ctx),
            "Pad" => self.pad(&ctx),
            "Softmax" => self.softmax(&ctx, Graph::softmax),
            "LogSoftmax" => self.softmax(&ctx, Graph::log_softmax),
            "Concat" => self.concat(&ctx),
            "Split" => self.split(&ctx),
            "Slice" => self.slice(&ctx),
            "Cast" => self.cast(&ctx),
            "Dropout" => self.dropout(&ctx),
            "Identity" => self.identity(&ctx),
            "Constant" => self.constant_node(&ctx),
            _ => Err(OnnxError::UnsupportedOp {
                op_type: op_type.into(),
                node_name: ctx.name.clone(),
            }),
        }
    }

    /// A chain [`patterns::find`] recognised, recorded as one op at its last node `node`.
    fn chain(&mut self, index: usize, node: &NodeProto, chain: &Fused) -> Result<(), OnnxError> {
        let ctx = Ctx::of(index, node);
        let out = ctx.output()?;
        let tensor = |me: &Self, name: &str| match me.value(&ctx, name)? {
            Value::Tensor { id, dims } => Ok((*id, dims.clone())),
            _ => Err(ctx.err(format!("'{name}' must be a tensor computed from the input"))),
        };
        let constant = |me: &Self, name: &Option<String>| match name {
            None => Ok(None),
            Some(n) => match me.value(&ctx, n)? {
                Value::Const(c) => Ok(Some(c.clone())),
                _ => Err(ctx.err(format!("'{n}' must be a constant"))),
            },
        };
        match chain {
            Fused::Gelu { x, tanh } => {
                let (x, dims) = tensor(self, x)?;
                let y = self.g.gelu(out, x, *tanh).map_err(ctx.graph())?;
                self.define(out, y, dims);
            }
            Fused::Silu { x } => {
                let (x, dims) = tensor(self, x)?;
                let y = self.g.silu(out, x).map_err(ctx.graph())?;
                self.define(out, y, dims);
            }
            Fused::Softplus { x, beta } if *beta == 1.0 => {
                let (x, dims) = tensor(self, x)?;
                let y = self.g.softplus(out, x).map_err(ctx.graph())?;
                self.define(out, y, dims);
            }
            Fused::Softplus { x, beta } => {
                // `softplus(β · x) / β`: constant scales around it (`{out}.scaled`, then
                // `{out}.softplus`), as the TorchScript exporter's Mul, Softplus, Div import.
                let (x, dims) = tensor(self, x)?;
                let scaled =
                    self.affine(&ctx, &format!("{out}.scaled"), x, &dims, &[*beta], &[0.0])?;
                let soft =
                    self.g.softplus(&format!("{out}.softplus"), scaled).map_err(ctx.graph())?;
                let y = self.affine(&ctx, out, soft, &dims, &[1.0 / *beta], &[0.0])?;
                self.define(out, y, dims);
            }
            Fused::LayerNorm { x, axes, eps, scale, shift } => {
                let (x, dims) = tensor(self, x)?;
                let (scale, shift) = (constant(self, scale)?, constant(self, shift)?);
                self.layer_norm(&ctx, out, x, dims, *axes, *eps, scale, shift)?;
            }
        }
        Ok(())
    }

    /// `LayerNormalization` (opset 17): over the axes from `axis` on, its mean and
    /// inverse-deviation outputs unused.
    fn layer_normalization(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        if ctx
            .node
            .output
            .iter()
            .skip(1)
            .any(|o| !o.is_empty() && self.uses.contains_key(o.as_str()))
        {
            return Err(ctx.err("only the first output (Y) is supported"));
        }
        let axis = fold::axis(ctx.int("axis", -1)?, dims.len()).map_err(|e| ctx.err(e))?;
        let eps = ctx.float("epsilon", 1e-5)?;
        let (scale, shift) = (self.constant(ctx, 1)?, self.constant(ctx, 2)?);
        let axes = dims.len() - axis;
        self.layer_norm(ctx, ctx.output()?, x, dims, axes, eps, scale, shift).map(|_| ())
    }

    /// Layer normalisation of `x` (ONNX shape `dims`) over its last `axes` axes, scaled and
    /// shifted by the constants (parameters under their names; ones and zeros without),
    /// defined as `out`.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &mut self,
        ctx: &Ctx,
        out: &str,
        x: TensorId,
        dims: Vec<usize>,
        axes: usize,
        eps: f32,
        scale: Option<Rc<Const>>,
        shift: Option<Rc<Const>>,
    ) -> Result<TensorId, OnnxError> {
        if axes == 0 || axes >= dims.len() {
            return Err(ctx.err(format!(
                "normalises {axes} trailing axes of shape {dims:?}: sprout keeps the batch axis apart"
            )));
        }
        let d: usize = dims[dims.len() - axes..].iter().product();
        let x = self.view(ctx, x, &dims, out)?;
        let mut affine = [TensorId(0); 2];
        for ((slot, c), (what, fill)) in
            affine.iter_mut().zip([scale, shift]).zip([("scale", 1.0), ("shift", 0.0)])
        {
            *slot = match c {
                Some(c) if c.numel() == d => {
                    self.weight(&c, Shape::d1(d), c.f32()?.to_vec(), false)?
                }
                Some(c) => {
                    return Err(ctx.err(format!(
                    "{what} '{}' has shape {:?}: expected the {d} values of the normalised axes",
                    c.name, c.dims
                )))
                }
                None => self
                    .g
                    .buffer(&format!("{out}.{what}"), Shape::d1(d), Init::Values(vec![fill; d]))
                    .map_err(ctx.graph())?,
            };
        }
        let y = self.g.layer_norm(out, x, affine[0], affine[1], eps).map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(y)
    }

    fn unary(
        &mut self,
        ctx: &Ctx,
        op: impl FnOnce(&mut Graph, &str, TensorId) -> Result<TensorId, GraphError>,
    ) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let out = ctx.output()?;
        let y = op(&mut self.g, out, x).map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    fn conv(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let name = ctx.input(0).ok_or_else(|| ctx.err("input 0 is missing"))?;
        // A zero Pad right before the convolution adds to its padding.
        let (x, dims, pre) = match self.value(ctx, name)? {
            Value::Padded { id, dims, pads } => (*id, dims.clone(), *pads),
            _ => {
                let (x, dims) = self.act(ctx, 0)?;
                (x, dims, [0; 4])
            }
        };
        let [_, _, h, w_in] = dims[..] else {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        };
        let w = self.required_constant(ctx, 1)?;
        let [o, cg, kh, kw] = w.dims[..] else {
            return Err(ctx.err(format!(
                "weight '{}' must be 4-D (OIHW), it has shape {:?}",
                w.name, w.dims
            )));
        };
        let dilation = ctx.pair("dilations", Some((1, 1)))?;
        if dilation.0 == 0 || dilation.1 == 0 {
            return Err(ctx.err(format!("dilations {dilation:?} must be positive")));
        }
        if let Some(k) = ctx.ints("kernel_shape") {
            if k != [kh as i64, kw as i64] {
                return Err(
                    ctx.err(format!("kernel_shape {k:?} differs from the weight's [{kh}, {kw}]"))
                );
            }
        }
        let groups = ctx.int("group", 1)?;
        let stride = ctx.pair("strides", Some((1, 1)))?;
        // A dilated kernel spans `(k - 1) · d + 1` input pixels.
        let spread = |k: usize, d: usize| k.saturating_sub(1).checked_mul(d)?.checked_add(1);
        let (Some(sh), Some(sw)) = (spread(kh, dilation.0), spread(kw, dilation.1)) else {
            return Err(ctx.err(format!("dilations {dilation:?} are too large")));
        };
        let span = (sh, sw);
        let own = ctx.pads((h, w_in), span, stride)?;
        let [t, l, b, r]: [usize; 4] = std::array::from_fn(|i| own[i] + pre[i]);
        // The convolution pads each side equally; a zero padding op adds what one side has
        // more (`auto_pad` SAME with stride 2, TensorFlow's exports).
        let padding = (t.min(b), l.min(r));
        let params = ConvParams {
            stride,
            padding,
            groups: usize::try_from(groups)
                .map_err(|_| ctx.err(format!("group {groups} must be positive")))?,
        };
        let out = ctx.output()?;
        let mut x = self.view(ctx, x, &unpadded(&dims, pre), out)?;
        for (axis, before, after) in [(2, t, b), (3, l, r)] {
            let least = before.min(after);
            if before != after {
                x = self
                    .g
                    .pad(&format!("{out}.pad{axis}"), x, axis, before - least, after - least)
                    .map_err(ctx.graph())?;
            }
        }
        let wt = self.weight(&w, Shape::d4(o, cg, kh, kw), w.f32()?.to_vec(), false)?;
        let b = match self.constant(ctx, 2)? {
            Some(b) => Some(self.vector(ctx, &b, o, false)?),
            None => None,
        };
        let y = self.g.dilated_conv2d(out, x, wt, b, params, dilation).map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    /// `Pad` with zeros (mode `constant`, value 0) of the two spatial axes of an NCHW
    /// tensor: kept aside for the `Conv` that reads it (pads in a row add up).
    fn pad(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let name = ctx.input(0).ok_or_else(|| ctx.err("input 0 is missing"))?;
        let (x, dims, prior) = match self.value(ctx, name)? {
            Value::Padded { id, dims, pads } => (*id, dims.clone(), *pads),
            _ => {
                let (x, dims) = self.act(ctx, 0)?;
                (x, dims, [0; 4])
            }
        };
        if dims.len() != 4 {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        }
        let mode = ctx.string("mode").unwrap_or_else(|| "constant".into());
        if mode != "constant" {
            return Err(ctx.err(format!("mode '{mode}' is not supported (constant zeros is)")));
        }
        if let Some(v) = self.scalar(ctx, 2)?.filter(|&v| v != 0.0) {
            return Err(ctx.err(format!("constant_value {v} is not supported: expected 0")));
        }
        if ctx.input(3).is_some() {
            return Err(ctx.err("the axes input is not supported: give pads for all 4 axes"));
        }
        let spec = self.required_constant(ctx, 1)?;
        let p = spec.i64()?;
        let &[n0, c0, t, l, n1, c1, b, r] = p else {
            return Err(ctx.err(format!("pads must hold 8 values (NCHW), it holds {p:?}")));
        };
        if [n0, c0, n1, c1] != [0; 4] || [t, l, b, r].iter().any(|&v| v < 0) {
            return Err(ctx.err(format!(
                "pads {p:?} are not supported: only non-negative padding of the two spatial axes is"
            )));
        }
        let pads = [t as usize, l as usize, b as usize, r as usize];
        let out = ctx.output()?;
        let id = self.view(ctx, x, &unpadded(&dims, prior), out)?;
        let padded =
            vec![dims[0], dims[1], dims[2] + pads[0] + pads[2], dims[3] + pads[1] + pads[3]];
        let pads = std::array::from_fn(|i| pads[i] + prior[i]);
        self.values.insert(out.into(), Value::Padded { id, dims: padded, pads });
        Ok(())
    }

    /// A `[K, M]` constant times `alpha` as a `[M, K]` weight (PyTorch's `nn.Linear` layout).
    fn transposed(&mut self, ctx: &Ctx, w: &Const, alpha: f32) -> Result<TensorId, OnnxError> {
        let [k, m] = w.dims[..] else {
            return Err(
                ctx.err(format!("weight '{}' must be 2-D, it has shape {:?}", w.name, w.dims))
            );
        };
        let v = w.f32()?;
        let t = (0..m * k).map(|i| alpha * v[(i % k) * m + i / k]).collect();
        self.weight(w, Shape::d2(m, k), t, false)
    }

    /// Input 0 as `[batch, features]` (viewed so when sprout stores it otherwise) and K;
    /// with `rows`, any `[batch, ..., features]`.
    fn linear_input(&mut self, ctx: &Ctx, rows: bool) -> Result<(TensorId, usize), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let k = match dims[..] {
            [_, k] => k,
            [_, _, .., k] if rows => k,
            _ => {
                return Err(ctx.err(format!(
                "input must be 2-D [batch, features] (add a Flatten first), it has shape {dims:?}"
            )))
            }
        };
        Ok((self.view(ctx, x, &dims, ctx.output()?)?, k))
    }

    /// `Gemm`: `alpha` folds into the weight, `beta` into the bias.
    fn gemm(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, k) = self.linear_input(ctx, false)?;
        let (alpha, beta) = (ctx.float("alpha", 1.0)?, ctx.float("beta", 1.0)?);
        if ctx.int("transA", 0)? != 0 {
            return Err(ctx.err(
                "transA = 1 is not supported: sprout has no transpose op, the input must be [batch, features]",
            ));
        }
        let w = self.required_constant(ctx, 1)?;
        let wt = if ctx.int("transB", 0)? != 0 {
            let [m, kw] = w.dims[..] else {
                return Err(
                    ctx.err(format!("weight '{}' must be 2-D, it has shape {:?}", w.name, w.dims))
                );
            };
            if kw != k {
                return Err(ctx.err(format!(
                    "weight '{}' has shape {:?}: expected [M, {k}]",
                    w.name, w.dims
                )));
            }
            let values = w.f32()?.iter().map(|&v| alpha * v).collect();
            self.weight(&w, Shape::d2(m, k), values, false)?
        } else {
            if w.dims.first() != Some(&k) {
                return Err(ctx.err(format!(
                    "weight '{}' has shape {:?}: expected [{k}, N]",
                    w.name, w.dims
                )));
            }
            self.transposed(ctx, &w, alpha)?
        };
        let m = self.g.shape(wt).dims()[0];
        let b = match self.constant(ctx, 2)? {
            Some(c) => {
                check_vector(ctx, &c, m)?;
                let values = c.f32()?.iter().map(|&b| beta * b).collect();
                Some(self.weight(&c, Shape::d1(m), values, false)?)
            }
            None => None,
        };
        let out = ctx.output()?;
        let y = self.g.linear(out, x, wt, b).map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    /// `MatMul` of `[N, ..., K]` by a constant `[K, M]`; an `Add` of an `[M]` constant that is the only
    /// reader of the product becomes the bias.
    fn matmul(
        &mut self,
        ctx: &Ctx,
        graph: &'m proto::GraphProto,
        index: usize,
    ) -> Result<(), OnnxError> {
        let (x, k) = self.linear_input(ctx, true)?;
        let w = self.required_constant(ctx, 1)?;
        if w.dims.first() != Some(&k) || w.dims.len() != 2 {
            return Err(
                ctx.err(format!("weight '{}' has shape {:?}: expected [{k}, N]", w.name, w.dims))
            );
        }
        let wt = self.transposed(ctx, &w, 1.0)?;
        let m = w.dims[1];
        let out = ctx.output()?;
        // Fuse `Add(out, bias)` when it is the product's only reader.
        let fused = self.only_reader(graph, index, out, "Add").and_then(|(j, other, add_out)| {
            let Some(Value::Const(c)) = self.values.get(other) else { return None };
            let shape_ok =
                matches!(c.dims[..], [n] if n == m) || matches!(c.dims[..], [1, n] if n == m);
            (shape_ok && c.f32().is_ok()).then(|| (j, c.clone(), add_out.to_string()))
        });
        let y = match fused {
            Some((j, bias, add_out)) => {
                let b = self.vector(ctx, &bias, m, false)?;
                let y = self.g.linear(&add_out, x, wt, Some(b)).map_err(ctx.graph())?;
                self.fused.insert(j);
                self.define_sprout(&add_out, y);
                y
            }
            None => self.g.linear(out, x, wt, None).map_err(ctx.graph())?,
        };
        self.define_sprout(out, y);
        Ok(())
    }

    /// The node after `index` that alone reads `value`, when it is a default-domain `op` of
    /// two inputs with an output: its index, its other operand and its output.
    fn only_reader(
        &self,
        graph: &'m proto::GraphProto,
        index: usize,
        value: &str,
        op: &str,
    ) -> Option<(usize, &'m str, &'m str)> {
        if self.uses.get(value) != Some(&1) {
            return None;
        }
        let (j, n) = graph
            .node
            .iter()
            .enumerate()
            .skip(index + 1)
            .find(|(_, n)| n.input.iter().any(|i| i == value))?;
        let fits = n.op_type.as_deref() == Some(op)
            && matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx"));
        let [a, b] = &n.input[..] else { return None };
        let out = n.output.first().filter(|o| !o.is_empty())?;
        let other = if a == value { b } else { a };
        fits.then_some((j, other.as_str(), out.as_str()))
    }

    /// `Clip(min, max)`: ReLU6 or ReLU where the bounds are theirs; otherwise a hard
    /// sigmoid onto `[0, 1]` rescaled to `[min, max]`, or a ReLU between two affine maps
    /// for one bound.
    fn clip(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let (min, max) = (self.scalar(ctx, 1)?, self.scalar(ctx, 2)?);
        let out = ctx.output()?;
        let min = min.filter(|&v| v != f32::NEG_INFINITY);
        let max = max.filter(|&v| v != f32::INFINITY);
        let y = match (min, max) {
            (None, None) => x,
            (Some(lo), Some(hi)) if lo == 0.0 && hi == 6.0 => {
                self.g.relu6(out, x).map_err(ctx.graph())?
            }
            (Some(0.0), None) => self.g.relu(out, x).map_err(ctx.graph())?,
            (Some(lo), Some(hi)) if lo < hi => {
                let range = hi - lo;
                let unit = self
                    .g
                    .hard_sigmoid(&format!("{out}.unit"), x, 1.0 / range, -lo / range)
                    .map_err(ctx.graph())?;
                self.affine(ctx, out, unit, &dims, &[range], &[lo])?
            }
            // min(x, hi) = hi - relu(hi - x); max(x, lo) = lo + relu(x - lo).
            (Some(bound), None) | (None, Some(bound)) => {
                let sign = if max.is_some() { -1.0 } else { 1.0 };
                let shifted =
                    self.affine(ctx, &format!("{out}.in"), x, &dims, &[sign], &[-sign * bound])?;
                let r = self.g.relu(&format!("{out}.relu"), shifted).map_err(ctx.graph())?;
                self.affine(ctx, out, r, &dims, &[sign], &[bound])?
            }
            (Some(lo), Some(hi)) => {
                return Err(ctx.err(format!("min {lo} must be below max {hi}")));
            }
        };
        self.define(out, y, dims);
        Ok(())
    }

    fn pool(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let [_, _, h, w] = dims[..] else {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        };
        if ctx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
            return Err(ctx.err("the Indices output is not supported"));
        }
        if ctx.int("storage_order", 0)? != 0 {
            return Err(ctx.err("storage_order = 1 is not supported"));
        }
        ctx.no_dilation()?;
        let kernel = ctx.pair("kernel_shape", None)?;
        let stride = ctx.pair("strides", Some((1, 1)))?;
        let pads = ctx.pads((h, w), kernel, stride)?;
        if pads[0].max(pads[2]) >= kernel.0 || pads[1].max(pads[3]) >= kernel.1 {
            return Err(ctx.err(format!(
                "pads {pads:?} ([top, left, bottom, right]) reach a whole kernel {kernel:?}: a window would hold only padding"
            )));
        }
        let extra = ctx.ceil_extra((h, w), kernel, stride, pads)?;
        let count_include_pad = ctx.int("count_include_pad", 0)? != 0;
        let [t, l, b, r] = [pads[0], pads[1], pads[2] + extra.0, pads[3] + extra.1];
        let out = ctx.output()?;
        let mut x = self.view(ctx, x, &dims, out)?;
        if ctx.op_type == "AveragePool" && [t, l] != [b, r] {
            let y =
                self.avg_pool_uneven(ctx, x, (kernel, stride), pads, extra, count_include_pad)?;
            self.define_sprout(out, y);
            return Ok(());
        }
        let max = ctx.op_type == "MaxPool";
        // What one side has more repeats its edge: a window reaching that far also holds
        // the edge, so the copies never change its maximum.
        let params =
            PoolParams { kernel, stride, padding: (t.min(b), l.min(r)), count_include_pad };
        for (axis, before, after) in [(2, t, b), (3, l, r)] {
            let least = before.min(after);
            x = self.repeat_edges(ctx, x, axis, (before - least, after - least), out)?;
        }
        let y =
            if max { self.g.max_pool2d(out, x, params) } else { self.g.avg_pool2d(out, x, params) }
                .map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    /// The most pools an uneven average pool is split into: ceil_mode adds one window per
    /// axis, so real models need four; a hostile file asking for thousands is refused.
    const MAX_POOL_BLOCKS: usize = 64;

    /// An average pool whose trailing padding (`pads` `[top, left, bottom, right]` plus
    /// what `ceil_mode` adds, `extra`) differs from its leading one, with PyTorch's divisor:
    /// the window's positions inside the input and, with `count_include_pad`, inside the
    /// explicit pads (written as zeros first), never those `ceil_mode` adds. Sprout's kernel
    /// pads both sides by the leading padding and divides by the positions inside; the
    /// windows it has beyond ONNX's are cut off, and each window ONNX has beyond it (it runs
    /// past the input's end) is the mean of the input from its start to the end, a pool of
    /// its own. The blocks are joined along W, then H.
    fn avg_pool_uneven(
        &mut self,
        ctx: &Ctx,
        x: TensorId,
        (kernel, stride): ((usize, usize), (usize, usize)),
        pads: [usize; 4],
        extra: (usize, usize),
        count_include_pad: bool,
    ) -> Result<TensorId, OnnxError> {
        let out = ctx.output()?;
        let mut x = x;
        let mut lead = [pads[0], pads[1]];
        let mut trail = [pads[2] + extra.0, pads[3] + extra.1];
        if count_include_pad {
            for (axis, before, after) in [(2, pads[0], pads[2]), (3, pads[1], pads[3])] {
                if before + after > 0 {
                    let name = format!("{out}.pad{axis}");
                    x = self.g.pad(&name, x, axis, before, after).map_err(ctx.graph())?;
                }
            }
            (lead, trail) = ([0, 0], [extra.0, extra.1]);
        }
        let dims = self.g.shape(x).dims().to_vec();
        // Per axis: how many of the kernel's own windows ONNX keeps, how many the kernel
        // has, and where each window ONNX has beyond them starts in `x`.
        let mut axes: Vec<(usize, usize, Vec<usize>)> = Vec::with_capacity(2);
        for (i, k, s) in [(0, kernel.0, stride.0), (1, kernel.1, stride.1)] {
            let (size, p) = (dims[2 + i], lead[i]);
            let windows = |span: usize| span.checked_sub(k).map_or(0, |d| d / s.max(1) + 1);
            let (onnx, own) = (windows(size + p + trail[i]), windows(size + 2 * p));
            let mut tails = Vec::new();
            for o in own.min(onnx)..onnx {
                match (o * s).checked_sub(p).filter(|&start| start < size) {
                    Some(start) => tails.push(start),
                    None => {
                        return Err(ctx.err(format!(
                            "window {o} of axis {} (size {size}, kernel {kernel:?}, stride {stride:?}, pads {pads:?}, ceil_mode adding {extra:?}) holds no input to average",
                            2 + i
                        )))
                    }
                }
            }
            axes.push((own.min(onnx), own, tails));
        }
        // Each axis's segments: the kernel's windows (`None`), then one per window beyond.
        let segments = |(main, _, tails): &(usize, usize, Vec<usize>)| {
            let own = (*main > 0).then_some(None);
            own.into_iter().chain(tails.iter().map(|&start| Some(start))).collect::<Vec<_>>()
        };
        let (rows, cols) = (segments(&axes[0]), segments(&axes[1]));
        if rows.len() * cols.len() > Self::MAX_POOL_BLOCKS {
            return Err(ctx.err(format!(
                "its uneven padding (pads {pads:?}, ceil_mode adding {extra:?}) splits it into {} x {} pools of their own: sprout builds at most {}",
                rows.len(),
                cols.len(),
                Self::MAX_POOL_BLOCKS
            )));
        }
        let mut joined_rows = None;
        for (ri, row) in rows.iter().enumerate() {
            let mut joined = None;
            for (ci, col) in cols.iter().enumerate() {
                let base = format!("{out}.block{ri}_{ci}");
                let mut part = x;
                let (mut k, mut s, mut p) = ([kernel.0, kernel.1], [stride.0, stride.1], lead);
                for (i, seg) in [row, col].into_iter().enumerate() {
                    if let Some(start) = *seg {
                        let size = dims[2 + i];
                        let name = format!("{base}.from{}", 2 + i);
                        let cut = self.g.slice(&name, part, 2 + i, start, size - start);
                        part = cut.map_err(ctx.graph())?;
                        (k[i], s[i], p[i]) = (size - start, 1, 0);
                    }
                }
                let params = PoolParams {
                    kernel: (k[0], k[1]),
                    stride: (s[0], s[1]),
                    padding: (p[0], p[1]),
                    count_include_pad: false,
                };
                let mut y = self.g.avg_pool2d(&base, part, params).map_err(ctx.graph())?;
                for (i, seg) in [row, col].into_iter().enumerate() {
                    let (main, own, _) = &axes[i];
                    if seg.is_none() && main < own {
                        let name = format!("{base}.cut{}", 2 + i);
                        y = self.g.slice(&name, y, 2 + i, 0, *main).map_err(ctx.graph())?;
                    }
                }
                joined = Some(match joined {
                    None => y,
                    Some(acc) => {
                        let name = format!("{base}.join");
                        self.g.concat(&name, acc, y, 3).map_err(ctx.graph())?
                    }
                });
            }
            let row = joined.ok_or_else(|| ctx.err("the pool has no output columns"))?;
            joined_rows = Some(match joined_rows {
                None => row,
                Some(acc) => {
                    let name = format!("{out}.rows{ri}");
                    self.g.concat(&name, acc, row, 2).map_err(ctx.graph())?
                }
            });
        }
        joined_rows.ok_or_else(|| ctx.err("the pool has no output rows"))
    }

    /// `x` with its first slice along `axis` repeated `times.0` times in front and its last
    /// `times.1` times behind (nodes `{base}.edge{axis}.{i}`).
    fn repeat_edges(
        &mut self,
        ctx: &Ctx,
        mut x: TensorId,
        axis: usize,
        times: (usize, usize),
        base: &str,
    ) -> Result<TensorId, OnnxError> {
        let mut step = 0;
        let mut name = || {
            step += 1;
            format!("{base}.edge{axis}.{step}")
        };
        if times.0 > 0 {
            let first = self.g.slice(&name(), x, axis, 0, 1).map_err(ctx.graph())?;
            let block = self.repeated(first, axis, times.0, &mut name).map_err(ctx.graph())?;
            x = self.g.concat(&name(), block, x, axis).map_err(ctx.graph())?;
        }
        if times.1 > 0 {
            let end = self.g.shape(x).dim(axis).unwrap_or(0).saturating_sub(1);
            let last = self.g.slice(&name(), x, axis, end, 1).map_err(ctx.graph())?;
            let block = self.repeated(last, axis, times.1, &mut name).map_err(ctx.graph())?;
            x = self.g.concat(&name(), x, block, axis).map_err(ctx.graph())?;
        }
        Ok(x)
    }

    /// `slice` (one entry long on `axis`) repeated `times` times, by doubling: a number of
    /// concatenations logarithmic in `times`, whatever a file's pads ask for.
    fn repeated(
        &mut self,
        slice: TensorId,
        axis: usize,
        times: usize,
        name: &mut impl FnMut() -> String,
    ) -> Result<TensorId, GraphError> {
        let (mut power, mut left, mut whole) = (slice, times, None);
        loop {
            if left & 1 == 1 {
                whole = Some(match whole {
                    None => power,
                    Some(w) => self.g.concat(&name(), w, power, axis)?,
                });
            }
            left >>= 1;
            if left == 0 {
                return Ok(whole.unwrap_or(slice));
            }
            power = self.g.concat(&name(), power, power, axis)?;
        }
    }

    fn global_pool(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        self.mean_hw(ctx, x, dims, true)
    }

    /// `ReduceMean` over axes other than the batch axis: the spatial axes of an NCHW tensor
    /// as a global average pool; otherwise each trailing block of reduced axes as one
    /// (moved last by a transpose when axes that stay follow it), size-1 axes as a reshape.
    fn reduce_mean(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let axes = self.axes(ctx, 18)?.unwrap_or_default();
        let mut at: Vec<_> = axes
            .iter()
            .map(|&a| fold::axis(a, dims.len()))
            .collect::<Result<_, _>>()
            .map_err(|e| ctx.err(e))?;
        at.sort_unstable();
        at.dedup();
        let keep = ctx.int("keepdims", 1)? != 0;
        if dims.len() == 4 && at == [2, 3] {
            return self.mean_hw(ctx, x, dims, keep);
        }
        if at.is_empty() || at.contains(&0) {
            return Err(ctx.err(format!(
                "a mean over axes {axes:?} of shape {dims:?} includes the batch axis 0: sprout keeps every sample"
            )));
        }
        let out = ctx.output()?;
        let mut y = x;
        // The shape `y` holds, reduced axes kept as 1 until the end.
        let mut now = dims.clone();
        for (step, &a) in at.iter().rev().enumerate().filter(|&(_, &a)| dims[a] != 1) {
            let (before, after): (usize, usize) =
                (now[1..a].iter().product(), now[a + 1..].iter().product());
            let base = format!("{out}.mean{step}");
            let split = [now[0], before, now[a], after];
            y = self.view(ctx, y, &split, &format!("{base}.split"))?;
            if after != 1 {
                let t = self.g.transpose(&format!("{base}.last"), y, &[0, 1, 3, 2]);
                y = t.map_err(ctx.graph())?;
            }
            let rows = [now[0], before * after, now[a], 1];
            let rows = self.view(ctx, y, &rows, &format!("{base}.rows"))?;
            y = self.g.global_avg_pool(&base, rows).map_err(ctx.graph())?;
            now[a] = 1;
        }
        let result = match keep {
            true => now,
            false => {
                dims.iter().enumerate().filter(|(i, _)| !at.contains(i)).map(|(_, &d)| d).collect()
            }
        };
        self.define(out, y, result);
        Ok(())
    }

    /// The mean over H and W of an NCHW tensor, as `[N, C, 1, 1]` (`keep`) or `[N, C]`.
    fn mean_hw(
        &mut self,
        ctx: &Ctx,
        x: TensorId,
        dims: Vec<usize>,
        keep: bool,
    ) -> Result<(), OnnxError> {
        let [n, c, _, _] = dims[..] else {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        };
        let out = ctx.output()?;
        let x = self.view(ctx, x, &dims, out)?;
        // sprout stores [N, C].
        let name = self.staging(out, keep);
        let y = self.g.global_avg_pool(&name, x).map_err(ctx.graph())?;
        self.define(out, y, if keep { vec![n, c, 1, 1] } else { vec![n, c] });
        Ok(())
    }

    /// `out`, or a staging name for it when sprout stores it under another shape than
    /// ONNX's (`differs`) and it is a graph output, which must bear the ONNX name.
    fn staging(&self, out: &str, differs: bool) -> String {
        match differs && self.graph_outputs.contains(out) {
            true => format!("{out}.staged"),
            false => out.into(),
        }
    }

    /// `BatchNormalization` (inference form) of `[N, C, ...]`: 4-D directly, 2-D and 3-D
    /// through an `[N, C, L, 1]` view.
    fn batch_norm(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        if ctx.int("training_mode", 0)? != 0 {
            return Err(
                ctx.err("training_mode = 1 is not supported: export the model in eval mode")
            );
        }
        if ctx.node.output.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(ctx.err("only the first output (inference form) is supported"));
        }
        let eps = ctx.float("epsilon", 1e-5)?;
        let momentum = ctx.float("momentum", 0.9)?;
        let out = ctx.output()?;
        let (x, c) = self.channel_view(ctx, x, &dims, out)?;
        let mut ids = [TensorId(0); 4];
        for (slot, i) in ids.iter_mut().zip(1..) {
            let cst = self.required_constant(ctx, i)?;
            *slot = self.vector(ctx, &cst, c, i >= 3)?;
        }
        // ONNX weighs the running value by `momentum`, sprout (as PyTorch) the new batch.
        let cfg = BatchNormConfig { eps, momentum: 1.0 - momentum };
        let name = self.staging(out, dims.len() != 4);
        let y = self
            .g
            .batch_norm2d(&name, x, ids[0], ids[1], ids[2], ids[3], cfg)
            .map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `x [N, C, ...]` as the NCHW tensor `[N, C, H, W]` (4-D) or `[N, C, L, 1]`, and `C`.
    fn channel_view(
        &mut self,
        ctx: &Ctx,
        x: TensorId,
        dims: &[usize],
        base: &str,
    ) -> Result<(TensorId, usize), OnnxError> {
        let nchw = match dims {
            [n, c, h, w] => vec![*n, *c, *h, *w],
            [n, c, rest @ ..] => vec![*n, *c, rest.iter().product(), 1],
            _ => {
                return Err(ctx.err(format!(
                    "input must be [N, C, ...] (at least 2-D), it has shape {dims:?}"
                )))
            }
        };
        Ok((self.view(ctx, x, &nchw, base)?, nchw[1]))
    }

    /// `x · scale + shift` with one scale and shift per channel (one value: all channels),
    /// recorded as a depthwise 1×1 convolution whose weight and bias are constant buffers
    /// (`{name}.scale`, `{name}.shift`). The result is stored NCHW.
    fn affine(
        &mut self,
        ctx: &Ctx,
        name: &str,
        x: TensorId,
        dims: &[usize],
        scale: &[f32],
        shift: &[f32],
    ) -> Result<TensorId, OnnxError> {
        let (x, c) = self.channel_view(ctx, x, dims, name)?;
        let per_channel = |v: &[f32]| if v.len() == 1 { vec![v[0]; c] } else { v.to_vec() };
        let graph = |source| OnnxError::Graph { context: format!("constant '{name}'"), source };
        let w = self
            .g
            .buffer(
                &format!("{name}.scale"),
                Shape::d4(c, 1, 1, 1),
                Init::Values(per_channel(scale)),
            )
            .map_err(graph)?;
        let b = self
            .g
            .buffer(&format!("{name}.shift"), Shape::d1(c), Init::Values(per_channel(shift)))
            .map_err(graph)?;
        let params = ConvParams { stride: (1, 1), padding: (0, 0), groups: c };
        let name = self.staging(name, dims.len() != 4);
        self.g.conv2d(&name, x, w, Some(b), params).map_err(ctx.graph())
    }

    /// `x · scale (+ shift)` with `scale` a per-channel parameter and `shift` a per-channel
    /// one (each under its name and ONNX shape), as a depthwise 1×1 convolution by views of
    /// them; one scale for all channels (no shift) is a 1×1 convolution of one channel by
    /// it over `x` viewed as `[N, 1, C·H, W]` (`{name}.shared`), its gradient the sum over
    /// every position. The result is stored NCHW.
    fn channel_scale(
        &mut self,
        ctx: &Ctx,
        name: &str,
        x: TensorId,
        dims: &[usize],
        scale: &Const,
        shift: Option<&Const>,
    ) -> Result<TensorId, OnnxError> {
        let (x, c) = self.channel_view(ctx, x, dims, name)?;
        let parameter = |me: &mut Self, p: &Const| {
            let dims = if p.dims.is_empty() { vec![1] } else { p.dims.clone() };
            let shape = Shape::new(&dims).map_err(|e| tensor_error(&p.name, e.to_string()))?;
            me.weight(p, shape, p.f32()?.to_vec(), false)
        };
        let p = parameter(self, scale)?;
        let shared = scale.numel() == 1 && c > 1 && shift.is_none();
        let (w, groups) = match shared {
            true => (self.view(ctx, p, &[1, 1, 1, 1], &format!("{name}.scale"))?, 1),
            false => (self.view(ctx, p, &[c, 1, 1, 1], &format!("{name}.scale"))?, c),
        };
        let b = match shift {
            Some(shift) => {
                let p = parameter(self, shift)?;
                Some(self.view(ctx, p, &[c], &format!("{name}.shift"))?)
            }
            None => None,
        };
        let params = ConvParams { stride: (1, 1), padding: (0, 0), groups };
        let nchw = self.g.shape(x).dims().to_vec();
        if shared {
            let one = [nchw[0], 1, c * nchw[2], nchw[3]];
            let base = format!("{name}.shared");
            let flat = self.view(ctx, x, &one, &base)?;
            let y = self.g.conv2d(&base, flat, w, None, params).map_err(ctx.graph())?;
            let name = self.staging(name, dims.len() != 4);
            return self
                .g
                .reshape(&name, y, Shape::new(&nchw).map_err(|e| ctx.err(e.to_string()))?)
                .map_err(ctx.graph());
        }
        let name = self.staging(name, dims.len() != 4);
        self.g.conv2d(&name, x, w, b, params).map_err(ctx.graph())
    }

    /// A constant operand of an element-wise op on `dims` as one value per channel (axis 1)
    /// or one value for all: it must broadcast along every other axis.
    fn channel_values(&self, ctx: &Ctx, c: &Const, dims: &[usize]) -> Result<Vec<f32>, OnnxError> {
        let v = c.f32()?;
        let offset = dims.len().checked_sub(c.dims.len());
        let per_channel = offset.is_some_and(|off| {
            c.dims.iter().enumerate().all(|(i, &d)| d == 1 || (i + off == 1 && d == dims[1]))
        });
        if !per_channel || dims.len() < 2 {
            return Err(ctx.err(format!(
                "constant '{}' of shape {:?} does not broadcast per channel over shape {dims:?}: sprout applies constants as one value per channel (axis 1) or one for all",
                c.name, c.dims
            )));
        }
        Ok(v.to_vec())
    }

    /// `Add`, `Sub`, `Mul`, `Div`: of two computed tensors (Add of the same shape, Mul also
    /// by a per-channel factor), or of a tensor and a per-channel or scalar constant (an
    /// affine map). A `Mul` by a per-channel initializer trains it (ConvNeXt's layer scale,
    /// GroupNorm's weight), and so does the `Add` of a per-channel initializer that alone
    /// reads its product (GroupNorm's bias): one depthwise 1×1 convolution by both.
    fn arithmetic(
        &mut self,
        ctx: &Ctx,
        graph: &'m proto::GraphProto,
        index: usize,
    ) -> Result<(), OnnxError> {
        let constant = |i: usize| match self.value(ctx, ctx.input(i).unwrap_or("")) {
            Ok(Value::Const(c)) => Some(c.clone()),
            _ => None,
        };
        // Both constant: folded before this; neither: a product or sum of tensors.
        let (c, tensor) = match (constant(0), constant(1)) {
            (None, Some(c)) => (c, 0),
            (Some(c), None) => (c, 1),
            _ => return self.tensor_arithmetic(ctx),
        };
        let (x, dims) = self.act(ctx, tensor)?;
        let v = self.channel_values(ctx, &c, &dims)?;
        if ctx.op_type == "Mul" && v.len() > 1 && self.initializers.contains(&c.name) {
            // A weight of the model (ConvNeXt's layer scale): it trains, under its name.
            let out = ctx.output()?;
            let shift = self.only_reader(graph, index, out, "Add").and_then(|(j, other, sum)| {
                let b = self.initializers.contains(other).then(|| self.values.get(other))??;
                let Value::Const(b) = b else { return None };
                let per_channel =
                    self.channel_values(ctx, b, &dims).is_ok_and(|w| w.len() == v.len());
                per_channel.then(|| (j, b.clone(), sum))
            });
            let Some((j, b, sum)) = shift else {
                let y = self.channel_scale(ctx, out, x, &dims, &c, None)?;
                self.define(out, y, dims);
                return Ok(());
            };
            self.fused.insert(j);
            let y = self.channel_scale(ctx, sum, x, &dims, &c, Some(&b))?;
            self.define(sum, y, dims);
            return Ok(());
        }
        let map = |f: fn(f32) -> f32| v.iter().map(|&x| f(x)).collect::<Vec<f32>>();
        let (scale, shift) = match (ctx.op_type, tensor) {
            ("Add", _) => (vec![1.0], v.clone()),
            ("Sub", 0) => (vec![1.0], map(|c| -c)),
            ("Sub", _) => (vec![-1.0], v.clone()),
            ("Mul", _) => (v.clone(), vec![0.0]),
            ("Div", 0) => (map(|c| 1.0 / c), vec![0.0]),
            _ => {
                return Err(ctx.err(format!(
                    "divides the constant '{}' by a computed tensor: sprout has no reciprocal op",
                    c.name
                )))
            }
        };
        let out = ctx.output()?;
        let y = self.affine(ctx, out, x, &dims, &scale, &shift)?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Add`, `Sub` or `Mul` of two computed tensors under numpy's broadcasting (`a - b` is
    /// `a + (-1 · b)`): of one shape, `Mul` by an `[N, C, 1, ...]` factor on either side
    /// (squeeze-excitation) directly, other shapes through a `broadcast` of each operand that
    /// grows (never along the batch axis).
    fn tensor_arithmetic(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let ((a, ad), (b, bd)) = (self.act(ctx, 0)?, self.act(ctx, 1)?);
        let out = ctx.output()?;
        let op = ctx.op_type;
        if !matches!(op, "Add" | "Sub" | "Mul") {
            return Err(ctx.err(format!(
                "{op} of two computed tensors (shapes {ad:?} and {bd:?}) is not supported (only by a constant)"
            )));
        }
        let dims = fold::broadcast_shape(&ad, &bd).map_err(|e| ctx.err(e))?;
        let factor = |f: &[usize], of: &[usize]| {
            f.len() == of.len()
                && f.len() >= 2
                && f[..2] == of[..2]
                && f[2..].iter().all(|&d| d == 1)
        };
        let direct = ad == bd || (op == "Mul" && (factor(&bd, &ad) || factor(&ad, &bd)));
        let b = match op {
            "Sub" => self.affine(ctx, &format!("{out}.negated"), b, &bd, &[-1.0], &[0.0])?,
            _ => b,
        };
        let (a, b) = match direct {
            true => (
                self.view(ctx, a, &ad, &format!("{out}.a"))?,
                self.view(ctx, b, &bd, &format!("{out}.b"))?,
            ),
            false => (
                self.expand(ctx, a, &ad, &dims, &format!("{out}.a"))?,
                self.expand(ctx, b, &bd, &dims, &format!("{out}.b"))?,
            ),
        };
        let y = if op == "Mul" { self.g.mul(out, a, b) } else { self.g.add(out, a, b) }
            .map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `x` (ONNX shape `dims`) broadcast to `to` under numpy's rule: a view at `to`'s rank,
    /// then a `broadcast` node `{base}.broadcast` where it grows.
    fn expand(
        &mut self,
        ctx: &Ctx,
        x: TensorId,
        dims: &[usize],
        to: &[usize],
        base: &str,
    ) -> Result<TensorId, OnnxError> {
        let lead = to.len().saturating_sub(dims.len());
        let aligned: Vec<usize> =
            std::iter::repeat_n(1, lead).chain(dims.iter().copied()).collect();
        let x = self.view(ctx, x, &aligned, base)?;
        if aligned == to {
            return Ok(x);
        }
        if aligned.first() != to.first() {
            return Err(ctx.err(format!(
                "broadcasting {dims:?} to {to:?} repeats the batch axis 0, which sprout does not"
            )));
        }
        let shape = Shape::new(to).map_err(|e| ctx.err(format!("broadcasting to {to:?}: {e}")))?;
        self.g.broadcast(&format!("{base}.broadcast"), x, shape).map_err(ctx.graph())
    }

    /// `Expand` of a computed tensor by a constant shape (numpy broadcasting both ways).
    fn expand_node(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let spec = self.required_constant(ctx, 1)?;
        let wanted: Vec<usize> = spec
            .i64()?
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| ctx.err(format!("shape {d} is negative"))))
            .collect::<Result<_, _>>()?;
        let to = fold::broadcast_shape(&dims, &wanted).map_err(|e| ctx.err(e))?;
        let out = ctx.output()?;
        let y = self.expand(ctx, x, &dims, &to, out)?;
        self.define(out, y, to);
        Ok(())
    }

    /// `Concat` of computed tensors along any axis but the batch axis, as a chain of
    /// two-operand joins (constants alone were folded before this).
    fn concat(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let out = ctx.output()?;
        let count = ctx.node.input.len();
        let (first, mut dims) = self.act(ctx, 0)?;
        let rank = dims.len() as i64;
        let axis = ctx.int("axis", i64::MAX)?;
        let axis = match axis {
            a if (1..rank).contains(&a) => a as usize,
            a if (1 - rank..0).contains(&a) => (a + rank) as usize,
            i64::MAX => return Err(ctx.err("attribute 'axis' is required")),
            a => {
                return Err(ctx.err(format!(
                    "axis {a} of a rank-{rank} tensor: sprout joins along any axis but the batch axis 0"
                )))
            }
        };
        let mut joined = self.view(ctx, first, &dims, &format!("{out}.0"))?;
        for i in 1..count {
            let (x, x_dims) = self.act(ctx, i)?;
            let x = self.view(ctx, x, &x_dims, &format!("{out}.{i}"))?;
            dims[axis] += x_dims.get(axis).copied().unwrap_or(0);
            let name = if i + 1 == count { out.to_string() } else { format!("{out}.join{i}") };
            joined = self.g.concat(&name, joined, x, axis).map_err(ctx.graph())?;
        }
        self.define(out, joined, dims);
        Ok(())
    }

    /// Defines `out` as input 0 under ONNX shape `dims`: a constant with new dims, or a
    /// tensor, recording a reshape only when sprout stores it under another shape.
    fn reshaped(&mut self, ctx: &Ctx, dims: Vec<usize>) -> Result<(), OnnxError> {
        let out = ctx.output()?;
        let input = ctx.input(0).ok_or_else(|| ctx.err("input 0 is missing"))?;
        if let Value::Const(c) = self.value(ctx, input)? {
            let c = Const { name: out.into(), dims, data: c.data.clone() };
            self.values.insert(out.into(), Value::Const(Rc::new(c)));
            return Ok(());
        }
        let (x, _) = self.act(ctx, 0)?;
        if dims.len() > MAX_RANK || (dims.len() == 1 && self.g.shape(x).rank() > 1) {
            // Beyond sprout's rank (a channel shuffle's 5-D view), or the whole batch as one
            // axis (the dynamo exporter's `as_strided`, a Gather of every element in order
            // following): the data stays under its own shape until a node that reads it
            // reshapes it.
            self.define(out, x, dims);
            return Ok(());
        }
        let shape = Shape::new(&dims).map_err(|e| ctx.err(e.to_string()))?;
        let y = if self.g.shape(x) == shape {
            x
        } else {
            self.g.reshape(out, x, shape).map_err(ctx.graph())?
        };
        self.define(out, y, dims);
        Ok(())
    }

    /// The ONNX dims of input 0, tensor or constant.
    fn dims(&self, ctx: &Ctx) -> Result<Vec<usize>, OnnxError> {
        let name = ctx.input(0).ok_or_else(|| ctx.err("input 0 is missing"))?;
        Ok(self.value(ctx, name)?.dims())
    }

    fn flatten(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let dims = self.dims(ctx)?;
        let axis = fold::axis(ctx.int("axis", 1)?, dims.len() + 1).map_err(|e| ctx.err(e))?;
        let target = vec![dims[..axis].iter().product(), dims[axis..].iter().product()];
        self.reshaped(ctx, target)
    }

    fn reshape(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let dims = self.dims(ctx)?;
        let spec = self.required_constant(ctx, 1)?;
        let allow_zero = ctx.int("allowzero", 0)? != 0;
        let target = fold::reshape_dims(spec.i64()?, &dims, allow_zero).map_err(|e| ctx.err(e))?;
        self.reshaped(ctx, target)
    }

    /// `Squeeze` and `Unsqueeze`: reshapes.
    fn squeeze(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let dims = self.dims(ctx)?;
        let axes = self.axes(ctx, 13)?;
        let target = if ctx.op_type == "Squeeze" {
            fold::squeeze_dims(&dims, axes.as_deref())
        } else {
            let axes = axes.ok_or_else(|| ctx.err("axes are required"))?;
            fold::unsqueeze_dims(&dims, &axes)
        }
        .map_err(|e| ctx.err(e))?;
        self.reshaped(ctx, target)
    }

    /// The `axes` of a reduction or (un)squeeze: an attribute before opset `since`, input
    /// 1 from it on.
    fn axes(&self, ctx: &Ctx, since: i64) -> Result<Option<Vec<i64>>, OnnxError> {
        if self.opset < since {
            return Ok(ctx.ints("axes").map(<[i64]>::to_vec));
        }
        self.constant(ctx, 1)?.map(|c| c.i64().map(<[i64]>::to_vec)).transpose()
    }

    /// Input 0 as it is stored and the permutation that reads it: a value a `Transpose`
    /// kept aside (see [`Value::Permuted`]), or any other value with the identity.
    fn permuted_input(
        &mut self,
        ctx: &Ctx,
    ) -> Result<(TensorId, Vec<usize>, Vec<usize>), OnnxError> {
        let input = ctx.input(0).ok_or_else(|| ctx.err("input 0 is missing"))?;
        Ok(match self.value(ctx, input)? {
            Value::Permuted { id, stored, perm, .. } => (*id, stored.clone(), perm.clone()),
            _ => {
                let (x, dims) = self.act(ctx, 0)?;
                let identity = (0..dims.len()).collect();
                (x, dims, identity)
            }
        })
    }

    /// `Transpose`, composed with the transposes before it that moved the batch axis: when
    /// the batch axis ends up first, a reshape if only size-1 axes move, else sprout's
    /// transpose of as few merged axes as the reordering needs (at most four: ShuffleNet's
    /// 5-D channel shuffle is a 3-D one); else kept aside (see [`Value::Permuted`]).
    fn transpose(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, stored, before) = self.permuted_input(ctx)?;
        let perm = fold::permutation(ctx.ints("perm"), stored.len()).map_err(|e| ctx.err(e))?;
        let composed: Vec<usize> = perm.iter().map(|&a| before[a]).collect();
        let out = ctx.output()?;
        if composed.first() != Some(&0) {
            let dims: Vec<usize> = before.iter().map(|&a| stored[a]).collect();
            let detail = format!(
                "perm {perm:?} on shape {dims:?} moves the batch axis 0: sprout keeps it first (a later Transpose may put it back, a GatherND may read other axes)"
            );
            let refusal = Rc::new((ctx.name.clone(), detail));
            let value = Value::Permuted { id: x, stored, perm: composed, refusal };
            self.values.insert(out.into(), value);
            return Ok(());
        }
        let name = self.staging(out, true);
        let (y, dims) = self.permuted(ctx, x, &stored, &composed, &name)?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Gather` of a flattened computed tensor by constant indices that read every element
    /// in order, shaped as the indices are: the dynamo exporter's `as_strided` of a
    /// contiguous view (ConvNeXt's head), a reshape. Any other Gather of a computed tensor
    /// is refused.
    fn gather(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (_, dims) = self.act(ctx, 0)?;
        let indices = self.required_constant(ctx, 1)?;
        let in_order = dims.len() == 1
            && indices.numel() == dims[0]
            && indices.i64()?.iter().zip(0..).all(|(&i, k)| i == k);
        if !in_order {
            return Err(ctx.err(format!(
                "gathers from a computed tensor of shape {dims:?} by indices of shape {:?}: sprout takes only a Gather of every element of a flattened tensor in order (as_strided of a contiguous view)",
                indices.dims
            )));
        }
        self.reshaped(ctx, indices.dims.clone())
    }

    /// `GatherND` (`batch_dims` 0) of constant indices from axes other than the batch axis,
    /// which a `Transpose` moved to the front (PyTorch's dynamo exporter writes adaptive
    /// average pooling so): the gathered axes become one, from which slices of runs of
    /// neighbouring positions are joined. The result keeps the batch axis where it was.
    fn gather_nd(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        if ctx.int("batch_dims", 0)? != 0 {
            return Err(ctx.err("batch_dims other than 0 are not supported"));
        }
        let (x, stored, perm) = self.permuted_input(ctx)?;
        let indices = self.required_constant(ctx, 1)?;
        let (k, tuples) = match indices.dims.split_last() {
            Some((&k, lead)) if (1..=perm.len()).contains(&k) => (k, lead.to_vec()),
            _ => {
                return Err(ctx.err(format!(
                    "indices of shape {:?} must end in an axis of 1 to {} (the data's rank)",
                    indices.dims,
                    perm.len()
                )))
            }
        };
        let gathered = &perm[..k];
        if gathered.contains(&0) {
            return Err(ctx.err(format!(
                "it gathers along the batch axis 0 (axes {gathered:?} of the tensor of shape {stored:?}): sprout keeps every sample"
            )));
        }
        // The tensor as [batch, kept, positions]: the kept axes in their order, then the
        // gathered ones in the order the indices name them.
        let mut kept: Vec<usize> = perm[k..].to_vec();
        kept.sort_unstable();
        let order: Vec<usize> = kept.iter().chain(gathered).copied().collect();
        let out = ctx.output()?;
        let (t, _) = self.permuted(ctx, x, &stored, &order, &format!("{out}.gather_order"))?;
        let sizes: Vec<usize> = gathered.iter().map(|&a| stored[a]).collect();
        let positions: usize = sizes.iter().product();
        let batch = stored[0];
        let rest: usize = kept[1..].iter().map(|&a| stored[a]).product();
        let t = self.view(ctx, t, &[batch, rest, positions], &format!("{out}.gather_from"))?;
        let flat = flat_positions(indices.i64()?, &sizes).map_err(|e| ctx.err(e))?;
        let mut slices: HashMap<(usize, usize), TensorId> = HashMap::new();
        let mut joined = None;
        let runs = runs(&flat);
        for (i, &(start, len)) in runs.iter().enumerate() {
            let piece = match slices.get(&(start, len)) {
                Some(&piece) => piece,
                None => {
                    let name = format!("{out}.at{start}");
                    let piece = self.g.slice(&name, t, 2, start, len).map_err(ctx.graph())?;
                    *slices.entry((start, len)).or_insert(piece)
                }
            };
            joined = Some(match joined {
                None => piece,
                Some(acc) => {
                    let name = if i + 1 == runs.len() {
                        out.to_string()
                    } else {
                        format!("{out}.join{i}")
                    };
                    self.g.concat(&name, acc, piece, 2).map_err(ctx.graph())?
                }
            });
        }
        let y = joined.ok_or_else(|| ctx.err("the indices select nothing"))?;
        // Stored as [kept axes..., index axes...]; the ONNX value is [index axes..., the
        // data's axes from k on].
        let store: Vec<usize> =
            kept.iter().map(|&a| stored[a]).chain(tuples.iter().copied()).collect();
        let lead = tuples.len();
        let onnx: Vec<usize> = (kept.len()..kept.len() + lead)
            .chain(perm[k..].iter().map(|a| kept.iter().position(|b| b == a).unwrap_or(0)))
            .collect();
        if onnx.iter().enumerate().all(|(i, &a)| i == a) {
            self.define(out, y, store);
        } else {
            let dims: Vec<usize> = onnx.iter().map(|&a| store[a]).collect();
            let detail = format!(
                "gathers into shape {dims:?}, with the batch axis 0 at {}: sprout keeps it first (a later Transpose may put it back)",
                onnx.iter().position(|&a| a == 0).unwrap_or(0)
            );
            let refusal = Rc::new((ctx.name.clone(), detail));
            let value = Value::Permuted { id: y, stored: store, perm: onnx, refusal };
            self.values.insert(out.into(), value);
        }
        Ok(())
    }

    /// `x` (ONNX shape `dims`) with its axes reordered by `perm`, recorded as `name`;
    /// returns the tensor and its ONNX shape.
    fn permuted(
        &mut self,
        ctx: &Ctx,
        x: TensorId,
        dims: &[usize],
        perm: &[usize],
        name: &str,
    ) -> Result<(TensorId, Vec<usize>), OnnxError> {
        let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
        if perm.first().is_some_and(|&a| a != 0) {
            return Err(ctx.err(format!(
                "perm {perm:?} on shape {dims:?} moves the batch axis 0: sprout keeps it first"
            )));
        }
        let (merged, merged_perm) = fold::merged_permutation(dims, perm);
        if merged_perm.iter().enumerate().all(|(i, &a)| i == a) {
            // Only size-1 axes move: the data stays as it is.
            return Ok((x, out_dims));
        }
        if merged.len() > MAX_RANK {
            // DepthToSpace's 6-D shuffle: transposes of at most four blocks each.
            let steps = fold::transpose_steps(dims, perm, MAX_RANK).ok_or_else(|| {
                ctx.err(format!(
                    "perm {perm:?} on shape {dims:?} reorders {} blocks of axes: sprout's transpose takes at most {MAX_RANK}",
                    merged.len()
                ))
            })?;
            let (mut y, mut now) = (x, dims.to_vec());
            for (i, step) in steps.iter().enumerate() {
                let step_name =
                    if i + 1 == steps.len() { name.to_string() } else { format!("{name}.step{i}") };
                (y, now) = self.permuted(ctx, y, &now, step, &step_name)?;
            }
            return Ok((y, now));
        }
        let x = self.view(ctx, x, &merged, name)?;
        let y = self.g.transpose(name, x, &merged_perm).map_err(ctx.graph())?;
        Ok((y, out_dims))
    }

    /// `Softmax` or `LogSoftmax` (`op` records it over the last axis): before opset 13,
    /// over everything from `axis` on as one row; from 13 on, over `axis`, which a
    /// transpose moves last (and back) when larger axes follow it.
    fn softmax(
        &mut self,
        ctx: &Ctx,
        op: impl FnOnce(&mut Graph, &str, TensorId) -> Result<TensorId, GraphError>,
    ) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let legacy = self.opset < 13;
        let axis = ctx.int("axis", if legacy { 1 } else { -1 })?;
        let a = fold::axis(axis, dims.len()).map_err(|e| ctx.err(e))?;
        let out = ctx.output()?;
        if a == 0 && !legacy {
            return Err(ctx.err(format!(
                "a {} over the batch axis 0 (shape {dims:?}) is not supported",
                ctx.op_type
            )));
        }
        let trailing = dims[a + 1..].iter().all(|&d| d == 1);
        if legacy || trailing {
            let cols = if legacy { dims[a..].iter().product() } else { dims[a] };
            // Rows keep the batch axis first, so that the graph rebatches.
            let view = match a {
                0 => vec![1, cols],
                1 => vec![dims[0], cols],
                _ => vec![dims[0], dims[1..a].iter().product(), cols],
            };
            let x = self.view(ctx, x, &view, out)?;
            let name = self.staging(out, view != dims);
            let y = op(&mut self.g, &name, x).map_err(ctx.graph())?;
            self.define(out, y, dims);
            return Ok(());
        }
        if dims[a] == 1 {
            return Err(ctx.err(format!(
                "a {} over axis {axis} of size 1 (shape {dims:?}) is constant: not supported",
                ctx.op_type
            )));
        }
        let to_last: Vec<usize> = (0..dims.len()).filter(|&i| i != a).chain([a]).collect();
        let (t, t_dims) = self.permuted(ctx, x, &dims, &to_last, &format!("{out}.to_last"))?;
        let y = op(&mut self.g, &format!("{out}.rows"), t).map_err(ctx.graph())?;
        let mut back = vec![0; to_last.len()];
        for (i, &p) in to_last.iter().enumerate() {
            back[p] = i;
        }
        let name = self.staging(out, true);
        let (y, _) = self.permuted(ctx, y, &t_dims, &back, &name)?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Split` of a computed tensor along an axis other than the batch axis, one slice per
    /// output: sizes from `split` (an attribute before opset 13, an input from it on), else
    /// `num_outputs` (opset 18) or as many equal parts as outputs.
    fn split(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let a = fold::axis(ctx.int("axis", 0)?, dims.len()).map_err(|e| ctx.err(e))?;
        let outs = &ctx.node.output;
        let given: Option<Vec<i64>> = match self.opset < 13 {
            true => ctx.ints("split").map(<[i64]>::to_vec),
            false => self.constant(ctx, 1)?.map(|c| c.i64().map(<[i64]>::to_vec)).transpose()?,
        };
        let sizes: Vec<usize> = match given {
            Some(s) => s.iter().map(|&v| usize::try_from(v).unwrap_or(0)).collect(),
            None => {
                let parts = outs.len().max(1);
                let each = dims[a].div_ceil(parts);
                (0..parts).map(|i| each.min(dims[a].saturating_sub(i * each))).collect()
            }
        };
        if sizes.len() != outs.len() || sizes.iter().sum::<usize>() != dims[a] {
            return Err(ctx.err(format!(
                "split {sizes:?} into {} outputs does not add up to axis {a} of shape {dims:?}",
                outs.len()
            )));
        }
        let x = self.view(ctx, x, &dims, &format!("{}.split", ctx.output()?))?;
        let mut start = 0;
        for (out, &len) in outs.iter().zip(&sizes) {
            if !out.is_empty() {
                let y = self.g.slice(out, x, a, start, len).map_err(ctx.graph())?;
                self.define_sprout(out, y);
            }
            start += len;
        }
        Ok(())
    }

    /// `Slice` of a computed tensor (constant `starts`, `ends`, `axes`, steps of 1): a
    /// slice per axis it cuts; the batch axis is never cut.
    fn slice(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let ints = |i: usize| -> Result<Option<Vec<i64>>, OnnxError> {
            self.constant(ctx, i)?.map(|c| c.i64().map(<[i64]>::to_vec)).transpose()
        };
        let (starts, ends) = (ints(1)?.unwrap_or_default(), ints(2)?.unwrap_or_default());
        let (axes, steps) = (ints(3)?, ints(4)?);
        let ranges = fold::slice_ranges(&dims, &starts, &ends, axes.as_deref(), steps.as_deref())
            .map_err(|e| ctx.err(e))?;
        let out = ctx.output()?;
        let cuts: Vec<usize> = (0..dims.len()).filter(|&a| ranges[a] != (0, dims[a])).collect();
        let mut y = self.view(ctx, x, &dims, out)?;
        for (k, &a) in cuts.iter().enumerate() {
            let (lo, hi) = ranges[a];
            let name = if k + 1 == cuts.len() { out.to_string() } else { format!("{out}.{a}") };
            y = self.g.slice(&name, y, a, lo, hi - lo).map_err(ctx.graph())?;
        }
        let dims = ranges.iter().map(|&(lo, hi)| hi - lo).collect();
        self.define(out, y, dims);
        Ok(())
    }

    /// `Shape`: the input's static dims as a constant (`start`, `end` from opset 15).
    fn shape(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let dims = self.dims(ctx)?;
        let out = ctx.output()?;
        let end = ctx.attr("end").map(|_| ctx.int("end", 0)).transpose()?;
        let c = fold::shape_of(&dims, ctx.int("start", 0)?, end, out);
        self.values.insert(out.into(), Value::Const(Rc::new(c)));
        Ok(())
    }

    /// Whether every input the node gives is a constant.
    fn all_constant(&self, ctx: &Ctx) -> Result<bool, OnnxError> {
        for name in ctx.node.input.iter().filter(|n| !n.is_empty()) {
            if !matches!(self.value(ctx, name)?, Value::Const(_)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Evaluates a node of constants now (see [`fold`]).
    fn fold(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let inputs = (0..ctx.node.input.len())
            .map(|i| self.constant(ctx, i))
            .collect::<Result<Vec<_>, _>>()?;
        let out = ctx.output()?;
        let int = |name: &str| ctx.attr(name).and_then(|a| a.i);
        let node = fold::FoldNode {
            op_type: ctx.op_type,
            out,
            int: &int,
            ints: ctx.ints("perm"),
            tensor: ctx.attr("value").and_then(|a| a.t.as_ref()),
        };
        let c = fold::eval(&node, &inputs).map_err(|e| ctx.err(e))?;
        self.values.insert(out.into(), Value::Const(Rc::new(c)));
        Ok(())
    }

    /// `Cast` of a computed tensor to float: the identity (sprout computes in f32).
    fn cast(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let to = ctx.int("to", 0)?;
        if to != i64::from(proto::FLOAT) {
            return Err(ctx.err(format!(
                "a cast of a computed tensor to type {to} is not supported (to float, {}, is)",
                proto::FLOAT
            )));
        }
        let (x, dims) = self.act(ctx, 0)?;
        self.define(ctx.output()?, x, dims);
        Ok(())
    }

    fn dropout(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let p = if self.opset < 12 {
            ctx.float("ratio", 0.5)?
        } else {
            self.scalar(ctx, 1)?.unwrap_or(0.5)
        };
        if let Some(mode) = self.constant(ctx, 2)? {
            if mode.i64().map(|v| v.iter().any(|&b| b != 0)).unwrap_or(true) {
                return Err(ctx.err("training_mode must be a constant false"));
            }
        }
        if let Some(mask) = ctx.node.output.get(1).filter(|o| !o.is_empty()) {
            if self.uses.get(mask.as_str()).copied().unwrap_or(0) > 0 {
                return Err(
                    ctx.err(format!("the mask output '{mask}' is read: it is not supported"))
                );
            }
        }
        let out = ctx.output()?;
        // A seed that follows the node's name, so each dropout draws its own mask.
        let seed = out
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        let y = self.g.dropout(out, x, DropoutConfig { p, seed }).map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Identity` names its input again. Of a constant, it names a constant of its own:
    /// PyTorch's exporter replaces parameters that happen to be equal (biases initialised to
    /// zero) by an `Identity` of the first, and training must keep them apart.
    fn identity(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let out = ctx.output()?;
        let v = match self.value(ctx, ctx.input(0).unwrap_or(""))? {
            Value::Const(c) => Value::Const(Rc::new(Const {
                name: out.into(),
                dims: c.dims.clone(),
                data: c.data.clone(),
            })),
            v => v.clone(),
        };
        self.values.insert(out.into(), v);
        Ok(())
    }

    fn constant_node(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let out = ctx.output()?;
        let a = ctx.node.attribute.first().ok_or_else(|| ctx.err("has no value attribute"))?;
        let c = match a.name.as_deref().unwrap_or("") {
            "value" => {
                let t =
                    a.t.as_ref().ok_or_else(|| ctx.err("attribute 'value' must be a tensor"))?;
                let mut c = parse_tensor(t, out)?;
                c.name = out.into();
                c
            }
            "value_float" => Const {
                name: out.into(),
                dims: vec![],
                data: ConstData::F32(vec![ctx.float("value_float", 0.0)?]),
            },
            "value_floats" => Const {
                name: out.into(),
                dims: vec![a.floats.len()],
                data: ConstData::F32(a.floats.clone()),
            },
            "value_int" => Const {
                name: out.into(),
                dims: vec![],
                data: ConstData::I64(vec![ctx.int("value_int", 0)?]),
            },
            "value_ints" => Const {
                name: out.into(),
                dims: vec![a.ints.len()],
                data: ConstData::I64(a.ints.clone()),
            },
            other => return Err(ctx.err(format!("attribute '{other}' is not supported"))),
        };
        debug_assert!(
            matches!(&c.data, ConstData::F32(v) if v.len() == c.numel())
                || matches!(&c.data, ConstData::I64(v) if v.len() == c.numel())
        );
        self.values.insert(out.into(), Value::Const(Rc::new(c)));
        Ok(())
    }
}

/// Refuses a per-channel constant (bias, batch-norm scale, ...) not of shape `[len]` or `[1, len]`.
fn check_vector(ctx: &Ctx, c: &Const, len: usize) -> Result<(), OnnxError> {
    match c.dims.as_slice() {
        [n] | [1, n] if *n == len => Ok(()),
        _ => Err(ctx.err(format!("'{}' must have shape [{len}], it has {:?}", c.name, c.dims))),
    }
}

/// Each index tuple of a `GatherND` (the last axis of `indices`) as a position in the
/// row-major block of axes of `sizes` (negative indices count from the end).
fn flat_positions(indices: &[i64], sizes: &[usize]) -> Result<Vec<usize>, String> {
    indices
        .chunks_exact(sizes.len())
        .map(|tuple| {
            tuple.iter().zip(sizes).try_fold(0usize, |at, (&i, &size)| {
                let j = if i < 0 { i + size as i64 } else { i };
                match usize::try_from(j).ok().filter(|&j| j < size) {
                    Some(j) => Ok(at * size + j),
                    None => Err(format!("index {i} is out of range for an axis of size {size}")),
                }
            })
        })
        .collect()
}

/// `positions` as runs `(start, length)` of neighbours in increasing order.
fn runs(positions: &[usize]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &p in positions {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == p => *len += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}

/// The NCHW dims before `pads` `[top, left, bottom, right]` were added.
fn unpadded(dims: &[usize], pads: [usize; 4]) -> Vec<usize> {
    vec![dims[0], dims[1], dims[2] - pads[0] - pads[2], dims[3] - pads[1] - pads[3]]
}
