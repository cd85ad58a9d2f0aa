//! Post-training int8 conversion: a float graph rewritten as int8 ops, batch norms folded and
//! clamps fused, other activations as look-up tables, with per-channel weights and
//! calibrated per-tensor activations. A batch norm with no convolution before it (DenseNet's
//! and pre-activation ResNets' batch norm -> ReLU -> convolution) becomes a depthwise 1x1
//! int8 convolution, its per-channel scale the weights.
//!
//! The int8 scheme and kernels it targets are [`crate::quant`].
//!
//! Float ops without an int8 kernel (the loss, layers kept in float, activations with no
//! int8 form) read dequantized values, and each one an int8 value reaches is reported as a
//! [`FloatFallback`]; a layer whose weights cannot be int8 (a dilated kernel, weights the
//! graph computes) is an error, unless [`QuantizeOptions::allow_float`] keeps it in float
//! too.

use crate::graph::{Graph, GraphError, Node, TensorInfo};
use crate::hyperparams::BatchNormConfig;
use crate::op::ConvParams;
use crate::ops::{
    Int8Clamp, Int8Form, Int8Layer, Int8Same, Int8Weights, Op, QAddParams, QConcatParams,
    QConvParams, QLinearParams, QLutParams, QMulParams,
};
use crate::quant::{
    lut_table, quantize_weight, symmetric_scale, AddRescale, ConcatRescale, MulRescale, QuantError,
    QuantParams, Requantize, Rescale, FULL_RANGE,
};
use crate::shape::Shape;
use crate::tensor::{DType, TensorId};
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// The observed `(min, max)` of float tensors over a calibration set, by tensor name.
pub type Ranges = BTreeMap<String, (f32, f32)>;

/// What to quantize and how.
#[derive(Clone, Debug, Default)]
pub struct QuantizeOptions {
    /// Weight names of convolutions and dense layers that stay float (a head to train).
    pub keep_float: BTreeSet<String>,
    /// Weight names of int8 layers whose weights and bias stay trainable, kept in integer
    /// units and rounded each forward pass.
    pub trainable: BTreeSet<String>,
    /// Quantization-aware scaling of the trainable int8 layers' gradients.
    pub qas: bool,
    /// Layers whose weights cannot be int8 (a dilated kernel, weights the graph computes) run
    /// in float instead of refusing the model.
    pub allow_float: bool,
    /// Amounts added to int8 layers' float biases before rounding, one per output channel,
    /// by the name of the tensor the layer outputs (empirical bias correction).
    pub bias_shift: BTreeMap<String, Vec<f32>>,
}

/// A graph rewritten in int8, and the ops that stayed float on int8 input.
pub struct Quantized {
    pub graph: Graph,
    pub float_fallbacks: Vec<FloatFallback>,
    /// Its int8 convolutions and dense layers, in graph order.
    pub layers: Vec<QuantizedLayer>,
}

/// An int8 convolution or dense layer, as the float and the int8 graph hold it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedLayer {
    /// The index of its convolution or dense node in the float graph.
    pub node: usize,
    /// The name of the float tensor it outputs (after what fused into it).
    pub output: String,
    /// Its input in the float graph.
    pub float_input: TensorId,
    /// Its int8 input in the int8 graph, and that input's quantization.
    pub int8_input: (TensorId, QuantParams),
    /// Stride, padding and groups of a convolution; `None` for a dense layer.
    pub conv: Option<ConvParams>,
    /// The shape of its weights (`[O, C / groups, KH, KW]` or `[M, K]`).
    pub weight_shape: Shape,
    /// Its float weights with a batch norm folded in.
    pub float_weights: Vec<f32>,
    /// Its int8 weights, dequantized (`code · scale` of the channel).
    pub int8_weights: Vec<f32>,
}

/// An op of the float graph that an int8 value reaches but that runs in float, reading it
/// dequantized.
#[derive(Clone, Debug, PartialEq)]
pub struct FloatFallback {
    pub op: &'static str,
    pub node: String,
    pub reason: &'static str,
}

