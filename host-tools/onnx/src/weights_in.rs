//! safetensors → sprout: reads the named F32 tensors of a safetensors file and applies
//! them onto a graph's parameters and buffers (the inverse of [`state_dict`](crate::state_dict)),
//! refusing unknown names, other shapes or dtypes and values that are not finite.

use crate::error::OnnxError;
use crate::export::NamedTensor;
use sprout_core::{Graph, ModelFile, Role};

fn weight_error(name: &str, detail: impl Into<String>) -> OnnxError {
    OnnxError::Weight { name: name.into(), detail: detail.into() }
}

/// The tensors of a safetensors file, in the file's order. Every tensor must be F32; the
/// header's offsets are checked against the bytes before any value is copied.
pub fn read_safetensors(bytes: &[u8]) -> Result<Vec<NamedTensor>, OnnxError> {
    let file = safetensors::SafeTensors::deserialize(bytes)?;
    let mut tensors = Vec::with_capacity(file.len());
    for name in file.names() {
        let view = file.tensor(name)?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(weight_error(
                name,
                format!("dtype {:?}: only F32 tensors can be applied", view.dtype()),
            ));
        }
        let values =
            view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        tensors.push((name.to_string(), view.shape().to_vec(), values.collect()));
    }
    Ok(tensors)
}

/// Gives each parameter or buffer of `graph` named in `tensors` those values. Every name
/// must be a parameter or buffer of the graph, every shape must be its shape and every
/// value finite; nothing is changed unless all tensors pass. Returns how many were applied.
pub fn apply_state_dict(graph: &mut Graph, tensors: &[NamedTensor]) -> Result<usize, OnnxError> {
    let mut targets = Vec::with_capacity(tensors.len());
    for (name, shape, values) in tensors {
        let id = graph.find(name).ok_or_else(|| {
            weight_error(name, "the model has no parameter or buffer of this name")
        })?;
        let tensor = graph.tensor(id);
        if !matches!(tensor.role, Role::FrozenParam | Role::TrainableParam | Role::Buffer) {
            return Err(weight_error(
                name,
                format!("a {:?} tensor, not a parameter or buffer", tensor.role),
            ));
        }
        if shape.as_slice() != tensor.shape.dims() {
            return Err(weight_error(
                name,
                format!("shape {shape:?} given, the model's is {:?}", tensor.shape.dims()),
            ));
        }
        if values.len() != tensor.shape.numel() {
            return Err(weight_error(
                name,
                format!("{} values given for shape {shape:?}", values.len()),
            ));
        }
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            return Err(weight_error(
                name,
                format!("value {} at index {at} is not finite", values[at]),
            ));
        }
        targets.push(id);
    }
    for (id, (name, _, values)) in targets.into_iter().zip(tensors) {
        graph
            .set_initial_values(id, values.clone())
            .map_err(|source| OnnxError::Graph { context: format!("weight '{name}'"), source })?;
    }
    Ok(tensors.len())
}

/// `file` with `tensors` applied onto its graph ([`apply_state_dict`]'s checks): the same
/// graph and metadata, new stored values; also how many tensors were applied.
pub fn with_weights(
    file: &ModelFile,
    tensors: &[NamedTensor],
) -> Result<(ModelFile, usize), OnnxError> {
    let mut graph = file.to_graph().map_err(|e| OnnxError::Malformed { detail: e.to_string() })?;
    let applied = apply_state_dict(&mut graph, tensors)?;
    Ok((ModelFile::from_graph(&graph, file.metadata.clone()), applied))
}

#[cfg(test)]
mod tests {
    use super::{apply_state_dict, read_safetensors, with_weights};
    use crate::{export_safetensors, graph_weights, state_dict, OnnxError};
    use sprout_core::{load_model, nn, save_model, Graph, Metadata, ModelFile, Shape};

    /// A two-layer classifier on 4 features: `fc1` (3x4) and `fc2` (2x3).
    fn graph() -> Graph {
        let mut g = Graph::new(7);
        let x = g.input("input", Shape::d2(2, 4)).unwrap();
        let h = nn::linear(&mut g, "fc1", x, 3).unwrap();
        nn::linear(&mut g, "fc2", h, 2).unwrap();
        g
    }

