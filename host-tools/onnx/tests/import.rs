//! ONNX models written in the test with the crate's prost messages, imported, run through
//! sprout's reference kernels and compared with forward passes computed here in f64.

mod common;

use common::*;
use prost::Message;
use sprout_core::op::Op;
use sprout_core::reference::GeluParams;
use sprout_core::Role;
use sprout_onnx::proto::{
    AttributeProto as A, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use sprout_onnx::{import, import_with, ImportOptions, OnnxError};

/// The small CNN's weights, as the test draws them.
struct Cnn {
    conv1_w: Vec<f32>,
    conv1_b: Vec<f32>,
    bn: [Vec<f32>; 4],
    dw_w: Vec<f32>,
    dw_b: Vec<f32>,
    /// `[3, 4]` (PyTorch layout).
    fc_w: Vec<f32>,
    fc_b: Vec<f32>,
}

fn cnn_weights() -> Cnn {
    Cnn {
        conv1_w: values(1, 4 * 3 * 9, -0.6, 0.6),
        conv1_b: values(2, 4, -0.5, 0.5),
        bn: [
            values(3, 4, 0.5, 1.5),
            values(4, 4, -0.5, 0.5),
            values(5, 4, -0.3, 0.3),
            values(6, 4, 0.5, 2.0),
        ],
        dw_w: values(7, 4 * 9, -1.0, 1.0),
        dw_b: values(8, 4, -0.5, 0.5),
        fc_w: values(9, 12, -1.0, 1.0),
        fc_b: values(10, 3, -0.5, 0.5),
    }
}

/// Conv(pads 1) → BatchNormalization → Relu → MaxPool → depthwise Conv (group 4) →
/// Clip(0, 6) → GlobalAveragePool → Flatten → Gemm, for `[2, 3, 8, 8]` images. `legacy`:
/// opset 11, the oldest imported, and a Gemm weight stored `[K, N]` (transB = 0).
fn cnn_model(w: &Cnn, legacy: bool) -> Vec<u8> {
    let sq = |name: &str, v: i64| A::ints(name, &[v, v]);
    let mut init = vec![
        TensorProto::f32("conv1.weight", &[4, 3, 3, 3], &w.conv1_w),
        TensorProto::f32("conv1.bias", &[4], &w.conv1_b),
        TensorProto::f32("bn1.weight", &[4], &w.bn[0]),
        TensorProto::f32("bn1.bias", &[4], &w.bn[1]),
        TensorProto::f32("bn1.running_mean", &[4], &w.bn[2]),
        TensorProto::f32("bn1.running_var", &[4], &w.bn[3]),
        TensorProto::f32("dw.weight", &[4, 1, 3, 3], &w.dw_w),
        TensorProto::f32("dw.bias", &[4], &w.dw_b),
        TensorProto::f32("fc.bias", &[3], &w.fc_b),
    ];
    init.push(TensorProto::f32("clip_min", &[], &[0.0]));
    init.push(TensorProto::f32("clip_max", &[], &[6.0]));
    let clip = NodeProto::new("Clip", "clip", &["c2", "clip_min", "clip_max"], &["a2"]);
    let gemm = if legacy {
        // Store [K = 4, M = 3]: element (k, m) = fc_w[m * 4 + k].
        let stored: Vec<f32> = (0..12).map(|i| w.fc_w[(i % 3) * 4 + i / 3]).collect();
        init.push(TensorProto::f32("fc.weight", &[4, 3], &stored));
        NodeProto::new("Gemm", "fc", &["f", "fc.weight", "fc.bias"], &["logits"])
    } else {
        init.push(TensorProto::f32("fc.weight", &[3, 4], &w.fc_w));
        NodeProto::new("Gemm", "fc", &["f", "fc.weight", "fc.bias"], &["logits"])
            .with(A::int("transB", 1))
    };
    let nodes = vec![
        NodeProto::new("Conv", "conv1", &["image", "conv1.weight", "conv1.bias"], &["c1"])
            .with(sq("kernel_shape", 3))
            .with(A::ints("pads", &[1, 1, 1, 1]))
            .with(sq("strides", 1))
            .with(A::int("group", 1)),
        NodeProto::new(
            "BatchNormalization",
            "bn1",
            &["c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"],
            &["b1"],
        )
        .with(A::float("epsilon", 1e-3))
        .with(A::float("momentum", 0.9)),
        NodeProto::new("Relu", "relu1", &["b1"], &["r1"]),
        NodeProto::new("MaxPool", "pool1", &["r1"], &["p1"])
            .with(sq("kernel_shape", 2))
            .with(sq("strides", 2)),
        NodeProto::new("Conv", "dw", &["p1", "dw.weight", "dw.bias"], &["c2"])
            .with(A::ints("pads", &[1, 1, 1, 1]))
            .with(A::int("group", 4))
            .with(sq("dilations", 1)),
        clip,
        NodeProto::new("GlobalAveragePool", "gap", &["a2"], &["g"]),
        NodeProto::new("Flatten", "flatten", &["g"], &["f"]).with(A::int("axis", 1)),
        gemm,
    ];
    let graph = GraphProto {
        name: Some("cnn".into()),
        node: nodes,
        initializer: init,
        input: vec![ValueInfoProto::f32(
            "image",
            &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(8), Dim::Fixed(8)],
        )],
        output: vec![ValueInfoProto::f32("logits", &[Dim::Fixed(2), Dim::Fixed(3)])],
        ..Default::default()
    };
    ModelProto::new(graph, if legacy { 11 } else { 13 }).encode_to_vec()
}

/// The logits, and the largest value the Clip saw.
fn cnn_expected(w: &Cnn, x: &[f32]) -> (Vec<f64>, f64) {
    let (h, d) = conv2d(
        &f64s(x),
        [2, 3, 8, 8],
        &f64s(&w.conv1_w),
        [4, 3, 3, 3],
        Some(&f64s(&w.conv1_b)),
        1,
        1,
        1,
    );
    let mut h = h;
    let bn: Vec<Vec<f64>> = w.bn.iter().map(|v| f64s(v)).collect();
    batch_norm(&mut h, d, [&bn[0], &bn[1], &bn[2], &bn[3]], 1e-3);
    relu(&mut h);
    let (h, d) = pool(&h, d, 2, 2, 0, None);
    let (mut h, d) = conv2d(&h, d, &f64s(&w.dw_w), [4, 1, 3, 3], Some(&f64s(&w.dw_b)), 1, 1, 4);
    let clipped = h.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    relu6(&mut h);
    let g = global_avg_pool(&h, d);
    (linear(&g, 2, 4, &f64s(&w.fc_w), 3, Some(&f64s(&w.fc_b))), clipped)
}

