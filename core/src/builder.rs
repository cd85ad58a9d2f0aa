//! Recording on [`Graph`]: the leaves (inputs, labels, parameters, buffers) and the operand
//! checks every op's recording method (in its file under [`crate::ops`]) uses, so mistakes
//! surface where the model code makes them.

use crate::geometry::window_output;
use crate::graph::{Graph, GraphError, Init, Node, Phase, TensorInfo};
use crate::op::Op;
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

    /// A frozen integer parameter (`I8` weights, `I32` biases and multipliers) with exact
    /// values.
    pub fn int_parameter(
        &mut self,
        name: &str,
        shape: Shape,
        dtype: DType,
        values: alloc::vec::Vec<i32>,
    ) -> Result<TensorId, GraphError> {
        let init = Init::Ints(values);
        self.check_init(name, shape, &init)?;
        self.leaf(name, shape, dtype, Role::FrozenParam, Some(init))
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

    // ---- helpers ----

    pub(crate) fn elementwise(
        &mut self,
        name: &str,
        op: Op,
        x: TensorId,
    ) -> Result<TensorId, GraphError> {
        let xs = self.float(op, name, x)?;
        self.record_one(name, op, vec![x], xs)
    }

    pub(crate) fn window(
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
    pub(crate) fn float(&self, op: Op, name: &str, x: TensorId) -> Result<Shape, GraphError> {
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

    pub(crate) fn float_rank(
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

    pub(crate) fn record_one(
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
