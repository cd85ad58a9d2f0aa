//! f16 storage for a recorded model: frozen weights kept as f16 and, optionally, activations
//! stored as f16 between ops. Compute stays f32 (Cortex-M4 has no f16 arithmetic): every
//! consumer reads a widened f32 copy made by a cast right before it.

use crate::graph::{Graph, GraphError, Node, Phase, Stage, TensorInfo};
use crate::ops::Op;
use crate::tensor::{DType, Role, TensorId};
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Which tensors of a model are stored as f16.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16Storage {
    /// Frozen weights live in the frozen-weight region as f16 (half its bytes).
    pub frozen_weights: bool,
    /// Each op's output is narrowed to f16 right after the op, and widened again right before
    /// each consumer; in a training step the backward pass reads widened copies too.
    pub activations: bool,
    /// Trainable weights keep their f32 values (the masters the optimizer updates), but the
    /// forward pass reads them through an f16 copy: mixed precision.
    pub trainable_weights: bool,
}

impl F16Storage {
    /// Weights and activations in f16 storage, f32 masters for the trained weights: the
    /// forward pass of mixed-precision training.
    pub const MIXED_PRECISION: F16Storage =
        F16Storage { frozen_weights: true, activations: true, trainable_weights: true };
}

/// What happens to one tensor of the model.
#[derive(Clone, Copy, PartialEq)]
enum Plan {
    Unchanged,
    /// Stored as f16; consumers read a widened copy.
    Narrowed,
    /// Stays f32; consumers read it through an f16 round trip.
    RoundTrip,
}

/// `graph` with f16 storage as `options` say. `trainable` are the parameters a training step
/// will update (an inference model passes none): they stay f32. Only a forward graph (model
/// code, before `differentiate`) can be converted. Tensor ids stay valid; the casts and
/// their f16 and f32 copies are new tensors named after the original (`conv.weight.f16`,
/// `conv.weight.f32`).
pub fn to_f16_storage(
    graph: &Graph,
    trainable: &[TensorId],
    options: F16Storage,
) -> Result<Graph, GraphError> {
    for &t in trainable {
        graph.check_id(t)?;
    }
    if let Some(node) = graph.nodes().iter().find(|n| n.stage != Stage::Forward) {
        let detail = "only a forward graph can be given f16 storage".into();
        return Err(GraphError::Invalid { op: "to_f16_storage", node: node.name.clone(), detail });
    }
    let mut plan = vec![Plan::Unchanged; graph.tensors().len()];
    for p in graph.parameters().filter(|&p| graph.tensor(p).dtype == DType::F32) {
        let trained = trainable.contains(&p);
        plan[p.index()] = match (trained, options) {
            (false, F16Storage { frozen_weights: true, .. }) => Plan::Narrowed,
            (true, F16Storage { trainable_weights: true, .. }) => Plan::RoundTrip,
            _ => Plan::Unchanged,
        };
    }
    let mut rewrite = Rewrite {
        tensors: graph.tensors().to_vec(),
        nodes: Vec::with_capacity(graph.nodes().len() * 3),
        names: graph.tensors().iter().map(|t| t.name.clone()).collect(),
        narrow: vec![None; graph.tensors().len()],
    };
    for (i, p) in plan.iter().enumerate() {
        match p {
            Plan::Narrowed => {
                rewrite.tensors[i].dtype = DType::F16;
                rewrite.narrow[i] = Some(TensorId(i as u32));
            }
            Plan::RoundTrip | Plan::Unchanged => {}
        }
    }
    let consumed: BTreeSet<TensorId> =
        graph.nodes().iter().flat_map(|n| n.inputs.iter().copied()).collect();
    for node in graph.nodes() {
        let mut node = node.clone();
        for input in node.inputs.iter_mut() {
            let i = input.index();
            if plan[i] == Plan::RoundTrip && rewrite.narrow[i].is_none() {
                rewrite.narrow[i] = Some(rewrite.cast(*input, DType::F16)?);
            }
            if let Some(half) = rewrite.narrow[i] {
                *input = rewrite.cast(half, DType::F32)?;
            }
        }
        let output = node.outputs.first().copied();
        rewrite.nodes.push(node);
        let Some(y) = output else { continue };
        let info = graph.tensor(y);
        let narrowed = options.activations
            && info.role == Role::Activation
            && info.dtype == DType::F32
            && consumed.contains(&y);
        if narrowed {
            rewrite.narrow[y.index()] = Some(rewrite.cast(y, DType::F16)?);
        }
    }
    Graph::from_parts(graph.seed(), rewrite.tensors, rewrite.nodes)
}