#[test]
fn a_small_cnn_imports_and_matches_an_independent_forward_pass() {
    let w = cnn_weights();
    let x = values(11, 2 * 3 * 64, -2.0, 2.0);
    let (expected, largest) = cnn_expected(&w, &x);
    assert!(largest > 6.0, "some activations are clipped at 6 ({largest})");
    for legacy in [false, true] {
        let imported = import(&cnn_model(&w, legacy)).expect("imports");
        let g = &imported.graph;
        assert_eq!(imported.opset, if legacy { 11 } else { 13 });
        assert_eq!(imported.metadata.input_shape, sprout_core::Shape::d4(2, 3, 8, 8));
        // ONNX initializer names are the sprout weight names, with their roles.
        for name in [
            "conv1.weight",
            "conv1.bias",
            "bn1.weight",
            "bn1.bias",
            "dw.weight",
            "fc.weight",
            "fc.bias",
        ] {
            assert_eq!(g.tensor(g.find(name).unwrap()).role, Role::FrozenParam, "{name}");
        }
        for name in ["bn1.running_mean", "bn1.running_var"] {
            assert_eq!(g.tensor(g.find(name).unwrap()).role, Role::Buffer, "{name}");
        }
        assert_eq!(g.shape(g.find("fc.weight").unwrap()), sprout_core::Shape::d2(3, 4));
        let bn = g.nodes().iter().find(|n| matches!(n.op, Op::BatchNorm2d(_))).unwrap();
        let Op::BatchNorm2d(cfg) = bn.op else { unreachable!() };
        assert_eq!(cfg.eps, 1e-3);
        assert!((cfg.momentum - 0.1).abs() < 1e-6, "sprout momentum = 1 - ONNX momentum");
        assert!(g.nodes().iter().any(|n| matches!(n.op, Op::Conv2d(p) if p.groups == 4)));
        assert!(g.nodes().iter().any(|n| n.op == Op::Relu6));
        assert_eq!(imported.outputs.len(), 1);
        assert_eq!(g.tensor(imported.outputs[0]).name, "logits");
        let y = run(g, imported.input, imported.outputs[0], &x);
        assert_close(&y, &expected, 1e-4);
    }
}

struct Mlp {
    w1: Vec<f32>, // [8, 16] (MatMul layout, K x N)
    b1: Vec<f32>,
    w2: Vec<f32>, // [16, 5]
    b2: Vec<f32>,
}

/// AveragePool(3, stride 2, pads 1, count_include_pad) → Reshape(Constant [0, -1]) →
/// MatMul + Add → Relu → Dropout(Constant 0.25) → Identity → MatMul + Add (bias first) →
/// Softmax(-1), on `[batch, 2, 4, 4]` with a symbolic batch axis.
fn mlp_model(w: &Mlp) -> Vec<u8> {
    let nodes = vec![
        NodeProto::new("AveragePool", "avg", &["x"], &["ap"])
            .with(A::ints("kernel_shape", &[3, 3]))
            .with(A::ints("strides", &[2, 2]))
            .with(A::ints("pads", &[1, 1, 1, 1]))
            .with(A::int("count_include_pad", 1)),
        NodeProto::new("Constant", "shape", &[], &["shape_const"])
            .with(A::tensor("value", TensorProto::i64("", &[2], &[0, -1]))),
        NodeProto::new("Reshape", "reshape", &["ap", "shape_const"], &["flat"]),
        NodeProto::new("MatMul", "mm1", &["flat", "w1"], &["mm1_out"]),
        NodeProto::new("Add", "add1", &["mm1_out", "b1"], &["h1"]),
        NodeProto::new("Relu", "relu", &["h1"], &["r1"]),
        NodeProto::new("Constant", "ratio", &[], &["ratio_const"])
            .with(A::float("value_float", 0.25)),
        NodeProto::new("Dropout", "drop", &["r1", "ratio_const"], &["d1"]),
        NodeProto::new("Identity", "id", &["d1"], &["id1"]),
        NodeProto::new("MatMul", "mm2", &["id1", "w2"], &["mm2_out"]),
        NodeProto::new("Add", "add2", &["b2", "mm2_out"], &["h2"]),
        NodeProto::new("Softmax", "softmax", &["h2"], &["probs"]).with(A::int("axis", -1)),
    ];
    let graph = GraphProto {
        name: Some("mlp".into()),
        node: nodes,
        initializer: vec![
            TensorProto::f32("w1", &[8, 16], &w.w1),
            TensorProto::f32("b1", &[16], &w.b1),
            TensorProto::f32("w2", &[16, 5], &w.w2),
            TensorProto::f32("b2", &[5], &w.b2),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Symbolic("N".into()), Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(4)],
        )],
        output: vec![ValueInfoProto::f32("probs", &[Dim::Symbolic("N".into()), Dim::Fixed(5)])],
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

fn mlp_weights() -> Mlp {
    Mlp {
        w1: values(21, 8 * 16, -1.0, 1.0),
        b1: values(22, 16, -0.5, 0.5),
        w2: values(23, 16 * 5, -1.0, 1.0),
        b2: values(24, 5, -0.5, 0.5),
    }
}

#[test]
fn an_mlp_with_matmul_add_reshape_constant_dropout_and_softmax_matches() {
    let w = mlp_weights();
    let batch = 3;
    let x = values(25, batch * 32, -2.0, 2.0);
    let (h, _) = pool(&f64s(&x), [batch, 2, 4, 4], 3, 2, 1, Some(true));
    let mut h = linear(&h, batch, 8, &transpose(&f64s(&w.w1), 8, 16), 16, Some(&f64s(&w.b1)));
    relu(&mut h);
    let mut y = linear(&h, batch, 16, &transpose(&f64s(&w.w2), 16, 5), 5, Some(&f64s(&w.b2)));
    softmax_rows(&mut y, 5);

    let imported =
        import_with(&mlp_model(&w), &ImportOptions { batch: Some(batch), ..Default::default() })
            .expect("imports");
    let g = &imported.graph;
    assert_eq!(g.shape(imported.input), sprout_core::Shape::d4(3, 2, 4, 4));
    // Both MatMul + Add pairs became one linear layer with a bias; the dropout is kept.
    let linears: Vec<_> = g.nodes().iter().filter(|n| n.op == Op::Linear).collect();
    assert_eq!(linears.len(), 2);
    assert!(linears.iter().all(|n| n.inputs.len() == 3));
    assert_eq!(g.shape(g.find("w1").unwrap()), sprout_core::Shape::d2(16, 8), "[K, N] → [N, K]");
    assert!(g.nodes().iter().any(|n| matches!(n.op, Op::Dropout(c) if c.p == 0.25)));
    assert_eq!(g.tensor(imported.outputs[0]).name, "probs");
    let out = run(g, imported.input, imported.outputs[0], &x);
    assert_close(&out, &y, 1e-4);

    // The dynamic batch axis defaults to 1.
    let one = import(&mlp_model(&w)).unwrap();
    assert_eq!(one.graph.shape(one.input).dim(0), Some(1));
    let out1 = run(&one.graph, one.input, one.outputs[0], &x[..32]);
    assert_close(&out1, &y[..5], 1e-4);
}

