//! Eager debugging: a graph that runs each op as it is recorded, with the reference kernels,
//! so model code can print any intermediate and anomaly mode stops at the first NaN/Inf.

use crate::backend::Reference;
use crate::dispatch::{run_kernel, Fault, Operands, StepContext, View};
use crate::graph::{Graph, GraphError, Observer, TensorInfo};
use crate::kernel::Access;
use crate::lower::{lower, Mode};
use crate::tensor::{DType, Element, TensorId};
use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use core::any::Any;

/// How an eager graph runs its ops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EagerOptions {
    /// Training behaviour (batch statistics, dropout) or evaluation behaviour.
    pub mode: Mode,
    /// Stop with [`GraphError::Anomaly`] at the first op that produces NaN or infinity.
    pub detect_anomalies: bool,
    /// Learning rate, update and micro-batch counters seen by the kernels.
    pub context: StepContext,
}

/// One tensor's value as the bytes of its element type, held in 4-byte words so that every
/// element type is aligned.
#[derive(Clone)]
struct Stored {
    words: Vec<u32>,
    bytes: usize,
}

impl Stored {
    fn zeroed(bytes: usize) -> Self {
        Self { words: vec![0; bytes.div_ceil(4)], bytes }
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        let mut stored = Self::zeroed(bytes.len());
        stored.bytes_mut().copy_from_slice(bytes);
        stored
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.bytes]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.bytes]
    }
}

/// Values of an eager graph, one slot per tensor, each in its element type.
#[derive(Clone)]
pub(crate) struct Eager {
    options: EagerOptions,
    values: Vec<Option<Stored>>,
}

impl Observer for Eager {
    /// Stores the new tensor's initial value, if it has one.
    fn tensor_added(&mut self, info: &TensorInfo) {
        let value = info.init.as_ref().map(|i| i.to_bytes(info.dtype, info.shape.numel()));
        self.values.push(value.as_deref().map(Stored::from_bytes));
    }

    /// Runs node `index` of `graph` (which has just been recorded).
    fn node_recorded(&mut self, graph: &Graph, index: usize) -> Result<(), GraphError> {
        self.run_node(graph, index)
    }

    fn boxed_clone(&self) -> Box<dyn Observer> {
        Box::new(self.clone())
    }
}

impl Eager {
    /// Runs node `index` of `graph` with the reference kernels.
    fn run_node(&mut self, graph: &Graph, index: usize) -> Result<(), GraphError> {
        let node = &graph.nodes()[index];
        let (kernel, operands) = lower(graph, node, self.options.mode);
        let signature = kernel.signature();
        let missing =
            |t: TensorId| GraphError::MissingValue { tensor: graph.tensor(t).name.clone() };

        // Written operands are moved out while the kernel runs, so reads can borrow the rest.
        let mut written: Vec<(TensorId, Stored)> = Vec::new();
        for (slot, &t) in signature.slots.iter().zip(&operands) {
            match slot.access {
                Access::Read => {}
                Access::Update => {
                    let value = self.values[t.index()].take().ok_or_else(|| missing(t))?;
                    written.push((t, value));
                }
                Access::Write => written.push((t, Stored::zeroed(slot.len * slot.dtype.size()))),
            }
        }
        let mut views = heapless::Vec::new();
        let mut outputs = written.iter_mut();
        for (slot, &t) in signature.slots.iter().zip(&operands) {
            let view = match slot.access {
                Access::Read => match self.values[t.index()].as_ref() {
                    Some(v) => View::Read(v.bytes()),
                    None => {
                        let error = missing(t);
                        drop(views);
                        self.restore(written);
                        return Err(error);
                    }
                },
                _ => View::Write(outputs.next().expect("one per written slot").1.bytes_mut()),
            };
            let _ = views.push(view);
        }
        let result =
            run_kernel(&mut Reference, &kernel, Operands::new(views), &self.options.context);
        let anomaly =
            self.options.detect_anomalies.then(|| first_anomaly(graph, &written)).flatten();
        self.restore(written);
        let op = node.op.kind();
        match result {
            Err(Fault::Kernel(error)) => {
                Err(GraphError::Kernel { op, node: node.name.clone(), error })
            }
            Err(Fault::Malformed(detail)) => {
                Err(GraphError::Invalid { op, node: node.name.clone(), detail: detail.to_string() })
            }
            Ok(_) => match anomaly {
                Some((tensor, index, value)) => Err(GraphError::Anomaly {
                    op,
                    node: node.name.clone(),
                    tensor: graph.tensor(tensor).name.clone(),
                    shape: graph.shape(tensor),
                    index,
                    value,
                }),
                None => Ok(()),
            },
        }
    }