/// The graph being rebuilt: tensors (old ones first, ids unchanged), nodes in order, and
/// the f16 copy consumers read of each tensor, if any.
struct Rewrite {
    tensors: Vec<TensorInfo>,
    nodes: Vec<Node>,
    names: BTreeSet<String>,
    narrow: Vec<Option<TensorId>>,
}

impl Rewrite {
    /// Appends `x` cast to `dtype` (a new activation) and returns it.
    fn cast(&mut self, x: TensorId, dtype: DType) -> Result<TensorId, GraphError> {
        let (shape, source) = (self.tensors[x.index()].shape, self.tensors[x.index()].name.clone());
        let base = source.split('#').next().unwrap_or_default();
        let base = base.strip_suffix(".f16").unwrap_or(base);
        let suffix = if dtype == DType::F16 { "f16" } else { "f32" };
        let name = self.fresh(&format!("{base}.{suffix}"));
        let info =
            TensorInfo { name: name.clone(), shape, dtype, role: Role::Activation, init: None };
        let y = TensorId(self.tensors.len() as u32);
        self.tensors.push(info);
        self.nodes.push(Node {
            name,
            op: Op::Cast,
            inputs: vec![x],
            state: Vec::new(),
            outputs: vec![y],
            phase: Phase::MicroBatch,
            stage: Stage::Forward,
        });
        Ok(y)
    }

    fn fresh(&mut self, base: &str) -> String {
        let name = match self.names.contains(base) {
            false => String::from(base),
            true => (1..)
                .map(|i| format!("{base}#{i}"))
                .find(|n| !self.names.contains(n))
                .expect("an unused name exists"),
        };
        self.names.insert(name.clone());
        name
    }
}