fn single_node_model(node: NodeProto, init: Vec<TensorProto>, opset: i64) -> Vec<u8> {
    let out = node.output[0].clone();
    let graph = GraphProto {
        node: vec![NodeProto::new("Relu", "pre", &["x"], &["r"]), node],
        initializer: init,
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(1), Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(4)],
        )],
        output: vec![ValueInfoProto::f32(&out, &[])],
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

#[test]
fn an_unsupported_op_names_the_op_and_the_node() {
    let bytes =
        single_node_model(NodeProto::new("LSTM", "encoder/lstm_1", &["r"], &["y"]), vec![], 13);
    let err = import(&bytes).err().expect("refused");
    assert!(
        matches!(&err, OnnxError::UnsupportedOp { op_type, node_name } if op_type == "LSTM" && node_name == "encoder/lstm_1")
    );
    let text = err.to_string();
    assert!(text.contains("LSTM") && text.contains("encoder/lstm_1"), "{text}");
}

#[test]
fn unsupported_settings_are_named_with_expected_and_found_values() {
    let w = TensorProto::f32("w", &[2, 2, 3, 3], &[0.1; 36]);
    let cases: Vec<(NodeProto, Vec<TensorProto>, &[&str])> = vec![
        (
            NodeProto::new("Conv", "conv_dil", &["r", "w"], &["y"])
                .with(A::ints("dilations", &[0, 1])),
            vec![w.clone()],
            &["conv_dil", "dilations (0, 1) must be positive"],
        ),
        (
            NodeProto::new("Add", "add_const", &["r", "c"], &["y"]),
            vec![TensorProto::f32("c", &[4, 4], &[1.0; 16])],
            &["add_const", "'c'", "[4, 4]", "per channel"],
        ),
        (
            NodeProto::new("Clip", "clip_inverted", &["r", "lo", "hi"], &["y"]),
            vec![TensorProto::f32("lo", &[], &[3.0]), TensorProto::f32("hi", &[], &[1.0])],
            &["clip_inverted", "min 3 must be below max 1"],
        ),
        (
            NodeProto::new("LogSoftmax", "logsm", &["r"], &["y"]).with(A::int("axis", 0)),
            vec![],
            &["logsm", "[1, 2, 4, 4]", "over the batch axis 0"],
        ),
        (
            NodeProto::new("Concat", "cat", &["r", "r"], &["y"]).with(A::int("axis", 0)),
            vec![],
            &["cat", "axis 0", "batch axis"],
        ),
        (
            NodeProto::new("Transpose", "cnhw", &["r"], &["y"])
                .with(A::ints("perm", &[1, 0, 2, 3])),
            vec![],
            &["cnhw", "[1, 0, 2, 3]", "[1, 2, 4, 4]", "moves the batch axis 0"],
        ),
        (
            NodeProto::new("Slice", "every_other", &["r", "s", "e", "a", "st"], &["y"]),
            vec![
                TensorProto::i64("s", &[1], &[0]),
                TensorProto::i64("e", &[1], &[4]),
                TensorProto::i64("a", &[1], &[2]),
                TensorProto::i64("st", &[1], &[2]),
            ],
            &["every_other", "step 2 is not supported"],
        ),
        (
            NodeProto::new("Split", "uneven", &["r", "sizes"], &["y", "z"]).with(A::int("axis", 2)),
            vec![TensorProto::i64("sizes", &[2], &[1, 2])],
            &["uneven", "[1, 2]", "axis 2 of shape [1, 2, 4, 4]"],
        ),
        (
            NodeProto::new("GatherND", "take_samples", &["r", "i"], &["y"]),
            vec![TensorProto::i64("i", &[1, 1], &[0])],
            &["take_samples", "gathers along the batch axis 0", "[1, 2, 4, 4]"],
        ),
        (
            NodeProto::new("ReduceMean", "batch_mean", &["r"], &["y"])
                .with(A::ints("axes", &[0, 2])),
            vec![],
            &["batch_mean", "axes [0, 2]", "includes the batch axis 0"],
        ),
        (
            NodeProto::new("MaxPool", "all_padding", &["r"], &["y"])
                .with(A::ints("kernel_shape", &[2, 2]))
                .with(A::ints("pads", &[0, 0, 2, 0])),
            vec![],
            &["all_padding", "[0, 0, 2, 0]", "reach a whole kernel (2, 2)"],
        ),
        (
            NodeProto::new("Pad", "reflect", &["r", "p"], &["y"])
                .with(A::string("mode", "reflect")),
            vec![TensorProto::i64("p", &[8], &[0, 0, 1, 1, 0, 0, 1, 1])],
            &["reflect", "mode 'reflect'"],
        ),
        (
            NodeProto::new("Div", "recip", &["c", "r"], &["y"]),
            vec![TensorProto::f32("c", &[], &[1.0])],
            &["recip", "reciprocal"],
        ),
        (NodeProto::new("Relu", "relu3", &["nowhere"], &["y"]), vec![], &["relu3", "nowhere"]),
    ];
    for (node, init, needles) in cases {
        let name = node.name.clone().unwrap();
        match import(&single_node_model(node, init, 13)) {
            Ok(_) => panic!("{name} should be refused"),
            Err(e) => {
                let text = e.to_string();
                for n in needles {
                    assert!(text.contains(n), "{name}: '{text}' lacks '{n}'");
                }
            }
        }
    }
}

#[test]
fn garbage_and_truncated_bytes_are_errors_not_panics() {
    assert!(matches!(import(b"\xff\xff\xff\xff\xff\xff"), Err(OnnxError::Decode(_))));
    assert!(matches!(import(b"\x0a\xff\xff\xff\xff\x0f"), Err(OnnxError::Decode(_))));
    assert!(import(b"").is_err());
    for seed in 0..200 {
        let bytes: Vec<u8> = values(seed, 64, 0.0, 256.0).iter().map(|&v| v as u8).collect();
        assert!(import(&bytes).is_err(), "random bytes (seed {seed}) imported");
    }
    let full = mlp_model(&mlp_weights());
    assert!(import(&full).is_ok());
    for len in 0..full.len() {
        assert!(
            import(&full[..len]).is_err(),
            "a model truncated to {len} of {} bytes imported",
            full.len()
        );
    }
    // A corrupted weight length is refused by name.
    let mut model = ModelProto::decode(full.as_slice()).unwrap();
    model.graph.as_mut().unwrap().initializer[1].raw_data.as_mut().unwrap().pop();
    let text = import(&model.encode_to_vec()).err().unwrap().to_string();
    assert!(text.contains("'b1'") && text.contains("16 values"), "{text}");
}

