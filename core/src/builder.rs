//! Recording ops: one method per forward op on [`Graph`], each checking its operands and
//! inferring the output shape, so mistakes surface where the model code makes them.

use crate::geometry::{window_output, BatchNormConfig, DropoutConfig};
use crate::graph::{Graph, GraphError, Init, Node, Phase, TensorInfo};
use crate::ops::{ConvParams, Op, PoolParams};
use crate::shape::Shape;
use crate::tensor::{DType, Role, TensorId};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};

/// One output of a node about to be recorded.
pub(crate) struct OutputSpec {
    pub name: String,
    pub shape: Shape,
    pub dtype: DType,
    pub role: Role,
}

impl OutputSpec {
    pub fn f32(name: String, shape: Shape, role: Role) -> Self {
        Self { name, shape, dtype: DType::F32, role }
    }
}

impl Graph {
    // ---- leaves ----

    /// A float input fed by the caller (images, features).
    pub fn input(&mut self, name: &str, shape: Shape) -> Result<TensorId, GraphError> {
        self.leaf(name, shape, DType::F32, Role::Input, None)
    }

    /// Class-index labels (`i32`, one per sample) fed by the caller.
    pub fn labels(&mut self, name: &str, batch: usize) -> Result<TensorId, GraphError> {
        self.leaf(name, Shape::d1(batch), DType::I32, Role::Label, None)
    }

    /// Float regression targets fed by the caller.
    pub fn target(&mut self, name: &str, shape: Shape) -> Result<TensorId, GraphError> {
        self.leaf(name, shape, DType::F32, Role::Label, None)
    }

    /// A parameter. It is frozen until `differentiate` is asked to train it.
    pub fn parameter(
        &mut self,
        name: &str,
        shape: Shape,
        init: Init,
    ) -> Result<TensorId, GraphError> {
        self.check_init(name, shape, &init)?;
        self.leaf(name, shape, DType::F32, Role::FrozenParam, Some(init))
    }

    /// Persistent non-trainable state, such as batch-norm running statistics.
    pub fn buffer(&mut self, name: &str, shape: Shape, init: Init) -> Result<TensorId, GraphError> {
        self.check_init(name, shape, &init)?;
        self.leaf(name, shape, DType::F32, Role::Buffer, Some(init))
    }

    pub(crate) fn check_init(
        &self,
        name: &str,
        shape: Shape,
        init: &Init,
    ) -> Result<(), GraphError> {
        match init.explicit_len() {
            Some(len) if len != shape.numel() => Err(GraphError::ValueLength {
                tensor: name.to_string(),
                expected: shape.numel(),
                actual: len,
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn leaf(
        &mut self,
        name: &str,
        shape: Shape,
        dtype: DType,
        role: Role,
        init: Option<Init>,
    ) -> Result<TensorId, GraphError> {
        self.add_tensor(TensorInfo { name: name.to_string(), shape, dtype, role, init })
    }

    // ---- forward ops ----

    /// `y = x · wᵀ + b` with `x[N,K]`, `w[M,K]`, `b[M]`.
    pub fn linear(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Linear;
        let shape = self.linear_shape(op, name, x, w, DType::F32)?;
        let mut inputs = vec![x, w];
        if let Some(b) = b {
            self.check_bias(op, name, b, shape.dims()[1])?;
            inputs.push(b);
        }
        self.record_one(name, op, inputs, shape)
    }

    /// A 2-D convolution with OIHW weights; `groups == channels` is depthwise.
    pub fn conv2d(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        params: ConvParams,
    ) -> Result<TensorId, GraphError> {
        let op = Op::Conv2d(params);
        let shape = self.conv_shape(op, name, x, w, params, DType::F32)?;
        let mut inputs = vec![x, w];
        if let Some(b) = b {
            self.check_bias(op, name, b, shape.dims()[1])?;
            inputs.push(b);
        }
        self.record_one(name, op, inputs, shape)
    }

    pub fn relu(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Relu, x)
    }

    pub fn relu6(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Relu6, x)
    }

    pub fn max_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        self.pool(name, Op::MaxPool2d(p), x, p)
    }

    pub fn avg_pool2d(
        &mut self,
        name: &str,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        self.pool(name, Op::AvgPool2d(p), x, p)
    }

    /// Mean over H and W: `[N,C,H,W] → [N,C]`.
    pub fn global_avg_pool(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float_rank(Op::GlobalAvgPool, name, x, 4)?;
        self.record_one(name, Op::GlobalAvgPool, vec![x], Shape::d2(xs.dims()[0], xs.dims()[1]))
    }

    /// Element-wise sum of two tensors of the same shape.
    pub fn add(&mut self, name: &str, a: TensorId, b: TensorId) -> Result<TensorId, GraphError> {
        let (as_, bs) = (self.float(Op::Add, name, a)?, self.float(Op::Add, name, b)?);
        if as_ != bs {
            return Err(mismatch(Op::Add, name, "operands must have the same shape", as_, bs));
        }
        self.record_one(name, Op::Add, vec![a, b], as_)
    }

    /// Batch normalisation over the channels of `x[N,C,H,W]`. `gamma`, `beta` are `[C]`
    /// parameters; `running_mean`, `running_var` are `[C]` buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm2d(
        &mut self,
        name: &str,
        x: TensorId,
        gamma: TensorId,
        beta: TensorId,
        running_mean: TensorId,
        running_var: TensorId,
        cfg: BatchNormConfig,
    ) -> Result<TensorId, GraphError> {
        let op = Op::BatchNorm2d(cfg);
        let xs = self.float_rank(op, name, x, 4)?;
        let c = xs.dims()[1];
        for t in [gamma, beta, running_mean, running_var] {
            self.check_bias(op, name, t, c)?;
        }
        let sane = cfg.eps.is_finite() && cfg.eps > 0.0 && (0.0..=1.0).contains(&cfg.momentum);
        if !sane {
            return Err(invalid(
                op,
                name,
                format!("eps {} must be > 0 and momentum {} in [0, 1]", cfg.eps, cfg.momentum),
            ));
        }
        let outputs = vec![
            OutputSpec::f32(name.to_string(), xs, Role::Activation),
            OutputSpec::f32(format!("{name}.saved_mean"), Shape::d1(c), Role::Scratch),
            OutputSpec::f32(format!("{name}.saved_invstd"), Shape::d1(c), Role::Scratch),
        ];
        let ids = self.record(
            name,
            op,
            vec![x, gamma, beta],
            vec![running_mean, running_var],
            outputs,
            Phase::MicroBatch,
        )?;
        Ok(ids[0])
    }

