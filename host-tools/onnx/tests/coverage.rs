//! The operators and settings PyTorch's exporters emit for ordinary CNNs, opsets 11 to
//! 24: each model is written here with prost, imported, run and compared with a forward
//! pass computed here in f64 loops; shape subgraphs fold; refusals name the opset.

mod common;

use common::*;
use prost::Message;
use sprout_core::op::Op;
use sprout_core::Role;
use sprout_onnx::proto::{
    AttributeProto as A, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use sprout_onnx::{import, import_with, ImportOptions, OnnxError};

const N: usize = 2;

/// The weights the coverage model reads, as the test draws them.
struct Weights {
    mean: Vec<f32>,
    std: Vec<f32>,
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    shift: Vec<f32>,
    bn: [Vec<f32>; 4],
    fc_w: Vec<f32>,
    fc_b: Vec<f32>,
}

fn weights() -> Weights {
    Weights {
        mean: values(20, 3, -0.3, 0.3),
        std: values(21, 3, 0.5, 1.5),
        w1: values(22, 4 * 3 * 9, -0.5, 0.5),
        b1: values(23, 4, -0.3, 0.3),
        w2: values(24, 4 * 4 * 9, -0.4, 0.4),
        shift: values(25, 4, -0.5, 0.5),
        bn: [
            values(26, 4, 0.5, 1.5),
            values(27, 4, -0.5, 0.5),
            values(28, 4, -0.3, 0.3),
            values(29, 4, 0.5, 2.0),
        ],
        fc_w: values(30, 3 * 4, -1.0, 1.0),
        fc_b: values(31, 3, -0.5, 0.5),
    }
}

/// `Sub`/`Div` by `[1, 3, 1, 1]` and `[3, 1, 1]` constants → zero `Pad` → `Conv` → general
/// `Clip(-1, 2)` → SiLU (`x · Sigmoid(x)`) → `Conv` with `auto_pad` SAME_UPPER → `Mul` by a
/// scalar → `Add` of a `[4, 1, 1]` constant on the left → `Clip(min -0.5)` → `MaxPool` with
/// a `ceil_mode` that rounds nothing → `Clip(max 1.5)` → `ReduceMean` over H, W →
/// `Transpose` of size-1 axes → `Squeeze` → 2-D `BatchNormalization` → `Gemm` (alpha 0.5,
/// beta 2) → `Softmax`, on `[2, 3, 6, 6]`. Axes are attributes before opset 13 (`Squeeze`)
/// and 18 (`ReduceMean`), inputs from then on.
fn coverage_model(w: &Weights, opset: i64) -> Vec<u8> {
    let mut init = vec![
        TensorProto::f32("mean", &[1, 3, 1, 1], &w.mean),
        TensorProto::f32("std", &[3, 1, 1], &w.std),
        TensorProto::i64("pads", &[8], &[0, 0, 1, 1, 0, 0, 1, 1]),
        TensorProto::f32("conv1.weight", &[4, 3, 3, 3], &w.w1),
        TensorProto::f32("conv1.bias", &[4], &w.b1),
        TensorProto::f32("lo", &[], &[-1.0]),
        TensorProto::f32("hi", &[], &[2.0]),
        TensorProto::f32("conv2.weight", &[4, 4, 3, 3], &w.w2),
        TensorProto::f32("half", &[], &[0.5]),
        TensorProto::f32("shift", &[4, 1, 1], &w.shift),
        TensorProto::f32("floor", &[], &[-0.5]),
        TensorProto::f32("ceiling", &[], &[1.5]),
        TensorProto::f32("bn.weight", &[4], &w.bn[0]),
        TensorProto::f32("bn.bias", &[4], &w.bn[1]),
        TensorProto::f32("bn.running_mean", &[4], &w.bn[2]),
        TensorProto::f32("bn.running_var", &[4], &w.bn[3]),
        TensorProto::f32("fc.weight", &[3, 4], &w.fc_w),
        TensorProto::f32("fc.bias", &[3], &w.fc_b),
    ];
    let mut reduce =
        NodeProto::new("ReduceMean", "gap", &["k"], &["m"]).with(A::int("keepdims", 1));
    if opset < 18 {
        reduce = reduce.with(A::ints("axes", &[2, 3]));
    } else {
        init.push(TensorProto::i64("hw", &[2], &[-2, -1]));
        reduce.input.push("hw".into());
    }
    let mut squeeze = NodeProto::new("Squeeze", "squeeze", &["t"], &["q"]);
    if opset < 13 {
        squeeze = squeeze.with(A::ints("axes", &[1, 2]));
    } else {
        init.push(TensorProto::i64("sq_axes", &[2], &[1, 2]));
        squeeze.input.push("sq_axes".into());
    }
    let nodes = vec![
        NodeProto::new("Sub", "center", &["x", "mean"], &["a"]),
        NodeProto::new("Div", "scale", &["a", "std"], &["b"]),
        NodeProto::new("Pad", "pad", &["b", "pads"], &["p"]),
        NodeProto::new("Conv", "conv1", &["p", "conv1.weight", "conv1.bias"], &["c"]),
        NodeProto::new("Clip", "clip", &["c", "lo", "hi"], &["d"]),
        NodeProto::new("Sigmoid", "sig", &["d"], &["s"]),
        NodeProto::new("Mul", "silu", &["d", "s"], &["e"]),
        NodeProto::new("Conv", "conv2", &["e", "conv2.weight"], &["f"])
            .with(A::string("auto_pad", "SAME_UPPER")),
        NodeProto::new("Mul", "halve", &["f", "half"], &["g"]),
        NodeProto::new("Add", "shift", &["shift", "g"], &["h"]),
        NodeProto::new("Clip", "floor", &["h", "floor"], &["i"]),
        NodeProto::new("MaxPool", "pool", &["i"], &["j"])
            .with(A::ints("kernel_shape", &[2, 2]))
            .with(A::ints("strides", &[2, 2]))
            .with(A::int("ceil_mode", 1)),
        NodeProto::new("Clip", "ceiling", &["j", "", "ceiling"], &["k"]),
        reduce,
        NodeProto::new("Transpose", "nhwc", &["m"], &["t"]).with(A::ints("perm", &[0, 2, 3, 1])),
        squeeze,
        NodeProto::new(
            "BatchNormalization",
            "bn",
            &["q", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
            &["r"],
        ),
        NodeProto::new("Gemm", "fc", &["r", "fc.weight", "fc.bias"], &["logits"])
            .with(A::float("alpha", 0.5))
            .with(A::float("beta", 2.0))
            .with(A::int("transB", 1)),
        NodeProto::new("Softmax", "softmax", &["logits"], &["probs"]).with(A::int("axis", 1)),
    ];
    let graph = GraphProto {
        node: nodes,
        initializer: init,
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Symbolic("batch".into()), Dim::Fixed(3), Dim::Fixed(6), Dim::Fixed(6)],
        )],
        output: vec![ValueInfoProto::f32("probs", &[Dim::Symbolic("batch".into()), Dim::Fixed(3)])],
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

fn clamp(x: &mut [f64], lo: f64, hi: f64) {
    x.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
}

/// The coverage model's forward pass, written out in f64.
fn coverage_expected(w: &Weights, x: &[f32]) -> Vec<f64> {
    let hw = 36;
    let mut a = f64s(x);
    for (i, v) in a.iter_mut().enumerate() {
        let c = i / hw % 3;
        *v = (*v - w.mean[c] as f64) / w.std[c] as f64;
    }
    let (mut h, d) =
        conv2d(&a, [N, 3, 6, 6], &f64s(&w.w1), [4, 3, 3, 3], Some(&f64s(&w.b1)), 1, 1, 1);
    clamp(&mut h, -1.0, 2.0);
    h.iter_mut().for_each(|v| *v *= 1.0 / (1.0 + (-*v).exp()));
    let (mut h, d) = conv2d(&h, d, &f64s(&w.w2), [4, 4, 3, 3], None, 1, 1, 1);
    for (i, v) in h.iter_mut().enumerate() {
        *v = w.shift[i / hw % 4] as f64 + 0.5 * *v;
    }
    clamp(&mut h, -0.5, f64::INFINITY);
    let (mut h, d) = pool(&h, d, 2, 2, 0, None);
    clamp(&mut h, f64::NEG_INFINITY, 1.5);
    let mut g = global_avg_pool(&h, d);
    let bn: Vec<Vec<f64>> = w.bn.iter().map(|v| f64s(v)).collect();
    batch_norm(&mut g, [N, 4, 1, 1], [&bn[0], &bn[1], &bn[2], &bn[3]], 1e-5);
    let fc_w: Vec<f64> = w.fc_w.iter().map(|&v| 0.5 * v as f64).collect();
    let fc_b: Vec<f64> = w.fc_b.iter().map(|&v| 2.0 * v as f64).collect();
    let mut y = linear(&g, N, 4, &fc_w, 3, Some(&fc_b));
    softmax_rows(&mut y, 3);
    y
}

#[test]
fn the_cnn_operator_set_matches_loops_at_opsets_11_13_and_18_and_survives_export() {
    let w = weights();
    let x = values(32, N * 3 * 36, -2.0, 2.0);
    let expected = coverage_expected(&w, &x);
    let batch = ImportOptions { batch: Some(N), ..Default::default() };
    for opset in [11, 13, 18, 21] {
        let imported = import_with(&coverage_model(&w, opset), &batch).expect("imports");
        let g = &imported.graph;
        // Constants of element-wise ops are frozen buffers, never trained.
        for name in ["a.shift", "b.scale", "g.scale", "h.shift"] {
            let id = g.find(name).unwrap_or_else(|| panic!("{name} missing at opset {opset}"));
            assert_eq!(g.tensor(id).role, Role::Buffer, "{name}");
        }
        // The Pad folded into the first convolution.
        assert!(g
            .nodes()
            .iter()
            .any(|n| matches!(n.op, Op::Conv2d(p) if p.padding == (1, 1) && p.groups == 1)));
        assert!(g.nodes().iter().any(|n| matches!(n.op, Op::HardSigmoid(_))));
        let y = run(g, imported.input, imported.outputs[0], &x);
        assert_close(&y, &expected, 1e-5);

        let bytes = sprout_onnx::export_onnx(g, &sprout_onnx::graph_weights(g)).expect("exports");
        let again = import_with(&bytes, &batch).expect("re-imports");
        let y2 = run(&again.graph, again.input, again.outputs[0], &x);
        assert_close(&y2, &f64s(&y), 1e-6);
    }
}

/// `Shape → Gather → Unsqueeze → Concat → Reshape` as the TorchScript exporter writes
/// `x.view(x.size(0), -1)`, with the feature count computed as `(C · H · W · 2) / 2` from
/// gathered dims, a `ConstantOfShape`, a `Cast` and a `Slice`, then a `Gemm` whose weight is
/// itself folded (`Mul` of an initializer by a `Constant`).
/// Unsqueeze's axes are an attribute before opset 13, an input from then on.
fn shape_subgraph_model(fc_w: &[f32], opset: i64) -> Vec<u8> {
    let scalar = |name: &str, v: i64| {
        NodeProto::new("Constant", name, &[], &[name])
            .with(A::tensor("value", TensorProto::i64("", &[], &[v])))
    };
    let nodes = vec![
        NodeProto::new("Shape", "shape", &["x"], &["shape"]),
        scalar("zero", 0),
        NodeProto::new("Gather", "batch", &["shape", "zero"], &["n"]).with(A::int("axis", 0)),
        if opset < 13 {
            NodeProto::new("Unsqueeze", "n1", &["n"], &["n_1"]).with(A::ints("axes", &[0]))
        } else {
            NodeProto::new("Unsqueeze", "n1", &["n", "axes0"], &["n_1"])
        },
        NodeProto::new("Slice", "chw", &["shape", "one", "four"], &["chw"]),
        NodeProto::new("Gather", "c", &["chw", "zero"], &["c"]),
        NodeProto::new("Gather", "h", &["chw", "one_s"], &["h"]),
        NodeProto::new("Gather", "w", &["chw", "two_s"], &["w"]),
        NodeProto::new("Mul", "ch", &["c", "h"], &["ch"]),
        NodeProto::new("Mul", "chw_n", &["ch", "w"], &["feat"]),
        NodeProto::new("ConstantOfShape", "twos", &["one"], &["twos"])
            .with(A::tensor("value", TensorProto::i64("", &[1], &[2]))),
        NodeProto::new("Mul", "double", &["feat", "twos"], &["feat2"]),
        NodeProto::new("Div", "halve", &["feat2", "twos"], &["feat1"]),
        NodeProto::new("Cast", "cast", &["feat1"], &["feat_i"]).with(A::int("to", 7)),
        NodeProto::new("Concat", "target", &["n_1", "feat_i"], &["target"]).with(A::int("axis", 0)),
        NodeProto::new("Reshape", "flatten", &["x", "target"], &["flat"]),
        scalar("one_s", 1),
        scalar("two_s", 2),
        NodeProto::new("Constant", "gain", &[], &["gain"])
            .with(A::tensor("value", TensorProto::f32("", &[], &[3.0]))),
        NodeProto::new("Mul", "fc_w", &["fc.raw", "gain"], &["fc.weight"]),
        NodeProto::new("Gemm", "fc", &["flat", "fc.weight"], &["y"]).with(A::int("transB", 1)),
    ];
    // Constants above are defined after a reader in the list: order them by use.
    let mut ordered: Vec<NodeProto> =
        nodes.iter().filter(|n| n.op_type.as_deref() == Some("Constant")).cloned().collect();
    ordered.extend(nodes.into_iter().filter(|n| n.op_type.as_deref() != Some("Constant")));
    let graph = GraphProto {
        node: ordered,
        initializer: vec![
            TensorProto::i64("axes0", &[1], &[0]),
            TensorProto::i64("one", &[1], &[1]),
            TensorProto::i64("four", &[1], &[4]),
            TensorProto::f32("fc.raw", &[2, 16], fc_w),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Symbolic("batch".into()), Dim::Fixed(4), Dim::Fixed(2), Dim::Fixed(2)],
        )],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

#[test]
fn a_shape_subgraph_folds_to_a_constant_reshape_at_any_batch() {
    let fc_w = values(40, 32, -1.0, 1.0);
    let tripled: Vec<f64> = fc_w.iter().map(|&v| 3.0 * v as f64).collect();
    for (opset, batch) in [(11, 1), (11, 3), (13, 1), (13, 3), (18, 2)] {
        let bytes = shape_subgraph_model(&fc_w, opset);
        let imported =
            import_with(&bytes, &ImportOptions { batch: Some(batch), ..Default::default() })
                .expect("imports");
        let g = &imported.graph;
        assert_eq!(g.shape(g.find("flat").unwrap()), sprout_core::Shape::d2(batch, 16));
        // The folded weight is one parameter under the name the Mul gave it.
        assert_eq!(g.tensor(g.find("fc.weight").unwrap()).role, Role::FrozenParam);
        let x = values(41 + batch as u64, batch * 16, -1.0, 1.0);
        let y = run(g, imported.input, imported.outputs[0], &x);
        assert_close(&y, &linear(&f64s(&x), batch, 16, &tripled, 2, None), 1e-5);
    }
}

fn relu_model(opset: i64) -> Vec<u8> {
    let graph = GraphProto {
        node: vec![NodeProto::new("Relu", "relu", &["x"], &["y"])],
        input: vec![ValueInfoProto::f32("x", &[Dim::Fixed(1), Dim::Fixed(4)])],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

#[test]
fn opsets_outside_11_to_24_are_refused_by_number() {
    for opset in [11, 17, 24] {
        assert_eq!(import(&relu_model(opset)).expect("imports").opset, opset);
    }
    for opset in [9, 10, 25, 1000] {
        let err = import(&relu_model(opset)).err().expect("refused");
        assert!(matches!(err, OnnxError::Opset { found, .. } if found == opset), "{err}");
        let text = err.to_string();
        assert!(text.contains(&format!("opset {opset}")) && text.contains("11 to 24"), "{text}");
    }
}

/// A backbone whose output is the pooled `[N, C, 1, 1]` map keeps the ONNX name and shape.
#[test]
fn a_pooled_feature_map_output_keeps_its_onnx_name_and_shape() {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Relu", "relu", &["x"], &["r"]),
            NodeProto::new("GlobalAveragePool", "gap", &["r"], &["features"]),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(2), Dim::Fixed(2)],
        )],
        output: vec![ValueInfoProto::f32("features", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 13).encode_to_vec()).expect("imports");
    let g = &imported.graph;
    let out = g.tensor(imported.outputs[0]);
    assert_eq!((out.name.as_str(), out.shape), ("features", sprout_core::Shape::d4(2, 3, 1, 1)));
    let x = values(50, 24, -1.0, 1.0);
    let mut r = f64s(&x);
    relu(&mut r);
    assert_close(
        &run(g, imported.input, imported.outputs[0], &x),
        &global_avg_pool(&r, [2, 3, 2, 2]),
        1e-6,
    );
}