/// Sigmoid, HardSwish, a squeeze-excitation gate (GlobalAveragePool → HardSigmoid with
/// ONNX's default settings → Mul by the `[N, C, 1, 1]` factor on the left), LeakyRelu with
/// its default slope and a same-shape Mul, at opset 14 (where HardSwish exists).
fn pointwise_model() -> Vec<u8> {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Sigmoid", "sigmoid", &["x"], &["s"]),
            NodeProto::new("HardSwish", "hswish", &["x"], &["hs"]),
            NodeProto::new("GlobalAveragePool", "squeeze", &["hs"], &["p"]),
            NodeProto::new("HardSigmoid", "gate", &["p"], &["g"]),
            NodeProto::new("Mul", "excite", &["g", "hs"], &["m"]),
            NodeProto::new("LeakyRelu", "leaky", &["m"], &["l"]),
            NodeProto::new("Mul", "product", &["l", "s"], &["y"]),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(3), Dim::Fixed(3)],
        )],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    ModelProto::new(graph, 14).encode_to_vec()
}

/// The same computation in f64, written out here.
fn pointwise_expected(x: &[f32]) -> Vec<f64> {
    let (n, c, hw) = (2, 4, 9);
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    let hswish = |v: f64| v * (v + 3.0).clamp(0.0, 6.0) / 6.0;
    let leaky = |v: f64| if v > 0.0 { v } else { 0.01 * v };
    let hs: Vec<f64> = x.iter().map(|&v| hswish(v as f64)).collect();
    let mut y = vec![0.0; x.len()];
    for plane in 0..n * c {
        let at = plane * hw..(plane + 1) * hw;
        let mean = hs[at.clone()].iter().sum::<f64>() / hw as f64;
        let gate = (0.2 * mean + 0.5).clamp(0.0, 1.0);
        for i in at {
            y[i] = leaky(gate * hs[i]) * sigmoid(x[i] as f64);
        }
    }
    y
}

#[test]
fn sigmoid_hard_swish_excitation_and_leaky_relu_match_and_survive_export() {
    let imported = import(&pointwise_model()).expect("imports");
    let g = &imported.graph;
    for op in [Op::Sigmoid, Op::HardSwish, Op::Mul] {
        assert!(g.nodes().iter().any(|n| n.op == op), "{op} missing");
    }
    let x = values(11, 2 * 4 * 9, -5.0, 5.0);
    let y = run(g, imported.input, imported.outputs[0], &x);
    assert_close(&y, &pointwise_expected(&x), 1e-5);

    // Out through the exporter (opset 13: HardSwish becomes x · HardSigmoid(x)) and back.
    let weights = sprout_onnx::graph_weights(g);
    let bytes = sprout_onnx::export_onnx(g, &weights).expect("exports");
    let again = import_with(&bytes, &ImportOptions { batch: Some(2), ..Default::default() })
        .expect("imports it");
    let y2 = run(&again.graph, again.input, again.outputs[0], &x);
    assert_close(&y2, &f64s(&y), 1e-6);
}

/// `Mul(x, Sigmoid(x))` in either operand order becomes one SiLU op; a sigmoid that another
/// node reads too, or a product of a sigmoid with another tensor, stays as it is. The values
/// match f64 loops, and sprout's export (SiLU as `Sigmoid` and `Mul`) reads back as SiLU.
#[test]
fn x_times_its_sigmoid_is_one_silu_op_and_survives_export() {
    let model = x_to_y_model(
        vec![
            NodeProto::new("Sigmoid", "s1", &["x"], &["s1"]),
            NodeProto::new("Mul", "silu1", &["x", "s1"], &["a"]),
            NodeProto::new("Sigmoid", "s2", &["a"], &["s2"]),
            NodeProto::new("Mul", "silu2", &["s2", "a"], &["b"]),
            NodeProto::new("Sigmoid", "s3", &["b"], &["s3"]),
            NodeProto::new("Mul", "shared", &["b", "s3"], &["c"]),
            NodeProto::new("Add", "plus", &["c", "s3"], &["d"]),
            NodeProto::new("Sigmoid", "s4", &["x"], &["s4"]),
            NodeProto::new("Mul", "gated", &["d", "s4"], &["y"]),
        ],
        vec![],
    );
    let imported = import(&model).expect("imports");
    let count = |g: &sprout_core::Graph, op| g.nodes().iter().filter(|n| n.op == op).count();
    let g = &imported.graph;
    assert_eq!([Op::Silu, Op::Sigmoid, Op::Mul].map(|op| count(g, op)), [2, 2, 2]);
    let x = values(13, 24, -6.0, 6.0);
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    let expected: Vec<f64> = f64s(&x)
        .into_iter()
        .map(|x| {
            let a = x * sigmoid(x);
            let b = a * sigmoid(a);
            (b * sigmoid(b) + sigmoid(b)) * sigmoid(x)
        })
        .collect();
    let y = run(g, imported.input, imported.outputs[0], &x);
    assert_close(&y, &expected, 1e-6);

    let bytes = sprout_onnx::export_onnx(g, &sprout_onnx::graph_weights(g)).expect("exports");
    let again = import_with(&bytes, &ImportOptions { batch: Some(2), ..Default::default() })
        .expect("imports it");
    assert_eq!([Op::Silu, Op::Sigmoid, Op::Mul].map(|op| count(&again.graph, op)), [2, 2, 2]);
    let y2 = run(&again.graph, again.input, again.outputs[0], &x);
    assert_close(&y2, &f64s(&y), 0.0);
}

/// GELU's tanh form as PyTorch's TorchScript exporter spells it out before opset 20
/// (`0.5 · (x · (1 + tanh(√(2/π) · (x + 0.044715 · (x · (x · x))))))`), and with every
/// constant on the other side of its product, is one GELU op of the tanh form, which
/// The dynamo exporter at opset 18 writes exact GELU as `x / √2 → Erf → + 1 → · ½ → · x`:
/// one GELU op.
#[test]
fn gelu_with_its_half_before_x_is_one_op() {
    let constants = vec![
        TensorProto::f32("sqrt2", &[], &[std::f32::consts::SQRT_2]),
        TensorProto::f32("one", &[], &[1.0]),
        TensorProto::f32("half", &[], &[0.5]),
    ];
    let model = x_to_y_model(
        vec![
            NodeProto::new("Div", "scaled", &["x", "sqrt2"], &["s"]),
            NodeProto::new("Erf", "erf", &["s"], &["e"]),
            NodeProto::new("Add", "plus", &["e", "one"], &["p"]),
            NodeProto::new("Mul", "halved", &["half", "p"], &["h"]),
            NodeProto::new("Mul", "gelu", &["x", "h"], &["y"]),
        ],
        constants,
    );
    let imported = import(&model).expect("imports");
    let ops: Vec<Op> = imported.graph.nodes().iter().map(|n| n.op).collect();
    assert_eq!(ops, [Op::Gelu(GeluParams { tanh: false })]);
    let x = values(18, 24, -4.0, 4.0);
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    let expected: Vec<f64> =
        f64s(&x).into_iter().map(|v| 0.5 * v * (1.0 + erf(v / 2f64.sqrt()))).collect();
    assert_close(&y, &expected, 1e-6);
}