    fn restore(&mut self, written: Vec<(TensorId, Stored)>) {
        for (t, v) in written {
            self.values[t.index()] = Some(v);
        }
    }
}

/// The first non-finite float (f32, or f16 widened to f32) among freshly written tensors.
fn first_anomaly(graph: &Graph, written: &[(TensorId, Stored)]) -> Option<(TensorId, usize, f32)> {
    written.iter().find_map(|(t, v)| {
        let bytes = v.bytes();
        let found = match graph.tensor(*t).dtype {
            DType::F32 => first_non_finite(bytemuck::cast_slice::<u8, f32>(bytes).iter().copied()),
            DType::F16 => first_non_finite(
                bytemuck::cast_slice::<u8, half::f16>(bytes).iter().map(|h| h.to_f32()),
            ),
            DType::I8 | DType::I32 => None,
        };
        found.map(|(i, value)| (*t, i, value))
    })
}

fn first_non_finite(values: impl Iterator<Item = f32>) -> Option<(usize, f32)> {
    values.enumerate().find(|(_, x)| !x.is_finite())
}

impl Graph {
    /// A graph that runs every op as soon as it is recorded.
    pub fn eager(seed: u64, options: EagerOptions) -> Self {
        let mut g = Graph::new(seed);
        g.observer = Some(Box::new(Eager { options, values: Vec::new() }));
        g
    }

    /// Runs every node of this graph in order with the reference kernels, as an eager graph
    /// runs them while recording: tensors start from their initial values, `values` (bytes
    /// of their element type) replacing those it names, e.g. a training step's inputs and
    /// the weights it started from. With `options.detect_anomalies`, stops with
    /// [`GraphError::Anomaly`] at the first op that produces NaN or infinity.
    pub fn replay(
        &self,
        options: EagerOptions,
        values: &[(TensorId, &[u8])],
    ) -> Result<(), GraphError> {
        let mut eager = Eager { options, values: Vec::with_capacity(self.tensors().len()) };
        for info in self.tensors() {
            eager.tensor_added(info);
        }
        for &(tensor, bytes) in values {
            self.check_id(tensor)?;
            let info = self.tensor(tensor);
            let expected = info.shape.numel() * info.dtype.size();
            if bytes.len() != expected {
                let name = info.name.clone();
                return Err(GraphError::ValueLength {
                    tensor: name,
                    expected,
                    actual: bytes.len(),
                });
            }
            eager.values[tensor.index()] = Some(Stored::from_bytes(bytes));
        }
        (0..self.nodes().len()).try_for_each(|index| eager.run_node(self, index))
    }

    /// Gives an eager tensor its value (inputs and labels; also overrides a weight).
    pub fn feed<T: Element>(&mut self, tensor: TensorId, values: &[T]) -> Result<(), GraphError> {
        self.check_id(tensor)?;
        let info = self.tensor(tensor);
        let name = info.name.clone();
        if info.dtype != T::DTYPE {
            return Err(GraphError::DType {
                op: "feed",
                node: name.clone(),
                tensor: name,
                expected: info.dtype,
                actual: T::DTYPE,
            });
        }
        if info.shape.numel() != values.len() {
            let expected = info.shape.numel();
            return Err(GraphError::ValueLength { tensor: name, expected, actual: values.len() });
        }
        let eager = eager_mut(self).ok_or(GraphError::Invalid {
            op: "feed",
            node: name,
            detail: "only an eager graph holds values".into(),
        })?;
        eager.values[tensor.index()] = Some(Stored::from_bytes(bytemuck::cast_slice(values)));
        Ok(())
    }

    /// The current value of a float tensor of an eager graph.
    pub fn value(&self, tensor: TensorId) -> Option<&[f32]> {
        self.value_of::<f32>(tensor)
    }