/// Why a graph could not be quantized.
#[derive(Clone, Debug, PartialEq)]
pub enum QuantizeError {
    /// The calibration did not observe a tensor whose range the int8 graph needs.
    NoRange {
        tensor: String,
    },
    /// An op of the float graph has no int8 kernel and cannot stay float where it is.
    NoInt8Kernel {
        op: &'static str,
        node: String,
        detail: &'static str,
    },
    /// A layer's parameters cannot be quantized (non-finite range, scale or multiplier).
    Params {
        node: String,
        source: QuantError,
    },
    Graph(GraphError),
}

impl fmt::Display for QuantizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRange { tensor } => {
                write!(f, "the calibration recorded no range for '{tensor}'")
            }
            Self::NoInt8Kernel { op, node, detail } => {
                write!(f, "{op} '{node}' has no int8 kernel: {detail}")
            }
            Self::Params { node, source } => write!(f, "'{node}': {source}"),
            Self::Graph(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for QuantizeError {}

impl From<GraphError> for QuantizeError {
    fn from(e: GraphError) -> Self {
        QuantizeError::Graph(e)
    }
}

/// A tensor of the float graph as the int8 graph holds it.
#[derive(Clone, Copy, Debug)]
enum Value {
    Float(TensorId),
    Int8(TensorId, QuantParams),
}

/// Quantizes `model` (a float graph) with activation ranges from a calibration run.
pub fn quantize_graph(
    model: &Graph,
    ranges: &Ranges,
    options: &QuantizeOptions,
) -> Result<Quantized, QuantizeError> {
    let mut c = Converter {
        src: model,
        dst: Graph::new(model.seed()),
        values: vec![None; model.tensors().len()],
        consumers: consumers(model),
        ranges,
        options,
        float_fallbacks: Vec::new(),
        from_int8: vec![false; model.tensors().len()],
        layers: Vec::new(),
    };
    let nodes = model.nodes();
    let mut i = 0;
    while i < nodes.len() {
        i += c.convert(i)?;
    }
    Ok(Quantized { graph: c.dst, float_fallbacks: c.float_fallbacks, layers: c.layers })
}

/// For each tensor, the indices of the nodes that read it.
fn consumers(g: &Graph) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); g.tensors().len()];
    for (i, node) in g.nodes().iter().enumerate() {
        for t in node.inputs.iter().chain(&node.state) {
            out[t.index()].push(i);
        }
    }
    out
}

struct Converter<'a> {
    src: &'a Graph,
    dst: Graph,
    values: Vec<Option<Value>>,
    consumers: Vec<Vec<usize>>,
    ranges: &'a Ranges,
    options: &'a QuantizeOptions,
    float_fallbacks: Vec<FloatFallback>,
    /// Per source tensor: it held an int8 value, or a float op computed it from one.
    from_int8: Vec<bool>,
    layers: Vec<QuantizedLayer>,
}

/// An activation fused into the op before it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Activation {
    None,
    Relu,
    Relu6,
}

impl Activation {
    /// The activation `op` fuses into the op before it as, if it is one.
    fn of(op: Op) -> Option<Activation> {
        let Int8Form::Activation(clamp) = op.int8_form() else { return None };
        Some(match clamp {
            Int8Clamp::Relu => Activation::Relu,
            Int8Clamp::Relu6 => Activation::Relu6,
        })
    }

    /// The clamp bounds in output units.
    fn bounds(self, output: QuantParams) -> (i8, i8) {
        match self {
            Activation::None => FULL_RANGE,
            Activation::Relu => output.relu_bounds(),
            Activation::Relu6 => output.relu6_bounds(),
        }
    }
}

/// Where an int8 layer's weights come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LayerWeights {
    /// Its node's weight (and bias) operands.
    Operands,
    /// A standalone batch norm as a depthwise 1x1 convolution over `channels`: unit weights
    /// with the batch norm folded in.
    Unit { channels: usize },
}

/// A convolution or dense layer with what folds into it.
struct Layer<'n> {
    node: &'n Node,
    /// Its index in the float graph.
    index: usize,
    /// The int8 op it becomes.
    kind: Int8Layer,
    /// A batch norm folded into it, with its settings.
    batch_norm: Option<(&'n Node, BatchNormConfig)>,
    act: Activation,
    /// The float tensor the fused group produces.
    output: TensorId,
    /// Nodes the group spans.
    len: usize,
    weights: LayerWeights,
}

