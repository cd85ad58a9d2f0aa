//! ONNX → sprout: decodes a `ModelProto` and records its graph with sprout's builder, one
//! ONNX node at a time, keeping initializer names as sprout weight names.

use crate::error::{malformed, tensor_error, OnnxError};
use crate::metadata::read_metadata_props;
use crate::proto::{self, tensor_shape_proto::dimension, type_proto, AttributeProto, NodeProto};
use prost::Message;
use sprout_core::format::{Metadata, ModelFile, Preprocessing};
use sprout_core::hyperparams::{BatchNormConfig, DropoutConfig};
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::{Graph, GraphError, Init, Shape, TensorId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The most elements one initializer or constant may announce (1 Gi values, 4 GiB as f32).
const MAX_ELEMENTS: usize = 1 << 30;

/// How to import.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Samples per batch the graph is recorded for. `None`: the input's first dimension
    /// when it is fixed, 1 when it is symbolic (a dynamic batch axis).
    pub batch: Option<usize>,
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
    let graph = model.graph.as_ref().ok_or_else(|| malformed("the model has no graph"))?;
    let mut importer = Importer::new(graph, opset);
    let input = importer.input(graph, options)?;
    for (index, node) in graph.node.iter().enumerate() {
        if !importer.fused.contains(&index) {
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
struct Const {
    name: String,
    dims: Vec<usize>,
    data: ConstData,
}

#[derive(Debug)]
enum ConstData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl Const {
    fn f32(&self) -> Result<&[f32], OnnxError> {
        match &self.data {
            ConstData::F32(v) => Ok(v),
            ConstData::I64(_) => Err(tensor_error(&self.name, "must be float, it is an integer")),
        }
    }

    fn i64(&self) -> Result<&[i64], OnnxError> {
        match &self.data {
            ConstData::I64(v) => Ok(v),
            ConstData::F32(_) => Err(tensor_error(&self.name, "must be an integer, it is float")),
        }
    }

    fn numel(&self) -> usize {
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
}

/// Decodes a tensor's dims and data (float, double, int32, int64 or bool), refusing data
/// whose length differs from what the dims announce.
fn parse_tensor(t: &proto::TensorProto, fallback_name: &str) -> Result<Const, OnnxError> {
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

impl Ctx<'_> {
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

    /// Symmetric `pads` `[top, left, bottom, right]` as `(h, w)`, honouring `auto_pad`.
    fn pads(&self) -> Result<(usize, usize), OnnxError> {
        match self.string("auto_pad").as_deref() {
            None | Some("") | Some("NOTSET") => {}
            Some("VALID") => return Ok((0, 0)),
            Some(other) => {
                return Err(self.err(format!(
                    "auto_pad '{other}' is not supported (NOTSET with explicit pads, or VALID)"
                )))
            }
        }
        match self.ints("pads") {
            None => Ok((0, 0)),
            Some([t, l, b, r]) if t == b && l == r && *t >= 0 && *l >= 0 => {
                Ok((*t as usize, *l as usize))
            }
            Some(p @ [_, _, _, _]) => Err(self.err(format!(
                "pads {p:?} are asymmetric: only [top, left, bottom, right] with top = bottom and left = right is supported"
            ))),
            Some(p) => Err(self.err(format!("pads must hold 4 values (2-D), it holds {p:?}"))),
        }
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
    /// Nodes folded into an earlier one (an `Add` bias into its `MatMul`).
    fused: HashSet<usize>,
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
        }
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
        }
    }

    /// Input `i` as a constant (initializer or `Constant` output), if present.
    fn constant(&self, ctx: &Ctx, i: usize) -> Result<Option<Rc<Const>>, OnnxError> {
        let Some(name) = ctx.input(i) else { return Ok(None) };
        match self.value(ctx, name)? {
            Value::Const(c) => Ok(Some(c.clone())),
            Value::Tensor { .. } => Err(ctx.err(format!(
                "input {i} '{name}' must be an initializer or constant, it is computed"
            ))),
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
        let values = c.f32()?.to_vec();
        let ok = matches!(c.dims.as_slice(), [n] if *n == len)
            || matches!(c.dims.as_slice(), [1, n] if *n == len);
        if !ok {
            return Err(
                ctx.err(format!("'{}' must have shape [{len}], it has {:?}", c.name, c.dims))
            );
        }
        self.weight(c, Shape::d1(len), values, buffer)
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
        let op_type = node.op_type.as_deref().unwrap_or("");
        let name = match node.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match node.output.first().filter(|o| !o.is_empty()) {
                Some(o) => format!("{op_type} #{index} -> {o}"),
                None => format!("{op_type} #{index}"),
            },
        };
        let ctx = Ctx { op_type, name, node };
        if !matches!(node.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
            return Err(OnnxError::UnsupportedOp {
                op_type: format!("{}.{op_type}", node.domain.as_deref().unwrap_or("")),
                node_name: ctx.name.clone(),
            });
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
            "LeakyRelu" => {
                let alpha = ctx.float("alpha", 0.01)?;
                self.unary(&ctx, |g, name, x| g.leaky_relu(name, x, alpha))
            }
            "Mul" => self.mul(&ctx),
            "Clip" => self.clip(&ctx),
            "MaxPool" | "AveragePool" => self.pool(&ctx),
            "GlobalAveragePool" => self.global_pool(&ctx),
            "BatchNormalization" => self.batch_norm(&ctx),
            "Add" => self.add(&ctx),
            "Flatten" => self.flatten(&ctx),
            "Reshape" => self.reshape(&ctx),
            "Softmax" => self.softmax(&ctx),
            "Dropout" => self.dropout(&ctx),
            "Identity" => {
                let v = self.value(&ctx, ctx.input(0).unwrap_or(""))?.clone();
                self.values.insert(ctx.output()?.into(), v);
                Ok(())
            }
            "Constant" => self.constant_node(&ctx),
            _ => Err(OnnxError::UnsupportedOp {
                op_type: op_type.into(),
                node_name: ctx.name.clone(),
            }),
        }
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
        let (x, dims) = self.act(ctx, 0)?;
        if dims.len() != 4 {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        }
        let w = self.required_constant(ctx, 1)?;
        let [o, cg, kh, kw] = w.dims[..] else {
            return Err(ctx.err(format!(
                "weight '{}' must be 4-D (OIHW), it has shape {:?}",
                w.name, w.dims
            )));
        };
        ctx.no_dilation()?;
        if let Some(k) = ctx.ints("kernel_shape") {
            if k != [kh as i64, kw as i64] {
                return Err(
                    ctx.err(format!("kernel_shape {k:?} differs from the weight's [{kh}, {kw}]"))
                );
            }
        }
        let groups = ctx.int("group", 1)?;
        let params = ConvParams {
            stride: ctx.pair("strides", Some((1, 1)))?,
            padding: ctx.pads()?,
            groups: usize::try_from(groups)
                .map_err(|_| ctx.err(format!("group {groups} must be positive")))?,
        };
        let out = ctx.output()?;
        let x = self.view(ctx, x, &dims, out)?;
        let wt = self.weight(&w, Shape::d4(o, cg, kh, kw), w.f32()?.to_vec(), false)?;
        let b = match self.constant(ctx, 2)? {
            Some(b) => Some(self.vector(ctx, &b, o, false)?),
            None => None,
        };
        let y = self.g.conv2d(out, x, wt, b, params).map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    /// A `[K, M]` constant as a `[M, K]` weight (PyTorch's `nn.Linear` layout).
    fn transposed(&mut self, ctx: &Ctx, w: &Const) -> Result<TensorId, OnnxError> {
        let [k, m] = w.dims[..] else {
            return Err(
                ctx.err(format!("weight '{}' must be 2-D, it has shape {:?}", w.name, w.dims))
            );
        };
        let v = w.f32()?;
        let t = (0..m * k).map(|i| v[(i % k) * m + i / k]).collect();
        self.weight(w, Shape::d2(m, k), t, false)
    }

    fn linear_input(&self, ctx: &Ctx) -> Result<(TensorId, usize), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        match dims[..] {
            [_, k] if self.g.shape(x).rank() == 2 => Ok((x, k)),
            _ => Err(ctx.err(format!(
                "input must be 2-D [batch, features] (add a Flatten first), it has shape {dims:?}"
            ))),
        }
    }

    fn gemm(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, k) = self.linear_input(ctx)?;
        let (alpha, beta) = (ctx.float("alpha", 1.0)?, ctx.float("beta", 1.0)?);
        if alpha != 1.0 || beta != 1.0 {
            return Err(ctx.err(format!("alpha {alpha} and beta {beta} must both be 1")));
        }
        if ctx.int("transA", 0)? != 0 {
            return Err(ctx.err("transA = 1 is not supported: the input must be [batch, features]"));
        }
        let w = self.required_constant(ctx, 1)?;
        let trans_b = ctx.int("transB", 0)? != 0;
        let wt = if trans_b {
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
            self.weight(&w, Shape::d2(m, k), w.f32()?.to_vec(), false)?
        } else {
            if w.dims.first() != Some(&k) {
                return Err(ctx.err(format!(
                    "weight '{}' has shape {:?}: expected [{k}, N]",
                    w.name, w.dims
                )));
            }
            self.transposed(ctx, &w)?
        };
        let m = self.g.shape(wt).dims()[0];
        let b = match self.constant(ctx, 2)? {
            Some(c) => Some(self.vector(ctx, &c, m, false)?),
            None => None,
        };
        let out = ctx.output()?;
        let y = self.g.linear(out, x, wt, b).map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    /// `MatMul` by a constant `[K, M]`; an `Add` of an `[M]` constant that is the only
    /// reader of the product becomes the bias.
    fn matmul(
        &mut self,
        ctx: &Ctx,
        graph: &'m proto::GraphProto,
        index: usize,
    ) -> Result<(), OnnxError> {
        let (x, k) = self.linear_input(ctx)?;
        let w = self.required_constant(ctx, 1)?;
        if w.dims.first() != Some(&k) || w.dims.len() != 2 {
            return Err(
                ctx.err(format!("weight '{}' has shape {:?}: expected [{k}, N]", w.name, w.dims))
            );
        }
        let wt = self.transposed(ctx, &w)?;
        let m = w.dims[1];
        let out = ctx.output()?;
        // Fuse `Add(out, bias)` when it is the product's only reader.
        let mut fused = None;
        if self.uses.get(out) == Some(&1) {
            let next = graph
                .node
                .iter()
                .enumerate()
                .skip(index + 1)
                .find(|(_, n)| n.input.iter().any(|i| i == out));
            if let Some((j, add)) = next {
                let is_add = add.op_type.as_deref() == Some("Add")
                    && matches!(add.domain.as_deref(), None | Some("") | Some("ai.onnx"))
                    && add.input.len() == 2
                    && add.output.first().is_some_and(|o| !o.is_empty());
                if is_add {
                    let other = if add.input[0] == out { &add.input[1] } else { &add.input[0] };
                    if let Some(Value::Const(c)) = self.values.get(other.as_str()) {
                        let shape_ok = matches!(c.dims[..], [n] if n == m)
                            || matches!(c.dims[..], [1, n] if n == m);
                        if shape_ok && c.f32().is_ok() {
                            fused = Some((j, c.clone(), add.output[0].clone()));
                        }
                    }
                }
            }
        }
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

    fn clip(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (min, max) = if self.opset < 11 {
            let min = ctx.attr("min").map(|_| ctx.float("min", 0.0)).transpose()?;
            let max = ctx.attr("max").map(|_| ctx.float("max", 0.0)).transpose()?;
            (min, max)
        } else {
            (self.scalar(ctx, 1)?, self.scalar(ctx, 2)?)
        };
        let op = match (min, max) {
            (Some(lo), Some(hi)) if lo == 0.0 && hi == 6.0 => Graph::relu6,
            (Some(0.0), None) => Graph::relu,
            (Some(lo), Some(hi)) if lo == 0.0 && hi == f32::INFINITY => Graph::relu,
            _ => {
                return Err(ctx.err(format!(
                    "only Clip(min 0, max 6) (ReLU6) and Clip(min 0) (ReLU) are supported, found min {min:?} and max {max:?}"
                )))
            }
        };
        self.unary(ctx, op)
    }

    fn pool(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        if dims.len() != 4 {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        }
        if ctx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
            return Err(ctx.err("the Indices output is not supported"));
        }
        if ctx.int("ceil_mode", 0)? != 0 {
            return Err(ctx.err("ceil_mode = 1 is not supported"));
        }
        if ctx.int("storage_order", 0)? != 0 {
            return Err(ctx.err("storage_order = 1 is not supported"));
        }
        ctx.no_dilation()?;
        let params = PoolParams {
            kernel: ctx.pair("kernel_shape", None)?,
            stride: ctx.pair("strides", Some((1, 1)))?,
            padding: ctx.pads()?,
            count_include_pad: ctx.int("count_include_pad", 0)? != 0,
        };
        let out = ctx.output()?;
        let x = self.view(ctx, x, &dims, out)?;
        let y = if ctx.op_type == "MaxPool" {
            self.g.max_pool2d(out, x, params)
        } else {
            self.g.avg_pool2d(out, x, params)
        }
        .map_err(ctx.graph())?;
        self.define_sprout(out, y);
        Ok(())
    }

    fn global_pool(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let [n, c, _, _] = dims[..] else {
            return Err(ctx.err(format!("input must be NCHW (4-D), it has shape {dims:?}")));
        };
        let out = ctx.output()?;
        let x = self.view(ctx, x, &dims, out)?;
        let y = self.g.global_avg_pool(out, x).map_err(ctx.graph())?;
        // sprout stores [N, C]; ONNX says [N, C, 1, 1].
        self.define(out, y, vec![n, c, 1, 1]);
        Ok(())
    }

    fn batch_norm(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let [_, c, _, _] = dims[..] else {
            return Err(ctx.err(format!(
                "only 4-D (NCHW, BatchNorm2d) input is supported, it has shape {dims:?}"
            )));
        };
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
        let x = self.view(ctx, x, &dims, out)?;
        let mut ids = [TensorId(0); 4];
        for (slot, i) in ids.iter_mut().zip(1..) {
            let cst = self.required_constant(ctx, i)?;
            *slot = self.vector(ctx, &cst, c, i >= 3)?;
        }
        // ONNX weighs the running value by `momentum`, sprout (as PyTorch) the new batch.
        let cfg = BatchNormConfig { eps, momentum: 1.0 - momentum };
        let y = self
            .g
            .batch_norm2d(out, x, ids[0], ids[1], ids[2], ids[3], cfg)
            .map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    fn add(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let ((a, ad), (b, bd)) = self.computed_operands(ctx, |c| {
            format!("adds the constant '{c}' to a computed tensor: sprout imports a constant Add only as the bias of the MatMul it directly follows")
        })?;
        if ad != bd {
            return Err(ctx.err(format!(
                "operands must have the same shape (no broadcasting), they have {ad:?} and {bd:?}"
            )));
        }
        let out = ctx.output()?;
        let a = self.view(ctx, a, &ad, &format!("{out}.a"))?;
        let b = self.view(ctx, b, &bd, &format!("{out}.b"))?;
        let y = self.g.add(out, a, b).map_err(ctx.graph())?;
        self.define(out, y, ad);
        Ok(())
    }

    /// `Mul` of two computed tensors of the same shape, or of a `[N, C, ...]` tensor and a
    /// `[N, C, 1, ...]` factor on either side (squeeze-excitation's channel scale).
    fn mul(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let ((a, ad), (b, bd)) = self.computed_operands(ctx, |c| {
            format!("multiplies by the constant '{c}': sprout's Mul takes two tensors computed from the graph input")
        })?;
        // ONNX broadcasts from the right: only equal ranks keep N and C aligned.
        if ad.len() != bd.len() {
            return Err(ctx.err(format!(
                "operands must have the same rank (broadcasting supports a per-channel [N, C, 1, 1] factor only), they have {ad:?} and {bd:?}"
            )));
        }
        let out = ctx.output()?;
        let dims = if ad.iter().product::<usize>() >= bd.iter().product::<usize>() {
            ad.clone()
        } else {
            bd.clone()
        };
        let a = self.view(ctx, a, &ad, &format!("{out}.a"))?;
        let b = self.view(ctx, b, &bd, &format!("{out}.b"))?;
        let y = self.g.mul(out, a, b).map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    /// Both operands of a binary element-wise node, each computed from the graph input; a
    /// constant operand is refused with the message `refuse` writes for its name.
    #[allow(clippy::type_complexity)]
    fn computed_operands(
        &self,
        ctx: &Ctx,
        refuse: impl Fn(&str) -> String,
    ) -> Result<((TensorId, Vec<usize>), (TensorId, Vec<usize>)), OnnxError> {
        let names = [ctx.input(0).unwrap_or(""), ctx.input(1).unwrap_or("")];
        for n in names {
            if let Value::Const(c) = self.value(ctx, n)? {
                return Err(ctx.err(refuse(&c.name)));
            }
        }
        Ok((self.act(ctx, 0)?, self.act(ctx, 1)?))
    }

    /// Defines `out` as `x` under ONNX shape `dims`, recording a reshape only when sprout
    /// stores `x` under another shape.
    fn reshaped(&mut self, ctx: &Ctx, x: TensorId, dims: Vec<usize>) -> Result<(), OnnxError> {
        let out = ctx.output()?;
        let shape = Shape::new(&dims).map_err(|e| ctx.err(e.to_string()))?;
        let y = if self.g.shape(x) == shape {
            x
        } else {
            self.g.reshape(out, x, shape).map_err(ctx.graph())?
        };
        self.define(out, y, dims);
        Ok(())
    }

    fn flatten(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let axis = ctx.int("axis", 1)?;
        let rank = dims.len() as i64;
        let axis = if axis < 0 { axis + rank } else { axis };
        if axis != 1 {
            return Err(ctx.err(format!(
                "only axis 1 ([N, ...] -> [N, rest]) is supported, found axis {axis} on shape {dims:?}"
            )));
        }
        let target = vec![dims[0], dims[1..].iter().product()];
        self.reshaped(ctx, x, target)
    }

    fn reshape(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let spec = self.required_constant(ctx, 1)?;
        let spec = spec.i64()?;
        let allow_zero = ctx.int("allowzero", 0)? != 0;
        let numel: usize = dims.iter().product();
        let mut target = Vec::with_capacity(spec.len());
        let mut infer = None;
        for (i, &s) in spec.iter().enumerate() {
            target.push(match s {
                0 if !allow_zero => *dims.get(i).ok_or_else(|| {
                    ctx.err(format!(
                        "shape {spec:?} copies dimension {i}, the input {dims:?} has none"
                    ))
                })?,
                -1 if infer.is_none() => {
                    infer = Some(i);
                    1
                }
                s if s > 0 => s as usize,
                _ => {
                    return Err(
                        ctx.err(format!("shape {spec:?} is not supported for input {dims:?}"))
                    )
                }
            });
        }
        let known: usize = target.iter().product();
        if let Some(i) = infer {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(ctx.err(format!("shape {spec:?} does not fit input {dims:?}")));
            }
            target[i] = numel / known;
        }
        if target.iter().product::<usize>() != numel {
            return Err(ctx.err(format!(
                "shape {spec:?} gives {target:?}, which does not hold the {numel} elements of {dims:?}"
            )));
        }
        self.reshaped(ctx, x, target)
    }

    fn softmax(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (_, dims) = self.act(ctx, 0)?;
        let default = if self.opset < 13 { 1 } else { -1 };
        let axis = ctx.int("axis", default)?;
        if dims.len() != 2 || !(axis == 1 || axis == -1) {
            return Err(ctx.err(format!(
                "only a 2-D input with axis 1 or -1 is supported, found axis {axis} on shape {dims:?}"
            )));
        }
        self.unary(ctx, Graph::softmax)
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