/// The f32 tensors of a training graph's forward pass (`forward_nodes` long) that f16
/// storage keeps only briefly: widened copies, and op outputs that have an f16 copy. The
/// backward pass recomputes them from the f16 copies (gradient checkpointing), so what
/// stays alive between the passes is f16.
pub(crate) fn f32_copies(graph: &Graph, forward_nodes: usize) -> Vec<TensorId> {
    let forward = &graph.nodes()[..forward_nodes];
    let mut narrowed = vec![false; graph.tensors().len()];
    for node in forward.iter().filter(|n| n.op == Op::Cast) {
        if graph.tensor(node.outputs[0]).dtype == DType::F16 {
            narrowed[node.inputs[0].index()] = true;
        }
    }
    crate::passes::checkpoint::candidates(graph, forward_nodes)
        .into_iter()
        .filter(|&t| graph.tensor(t).dtype == DType::F32)
        .filter(|&t| {
            let widened = forward.iter().any(|n| n.op == Op::Cast && n.outputs[0] == t);
            widened || narrowed[t.index()]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile_inference;
    use crate::shape::Shape;
    use crate::{nn, Executor, Reference};

    /// `relu(x · w1ᵀ + b1) · w2ᵀ + b2`.
    fn mlp() -> (Graph, TensorId) {
        let mut g = Graph::new(5);
        let x = g.input("x", Shape::d2(2, 4)).unwrap();
        let h = nn::linear(&mut g, "fc1", x, 6).unwrap();
        let h = g.relu("act", h).unwrap();
        let y = nn::linear(&mut g, "fc2", h, 3).unwrap();
        (g, y)
    }

    fn run(g: &Graph, out: TensorId) -> (Vec<f32>, crate::RegionSizes) {
        let plan = compile_inference(g, &[out]).unwrap();
        let mut memory = plan.initial_memory(g);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let mut regions = memory.regions();
        let x = [0.5f32, -1.0, 2.0, 0.25, 1.5, 0.75, -0.5, 1.0];
        regions.write(&plan.operand("x").unwrap(), &x).unwrap();
        exec.run(&mut regions).unwrap();
        (regions.read::<f32>(&plan.binding_of(out).unwrap().operand).unwrap().to_vec(), plan.sizes)
    }

    #[test]
    fn frozen_weights_become_f16_and_each_consumer_reads_a_widened_copy() {
        let (g, y) = mlp();
        let options = F16Storage { frozen_weights: true, ..F16Storage::default() };
        let half = to_f16_storage(&g, &[], options).unwrap();
        let w = half.find("fc1.weight").unwrap();
        assert_eq!(half.tensor(w).dtype, DType::F16);
        let fc1 = half.nodes().iter().find(|n| n.name == "fc1").unwrap();
        assert_eq!(half.tensor(fc1.inputs[1]).name, "fc1.weight.f32");
        let (exact, fp32) = run(&g, y);
        let (rounded, fp16) = run(&half, y);
        // Four weights of 24, 6, 18 and 3 values, each starting on a 16-byte boundary.
        assert_eq!((fp32.frozen, fp16.frozen), (220, 118));
        for (a, b) in exact.iter().zip(&rounded) {
            assert!((a - b).abs() <= 2e-3 * a.abs().max(1.0), "{exact:?} against {rounded:?}");
        }
        assert_ne!(exact, rounded, "rounding the weights to f16 must show");
    }

    #[test]
    fn activations_pass_through_f16_between_ops() {
        let (g, y) = mlp();
        let options = F16Storage { activations: true, ..F16Storage::default() };
        let half = to_f16_storage(&g, &[], options).unwrap();
        let relu = half.nodes().iter().find(|n| n.name == "act").unwrap();
        assert_eq!(half.tensor(relu.inputs[0]).name, "fc1.f32");
        assert!(half.find("fc1.f16").is_some_and(|t| half.tensor(t).dtype == DType::F16));
        // The output nobody reads stays as it is.
        assert!(half.find("fc2.f16").is_none());
        assert_eq!(half.tensor(y).dtype, DType::F32);
    }

    #[test]
    fn trained_weights_stay_f32_unless_read_through_f16() {
        let (g, _) = mlp();
        let w2 = g.find("fc2.weight").unwrap();
        let options = F16Storage { frozen_weights: true, ..F16Storage::default() };
        let half = to_f16_storage(&g, &[w2], options).unwrap();
        assert_eq!(half.tensor(w2).dtype, DType::F32);
        assert!(half.find("fc2.weight.f16").is_none());
        let mixed = to_f16_storage(&g, &[w2], F16Storage::MIXED_PRECISION).unwrap();
        assert_eq!(mixed.tensor(w2).dtype, DType::F32);
        assert!(mixed.find("fc2.weight.f16").is_some());
    }

    #[test]
    fn a_differentiated_graph_is_refused() {
        let (mut g, y) = mlp();
        let t = g.target("t", Shape::d2(2, 3)).unwrap();
        let loss = g.mse("loss", y, t).unwrap();
        let w = g.find("fc2.weight").unwrap();
        let d = crate::differentiate(&g, loss, &[w]).unwrap();
        let err = to_f16_storage(&d.graph, &[w], F16Storage::MIXED_PRECISION).err();
        assert!(matches!(err, Some(GraphError::Invalid { op: "to_f16_storage", .. })));
    }
}