    /// Inverted dropout with drop probability `p`; identity in evaluation.
    pub fn dropout(
        &mut self,
        name: &str,
        x: TensorId,
        cfg: DropoutConfig,
    ) -> Result<TensorId, GraphError> {
        if !(0.0..1.0).contains(&cfg.p) {
            return Err(invalid(
                Op::Dropout(cfg),
                name,
                format!("p = {} must be in [0, 1)", cfg.p),
            ));
        }
        self.elementwise(name, Op::Dropout(cfg), x)
    }

    /// The same values under a new shape with as many elements.
    pub fn reshape(
        &mut self,
        name: &str,
        x: TensorId,
        shape: Shape,
    ) -> Result<TensorId, GraphError> {
        let xs = self.float(Op::Reshape, name, x)?;
        if xs.numel() != shape.numel() {
            return Err(mismatch(Op::Reshape, name, "element counts differ", xs, shape));
        }
        self.record_one(name, Op::Reshape, vec![x], shape)
    }

    /// `[N, ...] → [N, rest]`.
    pub fn flatten(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.check_id(x)?;
        let xs = self.shape(x);
        let n = xs.dim(0).unwrap_or(1);
        self.reshape(name, x, Shape::d2(n, xs.per_sample()))
    }

    /// Row-wise softmax of `x[N,C]`.
    pub fn softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float_rank(Op::Softmax, name, x, 2)?;
        self.record_one(name, Op::Softmax, vec![x], xs)
    }

    /// Mean cross-entropy of `logits[N,C]` against class indices `labels[N]`.
    pub fn cross_entropy(
        &mut self,
        name: &str,
        logits: TensorId,
        labels: TensorId,
    ) -> Result<TensorId, GraphError> {
        let op = Op::CrossEntropy;
        let ls = self.float_rank(op, name, logits, 2)?;
        self.check_id(labels)?;
        let lab = self.tensor(labels).clone();
        if lab.dtype != DType::I32 {
            return Err(GraphError::DType {
                op: op.kind(),
                node: name.to_string(),
                tensor: lab.name,
                expected: DType::I32,
                actual: lab.dtype,
            });
        }
        if lab.shape != Shape::d1(ls.dims()[0]) {
            return Err(mismatch(
                op,
                name,
                "labels must be one per row of the logits",
                ls,
                lab.shape,
            ));
        }
        self.record_one(name, op, vec![logits, labels], Shape::SCALAR)
    }

    /// Mean squared error between two tensors of the same shape.
    pub fn mse(
        &mut self,
        name: &str,
        pred: TensorId,
        target: TensorId,
    ) -> Result<TensorId, GraphError> {
        let (ps, ts) = (self.float(Op::Mse, name, pred)?, self.float(Op::Mse, name, target)?);
        if ps != ts {
            return Err(mismatch(
                Op::Mse,
                name,
                "prediction and target must have the same shape",
                ps,
                ts,
            ));
        }
        self.record_one(name, Op::Mse, vec![pred, target], Shape::SCALAR)
    }

    /// The values of `x` in another element type: f32 to f16 (round to nearest even, ±inf
    /// beyond ±65504) or f16 to f32 (exact). The gradient is cast back.
    pub fn cast(&mut self, name: &str, x: TensorId, dtype: DType) -> Result<TensorId, GraphError> {
        self.check_id(x)?;
        let t = self.tensor(x);
        let expected = match dtype {
            DType::F16 => DType::F32,
            DType::F32 => DType::F16,
            other => {
                let detail = format!("casts go between f32 and f16, not to {other:?}");
                return Err(invalid(Op::Cast, name, detail));
            }
        };
        if t.dtype != expected {
            return Err(GraphError::DType {
                op: Op::Cast.kind(),
                node: name.to_string(),
                tensor: t.name.clone(),
                expected,
                actual: t.dtype,
            });
        }
        let out =
            OutputSpec { name: name.to_string(), shape: t.shape, dtype, role: Role::Activation };
        Ok(self.record(name, Op::Cast, vec![x], Vec::new(), vec![out], Phase::MicroBatch)?[0])
    }

    /// Passes the value, stops the gradient.
    pub fn detach(&mut self, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
        self.elementwise(name, Op::Detach, x)
    }

    // ---- helpers ----

    /// The output shape `[N, M]` of a dense layer on `x[N, K]` and `w[M, K]` of `dtype`.
    pub(crate) fn linear_shape(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        w: TensorId,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let (xs, ws) =
            (self.typed_rank(op, name, x, dtype, 2)?, self.typed_rank(op, name, w, dtype, 2)?);
        if xs.dims()[1] != ws.dims()[1] {
            return Err(mismatch(op, name, "input features differ from the weight's", xs, ws));
        }
        Ok(Shape::d2(xs.dims()[0], ws.dims()[0]))
    }

    /// The output shape of a convolution of `x` with OIHW `w`, both of `dtype`.
    pub(crate) fn conv_shape(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        w: TensorId,
        params: ConvParams,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let (xs, ws) =
            (self.typed_rank(op, name, x, dtype, 4)?, self.typed_rank(op, name, w, dtype, 4)?);
        let [n, c, h, wd] = [xs.dims()[0], xs.dims()[1], xs.dims()[2], xs.dims()[3]];
        let [o, cg, kh, kw] = [ws.dims()[0], ws.dims()[1], ws.dims()[2], ws.dims()[3]];
        let g = params.groups;
        if g == 0 || c % g != 0 || o % g != 0 {
            return Err(invalid(
                op,
                name,
                format!("groups {g} must divide both input channels {c} and output channels {o}"),
            ));
        }
        if cg != c / g {
            return Err(mismatch(
                op,
                name,
                "weight input channels must equal channels / groups",
                xs,
                ws,
            ));
        }
        let (oh, ow) = self.window(op, name, (h, wd), (kh, kw), params.stride, params.padding)?;
        Ok(Shape::d4(n, o, oh, ow))
    }

    fn elementwise(&mut self, name: &str, op: Op, x: TensorId) -> Result<TensorId, GraphError> {
        let xs = self.float(op, name, x)?;
        self.record_one(name, op, vec![x], xs)
    }

    fn pool(
        &mut self,
        name: &str,
        op: Op,
        x: TensorId,
        p: PoolParams,
    ) -> Result<TensorId, GraphError> {
        let shape = self.pool_shape(name, op, x, p, DType::F32)?;
        self.record_one(name, op, vec![x], shape)
    }

    /// The output shape of pooling `x` (of `dtype`) with window `p`.
    pub(crate) fn pool_shape(
        &self,
        name: &str,
        op: Op,
        x: TensorId,
        p: PoolParams,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        let xs = self.typed_rank(op, name, x, dtype, 4)?;
        if p.padding.0 * 2 > p.kernel.0 || p.padding.1 * 2 > p.kernel.1 {
            return Err(invalid(
                op,
                name,
                format!("padding {:?} must be at most half the window {:?}", p.padding, p.kernel),
            ));
        }
        let (oh, ow) =
            self.window(op, name, (xs.dims()[2], xs.dims()[3]), p.kernel, p.stride, p.padding)?;
        Ok(Shape::d4(xs.dims()[0], xs.dims()[1], oh, ow))
    }

    fn window(
        &self,
        op: Op,
        name: &str,
        size: (usize, usize),
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<(usize, usize), GraphError> {
        let oh = window_output(size.0, kernel.0, stride.0, padding.0);
        let ow = window_output(size.1, kernel.1, stride.1, padding.1);
        match (oh, ow) {
            (Some(oh), Some(ow)) => Ok((oh, ow)),
            _ => Err(invalid(
                op,
                name,
                format!("window {kernel:?} with stride {stride:?} and padding {padding:?} does not fit input {size:?}"),
            )),
        }
    }

    pub(crate) fn check_bias(
        &self,
        op: Op,
        name: &str,
        b: TensorId,
        len: usize,
    ) -> Result<(), GraphError> {
        let bs = self.float_rank(op, name, b, 1)?;
        if bs.dims()[0] != len {
            return Err(mismatch(
                op,
                name,
                "per-channel operand must match the channel count",
                Shape::d1(len),
                bs,
            ));
        }
        Ok(())
    }

    /// The shape of a float operand, checked to belong to this graph.
    fn float(&self, op: Op, name: &str, x: TensorId) -> Result<Shape, GraphError> {
        self.typed(op, name, x, DType::F32)
    }

    /// The shape of an operand of element type `dtype`, checked to belong to this graph.
    pub(crate) fn typed(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        dtype: DType,
    ) -> Result<Shape, GraphError> {
        self.check_id(x)?;
        let t = self.tensor(x);
        if t.dtype != dtype {
            return Err(GraphError::DType {
                op: op.kind(),
                node: name.to_string(),
                tensor: t.name.clone(),
                expected: dtype,
                actual: t.dtype,
            });
        }
        Ok(t.shape)
    }

    fn float_rank(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        rank: usize,
    ) -> Result<Shape, GraphError> {
        self.typed_rank(op, name, x, DType::F32, rank)
    }

    pub(crate) fn typed_rank(
        &self,
        op: Op,
        name: &str,
        x: TensorId,
        dtype: DType,
        rank: usize,
    ) -> Result<Shape, GraphError> {
        let s = self.typed(op, name, x, dtype)?;
        if s.rank() != rank {
            return Err(GraphError::Rank {
                op: op.kind(),
                node: name.to_string(),
                tensor: self.tensor(x).name.clone(),
                expected: rank,
                actual: s,
            });
        }
        Ok(s)
    }

    fn record_one(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<TensorId>,
        shape: Shape,
    ) -> Result<TensorId, GraphError> {
        self.record_as(name, op, inputs, shape, DType::F32)
    }

    /// Records a node with one activation output of `shape` and `dtype`.
    pub(crate) fn record_as(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<TensorId>,
        shape: Shape,
        dtype: DType,
    ) -> Result<TensorId, GraphError> {
        let out = OutputSpec { name: name.to_string(), shape, dtype, role: Role::Activation };
        Ok(self.record(name, op, inputs, Vec::new(), vec![out], Phase::MicroBatch)?[0])
    }

    /// Adds the outputs and the node. Output names that are taken get a `#n` suffix, so a
    /// node named like its output is the common, readable case.
    pub(crate) fn record(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<TensorId>,
        state: Vec<TensorId>,
        outputs: Vec<OutputSpec>,
        phase: Phase,
    ) -> Result<Vec<TensorId>, GraphError> {
        let mut ids = Vec::with_capacity(outputs.len());
        for o in outputs {
            let name = self.fresh_name(&o.name);
            ids.push(self.add_tensor(TensorInfo {
                name,
                shape: o.shape,
                dtype: o.dtype,
                role: o.role,
                init: None,
            })?);
        }
        let stage = self.stage;
        let node =
            Node { name: name.to_string(), op, inputs, state, outputs: ids.clone(), phase, stage };
        self.push_node(node)?;
        Ok(ids)
    }
}

pub(crate) fn mismatch(
    op: Op,
    name: &str,
    detail: &'static str,
    left: Shape,
    right: Shape,
) -> GraphError {
    GraphError::ShapeMismatch { op: op.kind(), node: name.to_string(), detail, left, right }
}

pub(crate) fn invalid(op: Op, name: &str, detail: String) -> GraphError {
    GraphError::Invalid { op: op.kind(), node: name.to_string(), detail }
}
