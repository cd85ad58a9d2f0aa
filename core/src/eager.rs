//! Eager debugging: a graph that runs each op as it is recorded, with the reference kernels,
//! so model code can print any intermediate and anomaly mode stops at the first NaN/Inf.

use crate::backend::Reference;
use crate::dispatch::{run_kernel, Fault, Operands, StepContext, View};
use crate::graph::{Graph, GraphError, TensorInfo};
use crate::kernel::Access;
use crate::lower::{lower, Mode};
use crate::tensor::{DType, Element, TensorId};
use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

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

/// Values of an eager graph, one slot per tensor (integers are stored bit-for-bit).
#[derive(Clone)]
pub(crate) struct Eager {
    options: EagerOptions,
    values: Vec<Option<Vec<f32>>>,
}

impl Eager {
    pub(crate) fn on_new_tensor(&mut self, info: &TensorInfo) {
        self.values.push(info.init.as_ref().map(|i| i.materialize(info.shape.numel())));
    }

    /// Runs node `index` of `graph` (which has just been recorded).
    pub(crate) fn run_node(&mut self, graph: &Graph, index: usize) -> Result<(), GraphError> {
        let node = &graph.nodes()[index];
        let (kernel, operands) = lower(graph, node, self.options.mode);
        let signature = kernel.signature();
        let missing =
            |t: TensorId| GraphError::MissingValue { tensor: graph.tensor(t).name.clone() };

        // Written operands are moved out while the kernel runs, so reads can borrow the rest.
        let mut written: Vec<(TensorId, Vec<f32>)> = Vec::new();
        for (slot, &t) in signature.slots.iter().zip(&operands) {
            match slot.access {
                Access::Read => {}
                Access::Update => {
                    let value = self.values[t.index()].take().ok_or_else(|| missing(t))?;
                    written.push((t, value));
                }
                Access::Write => written.push((t, vec![0.0; slot.len])),
            }
        }
        let mut views = heapless::Vec::new();
        let mut outputs = written.iter_mut();
        for (slot, &t) in signature.slots.iter().zip(&operands) {
            let view = match slot.access {
                Access::Read => match self.values[t.index()].as_deref() {
                    Some(v) => View::Read(bytemuck::cast_slice(v)),
                    None => {
                        let error = missing(t);
                        drop(views);
                        self.restore(written);
                        return Err(error);
                    }
                },
                _ => View::Write(bytemuck::cast_slice_mut(
                    &mut outputs.next().expect("one per written slot").1,
                )),
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
            Ok(()) => match anomaly {
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

    fn restore(&mut self, written: Vec<(TensorId, Vec<f32>)>) {
        for (t, v) in written {
            self.values[t.index()] = Some(v);
        }
    }
}

/// The first non-finite float among freshly written tensors.
fn first_anomaly(
    graph: &Graph,
    written: &[(TensorId, Vec<f32>)],
) -> Option<(TensorId, usize, f32)> {
    written
        .iter()
        .filter(|(t, _)| graph.tensor(*t).dtype == DType::F32)
        .find_map(|(t, v)| v.iter().position(|x| !x.is_finite()).map(|i| (*t, i, v[i])))
}

impl Graph {
    /// A graph that runs every op as soon as it is recorded.
    pub fn eager(seed: u64, options: EagerOptions) -> Self {
        let mut g = Graph::new(seed);
        g.eager = Some(Box::new(Eager { options, values: Vec::new() }));
        g
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
        let eager = self.eager.as_mut().ok_or(GraphError::Invalid {
            op: "feed",
            node: name,
            detail: "only an eager graph holds values".into(),
        })?;
        eager.values[tensor.index()] = Some(bytemuck::cast_slice(values).to_vec());
        Ok(())
    }

    /// The current value of a float tensor of an eager graph.
    pub fn value(&self, tensor: TensorId) -> Option<&[f32]> {
        let eager = self.eager.as_ref()?;
        let info = self.tensors().get(tensor.index())?;
        if info.dtype != DType::F32 {
            return None;
        }
        eager.values.get(tensor.index())?.as_deref()
    }
}
