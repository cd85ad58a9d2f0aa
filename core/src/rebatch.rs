//! Re-recording a model for another batch size: inputs, labels and every activation that
//! carries the batch in its first dimension change; weights and per-channel tensors do not.

use crate::graph::{Graph, GraphError, Stage};
use crate::ops::Op;
use crate::tensor::Role;
use alloc::format;
use alloc::vec;

impl Graph {
    /// The same model recorded for batches of `batch` samples (a forward graph: rebatch a
    /// model before differentiating it). Every weight keeps its values.
    pub fn with_batch(&self, batch: usize) -> Result<Graph, GraphError> {
        let invalid = |node: &str, detail| GraphError::Invalid {
            op: "with_batch",
            node: node.into(),
            detail,
        };
        if batch == 0 {
            return Err(invalid("", "a batch holds at least one sample".into()));
        }
        let old = self
            .tensors()
            .iter()
            .find(|t| t.role == Role::Input)
            .and_then(|t| t.shape.dim(0))
            .ok_or_else(|| {
                invalid("", "the graph has no input to take a batch size from".into())
            })?;
        let mut batched = vec![false; self.tensors().len()];
        for (i, t) in self.tensors().iter().enumerate() {
            batched[i] = matches!(t.role, Role::Input | Role::Label) && t.shape.rank() > 0;
        }
        for node in self.nodes() {
            if node.stage != Stage::Forward {
                return Err(invalid(&node.name, "only a forward graph can be rebatched".into()));
            }
            let carries = node.inputs.first().is_some_and(|x| batched[x.index()])
                || (matches!(node.op, Op::Add | Op::Concat(_) | Op::QConcat(_))
                    && node.inputs.iter().any(|x| batched[x.index()]));
            // Losses are scalars; batch norm's saved statistics are per channel.
            let scalar = matches!(node.op, Op::CrossEntropy | Op::Mse);
            if let (true, false, Some(y)) = (carries, scalar, node.outputs.first()) {
                if self.shape(*y).dim(0) != Some(old) {
                    let detail = format!(
                        "output {} does not lead with the batch size {old}",
                        self.shape(*y)
                    );
                    return Err(invalid(&node.name, detail));
                }
                batched[y.index()] = true;
            }
        }
        let tensors = self
            .tensors()
            .iter()
            .zip(&batched)
            .map(|(t, &b)| {
                let mut t = t.clone();
                if b {
                    t.shape = t.shape.with_batch(batch);
                }
                t
            })
            .collect();
        Graph::from_parts(self.seed(), tensors, self.nodes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile_inference;
    use crate::ops::{ConvParams, PoolParams};
    use crate::shape::Shape;
    use crate::tensor::TensorId;
    use crate::{nn, Executor, Reference};
    use alloc::vec::Vec;

    fn model(batch: usize) -> (Graph, TensorId) {
        let mut g = Graph::new(4);
        let x = g.input("x", Shape::d4(batch, 2, 6, 6)).unwrap();
        let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
        let h = nn::conv2d(&mut g, "conv", x, 4, 3, same, false).unwrap();
        let h = nn::batch_norm2d(&mut g, "bn", h).unwrap();
        let h = g.relu("act", h).unwrap();
        let pool =
            PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true };
        let h = g.max_pool2d("pool", h, pool).unwrap();
        let h = g.flatten("flat", h).unwrap();
        let y = nn::linear(&mut g, "fc", h, 3).unwrap();
        (g, y)
    }

    fn logits(graph: &Graph, out: TensorId, x: &[f32]) -> Vec<f32> {
        let plan = compile_inference(graph, &[out]).unwrap();
        let mut memory = plan.initial_memory(graph);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let mut regions = memory.regions();
        regions.write(&plan.operand("x").unwrap(), x).unwrap();
        exec.run(&mut regions).unwrap();
        regions.read::<f32>(&plan.operand("fc").unwrap()).unwrap().to_vec()
    }

    #[test]
    fn a_rebatched_model_gives_each_sample_the_single_sample_result() {
        let (single, out) = model(1);
        let four = single.with_batch(4).expect("rebatching a forward graph");
        assert_eq!(four.shape(out), Shape::d2(4, 3));
        let x: Vec<f32> = (0..4 * 72).map(|i| ((i * 13) % 29) as f32 / 14.0 - 1.0).collect();
        let together = logits(&four, out, &x);
        for (sample, chunk) in x.chunks(72).enumerate() {
            assert_eq!(logits(&single, out, chunk), together[sample * 3..sample * 3 + 3]);
        }
    }

    #[test]
    fn a_reshape_that_folds_the_batch_away_is_refused() {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(2, 4)).unwrap();
        g.reshape("fold", x, Shape::d1(8)).unwrap();
        let err = g.with_batch(3).err().expect("the reshape folds the batch away");
        assert!(
            matches!(err, GraphError::Invalid { op: "with_batch", ref node, .. } if node == "fold")
        );
    }

    #[test]
    fn a_training_graph_is_refused() {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d2(2, 4)).unwrap();
        let t = g.target("t", Shape::d2(2, 3)).unwrap();
        let y = nn::linear(&mut g, "fc", x, 3).unwrap();
        let loss = g.mse("loss", y, t).unwrap();
        let w = g.find("fc.weight").unwrap();
        let d = crate::differentiate(&g, loss, &[w]).unwrap();
        assert!(d.graph.with_batch(3).is_err());
        assert_eq!(g.with_batch(3).map(|g| g.shape(loss)).ok(), Some(Shape::SCALAR));
    }
}
