//! Export: a zoo model's inference part goes to ONNX and comes back with the same outputs
//! and names; weights go to safetensors and load back with the `safetensors` crate.

mod common;

use common::*;
use prost::Message;
use sprout_onnx::proto::{tensor_shape_proto::dimension, type_proto, ModelProto};
use sprout_onnx::{
    export_onnx, export_safetensors, graph_weights, import, import_with, state_dict, ImportOptions,
};
use sprout_zoo::{build, Architecture};

#[test]
fn leafnet_exports_and_imports_back_with_equal_outputs() {
    let model = build(Architecture::LeafNet, 1, 1).unwrap();
    let weights = graph_weights(&model.graph);
    let bytes = export_onnx(&model.graph, &weights).expect("exports");

    // The ONNX model: opset 13, a dynamic batch axis, sprout's names on the initializers,
    // no loss and no labels.
    let proto = ModelProto::decode(bytes.as_slice()).unwrap();
    assert_eq!(proto.opset_import[0].version, Some(13));
    let graph = proto.graph.as_ref().unwrap();
    assert_eq!(graph.input.len(), 1);
    assert_eq!(graph.input[0].name.as_deref(), Some("input"));
    assert_eq!(graph.output.len(), 1);
    assert_eq!(graph.output[0].name.as_deref(), Some("classifier.1"));
    for info in [&graph.input[0], &graph.output[0]] {
        let Some(type_proto::Value::TensorType(t)) = info.r#type.as_ref().unwrap().value.as_ref()
        else {
            panic!()
        };
        let first = t.shape.as_ref().unwrap().dim[0].value.clone();
        assert_eq!(first, Some(dimension::Value::DimParam("batch".into())));
    }
    let names: Vec<_> = graph.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    for name in [
        "classifier.1.weight",
        "classifier.1.bias",
        "features.0.0.weight",
        "features.0.1.running_var",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let ops: Vec<_> = graph.node.iter().filter_map(|n| n.op_type.as_deref()).collect();
    assert!(
        ops.contains(&"BatchNormalization") && ops.contains(&"Dropout") && ops.contains(&"Clip")
    );
    assert!(!graph.node.iter().any(|n| n.input.iter().any(|i| i == "labels")));

    // Back into sprout: same names, same outputs.
    let imported = import(&bytes).expect("imports");
    let g = &imported.graph;
    let buffers = model.graph.with_role(sprout_core::Role::Buffer);
    for id in model.graph.parameters().chain(buffers) {
        let t = model.graph.tensor(id);
        let back = g.find(&t.name).unwrap_or_else(|| panic!("{} lost", t.name));
        assert_eq!(g.tensor(back).shape, t.shape, "{}", t.name);
        assert_eq!(
            g.tensor(back).init.as_ref().unwrap().materialize(t.shape.numel()),
            weights[&t.name]
        );
    }
    let x = values(5, 3 * 64 * 64, -1.0, 1.0);
    let original = run(&model.graph, model.input, model.logits, &x);
    let again = run(g, imported.input, imported.outputs[0], &x);
    assert_eq!(g.tensor(imported.outputs[0]).name, "classifier.1");
    for (a, b) in original.iter().zip(&again) {
        assert!((a - b).abs() <= 1e-6, "{original:?} vs {again:?}");
    }

    // The dynamic axis takes another batch size.
    let four =
        import_with(&bytes, &ImportOptions { batch: Some(4), ..Default::default() }).unwrap();
    assert_eq!(four.graph.shape(four.input).dim(0), Some(4));
    let x4: Vec<f32> = x.iter().cycle().take(4 * x.len()).cloned().collect();
    let y4 = run(&four.graph, four.input, four.outputs[0], &x4);
    for row in y4.chunks(3) {
        for (a, b) in row.iter().zip(&original) {
            assert!((a - b).abs() <= 1e-5, "{row:?} vs {original:?}");
        }
    }
}

#[test]
fn an_mlp_round_trips_through_onnx() {
    let model = build(Architecture::Mlp, 2, 3).unwrap();
    let bytes = export_onnx(&model.graph, &graph_weights(&model.graph)).unwrap();
    let imported =
        import_with(&bytes, &ImportOptions { batch: Some(2), ..Default::default() }).unwrap();
    let x = values(6, 2 * 64, -1.0, 1.0);
    let a = run(&model.graph, model.input, model.logits, &x);
    let b = run(&imported.graph, imported.input, imported.outputs[0], &x);
    assert_eq!(a, b);
}

#[test]
fn safetensors_export_loads_back_with_the_same_names_and_values() {
    let model = build(Architecture::LeafNet, 1, 2).unwrap();
    let weights = graph_weights(&model.graph);
    let tensors = state_dict(&model.graph, &weights).unwrap();
    assert!(
        tensors.iter().any(|(n, _, _)| n == "features.0.1.running_mean"),
        "buffers are in the state dict"
    );
    let bytes = export_safetensors(&tensors).unwrap();
    let loaded = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(loaded.len(), tensors.len());
    for (name, shape, values) in &tensors {
        let t = loaded.tensor(name).unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::F32);
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
        let back: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(&back, values, "{name}");
    }
    // A shape that does not fit the values is an error, not a panic.
    let bad = vec![("w".to_string(), vec![2, 2], vec![1.0f32; 3])];
    assert!(export_safetensors(&bad).is_err());
}