/// `MatMul(x, Transpose(w))` with `w` an `[M, K]` initializer (PyTorch's Linear layout):
/// the Transpose folds, moving the data, and the MatMul reads the `[K, M]` constant.
#[test]
fn a_transposed_initializer_folds_into_a_matmul_weight() {
    let w = values(60, 3 * 5, -1.0, 1.0);
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Transpose", "wt", &["fc.weight"], &["fc.weight.t"])
                .with(A::ints("perm", &[1, 0])),
            NodeProto::new("MatMul", "fc", &["x", "fc.weight.t"], &["y"]),
        ],
        initializer: vec![TensorProto::f32("fc.weight", &[3, 5], &w)],
        input: vec![ValueInfoProto::f32("x", &[Dim::Fixed(2), Dim::Fixed(5)])],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 17).encode_to_vec()).expect("imports");
    let x = values(61, 10, -1.0, 1.0);
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    assert_close(&y, &linear(&f64s(&x), 2, 5, &f64s(&w), 3, None), 1e-5);
}

/// Training reaches every imported weight through the affine constants, the folded Pad and
/// the rescaled Clip, and never the constants themselves.
#[test]
fn the_coverage_model_differentiates_with_respect_to_its_weights_only() {
    let imported = import_with(
        &coverage_model(&weights(), 13),
        &ImportOptions { batch: Some(N), ..Default::default() },
    )
    .unwrap();
    let mut g = imported.graph;
    let logits = g.find("logits").unwrap();
    let labels = g.labels("labels", N).unwrap();
    let loss = g.cross_entropy("loss", logits, labels).unwrap();
    let params: Vec<_> = g.parameters().collect();
    let names: Vec<_> = params.iter().map(|&p| g.tensor(p).name.clone()).collect();
    assert_eq!(
        names,
        [
            "conv1.weight",
            "conv1.bias",
            "conv2.weight",
            "bn.weight",
            "bn.bias",
            "fc.weight",
            "fc.bias"
        ]
    );
    let d = sprout_core::differentiate(&g, loss, &params).expect("differentiates");
    assert_eq!(d.gradients.len(), params.len());
}