impl<'a> Converter<'a> {
    /// Converts the node at `i` (and what fuses into it); returns how many nodes it took.
    fn convert(&mut self, i: usize) -> Result<usize, QuantizeError> {
        let src: &'a Graph = self.src;
        let node = &src.nodes()[i];
        let input_is_int8 = node.inputs.first().is_some_and(|&t| self.is_int8(t));
        match node.op.int8_form() {
            Int8Form::Layer(kind) if !self.keeps_float(node) => {
                let layer = self.layer(i, kind);
                match self.int8_layer(&layer) {
                    Ok(()) => return Ok(layer.len),
                    Err(QuantizeError::NoInt8Kernel { detail, .. }) if self.options.allow_float => {
                        self.float_fallback(node, detail);
                        self.float_node(node)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            Int8Form::Add => {
                let (output, act, len) = self.fused_activation(i);
                let (a, pa) = self.int8(node.inputs[0])?;
                let (b, pb) = self.int8(node.inputs[1])?;
                let py = self.params_of(output)?;
                let rescale = AddRescale::new(pa, pb, py).map_err(|e| self.bad(node, e))?;
                let params = QAddParams { rescale, output: py, act: act.bounds(py) };
                let name = self.src.tensor(output).name.clone();
                let y = self.dst.qadd(&name, a, b, params)?;
                self.values[output.index()] = Some(Value::Int8(y, py));
                return Ok(len);
            }
            Int8Form::SameQuantization(same) if input_is_int8 => match same {
                Int8Same::MaxPool2d(p) => {
                    self.same_params(node, |g, name, x| g.qmax_pool2d(name, x, p))?;
                }
                Int8Same::AvgPool2d(p) => {
                    let zp = self.int8(node.inputs[0])?.1.zero_point;
                    self.same_params(node, |g, name, x| g.qavg_pool2d(name, x, p, zp))?;
                }
                Int8Same::GlobalAvgPool => {
                    self.same_params(node, |g, name, x| g.qglobal_avg_pool(name, x))?;
                }
                Int8Same::Reshape => {
                    let shape = self.src.shape(node.outputs[0]);
                    self.same_params(node, |g, name, x| {
                        g.record_as(name, Op::Reshape, vec![x], shape, DType::I8)
                    })?;
                }
                Int8Same::Slice(p) => {
                    let shape = self.src.shape(node.outputs[0]);
                    self.same_params(node, |g, name, x| {
                        g.record_as(name, Op::Slice(p), vec![x], shape, DType::I8)
                    })?;
                }
            },
            // Inference drops dropout; an int8 graph is an inference graph below its float part.
            Int8Form::Identity if input_is_int8 => {
                self.values[node.outputs[0].index()] = self.values[node.inputs[0].index()];
            }
            Int8Form::FoldedBatchNorm(config) if input_is_int8 => {
                let layer = self.standalone_batch_norm(i, config);
                self.int8_layer(&layer)?;
                return Ok(layer.len);
            }
            // Nothing before it to fuse into (a pooling, say): a clamp in the input's units.
            Int8Form::Activation(_) if input_is_int8 => {
                let act = Activation::of(node.op).unwrap_or(Activation::None);
                let p = self.int8(node.inputs[0])?.1;
                self.same_params(node, |g, name, x| g.qclamp(name, x, act.bounds(p)))?;
            }
            // An element-wise function: a table from the input's units to the output's.
            Int8Form::Table(f) if input_is_int8 => {
                let (x, input) = self.int8(node.inputs[0])?;
                let output = self.params_of(node.outputs[0])?;
                let codes = lut_table(|v| f.apply(v), input, output).map(i32::from).to_vec();
                let name = format!("{}.table", node.name);
                let table = self.dst.int_parameter(&name, Shape::d1(256), DType::I8, codes)?;
                let params = QLutParams { f, input, output };
                self.new_params(node, output, |g, name| g.qlut(name, x, table, params))?;
            }
            Int8Form::Mul if self.int8_operands(node) => {
                let (a, pa) = self.int8(node.inputs[0])?;
                let (b, pb) = self.int8(node.inputs[1])?;
                let py = self.params_of(node.outputs[0])?;
                let rescale = MulRescale::new(pa, pb, py).map_err(|e| self.bad(node, e))?;
                let params = QMulParams { rescale, a: pa, b: pb };
                self.new_params(node, py, |g, name| g.qmul(name, a, b, params))?;
            }
            Int8Form::Concat(p) if self.int8_operands(node) => {
                let (a, pa) = self.int8(node.inputs[0])?;
                let (b, pb) = self.int8(node.inputs[1])?;
                let py = self.params_of(node.outputs[0])?;
                let moved = |x| Rescale::new(x, py).map_err(|e| self.bad(node, e));
                let rescale = ConcatRescale { a: moved(pa)?, b: moved(pb)? };
                let params = QConcatParams { axis: p.axis, rescale };
                self.new_params(node, py, |g, name| g.qconcat(name, a, b, params))?;
            }
            // Kept float: weights the caller keeps in float, ops on float input, float ops.
            form @ (Int8Form::Layer(_)
            | Int8Form::SameQuantization(_)
            | Int8Form::Identity
            | Int8Form::FoldedBatchNorm(_)
            | Int8Form::Activation(_)
            | Int8Form::Table(_)
            | Int8Form::Mul
            | Int8Form::Concat(_)
            | Int8Form::Float) => {
                let from_int8 =
                    node.inputs.iter().any(|&t| self.is_int8(t) || self.from_int8[t.index()]);
                if from_int8 && !matches!(node.op, Op::CrossEntropy | Op::Mse) {
                    let reason = match form {
                        Int8Form::Layer(_) => "its weights are kept in float as asked",
                        Int8Form::Float => "it has no int8 kernel",
                        _ => "its input is float",
                    };
                    self.float_fallback(node, reason);
                }
                self.float_node(node)?
            }
        }
        Ok(1)
    }

    /// Reports `node` as running in float on (what came from) int8 values, for `reason`.
    fn float_fallback(&mut self, node: &Node, reason: &'static str) {
        for &t in &node.outputs {
            self.from_int8[t.index()] = true;
        }
        let (op, node) = (node.op.kind(), node.name.clone());
        self.float_fallbacks.push(FloatFallback { op, node, reason });
    }

    /// Whether a node of several operands runs in int8: one operand is int8 and every
    /// other one is int8 or has a calibrated range to be quantized with.
    fn int8_operands(&self, node: &Node) -> bool {
        let ready =
            |&t: &TensorId| self.is_int8(t) || self.ranges.contains_key(&self.src.tensor(t).name);
        node.inputs.iter().any(|&t| self.is_int8(t)) && node.inputs.iter().all(ready)
    }

    fn keeps_float(&self, node: &Node) -> bool {
        self.options.keep_float.contains(&self.src.tensor(node.inputs[1]).name)
    }

    fn is_int8(&self, t: TensorId) -> bool {
        matches!(self.values[t.index()], Some(Value::Int8(..)))
    }

    fn bad(&self, node: &Node, source: QuantError) -> QuantizeError {
        QuantizeError::Params { node: node.name.clone(), source }
    }

    /// The ReLU or ReLU6 at node `at` when it is the sole reader of `t`, and its output.
    fn activation_at(&self, t: TensorId, at: usize) -> Option<(Activation, TensorId)> {
        if self.consumers[t.index()].as_slice() != [at] {
            return None;
        }
        let node = &self.src.nodes()[at];
        Some((Activation::of(node.op)?, node.outputs[0]))
    }

    /// Node `i`'s output with the activation after it fused when that is the next node and
    /// the sole reader: `(output, act, nodes spanned)`.
    fn fused_activation(&self, i: usize) -> (TensorId, Activation, usize) {
        let t = self.src.nodes()[i].outputs[0];
        match self.activation_at(t, i + 1) {
            Some((act, y)) => (y, act, 2),
            None => (t, Activation::None, 1),
        }
    }

    /// The layer at node `i` with a following batch norm and activation, when each is the
    /// sole reader of what comes before it (the nodes are then consecutive in the graph).
    fn layer(&self, i: usize, kind: Int8Layer) -> Layer<'a> {
        let src: &'a Graph = self.src;
        let nodes = src.nodes();
        let node = &nodes[i];
        let mut end = node.outputs[0];
        let mut len = 1;
        let mut batch_norm = None;
        let sole_reader = self.consumers[end.index()].as_slice() == [i + 1];
        if let (Int8Layer::Conv2d(_), true) = (kind, sole_reader) {
            if let Int8Form::FoldedBatchNorm(config) = nodes[i + 1].op.int8_form() {
                batch_norm = Some((&nodes[i + 1], config));
                end = nodes[i + 1].outputs[0];
                len += 1;
            }
        }
        let mut act = Activation::None;
        if let Some((fused, y)) = self.activation_at(end, i + len) {
            act = fused;
            end = y;
            len += 1;
        }
        Layer {
            node,
            index: i,
            kind,
            batch_norm,
            act,
            output: end,
            len,
            weights: LayerWeights::Operands,
        }
    }

    /// The batch norm at node `i`, over a 4-D input, as a depthwise 1x1 convolution with a
    /// following activation fused when it is the next node and the sole reader.
    fn standalone_batch_norm(&self, i: usize, config: BatchNormConfig) -> Layer<'a> {
        let src: &'a Graph = self.src;
        let node = &src.nodes()[i];
        let channels = src.shape(node.inputs[0]).dim(1).unwrap_or(0);
        let depthwise = ConvParams { stride: (1, 1), padding: (0, 0), groups: channels };
        let (output, act, len) = self.fused_activation(i);
        Layer {
            node,
            index: i,
            kind: Int8Layer::Conv2d(depthwise),
            batch_norm: Some((node, config)),
            act,
            output,
            len,
            weights: LayerWeights::Unit { channels },
        }
    }

    /// The calibrated int8 parameters of float tensor `t`.
    fn params_of(&self, t: TensorId) -> Result<QuantParams, QuantizeError> {
        let name = &self.src.tensor(t).name;
        let &(min, max) =
            self.ranges.get(name).ok_or_else(|| QuantizeError::NoRange { tensor: name.clone() })?;
        QuantParams::from_min_max(min, max)
            .map_err(|source| QuantizeError::Params { node: name.clone(), source })
    }

    /// `t` in the int8 graph as int8, quantizing a float value on the way in.
    fn int8(&mut self, t: TensorId) -> Result<(TensorId, QuantParams), QuantizeError> {
        match self.value(t)? {
            Value::Int8(id, p) => Ok((id, p)),
            Value::Float(id) => {
                let p = self.params_of(t)?;
                let name = format!("{}.quantized", self.src.tensor(t).name);
                let q = self.dst.quantize(&name, id, p)?;
                self.values[t.index()] = Some(Value::Int8(q, p));
                Ok((q, p))
            }
        }
    }

    /// `t` in the int8 graph as float, dequantizing an int8 value on the way out.
    fn float(&mut self, t: TensorId) -> Result<TensorId, QuantizeError> {
        match self.value(t)? {
            Value::Float(id) => Ok(id),
            Value::Int8(id, p) => {
                self.from_int8[t.index()] = true;
                let name = format!("{}.dequantized", self.src.tensor(t).name);
                let f = self.dst.dequantize(&name, id, p)?;
                // Later float readers share this one.
                self.values[t.index()] = Some(Value::Float(f));
                Ok(f)
            }
        }
    }

    /// The int8 graph's value of `t`; leaves are copied over on first use.
    fn value(&mut self, t: TensorId) -> Result<Value, QuantizeError> {
        if let Some(v) = self.values[t.index()] {
            return Ok(v);
        }
        let info: TensorInfo = self.src.tensor(t).clone();
        let id = self.dst.add_tensor(info)?;
        self.values[t.index()] = Some(Value::Float(id));
        Ok(Value::Float(id))
    }

    /// Re-records a float node over float operands.
    fn float_node(&mut self, node: &Node) -> Result<(), QuantizeError> {
        let inputs = node.inputs.iter().map(|&t| self.float(t)).collect::<Result<Vec<_>, _>>()?;
        let state = node.state.iter().map(|&t| self.float(t)).collect::<Result<Vec<_>, _>>()?;
        let specs = node
            .outputs
            .iter()
            .map(|&t| {
                let info = self.src.tensor(t);
                crate::builder::OutputSpec {
                    name: info.name.clone(),
                    shape: info.shape,
                    dtype: info.dtype,
                    role: info.role,
                }
            })
            .collect();
        let ids = self.dst.record(&node.name, node.op, inputs, state, specs, node.phase)?;
        for (&t, id) in node.outputs.iter().zip(ids) {
            self.values[t.index()] = Some(Value::Float(id));
        }
        Ok(())
    }

    /// An int8 op whose output keeps its input's quantization.
    fn same_params(
        &mut self,
        node: &Node,
        record: impl FnOnce(&mut Graph, &str, TensorId) -> Result<TensorId, GraphError>,
    ) -> Result<(), QuantizeError> {
        let (x, p) = self.int8(node.inputs[0])?;
        let y = node.outputs[0];
        let name = self.src.tensor(y).name.clone();
        let id = record(&mut self.dst, &name, x)?;
        self.values[y.index()] = Some(Value::Int8(id, p));
        Ok(())
    }

    /// An int8 op whose output has quantization `params` of its own.
    fn new_params(
        &mut self,
        node: &Node,
        params: QuantParams,
        record: impl FnOnce(&mut Graph, &str) -> Result<TensorId, GraphError>,
    ) -> Result<(), QuantizeError> {
        let y = node.outputs[0];
        let name = self.src.tensor(y).name.clone();
        let id = record(&mut self.dst, &name)?;
        self.values[y.index()] = Some(Value::Int8(id, params));
        Ok(())
    }

    /// Rewrites a convolution or dense layer (with its folded batch norm and fused
    /// activation) as one int8 op.
    fn int8_layer(&mut self, layer: &Layer<'_>) -> Result<(), QuantizeError> {
        let node = layer.node;
        // Before anything is recorded: a layer that cannot be int8 may run in float instead.
        let (float_weights, mut bias) = self.folded_weights(layer)?;
        let (x, input) = self.int8(node.inputs[0])?;
        let output = self.params_of(layer.output)?;
        let name = self.src.tensor(layer.output).name.clone();
        if let Some(shift) = self.options.bias_shift.get(&name) {
            bias.iter_mut().zip(shift).for_each(|(b, s)| *b += s);
        }
        let channels = bias.len();
        let per_channel = float_weights.len() / channels.max(1);
        let mut codes = vec![0i32; float_weights.len()];
        let mut scales = vec![0f32; channels];
        let mut biases = vec![0i32; channels];
        let mut requant = vec![0i32; 2 * channels];
        for o in 0..channels {
            let w = &float_weights[o * per_channel..][..per_channel];
            let scale = symmetric_scale(w.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            for (q, &v) in codes[o * per_channel..][..per_channel].iter_mut().zip(w) {
                *q = i32::from(quantize_weight(v, scale));
            }
            scales[o] = scale;
            biases[o] =
                libm::round(f64::from(bias[o]) / (f64::from(input.scale) * f64::from(scale)))
                    as i32;
            let r = Requantize::from_scales(input.scale, scale, output.scale)
                .map_err(|e| self.bad(node, e))?;
            requant[2 * o] = r.multiplier;
            requant[2 * o + 1] = r.shift;
        }
        let int8_weights = (codes.iter().enumerate())
            .map(|(i, &q)| q as f32 * scales[i / per_channel.max(1)])
            .collect();
        let (w_name, w_shape) = match layer.weights {
            LayerWeights::Operands => {
                let w_info = self.src.tensor(node.inputs[1]);
                match w_info.init {
                    Some(_) => (w_info.name.clone(), w_info.shape),
                    // A view of a weight: the float view keeps its name.
                    None => (format!("{}.weight", node.name), w_info.shape),
                }
            }
            LayerWeights::Unit { channels } => {
                (format!("{}.weight", node.name), Shape::d4(channels, 1, 1, 1))
            }
        };
        let bias_name = format!("{}.bias", node.name);
        let g = &mut self.dst;
        let weight_scale = g.parameter(
            &format!("{}.weight_scale", node.name),
            Shape::d1(channels),
            crate::graph::Init::Values(scales),
        )?;
        let requant = g.int_parameter(
            &format!("{}.requant", node.name),
            Shape::d2(channels, 2),
            DType::I32,
            requant,
        )?;
        let (weight, bias) = if self.options.trainable.contains(&w_name) {
            let as_f32 = |v: &[i32]| v.iter().map(|&q| q as f32).collect();
            let w_bar =
                g.parameter(&w_name, w_shape, crate::graph::Init::Values(as_f32(&codes)))?;
            let b_bar = g.parameter(
                &bias_name,
                Shape::d1(channels),
                crate::graph::Init::Values(as_f32(&biases)),
            )?;
            let qas = self.options.qas;
            let weight = g.round_weights(&format!("{w_name}.int8"), w_bar, weight_scale, qas)?;
            let bias =
                g.round_bias(&format!("{bias_name}.int32"), b_bar, weight_scale, input.scale, qas)?;
            (weight, bias)
        } else {
            let weight = g.int_parameter(&w_name, w_shape, DType::I8, codes)?;
            let bias = g.int_parameter(&bias_name, Shape::d1(channels), DType::I32, biases)?;
            (weight, bias)
        };
        let weights = Int8Weights { weight, bias, requant, weight_scale };
        let act = layer.act.bounds(output);
        let (y, conv) = match layer.kind {
            Int8Layer::Conv2d(conv) => {
                let params = QConvParams { conv, input, output, act };
                (g.qconv2d(&name, x, weights, params)?, Some(conv))
            }
            Int8Layer::Linear => {
                (g.qlinear(&name, x, weights, QLinearParams { input, output, act })?, None)
            }
        };
        self.values[layer.output.index()] = Some(Value::Int8(y, output));
        self.layers.push(QuantizedLayer {
            node: layer.index,
            output: name,
            float_input: node.inputs[0],
            int8_input: (x, input),
            conv,
            weight_shape: w_shape,
            float_weights,
            int8_weights,
        });
        Ok(())
    }

    /// The layer's float weights and bias with its batch norm folded in:
    /// `w'[o] = w[o] · γ[o] / √(σ²[o] + ε)`, `b'[o] = (b[o] − μ[o]) · γ[o] / √(σ²[o] + ε) + β[o]`.
    fn folded_weights(&self, layer: &Layer<'_>) -> Result<(Vec<f32>, Vec<f32>), QuantizeError> {
        let values = |t: TensorId| -> Result<Vec<f32>, QuantizeError> {
            // A weight viewed under another shape (a reshape of it) holds its values.
            let viewed = self.src.nodes().iter().find(|n| n.op == Op::Reshape && n.outputs[0] == t);
            let info = self.src.tensor(viewed.map_or(t, |n| n.inputs[0]));
            let init = info.init.as_ref().ok_or_else(|| QuantizeError::NoInt8Kernel {
                op: layer.node.op.kind(),
                node: layer.node.name.clone(),
                detail: match self.src.kernel_dilation(t) {
                    Some(_) => "its kernel is dilated, which int8 convolutions do not support",
                    None => "its weights are computed, not parameters",
                },
            })?;
            Ok(init.materialize(info.shape.numel()))
        };
        let node = layer.node;
        let (mut w, mut b, channels) = match layer.weights {
            LayerWeights::Unit { channels } => (vec![1.0; channels], vec![0.0; channels], channels),
            LayerWeights::Operands => {
                let channels = self.src.shape(node.inputs[1]).dim(0).unwrap_or(0);
                let b = match node.inputs.get(2) {
                    Some(&t) => values(t)?,
                    None => vec![0.0; channels],
                };
                (values(node.inputs[1])?, b, channels)
            }
        };
        if let Some((bn, cfg)) = layer.batch_norm {
            let (gamma, beta) = (values(bn.inputs[1])?, values(bn.inputs[2])?);
            let (mean, var) = (values(bn.state[0])?, values(bn.state[1])?);
            let per_channel = w.len() / channels.max(1);
            for o in 0..channels {
                let k = gamma[o] / libm::sqrtf(var[o] + cfg.eps);
                w[o * per_channel..][..per_channel].iter_mut().for_each(|v| *v *= k);
                b[o] = (b[o] - mean[o]) * k + beta[o];
            }
        }
        Ok((w, b))
    }
}
