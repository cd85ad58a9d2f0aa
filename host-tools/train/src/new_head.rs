//! A new classifier on a trained backbone (PyTorch's `model.fc = nn.Linear(in, n)`): the
//! last dense layer, or 1x1 convolution, that feeds the logits is replaced by a freshly
//! initialised one for another number of classes; everything before it keeps its values.

use sprout_core::graph::Stage;
use sprout_core::op::Op;
use sprout_core::{nn, Graph, Shape, TensorId};

use crate::TrainError;

fn refuse(detail: String) -> TrainError {
    TrainError::Mismatch(format!("--new-head: {detail}"))
}

/// `graph` with the classifier producing `logits` (`[N, classes]`) resized to `classes`
/// outputs and initialised afresh from `seed` ([`nn::uniform_seeded`], not the graph's
/// own seed, so that `--seed` chooses the new head). Between that classifier and the
/// logits, only layers that keep the class axis (1) may stand: activations, pooling,
/// flattening. Returns the new graph and the classifier's parameters (the new head).
pub fn with_new_head(
    graph: &Graph,
    logits: TensorId,
    classes: usize,
    seed: u64,
) -> Result<(Graph, Vec<TensorId>), TrainError> {
    if classes == 0 {
        return Err(refuse("a classifier needs at least 1 class".into()));
    }
    let old = graph.shape(logits).dim(1).unwrap_or(0);
    let producer = |t: TensorId| {
        graph.nodes().iter().find(|n| n.stage == Stage::Forward && n.outputs.first() == Some(&t))
    };
    // From the logits back to the classifier: tensors whose class axis changes.
    let mut chain = vec![logits];
    let classifier = loop {
        let at = *chain.last().expect("the chain starts with the logits");
        let Some(node) = producer(at) else {
            return Err(refuse(format!(
                "no dense layer or 1x1 convolution produces the logits '{}'",
                graph.tensor(logits).name
            )));
        };
        let weight = node.inputs.get(1).map(|&w| graph.shape(w));
        match (&node.op, weight.as_ref().map(Shape::dims)) {
            (Op::Linear, Some(&[out, _])) if out == old => break node,
            (Op::Conv2d(_), Some(&[out, _, 1, 1])) if out == old => break node,
            _ => {}
        }
        let input = node.inputs[0];
        if graph.shape(input).dim(1) != Some(old) {
            return Err(refuse(format!(
                "'{}' ({}) changes the class axis between the classifier and the logits",
                node.name,
                node.op.kind()
            )));
        }
        chain.push(input);
    };
    chain.push(classifier.outputs[0]);
    let (weight, bias) = (classifier.inputs[1], classifier.inputs.get(2).copied());
    let fan_in = graph.shape(weight).numel() / old.max(1);
    let mut tensors = graph.tensors().to_vec();
    let resize = |shape: Shape| {
        let mut dims = shape.dims().to_vec();
        dims[0] = classes;
        Shape::new(&dims).expect("the rank is unchanged")
    };
    for t in [Some(weight), bias].into_iter().flatten() {
        let info = &mut tensors[t.index()];
        info.shape = resize(info.shape);
        info.init = Some(nn::uniform_seeded(seed, &info.name, fan_in));
    }
    for &t in &chain {
        let info = &mut tensors[t.index()];
        let mut dims = info.shape.dims().to_vec();
        dims[1] = classes;
        info.shape = Shape::new(&dims).expect("the rank is unchanged");
    }
    let rebuilt = Graph::from_parts(graph.seed(), tensors, graph.nodes().to_vec())?;
    Ok((rebuilt, [Some(weight), bias].into_iter().flatten().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::op::ConvParams;

    const ONE: ConvParams = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };

    #[test]
    fn a_1x1_convolution_classifier_is_resized_through_relu_and_pooling() {
        let mut g = Graph::new(5);
        let x = g.input("x", Shape::d4(2, 4, 3, 3)).unwrap();
        let y = nn::conv2d(&mut g, "classifier.1", x, 6, 1, ONE, true).unwrap();
        let y = g.relu("classifier.2", y).unwrap();
        let logits = g.global_avg_pool("pool", y).unwrap();
        let (new, head) = with_new_head(&g, logits, 3, 7).unwrap();
        assert_eq!(new.shape(logits).dims(), [2, 3]);
        assert_eq!(new.shape(head[0]).dims(), [3, 4, 1, 1]);
        assert_eq!(new.shape(head[1]).dims(), [3]);
        assert_eq!(new.shape(new.find("classifier.2").unwrap()).dims(), [2, 3, 3, 3]);

        // A layer that mixes the class axis cannot stand between classifier and logits.
        let mut g = Graph::new(5);
        let x = g.input("x", Shape::d4(2, 4, 3, 3)).unwrap();
        let y = nn::conv2d(&mut g, "a", x, 6, 3, ONE, true).unwrap();
        let logits = g.global_avg_pool("pool", y).unwrap();
        let error = with_new_head(&g, logits, 3, 7).err().unwrap().to_string();
        assert!(error.contains("'a' (conv2d) changes the class axis"), "{error}");
    }

    #[test]
    fn the_new_head_is_drawn_from_the_seed_given_not_the_graphs() {
        let head_init = |graph_seed: u64, seed: u64| {
            let mut g = Graph::new(graph_seed);
            let x = g.input("x", Shape::d2(2, 4)).unwrap();
            let logits = nn::linear(&mut g, "fc", x, 5).unwrap();
            let (new, head) = with_new_head(&g, logits, 3, seed).unwrap();
            head.iter().map(|&t| new.tensor(t).init.clone()).collect::<Vec<_>>()
        };
        assert_eq!(head_init(1, 9), head_init(2, 9));
        assert_ne!(head_init(1, 9), head_init(1, 10));
    }
}