/// The dynamo exporter's `as_strided` of a contiguous `[N, C, 1, 1]` view: a Reshape to
/// `[-1]` (the batch with the channels), a Gather of every element in order by indices
/// computed with `Range` from the batch size (folded at import), shaped `[N, C, 1, 1]`.
#[test]
fn a_gather_of_every_element_in_order_is_a_reshape_and_rebatches() {
    let constants = vec![
        TensorProto::i64("flat", &[1], &[-1]),
        TensorProto::i64("zero", &[], &[0]),
        TensorProto::i64("step", &[], &[1]),
        TensorProto::i64("first", &[1], &[0]),
        TensorProto::i64("channels", &[], &[3]),
        TensorProto::i64("axes", &[3], &[1, 2, 3]),
        TensorProto::i64("offsets", &[1, 3, 1, 1], &[0, 1, 2]),
    ];
    let model = x_to_y_model(
        vec![
            NodeProto::new("ReduceMean", "mean", &["x"], &["m"]).with(A::ints("axes", &[2, 3])),
            NodeProto::new("Reshape", "flatten", &["m", "flat"], &["f"]),
            NodeProto::new("Shape", "shape", &["x"], &["sh"]),
            NodeProto::new("Gather", "size", &["sh", "first"], &["n1"]),
            NodeProto::new("Squeeze", "n", &["n1"], &["n"]),
            NodeProto::new("Range", "range", &["zero", "n", "step"], &["r"]),
            NodeProto::new("Mul", "rows", &["r", "channels"], &["rc"]),
            NodeProto::new("Unsqueeze", "lift", &["rc", "axes"], &["ru"]),
            NodeProto::new("Add", "indices", &["ru", "offsets"], &["i"]),
            NodeProto::new("Gather", "as_strided", &["f", "i"], &["y"]),
        ],
        constants,
    );
    let imported = import(&model).expect("imports");
    let ops: Vec<&str> = imported.graph.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(ops, ["global_avg_pool", "reshape"]);
    assert_eq!(imported.graph.shape(imported.outputs[0]).dims(), [2, 3, 1, 1]);
    let x = values(19, 24, -1.0, 1.0);
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    let expected: Vec<f64> = f64s(&x).chunks(4).map(|v| v.iter().sum::<f64>() / 4.0).collect();
    assert_close(&y, &expected, 1e-6);
    let five = imported.graph.with_batch(5).expect("no reshape folds the batch away");
    assert_eq!(five.shape(imported.outputs[0]).dims(), [5, 3, 1, 1]);
    // Any other Gather of a computed tensor is refused, naming it.
    let model = x_to_y_model(
        vec![
            NodeProto::new("Reshape", "flatten", &["x", "flat"], &["f"]),
            NodeProto::new("Gather", "pick", &["f", "first"], &["y"]),
        ],
        vec![TensorProto::i64("flat", &[1], &[-1]), TensorProto::i64("first", &[1], &[0])],
    );
    let err = import(&model).err().expect("refused").to_string();
    assert!(err.contains("'pick'") && err.contains("every element"), "{err}");
}

/// sprout's export writes back as that chain.
#[test]
fn gelu_spelt_out_with_tanh_is_the_tanh_form_of_the_gelu_op() {
    let constants = vec![
        TensorProto::f32("cubic", &[], &[0.044_715]),
        TensorProto::f32("scale", &[], &[0.797_884_6]),
        TensorProto::f32("one", &[], &[1.0]),
        TensorProto::f32("half", &[], &[0.5]),
    ];
    let x = values(17, 24, -4.0, 4.0);
    for swapped in [false, true] {
        let mul = |name: &str, c: &str, v: &str, out: &str| match swapped {
            false => NodeProto::new("Mul", name, &[c, v], &[out]),
            true => NodeProto::new("Mul", name, &[v, c], &[out]),
        };
        let model = x_to_y_model(
            vec![
                NodeProto::new("Mul", "square", &["x", "x"], &["sq"]),
                NodeProto::new("Mul", "cube", &["x", "sq"], &["cu"]),
                mul("cubic", "cubic", "cu", "c3"),
                NodeProto::new("Add", "inner", &["x", "c3"], &["in"]),
                mul("scaled", "scale", "in", "sc"),
                NodeProto::new("Tanh", "tanh", &["sc"], &["t"]),
                NodeProto::new("Add", "plus", &["one", "t"], &["p"]),
                NodeProto::new("Mul", "times", &["x", "p"], &["m"]),
                mul("half", "half", "m", "y"),
            ],
            constants.clone(),
        );
        let imported = import(&model).expect("imports");
        let ops: Vec<Op> = imported.graph.nodes().iter().map(|n| n.op).collect();
        assert_eq!(ops, [Op::Gelu(GeluParams { tanh: true })], "swapped {swapped}");
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let expected: Vec<f64> = f64s(&x)
            .into_iter()
            .map(|x| 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()))
            .collect();
        let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
        assert_close(&y, &expected, 1e-6);
        // sprout's export writes the same chain, which reads back as the same op.
        let g = &imported.graph;
        let bytes = sprout_onnx::export_onnx(g, &sprout_onnx::graph_weights(g)).expect("exports");
        let again = import_with(&bytes, &ImportOptions { batch: Some(2), ..Default::default() })
            .expect("imports it");
        let ops: Vec<Op> = again.graph.nodes().iter().map(|n| n.op).collect();
        assert_eq!(ops, [Op::Gelu(GeluParams { tanh: true })]);
        let y2 = run(&again.graph, again.input, again.outputs[0], &x);
        assert_close(&y2, &f64s(&y), 0.0);
    }
}

#[test]
fn a_mul_whose_shapes_do_not_broadcast_is_refused_naming_the_node_and_both() {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("GlobalAveragePool", "pool", &["x"], &["p"]),
            NodeProto::new("Flatten", "flat", &["p"], &["f"]),
            NodeProto::new("Mul", "scale/mul", &["x", "f"], &["y"]),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(1), Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(4)],
        )],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let err = import(&ModelProto::new(graph, 13).encode_to_vec()).err().expect("refused");
    let text = err.to_string();
    let shapes = "shapes [1, 2, 4, 4] and [1, 2] do not broadcast";
    assert!(text.contains("scale/mul") && text.contains(shapes), "{text}");
}

/// `Concat` of three computed tensors along the channel axis, written as ONNX's negative
/// axis -3, and of two along the width: the values land where ONNX puts them.
#[test]
fn concat_joins_computed_tensors_along_any_axis_but_the_batch() {
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Relu", "r", &["x"], &["a"]),
            NodeProto::new("Sigmoid", "s", &["x"], &["b"]),
            NodeProto::new("Concat", "cat", &["a", "b", "x"], &["c"]).with(A::int("axis", -3)),
            NodeProto::new("Concat", "wide", &["c", "c"], &["y"]).with(A::int("axis", 3)),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(2), Dim::Fixed(2), Dim::Fixed(2), Dim::Fixed(3)],
        )],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 13).encode_to_vec()).expect("imports");
    let g = &imported.graph;
    assert_eq!(g.shape(imported.outputs[0]).dims(), &[2, 6, 2, 6]);
    let x = values(5, 2 * 2 * 2 * 3, -2.0, 2.0);
    let y = run(g, imported.input, imported.outputs[0], &x);
    let sample = 2 * 2 * 3;
    let mut expected = Vec::new();
    for n in 0..2 {
        let xs = &x[n * sample..][..sample];
        let c: Vec<f64> = (xs.iter().map(|&v| (v as f64).max(0.0)))
            .chain(xs.iter().map(|&v| 1.0 / (1.0 + (-(v as f64)).exp())))
            .chain(xs.iter().map(|&v| v as f64))
            .collect();
        for row in c.chunks(3) {
            expected.extend_from_slice(row);
            expected.extend_from_slice(row);
        }
    }
    assert_close(&y, &expected, 1e-6);
}