    fn detail(error: OnnxError) -> (String, String) {
        match error {
            OnnxError::Weight { name, detail } => (name, detail),
            other => panic!("not a weight error: {other}"),
        }
    }

    #[test]
    fn a_state_dict_round_trips_through_safetensors_onto_another_graph() {
        let source = graph();
        let mut tensors = state_dict(&source, &graph_weights(&source)).unwrap();
        for (_, _, values) in &mut tensors {
            values.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32 * 0.5);
        }
        let read = read_safetensors(&export_safetensors(&tensors).unwrap()).unwrap();
        let mut sorted = tensors.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut read_sorted = read.clone();
        read_sorted.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(read_sorted, sorted);

        let mut target = graph();
        let before = graph_weights(&target);
        // Only the second layer: the first keeps its values.
        let fc2: Vec<_> = read.into_iter().filter(|t| t.0.starts_with("fc2")).collect();
        assert_eq!(apply_state_dict(&mut target, &fc2).unwrap(), 2);
        let after = graph_weights(&target);
        assert_eq!(after["fc1.weight"], before["fc1.weight"]);
        let fc2_weight = fc2.iter().find(|t| t.0 == "fc2.weight").unwrap();
        assert_eq!(after["fc2.weight"], fc2_weight.2);
        assert_ne!(after["fc2.weight"], before["fc2.weight"]);
    }

    #[test]
    fn unknown_names_other_shapes_and_non_finite_values_are_refused_untouched() {
        let mut target = graph();
        let before = graph_weights(&target);
        let good = ("fc1.bias".to_string(), vec![3], vec![1.0; 3]);
        let cases = [
            (("fc9.weight".to_string(), vec![2], vec![0.0; 2]), "fc9.weight", "no parameter"),
            (("fc2.weight".to_string(), vec![3, 2], vec![0.0; 6]), "fc2.weight", "shape [3, 2]"),
            (("fc2.bias".to_string(), vec![2], vec![0.0, f32::NAN]), "fc2.bias", "index 1"),
            (("fc2.bias".to_string(), vec![2], vec![f32::INFINITY, 0.0]), "fc2.bias", "inf"),
            (("input".to_string(), vec![2, 4], vec![0.0; 8]), "input", "not a parameter"),
        ];
        for (bad, name, words) in cases {
            let error = apply_state_dict(&mut target, &[good.clone(), bad]).unwrap_err();
            let (named, text) = detail(error);
            assert_eq!(named, name);
            assert!(text.contains(words), "{name}: {text}");
            assert_eq!(graph_weights(&target), before, "nothing applied after {name}");
        }
    }

    #[test]
    fn other_dtypes_and_truncated_files_are_refused() {
        let data = [0u8; 4];
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![1], &data).unwrap();
        let bytes = safetensors::serialize([("count", view)], None).unwrap();
        let (name, text) = detail(read_safetensors(&bytes).unwrap_err());
        assert_eq!(name, "count");
        assert!(text.contains("I32"), "{text}");

        let good = export_safetensors(&[("w".into(), vec![4], vec![1.0; 4])]).unwrap();
        let error = read_safetensors(&good[..good.len() - 4]).unwrap_err();
        assert!(matches!(error, OnnxError::Safetensors(_)), "{error}");
        assert!(matches!(read_safetensors(b"not a file").unwrap_err(), OnnxError::Safetensors(_)));
    }

    #[test]
    fn a_model_file_with_weights_saves_and_loads_with_them() {
        let metadata = Metadata {
            class_names: vec!["a".into(), "b".into()],
            input_shape: Shape::d2(2, 4),
            preprocessing: Default::default(),
            provenance: "test".into(),
        };
        let file = ModelFile::from_graph(&graph(), metadata);
        let bias = ("fc2.bias".to_string(), vec![2], vec![0.25, -4.0]);
        let (updated, applied) = with_weights(&file, std::slice::from_ref(&bias)).unwrap();
        assert_eq!(applied, 1);
        let reloaded = load_model(&save_model(&updated).unwrap()).unwrap();
        let weights = graph_weights(&reloaded.to_graph().unwrap());
        assert_eq!(weights["fc2.bias"], bias.2);
        assert_eq!(weights["fc1.weight"], graph_weights(&graph())["fc1.weight"]);
        assert_eq!(reloaded.graph, file.graph, "the graph itself is unchanged");
    }
}
