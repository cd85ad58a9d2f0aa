//! `sprout convert`, `sprout export` and `sprout import-weights` end to end: an ONNX model
//! written here converts to a `.sprout` file that runs to hand-computed outputs; a zoo model
//! exports to ONNX and safetensors and comes back equal; safetensors weights apply back by
//! name; errors exit non-zero and leave no file behind.

mod common;

use prost::Message;
use sprout_core::format::{Metadata, ModelFile, Preprocessing};
use sprout_core::{
    compile_inference, load_model, save_model, Executor, Graph, Reference, TensorId,
};
use sprout_onnx::proto::{
    AttributeProto, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use sprout_zoo::{build, Architecture};

use common::{s, sprout, text, values, Scratch};

fn run(graph: &Graph, input: TensorId, output: TensorId, x: &[f32]) -> Vec<f32> {
    let plan = compile_inference(graph, &[output]).unwrap();
    let mut memory = plan.initial_memory(graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = memory.regions();
    regions.write(&plan.binding_of(input).unwrap().operand, x).unwrap();
    exec.run(&mut regions).unwrap();
    regions.read::<f32>(&plan.binding_of(output).unwrap().operand).unwrap().to_vec()
}

/// Flatten → Gemm(6 → 4, transB) → Relu → Gemm(4 → 2) on `[batch, 1, 2, 3]`.
fn small_onnx(w1: &[f32], w2: &[f32]) -> Vec<u8> {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Flatten", "flatten", &["x"], &["f"]),
            NodeProto::new("Gemm", "fc1", &["f", "fc1.weight", "fc1.bias"], &["h"])
                .with(AttributeProto::int("transB", 1)),
            NodeProto::new("Relu", "relu", &["h"], &["r"]),
            NodeProto::new("Gemm", "fc2", &["r", "fc2.weight"], &["y"])
                .with(AttributeProto::int("transB", 1)),
        ],
        initializer: vec![
            TensorProto::f32("fc1.weight", &[4, 6], w1),
            TensorProto::f32("fc1.bias", &[4], &[0.1, -0.2, 0.3, 0.0]),
            TensorProto::f32("fc2.weight", &[2, 4], w2),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Symbolic("batch".into()), Dim::Fixed(1), Dim::Fixed(2), Dim::Fixed(3)],
        )],
        output: vec![ValueInfoProto::f32("y", &[Dim::Symbolic("batch".into()), Dim::Fixed(2)])],
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