/// `LogSoftmax` over the last axis (ONNX's default from opset 13) of a `[2, 5]` tensor:
/// the logarithm of each row's softmax, finite even for logits far apart.
#[test]
fn log_softmax_gives_each_rows_log_probabilities() {
    let graph = GraphProto {
        node: vec![NodeProto::new("LogSoftmax", "logp", &["x"], &["y"])],
        input: vec![ValueInfoProto::f32("x", &[Dim::Fixed(2), Dim::Fixed(5)])],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 13).encode_to_vec()).expect("imports");
    let mut x = values(3, 10, -4.0, 4.0);
    x[9] = 90.0;
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    let expected: Vec<f64> = x
        .chunks(5)
        .flat_map(|row| {
            let row: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            let max = row.iter().copied().fold(f64::MIN, f64::max);
            let log_sum = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            row.into_iter().map(move |v| v - log_sum)
        })
        .collect();
    assert_close(&y, &expected, 1e-5);
}

/// `x [2, 5, 2, 5]` as PyTorch's exporters write ShuffleNet's channel shuffle and chunk:
/// a `Split` of the channels into 1 + 4 (opset 13: sizes as an input), a 5-D view of the
/// pair, the transpose of its two group axes and a view back, a `Slice` of the width, and a
/// `Softmax` over the channel axis (opset 13's `axis`, not the last): every value lands
/// where ONNX puts it.
#[test]
fn shuffles_splits_slices_and_a_channel_softmax_match() {
    let int = |name: &str, v: &[i64]| TensorProto::i64(name, &[v.len() as i64], v);
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Split", "chunk", &["x", "sizes"], &["a", "b"]).with(A::int("axis", 1)),
            NodeProto::new("Reshape", "groups", &["b", "five"], &["g"]),
            NodeProto::new("Transpose", "shuffle", &["g"], &["t"])
                .with(A::ints("perm", &[0, 2, 1, 3, 4])),
            NodeProto::new("Reshape", "back", &["t", "four"], &["s"]),
            NodeProto::new("Slice", "narrow", &["s", "starts", "ends", "axes"], &["n"]),
            NodeProto::new("Softmax", "softmax", &["n"], &["y"]).with(A::int("axis", 1)),
            NodeProto::new("Relu", "first", &["a"], &["z"]),
        ],
        initializer: vec![
            int("sizes", &[1, 4]),
            int("five", &[2, 2, 2, 2, 5]),
            int("four", &[2, 4, 2, 5]),
            int("starts", &[1]),
            int("ends", &[-1]),
            int("axes", &[3]),
        ],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(2), Dim::Fixed(5)],
        )],
        output: vec![ValueInfoProto::f32("y", &[]), ValueInfoProto::f32("z", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 13).encode_to_vec()).expect("imports");
    let g = &imported.graph;
    assert_eq!(g.shape(imported.outputs[0]).dims(), &[2, 4, 2, 3]);
    assert_eq!(g.shape(imported.outputs[1]).dims(), &[2, 1, 2, 5]);
    let x = values(9, 2 * 5 * 2 * 5, -3.0, 3.0);
    let at = |n: usize, c: usize, h: usize, w: usize| x[((n * 5 + c) * 2 + h) * 5 + w] as f64;
    // Channels 1..5 are the second chunk: shuffled, its channel j is chunk channel
    // (j % 2) * 2 + j / 2; the width keeps 1..4.
    let mut expected = Vec::new();
    for n in 0..2 {
        for j in 0..4 {
            for h in 0..2 {
                for w in 1..4 {
                    let e = |j: usize| at(n, 1 + (j % 2) * 2 + j / 2, h, w).exp();
                    expected.push(e(j) / (0..4).map(e).sum::<f64>());
                }
            }
        }
    }
    let y = run(g, imported.input, imported.outputs[0], &x);
    assert_close(&y, &expected, 1e-6);
    let z = run(g, imported.input, imported.outputs[1], &x);
    let first: Vec<f64> = (0..2)
        .flat_map(|n| (0..10).map(move |i| (n, i)))
        .map(|(n, i)| at(n, 0, i / 5, i % 5).max(0.0))
        .collect();
    assert_close(&z, &first, 1e-6);
}

/// A convolution of `x [1, 2, 5, 4]` by `w [3, 2, 3, 3]` with stride 2 and zero padding
/// `[top, left, bottom, right]`, computed here in f64.
fn conv_expected(x: &[f32], w: &[f32], pads: [usize; 4]) -> Vec<f64> {
    let (h, wd) = (5, 4);
    let out = |size: usize, lead: usize, trail: usize| (size + lead + trail - 3) / 2 + 1;
    let (oh, ow) = (out(h, pads[0], pads[2]), out(wd, pads[1], pads[3]));
    let mut y = Vec::new();
    for o in 0..3 {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut sum = 0.0;
                for c in 0..2 {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let iy = (oy * 2 + ky) as isize - pads[0] as isize;
                            let ix = (ox * 2 + kx) as isize - pads[1] as isize;
                            if (0..h as isize).contains(&iy) && (0..wd as isize).contains(&ix) {
                                let xv = x[(c * h + iy as usize) * wd + ix as usize] as f64;
                                sum += xv * w[((o * 2 + c) * 3 + ky) * 3 + kx] as f64;
                            }
                        }
                    }
                }
                y.push(sum);
            }
        }
    }
    y
}