/// Softmax of a 4-D tensor: over the last axis (opset 13 on), or over everything from
/// `axis` on, flattened (before opset 13); the output keeps its ONNX name and shape.
#[test]
fn softmax_of_a_4d_tensor_follows_each_opsets_axis_rule() {
    let x = values(70, 24, -3.0, 3.0);
    for (opset, axis, cols) in [(13, -1, 2), (18, 3, 2), (11, 1, 12), (12, 2, 4)] {
        let graph = GraphProto {
            node: vec![NodeProto::new("Softmax", "sm", &["x"], &["y"]).with(A::int("axis", axis))],
            input: vec![ValueInfoProto::f32(
                "x",
                &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(2), Dim::Fixed(2)],
            )],
            output: vec![ValueInfoProto::f32("y", &[])],
            ..Default::default()
        };
        let imported = import(&ModelProto::new(graph, opset).encode_to_vec()).expect("imports");
        let out = imported.graph.tensor(imported.outputs[0]);
        assert_eq!((out.name.as_str(), out.shape), ("y", sprout_core::Shape::d4(2, 3, 2, 2)));
        let mut expected = f64s(&x);
        softmax_rows(&mut expected, cols);
        let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
        assert_close(&y, &expected, 1e-6);
    }
}

/// `LayerNormalization` (opset 17, over the last two axes, `epsilon` 1e-3) then `Gelu`
/// (opset 20, exact and `approximate="tanh"`), against f64 loops; the scale and shift are
/// weights under their ONNX names.
#[test]
fn layer_normalization_and_gelu_match_loops() {
    let x = values(71, 2 * 3 * 4, -3.0, 3.0);
    let (scale, shift) = (values(72, 12, 0.5, 1.5), values(73, 12, -0.5, 0.5));
    for approximate in ["none", "tanh"] {
        let graph = GraphProto {
            node: vec![
                NodeProto::new("LayerNormalization", "ln", &["x", "scale", "shift"], &["n"])
                    .with(A::int("axis", 1))
                    .with(A::float("epsilon", 1e-3)),
                NodeProto::new("Gelu", "gelu", &["n"], &["y"])
                    .with(A::string("approximate", approximate)),
            ],
            input: vec![ValueInfoProto::f32("x", &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)])],
            output: vec![ValueInfoProto::f32("y", &[])],
            initializer: vec![
                TensorProto::f32("scale", &[3, 4], &scale),
                TensorProto::f32("shift", &[3, 4], &shift),
            ],
            ..Default::default()
        };
        let imported = import(&ModelProto::new(graph, 20).encode_to_vec()).expect("imports");
        let g = &imported.graph;
        // Weights (which training may select), not constant buffers.
        for name in ["scale", "shift"] {
            assert_eq!(g.tensor(g.find(name).expect("a weight")).role, Role::FrozenParam, "{name}");
        }
        let mut expected = Vec::new();
        for row in f64s(&x).chunks(12) {
            let mean = row.iter().sum::<f64>() / 12.0;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 12.0;
            for (i, v) in row.iter().enumerate() {
                let n = (v - mean) / (var + 1e-3).sqrt() * scale[i] as f64 + shift[i] as f64;
                let k = (2.0 / std::f64::consts::PI).sqrt();
                expected.push(match approximate {
                    "tanh" => 0.5 * n * (1.0 + (k * (n + 0.044715 * n * n * n)).tanh()),
                    _ => 0.5 * n * (1.0 + erf(n / std::f64::consts::SQRT_2)),
                });
            }
        }
        let y = run(g, imported.input, imported.outputs[0], &x);
        assert_close(&y, &expected, 1e-5);
    }
}