    /// The current value of an eager tensor of element type `T` (`f32`, `half::f16`, ...).
    pub fn value_of<T: Element>(&self, tensor: TensorId) -> Option<&[T]> {
        let eager = eager_ref(self)?;
        let info = self.tensors().get(tensor.index())?;
        if info.dtype != T::DTYPE {
            return None;
        }
        let stored = eager.values.get(tensor.index())?.as_ref()?;
        bytemuck::try_cast_slice(stored.bytes()).ok()
    }
}

/// The values of `graph` when it is eager.
fn eager_ref(graph: &Graph) -> Option<&Eager> {
    let observer: &dyn Any = graph.observer.as_deref()?;
    observer.downcast_ref()
}

/// The values of `graph` when it is eager, to change.
fn eager_mut(graph: &mut Graph) -> Option<&mut Eager> {
    let observer: &mut dyn Any = graph.observer.as_deref_mut()?;
    observer.downcast_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Init;
    use crate::shape::Shape;

    fn options(detect_anomalies: bool) -> EagerOptions {
        EagerOptions { mode: Mode::Train, detect_anomalies, context: StepContext::default() }
    }

    #[test]
    fn every_intermediate_is_readable_as_it_is_recorded() {
        let mut g = Graph::eager(1, options(false));
        let x = g.input("x", Shape::d2(1, 3)).unwrap();
        g.feed(x, &[-1.0f32, 2.0, -3.0]).unwrap();
        let w = g
            .parameter("w", Shape::d2(2, 3), Init::Values(vec![1.0, 0.0, 0.0, 0.0, 1.0, 1.0]))
            .unwrap();
        let h = g.linear("fc", x, w, None).unwrap();
        assert_eq!(g.value(h), Some(&[-1.0, -1.0][..]));
        let y = g.relu("act", x).unwrap();
        assert_eq!(g.value(y), Some(&[0.0, 2.0, 0.0][..]));
    }

    #[test]
    fn anomaly_mode_names_the_first_op_that_produces_nan_or_inf() {
        let mut g = Graph::eager(1, options(true));
        let x = g.input("x", Shape::d2(1, 2)).unwrap();
        g.feed(x, &[1.0f32, 2.0]).unwrap();
        let big = g.parameter("big", Shape::d2(2, 2), Init::Constant(f32::MAX)).unwrap();
        let ok = g.relu("first", x).unwrap();
        assert!(g.value(ok).is_some());
        let err = g.linear("overflowing_fc", ok, big, None).unwrap_err();
        match &err {
            GraphError::Anomaly { op, node, tensor, shape, value, .. } => {
                assert_eq!(*op, "linear");
                assert_eq!(node, "overflowing_fc");
                assert_eq!(tensor, "overflowing_fc");
                assert_eq!(*shape, Shape::d2(1, 2));
                assert!(value.is_infinite());
            }
            other => panic!("expected an anomaly, got {other:?}"),
        }
        let message = alloc::format!("{err}");
        assert!(message.contains("linear 'overflowing_fc'"), "{message}");
        assert!(message.contains("[1, 2]"), "{message}");
    }

    #[test]
    fn a_replay_names_the_first_op_that_produces_nan_from_the_values_given() {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(1, 2)).unwrap();
        let w = g.parameter("w", Shape::d2(2, 2), Init::Constant(1.0)).unwrap();
        let h = g.relu("first", x).unwrap();
        g.linear("fc", h, w, None).unwrap();
        let finite: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(g.replay(options(true), &[(x, &finite)]), Ok(()));
        let nan_weights: Vec<u8> =
            [1.0f32, f32::NAN, 0.0, 0.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        match g.replay(options(true), &[(x, &finite), (w, &nan_weights)]) {
            Err(GraphError::Anomaly { op: "linear", node, .. }) => assert_eq!(node, "fc"),
            other => panic!("expected an anomaly in fc, got {other:?}"),
        }
        assert!(matches!(
            g.replay(options(true), &[(x, &finite[..4])]),
            Err(GraphError::ValueLength { expected: 8, actual: 4, .. })
        ));
    }

    #[test]
    fn without_anomaly_mode_non_finite_values_flow_on() {
        let mut g = Graph::eager(1, options(false));
        let x = g.input("x", Shape::d1(2)).unwrap();
        g.feed(x, &[f32::NAN, 1.0]).unwrap();
        let y = g.relu6("act", x).unwrap();
        assert!(g.value(y).unwrap()[0].is_nan());
    }

    #[test]
    fn casts_run_eagerly_and_anomaly_mode_catches_an_f16_overflow() {
        let mut g = Graph::eager(1, options(true));
        let x = g.input("x", Shape::d1(3)).unwrap();
        g.feed(x, &[1.0f32, -0.1, 65504.0]).unwrap();
        let half = g.cast("narrow", x, DType::F16).unwrap();
        let bits: Vec<u16> =
            g.value_of::<half::f16>(half).unwrap().iter().map(|h| h.to_bits()).collect();
        assert_eq!(bits, [0x3c00, 0xae66, 0x7bff]);
        let wide = g.cast("widen", half, DType::F32).unwrap();
        assert_eq!(g.value(wide), Some(&[1.0, -0.099975586, 65504.0][..]));
        g.feed(x, &[1.0f32, 2.0, 65520.0]).unwrap();
        let err = g.cast("overflow", x, DType::F16).unwrap_err();
        assert!(
            matches!(err, GraphError::Anomaly { op: "cast", index: 2, value, .. } if value == f32::INFINITY),
            "{err:?}"
        );
        assert!(matches!(g.cast("again", wide, DType::I8), Err(GraphError::Invalid { .. })));
        assert!(matches!(g.cast("same", wide, DType::F32), Err(GraphError::DType { .. })));
    }

    #[test]
    fn using_an_unfed_input_is_an_error_naming_it() {
        let mut g = Graph::eager(1, options(true));
        let x = g.input("pixels", Shape::d1(4)).unwrap();
        let err = g.relu("act", x).unwrap_err();
        assert_eq!(err, GraphError::MissingValue { tensor: "pixels".into() });
    }

    #[test]
    fn feeding_checks_type_and_length() {
        let mut g = Graph::eager(1, options(true));
        let x = g.input("x", Shape::d1(4)).unwrap();
        let labels = g.labels("y", 2).unwrap();
        assert!(matches!(
            g.feed(x, &[1.0f32]),
            Err(GraphError::ValueLength { expected: 4, actual: 1, .. })
        ));
        assert!(matches!(g.feed(labels, &[1.0f32, 2.0]), Err(GraphError::DType { .. })));
        g.feed(labels, &[0i32, 1]).unwrap();
    }

    #[test]
    fn the_same_model_code_runs_eagerly_and_compiled_with_equal_results() {
        use crate::backend::Reference;
        use crate::compile::compile_inference;
        use crate::executor::Executor;
        use crate::ops::ConvParams;
        fn model(g: &mut Graph, x: TensorId) -> Result<TensorId, GraphError> {
            let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
            let h = crate::nn::conv2d(g, "c", x, 3, 3, same, true)?;
            let h = crate::nn::batch_norm2d(g, "bn", h)?;
            let h = g.relu("r", h)?;
            let h = g.global_avg_pool("gap", h)?;
            crate::nn::linear(g, "fc", h, 2)
        }
        let shape = Shape::d4(2, 2, 4, 4);
        let input: Vec<f32> = (0..64).map(|i| ((i * 37) % 11) as f32 / 5.0 - 1.0).collect();

        let mut eager = Graph::eager(9, EagerOptions { mode: Mode::Eval, ..options(true) });
        let x = eager.input("x", shape).unwrap();
        eager.feed(x, &input).unwrap();
        let eager_out = model(&mut eager, x).unwrap();

        let mut g = Graph::new(9);
        let x = g.input("x", shape).unwrap();
        let out = model(&mut g, x).unwrap();
        let plan = compile_inference(&g, &[out]).unwrap();
        let mut mem = plan.initial_memory(&g);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let mut regions = mem.regions();
        regions.write(&plan.operand("x").unwrap(), &input).unwrap();
        exec.run(&mut regions).unwrap();
        let compiled = regions.read::<f32>(&plan.operand("fc").unwrap()).unwrap();
        assert_eq!(compiled, eager.value(eager_out).unwrap());
    }
}