/// Asymmetric padding, given as `pads`, by `auto_pad` SAME_UPPER / SAME_LOWER with stride 2,
/// or as a `Pad` before the `Conv`: the convolution pads what both sides share and a zero
/// padding op adds the rest. sprout's ONNX export writes it back as a `Pad`.
#[test]
fn asymmetric_conv_padding_matches_for_pads_auto_pad_and_a_pad_node() {
    let w = values(4, 3 * 2 * 3 * 3, -1.0, 1.0);
    let x = values(6, 2 * 5 * 4, -2.0, 2.0);
    let model = |nodes: Vec<NodeProto>, extra: Vec<TensorProto>| {
        let mut initializer = vec![TensorProto::f32("w", &[3, 2, 3, 3], &w)];
        initializer.extend(extra);
        let graph = GraphProto {
            node: nodes,
            initializer,
            input: vec![ValueInfoProto::f32(
                "x",
                &[Dim::Fixed(1), Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(4)],
            )],
            output: vec![ValueInfoProto::f32("y", &[])],
            ..Default::default()
        };
        ModelProto::new(graph, 13).encode_to_vec()
    };
    let conv =
        || NodeProto::new("Conv", "conv", &["x", "w"], &["y"]).with(A::ints("strides", &[2, 2]));
    // SAME over 5 rows with stride 2 pads 2 (1 + 1); over 4 columns, 1: right (UPPER) or left.
    let cases: Vec<(&str, Vec<u8>, [usize; 4])> = vec![
        ("pads", model(vec![conv().with(A::ints("pads", &[0, 1, 2, 0]))], vec![]), [0, 1, 2, 0]),
        (
            "upper",
            model(vec![conv().with(A::string("auto_pad", "SAME_UPPER"))], vec![]),
            [1, 0, 1, 1],
        ),
        (
            "lower",
            model(vec![conv().with(A::string("auto_pad", "SAME_LOWER"))], vec![]),
            [1, 1, 1, 0],
        ),
        (
            "pad node",
            model(
                vec![
                    NodeProto::new("Pad", "pad", &["x", "p"], &["xp"]),
                    NodeProto::new("Conv", "conv", &["xp", "w"], &["y"])
                        .with(A::ints("strides", &[2, 2]))
                        .with(A::ints("pads", &[1, 0, 0, 0])),
                ],
                vec![TensorProto::i64("p", &[8], &[0, 0, 0, 0, 0, 0, 1, 1])],
            ),
            [1, 0, 1, 1],
        ),
    ];
    for (name, bytes, pads) in cases {
        let imported = import(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
        assert_close(&y, &conv_expected(&x, &w, pads), 1e-5);
        let weights = sprout_onnx::graph_weights(&imported.graph);
        let exported = sprout_onnx::export_onnx(&imported.graph, &weights)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = import(&exported).unwrap_or_else(|e| panic!("{name}: {e}"));
        let y = run(&again.graph, again.input, again.outputs[0], &x);
        assert_close(&y, &conv_expected(&x, &w, pads), 1e-5);
    }
}

/// `Sub` of two computed tensors of one shape: an addition of the negated second.
#[test]
fn sub_of_computed_tensors_matches() {
    let model = x_to_y_model(
        vec![
            NodeProto::new("Relu", "r", &["x"], &["a"]),
            NodeProto::new("Sigmoid", "s", &["x"], &["b"]),
            NodeProto::new("Sub", "difference", &["a", "b"], &["y"]),
        ],
        vec![],
    );
    let imported = import(&model).expect("imports");
    let x = values(12, 24, -3.0, 3.0);
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    let expected: Vec<f64> =
        x.iter().map(|&v| (v as f64).max(0.0) - 1.0 / (1.0 + (-(v as f64)).exp())).collect();
    assert_close(&y, &expected, 1e-6);
}

/// The opset-13 model of `node` from input `x` (`[2, 3, 2, 2]`) to output `y`, with the
/// constants `initializer`.
fn x_to_y_model(node: Vec<NodeProto>, initializer: Vec<TensorProto>) -> Vec<u8> {
    let graph = GraphProto {
        node,
        input: vec![ValueInfoProto::f32("x", &[2, 3, 2, 2].map(Dim::Fixed))],
        output: vec![ValueInfoProto::f32("y", &[])],
        initializer,
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

/// The model of the single node `node` over one image `[1, c, h, w]` (input `x`, output `y`).
fn one_node_model(node: NodeProto, [c, h, w]: [usize; 3]) -> Vec<u8> {
    let dims = [1, c, h, w].map(|d| Dim::Fixed(d as i64));
    let graph = GraphProto {
        node: vec![node],
        input: vec![ValueInfoProto::f32("x", &dims)],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    ModelProto::new(graph, 13).encode_to_vec()
}

/// A pool `op` of `kernel` over `[1, 1, h, w]` with `pads` `[top, left, bottom, right]`.
fn pool_model(op: &str, kernel: [i64; 2], [h, w]: [usize; 2], pads: [i64; 4]) -> Vec<u8> {
    let node = NodeProto::new(op, "pool", &["x"], &["y"])
        .with(A::ints("kernel_shape", &kernel))
        .with(A::ints("pads", &pads));
    one_node_model(node, [1, h, w])
}

/// A column max pool `(k, 1)` over `[1, 1, h, 1]`.
fn column_max_pool(k: usize, h: usize, pads: [i64; 4]) -> sprout_onnx::Imported {
    import(&pool_model("MaxPool", [k as i64, 1], [h, 1], pads)).unwrap()
}

/// An average pool padded so unevenly that it would split into a hundred pools of their
/// own (ten row segments times ten column segments) is refused, not built block by block:
/// at a few thousand rows and columns that was millions of nodes.
#[test]
fn an_average_pool_split_into_too_many_pools_is_refused() {
    let Err(err) = import(&pool_model("AveragePool", [10, 10], [20, 20], [0, 0, 9, 9])) else {
        panic!("a pool split into a hundred must be refused");
    };
    let message = err.to_string();
    assert!(message.contains("10 x 10 pools") && message.contains("at most 64"), "{message}");
    assert!(import(&pool_model("AveragePool", [3, 3], [6, 6], [0, 0, 2, 2])).is_ok());
}

/// Padding more on one side than the other repeats an edge: 5 and 6 times here, so the
/// repeated blocks are built from several doublings; each window takes the maximum of what
/// it covers of the input.
#[test]
fn a_max_pool_padded_unevenly_repeats_its_edges_any_number_of_times() {
    let h = 4;
    let x = values(41, h, -3.0, -1.0);
    for (top, bottom) in [(0, 6), (5, 0), (1, 6)] {
        let imported = column_max_pool(7, h, [top, 0, bottom, 0]);
        let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
        let out = h + top as usize + bottom as usize - 7 + 1;
        let expected: Vec<f64> = (0..out)
            .map(|i| {
                let rows =
                    i.saturating_sub(top as usize)..(i + 7).saturating_sub(top as usize).min(h);
                f64::from(x[rows].iter().copied().fold(f32::NEG_INFINITY, f32::max))
            })
            .collect();
        assert_close(&y, &expected, 0.0);
    }
}

/// Found by the `onnx` fuzz target: a pool padded a hundred thousand rows more below than
/// above recorded one concatenation per row, and the import ran for minutes. The edge is
/// now repeated by doubling.
#[test]
fn a_hugely_uneven_pool_padding_imports_in_a_few_nodes() {
    let k = 100_001;
    let imported = column_max_pool(k, k, [0, 0, k as i64 - 1, 0]);
    assert!(imported.graph.nodes().len() < 64, "{} nodes", imported.graph.nodes().len());
    assert_eq!(imported.graph.shape(imported.outputs[0]).dims(), [1, 1, k, 1]);
}

/// One image `[1, 2, h, w]` through the single node `node` (input `x`, output `y`).
fn run_one_node(node: NodeProto, (h, w): (usize, usize), x: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let imported = import(&one_node_model(node, [2, h, w])).unwrap();
    let y = run(&imported.graph, imported.input, imported.outputs[0], x);
    (imported.graph.shape(imported.outputs[0]).dims().to_vec(), y)
}

#[test]
fn average_pools_with_ceil_mode_and_uneven_pads_divide_as_pytorch_does() {
    let (h, w, k, s) = (6, 7, [3, 2], 2);
    let x: Vec<f32> = values(41, 2 * h * w, -1.0, 2.0);
    let cases = [
        ([0, 0, 0, 0], true, true),
        ([1, 0, 0, 1], false, false),
        ([1, 0, 0, 1], true, false),
        ([1, 1, 1, 0], true, true),
        ([1, 1, 1, 1], false, true),
    ];
    for (pads, include, ceil) in cases {
        let node = NodeProto::new("AveragePool", "pool", &["x"], &["y"])
            .with(A::ints("kernel_shape", &[k[0] as i64, k[1] as i64]))
            .with(A::ints("strides", &[s as i64, s as i64]))
            .with(A::ints("pads", &pads))
            .with(A::int("count_include_pad", include as i64))
            .with(A::int("ceil_mode", ceil as i64));
        let (dims, y) = run_one_node(node, (h, w), &x);
        // PyTorch's rule: a window ends at the padded input's end at the latest; its
        // divisor counts the positions inside the input, and the pads with count_include_pad.
        let windows = |size: usize, lead: usize, trail: usize, k: usize| {
            let span = size + lead + trail - k;
            let n = if ceil { span.div_ceil(s) + 1 } else { span / s + 1 };
            if ceil && (n - 1) * s >= size + lead {
                n - 1
            } else {
                n
            }
        };
        let [t, l, b, r] = pads.map(|p| p as usize);
        let (oh, ow) = (windows(h, t, b, k[0]), windows(w, l, r, k[1]));
        assert_eq!(dims, [1, 2, oh, ow], "{pads:?} {include} {ceil}");
        let span = |o: usize, lead: usize, size: usize, trail: usize, k: usize| {
            let start = (o * s) as isize - lead as isize;
            let end = (start + k as isize).min((size + trail) as isize);
            let inside = start.max(0) as usize..(end.min(size as isize)) as usize;
            (inside, (end - start) as usize)
        };
        let mut expected = Vec::new();
        for c in 0..2 {
            for i in 0..oh {
                for j in 0..ow {
                    let (rows, rn) = span(i, t, h, b, k[0]);
                    let (cols, cn) = span(j, l, w, r, k[1]);
                    let count = rows.len() * cols.len();
                    let sum: f64 = rows
                        .flat_map(|q| cols.clone().map(move |p| (q, p)))
                        .map(|(q, p)| f64::from(x[(c * h + q) * w + p]))
                        .sum();
                    expected.push(sum / if include { rn * cn } else { count } as f64);
                }
            }
        }
        assert_close(&y, &expected, 1e-6);
    }
}

#[test]
fn a_gather_between_transposes_that_move_the_batch_axis_takes_pixels() {
    // What the dynamo exporter writes for adaptive pooling: pixels to the front, GatherND of
    // (row, column) pairs, pixels back behind the channels, a mean over the window axes.
    let (h, w) = (3, 4);
    let x: Vec<f32> = values(42, 2 * h * w, -1.0, 1.0);
    // Two output rows of windows of 2 rows, three columns of windows of 1.
    let mut idx = Vec::new();
    for i in 0..2 {
        for a in 0..2 {
            for j in 0..3 {
                idx.extend([(i + a) as i64, (j + 1) as i64]);
            }
        }
    }
    let graph = GraphProto {
        node: vec![
            NodeProto::new("Transpose", "front", &["x"], &["t"])
                .with(A::ints("perm", &[2, 3, 0, 1])),
            NodeProto::new("GatherND", "take", &["t", "idx"], &["g"]),
            NodeProto::new("Transpose", "back", &["g"], &["b"])
                .with(A::ints("perm", &[3, 4, 0, 1, 2])),
            NodeProto::new("ReduceMean", "mean", &["b"], &["y"])
                .with(A::ints("axes", &[3]))
                .with(A::int("keepdims", 0)),
        ],
        initializer: vec![TensorProto::i64("idx", &[2, 2, 3, 2], &idx)],
        input: vec![ValueInfoProto::f32(
            "x",
            &[Dim::Fixed(1), Dim::Fixed(2), Dim::Fixed(h as i64), Dim::Fixed(w as i64)],
        )],
        output: vec![ValueInfoProto::f32("y", &[])],
        ..Default::default()
    };
    let imported = import(&ModelProto::new(graph, 13).encode_to_vec()).unwrap();
    let y = run(&imported.graph, imported.input, imported.outputs[0], &x);
    assert_eq!(imported.graph.shape(imported.outputs[0]).dims(), [1, 2, 2, 3]);
    let mut expected = Vec::new();
    for c in 0..2 {
        for i in 0..2 {
            for j in 0..3 {
                let at = |q: usize| f64::from(x[(c * h + q) * w + j + 1]);
                expected.push((at(i) + at(i + 1)) / 2.0);
            }
        }
    }
    assert_close(&y, &expected, 1e-6);
}

/// `MaxPool` with `ceil_mode = 1` rounding its output up, with and without asymmetric
/// `pads`, on negative values (where zeros in the overhang would win): the windows that
/// hang past the input take the maximum of what they cover, as ONNX and PyTorch define.
#[test]
fn a_ceil_mode_max_pool_rounds_up_over_what_its_last_windows_cover() {
    let (h, w) = (6, 7);
    let x: Vec<f32> = values(40, 2 * h * w, -3.0, -1.0);
    for (pads, out) in [([0, 0, 0, 0], (3, 4)), ([1, 0, 0, 1], (3, 4)), ([1, 1, 1, 0], (4, 4))] {
        let node = NodeProto::new("MaxPool", "pool", &["x"], &["y"])
            .with(A::ints("kernel_shape", &[3, 2]))
            .with(A::ints("strides", &[2, 2]))
            .with(A::ints("pads", &pads))
            .with(A::int("ceil_mode", 1));
        let (dims, y) = run_one_node(node, (h, w), &x);
        assert_eq!(dims, [1, 2, out.0, out.1]);
        let mut expected = Vec::new();
        for c in 0..2 {
            for i in 0..out.0 {
                for j in 0..out.1 {
                    let rows = (2 * i).saturating_sub(pads[0] as usize)
                        ..(2 * i + 3 - pads[0] as usize).min(h);
                    let cols = (2 * j).saturating_sub(pads[1] as usize)
                        ..(2 * j + 2 - pads[1] as usize).min(w);
                    let x = &x;
                    let best = rows
                        .flat_map(|r| cols.clone().map(move |q| x[(c * h + r) * w + q]))
                        .fold(f32::NEG_INFINITY, f32::max);
                    expected.push(f64::from(best));
                }
            }
        }
        assert_close(&y, &expected, 0.0);
    }
}