#[test]
fn convert_writes_a_sprout_model_that_runs() {
    let scratch = Scratch::new("convert");
    let (w1, w2) = (values(1, 24), values(2, 8));
    let (onnx, out) = (scratch.path("m.onnx"), scratch.path("m.sprout"));
    std::fs::write(&onnx, small_onnx(&w1, &w2)).unwrap();
    let output = sprout(&["convert", s(&onnx), "-o", s(&out), "--batch", "2"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("opset 13"), "{}", text(&output.stdout));
    assert_eq!(scratch.files(), ["m.onnx", "m.sprout"], "no temporary file is left");

    let model = load_model(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(model.metadata.input_shape, sprout_core::Shape::d4(2, 1, 2, 3));
    let graph = model.to_graph().unwrap();
    let (x_id, y_id) = (graph.find("x").unwrap(), graph.find("y").unwrap());
    let x = values(3, 12);
    let y = run(&graph, x_id, y_id, &x);
    let b1 = [0.1f64, -0.2, 0.3, 0.0];
    for n in 0..2 {
        let h: Vec<f64> = (0..4)
            .map(|o| {
                (b1[o] + (0..6).map(|k| x[n * 6 + k] as f64 * w1[o * 6 + k] as f64).sum::<f64>())
                    .max(0.0)
            })
            .collect();
        for o in 0..2 {
            let e: f64 = (0..4).map(|k| h[k] * w2[o * 4 + k] as f64).sum();
            assert!((y[n * 2 + o] as f64 - e).abs() < 1e-5, "y[{n},{o}] = {} vs {e}", y[n * 2 + o]);
        }
    }
}

#[test]
fn plan_reports_a_converted_model() {
    let scratch = Scratch::new("convert-plan");
    let (onnx, model) = (scratch.path("m.onnx"), scratch.path("m.sprout"));
    std::fs::write(&onnx, small_onnx(&values(1, 24), &values(2, 8))).unwrap();
    let output = sprout(&["convert", s(&onnx), "-o", s(&model), "--batch-size", "2"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let output = sprout(&["plan", s(&model), "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // fc1: 6·4 + 4, fc2: 4·2 (no bias), all trained.
    assert_eq!(
        (report["batch"].as_u64(), report["trainable_params"].as_u64()),
        (Some(2), Some(36))
    );
    assert!(report["arena_bytes"].as_u64() >= report["lower_bound_bytes"].as_u64());
    let head = sprout(&["plan", s(&model), "--trainable", "head", "--json"]);
    let head: serde_json::Value = serde_json::from_slice(&head.stdout).unwrap();
    assert_eq!(head["trainable_params"].as_u64(), Some(8), "the last linear layer: fc2");
}

#[test]
fn export_round_trips_a_zoo_model_through_onnx_and_safetensors() {
    let scratch = Scratch::new("export");
    let zoo = build(Architecture::LeafNet, 1, 7).unwrap();
    let metadata = Metadata {
        class_names: vec!["healthy".into(), "leaf_spot".into(), "rust".into()],
        input_shape: zoo.graph.shape(zoo.input),
        preprocessing: Preprocessing::default(),
        provenance: "test".into(),
    };
    let model = scratch.path("leafnet.sprout");
    std::fs::write(&model, save_model(&ModelFile::from_graph(&zoo.graph, metadata)).unwrap())
        .unwrap();

    let onnx = scratch.path("leafnet.onnx");
    let output = sprout(&["export", s(&model), "--format", "onnx", "-o", s(&onnx)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let imported = sprout_onnx::import(&std::fs::read(&onnx).unwrap()).unwrap();
    let x = values(9, 3 * 64 * 64);
    let a = run(&zoo.graph, zoo.input, zoo.logits, &x);
    let b = run(&imported.graph, imported.input, imported.outputs[0], &x);
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-6), "{a:?} vs {b:?}");

    // And back to .sprout through `convert`.
    let again = scratch.path("again.sprout");
    let output = sprout(&["convert", s(&onnx), "-o", s(&again)]);
    assert!(output.status.success(), "{}", text(&output.stderr));

    let st = scratch.path("leafnet.safetensors");
    let output = sprout(&["export", s(&model), "--format", "safetensors", "-o", s(&st)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let bytes = std::fs::read(&st).unwrap();
    let loaded = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let head = loaded.tensor("classifier.1.weight").unwrap();
    assert_eq!(head.shape(), [3, 192]);
    let stored = zoo.graph.tensor(zoo.graph.find("classifier.1.weight").unwrap());
    let expected = stored.init.as_ref().unwrap().materialize(3 * 192);
    let back: Vec<f32> =
        head.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(back, expected);
    assert!(loaded.tensor("features.0.1.running_var").is_ok());
    assert_eq!(
        scratch.files(),
        ["again.sprout", "leafnet.onnx", "leafnet.safetensors", "leafnet.sprout"]
    );
}

#[test]
fn an_unsupported_op_fails_with_its_name_and_leaves_no_file() {
    let scratch = Scratch::new("unsupported");
    let graph = GraphProto {
        node: vec![NodeProto::new("LSTM", "encoder_lstm", &["x"], &["y"])],
        input: vec![ValueInfoProto::f32("x", &[Dim::Fixed(1), Dim::Fixed(4)])],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let onnx = scratch.path("lstm.onnx");
    std::fs::write(&onnx, ModelProto::new(graph, 13).encode_to_vec()).unwrap();
    let out = scratch.path("lstm.sprout");
    let output = sprout(&["convert", s(&onnx), "-o", s(&out)]);
    assert_eq!(output.status.code(), Some(1));
    let err = text(&output.stderr);
    assert!(err.contains("LSTM") && err.contains("encoder_lstm"), "{err}");
    assert_eq!(scratch.files(), ["lstm.onnx"], "no output or temporary file");

    // Garbage input: an error, and an existing output file stays as it was.
    let junk = scratch.path("junk.onnx");
    std::fs::write(&junk, b"\xff\xfe not protobuf").unwrap();
    std::fs::write(&out, b"previous").unwrap();
    let output = sprout(&["convert", s(&junk), "-o", s(&out)]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("not a valid ONNX model"), "{}", text(&output.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), b"previous");

    // Exporting something that is not a .sprout file fails the same way.
    let onnx_out = scratch.path("x.onnx");
    let output = sprout(&["export", s(&junk), "--format", "onnx", "-o", s(&onnx_out)]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!onnx_out.exists());
    assert_eq!(scratch.files(), ["junk.onnx", "lstm.onnx", "lstm.sprout"]);
}

#[test]
fn import_weights_applies_safetensors_by_name_and_refuses_mismatches() {
    let scratch = Scratch::new("import-weights");
    let model = scratch.path("tiny.sprout");
    common::tiny_model(&model);
    let exported = scratch.path("tiny.safetensors");
    let output = sprout(&["export", s(&model), "--format", "safetensors", "-o", s(&exported)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut head: Vec<_> = sprout_onnx::read_safetensors(&std::fs::read(&exported).unwrap())
        .unwrap()
        .into_iter()
        .filter(|(name, _, _)| name.starts_with("classifier"))
        .collect();
    head.iter_mut().for_each(|(_, _, v)| v.iter_mut().for_each(|x| *x = 0.5));
    let weights = scratch.path("head.safetensors");
    std::fs::write(&weights, sprout_onnx::export_safetensors(&head).unwrap()).unwrap();

    let out = scratch.path("out.sprout");
    let output = sprout(&["import-weights", s(&model), "--weights", s(&weights), "-o", s(&out)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("applied 2 tensors"));
    let graph = load_model(&std::fs::read(&out).unwrap()).unwrap().to_graph().unwrap();
    let weights_out = sprout_onnx::graph_weights(&graph);
    assert_eq!(weights_out["classifier.weight"], vec![0.5; 24]);
    let before = sprout_onnx::graph_weights(
        &load_model(&std::fs::read(&model).unwrap()).unwrap().to_graph().unwrap(),
    );
    assert_eq!(weights_out["features.0.weight"], before["features.0.weight"]);

    let bad = scratch.path("bad.safetensors");
    let wrong = [("classifier.bias".to_string(), vec![4], vec![0.0; 4])];
    std::fs::write(&bad, sprout_onnx::export_safetensors(&wrong).unwrap()).unwrap();
    let refused = scratch.path("refused.sprout");
    let output = sprout(&["import-weights", s(&model), "--weights", s(&bad), "-o", s(&refused)]);
    assert_eq!(output.status.code(), Some(1));
    let err = text(&output.stderr);
    assert!(err.contains("'classifier.bias'") && err.contains("shape [4]"), "{err}");
    assert!(!refused.exists());
    let output = sprout(&["import-weights", s(&model), "--weights", s(&weights), "-o", s(&model)]);
    assert_eq!(output.status.code(), Some(1), "the model is never overwritten");
}