#[test]
fn a_dilated_convolution_exports_as_one_conv_with_its_dilations_and_reads_back() {
    use sprout_core::op::ConvParams;
    use sprout_core::{Graph, Init, Shape};
    let mut g = Graph::new(3);
    let x = g.input("input", Shape::d4(1, 2, 9, 9)).unwrap();
    let w = g.parameter("conv.weight", Shape::d4(4, 1, 3, 2), Init::Zeros).unwrap();
    g.set_initial_values(w, values(11, 24, -1.0, 1.0)).unwrap();
    let p = ConvParams { stride: (2, 1), padding: (2, 3), groups: 2 };
    let y = g.dilated_conv2d("conv", x, w, None, p, (2, 3)).unwrap();
    let bytes = export_onnx(&g, &graph_weights(&g)).unwrap();
    let proto = ModelProto::decode(bytes.as_slice()).unwrap();
    let graph = proto.graph.unwrap();
    let [conv] = &graph.node[..] else { panic!("one node expected: {:?}", graph.node) };
    assert_eq!(conv.op_type.as_deref(), Some("Conv"));
    assert_eq!(conv.input, ["input", "conv.weight"]);
    let attr = |name: &str| conv.attribute.iter().find(|a| a.name.as_deref() == Some(name));
    assert_eq!(attr("dilations").unwrap().ints, [2, 3]);
    assert_eq!(attr("kernel_shape").unwrap().ints, [3, 2]);
    let back = import(&bytes).unwrap();
    let input = values(12, 2 * 81, -1.0, 1.0);
    let again = run(&back.graph, back.input, back.outputs[0], &input);
    assert_eq!(run(&g, x, y, &input), again);
    let kernel = back.graph.find("conv.weight").unwrap();
    assert_eq!(back.graph.shape(kernel), Shape::d4(4, 1, 3, 2));
}

#[test]
fn a_layer_norm_over_channels_and_space_exports_and_reads_back() {
    use sprout_core::{Graph, Init, Shape};
    // PyTorch's `nn.LayerNorm([C, H, W])`: sprout keeps its 2·3·4 values flat, ONNX as
    // [2, 3, 4] over the last three axes.
    let mut g = Graph::new(3);
    let x = g.input("input", Shape::d4(2, 2, 3, 4)).unwrap();
    let gamma = g.parameter("ln.weight", Shape::d1(24), Init::Zeros).unwrap();
    let beta = g.parameter("ln.bias", Shape::d1(24), Init::Zeros).unwrap();
    g.set_initial_values(gamma, values(21, 24, 0.5, 1.5)).unwrap();
    g.set_initial_values(beta, values(22, 24, -0.1, 0.1)).unwrap();
    let y = g.layer_norm("ln", x, gamma, beta, 1e-5).unwrap();
    let bytes = export_onnx(&g, &graph_weights(&g)).unwrap();
    let graph = ModelProto::decode(bytes.as_slice()).unwrap().graph.unwrap();
    for name in ["ln.weight", "ln.bias"] {
        let init = graph.initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap();
        assert_eq!(init.dims, [2, 3, 4], "{name}");
    }
    let means: Vec<_> =
        graph.node.iter().filter(|n| n.op_type.as_deref() == Some("ReduceMean")).collect();
    assert_eq!(means.len(), 2);
    for mean in means {
        assert_eq!(mean.attribute[0].ints, [-3, -2, -1]);
    }
    let back =
        import_with(&bytes, &ImportOptions { batch: Some(2), ..Default::default() }).unwrap();
    let layer_norms = back.graph.nodes().iter().filter(|n| n.op.kind() == "layer_norm").count();
    assert_eq!(layer_norms, 1, "the chain reads back as one layer norm");
    let input = values(23, 48, -2.0, 2.0);
    let (want, got) =
        (run(&g, x, y, &input), run(&back.graph, back.input, back.outputs[0], &input));
    for (a, b) in want.iter().zip(&got) {
        assert!((a - b).abs() <= 1e-6, "{want:?} vs {got:?}");
    }
    assert_eq!(back.graph.shape(back.graph.find("ln.weight").unwrap()), Shape::d1(24));
}
