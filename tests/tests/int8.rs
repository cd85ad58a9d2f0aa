//! The int8 path end to end: post-training quantization of a float graph (batch norms
//! folded, activations fused) running the int8 kernels bit-exactly, gradients of int8
//! layers against their definition with and without quantization-aware scaling, and the
//! errors quantizing gives on bad input.

use sprout_core::format::{Metadata, ModelFile, Preprocessing};
use sprout_core::int8_conversion::{quantize_graph, FloatFallback, QuantizeError, QuantizeOptions};
use sprout_core::op::{ConvParams, Op, PoolParams};
use sprout_core::ops::Int8Weights;
use sprout_core::quant::{conv2d_s8, OutputQuant, QConv2dArgs, QuantParams, Requantize};
use sprout_core::reference::Activation;
use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_inference, compile_outputs, differentiate, nn, save_model, Executor, Graph, Init, Mode,
    Reference, Shape, TensorId,
};
use sprout_train::{calibrate, DataSource, Model, RangeMethod, TensorSet};
use std::path::Path;

const BATCH: usize = 4;

fn random(rng: &mut SplitMix, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(lo, hi)).collect()
}

/// A small MobileNet-like model: conv + BN + ReLU6, depthwise conv + BN + ReLU, pointwise
/// conv + BN with a residual add, global pooling and a linear head, with non-trivial
/// batch-norm statistics so folding matters.
fn float_model(seed: u64) -> Graph {
    let mut g = Graph::new(seed);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let labels = g.labels("labels", BATCH).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "stem", x, 8, 3, same, false).unwrap();
    let h = nn::batch_norm2d(&mut g, "stem_bn", h).unwrap();
    let h = g.relu6("stem_act", h).unwrap();
    let dw = ConvParams { groups: 8, ..same };
    let d = nn::conv2d(&mut g, "dw", h, 8, 3, dw, false).unwrap();
    let d = nn::batch_norm2d(&mut g, "dw_bn", d).unwrap();
    let d = g.relu("dw_act", d).unwrap();
    let point = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
    let p = nn::conv2d(&mut g, "pw", d, 8, 1, point, true).unwrap();
    let p = nn::batch_norm2d(&mut g, "pw_bn", p).unwrap();
    let r = g.add("res", h, p).unwrap();
    let pooled = g.global_avg_pool("pool", r).unwrap();
    let logits = nn::linear(&mut g, "head", pooled, 3).unwrap();
    g.cross_entropy("loss", logits, labels).unwrap();
    let mut rng = SplitMix::new(seed ^ 0xb17);
    for bn in ["stem_bn", "dw_bn", "pw_bn"] {
        for (what, lo, hi) in [
            ("weight", 0.5, 1.5),
            ("bias", -0.3, 0.3),
            ("running_mean", -0.2, 0.2),
            ("running_var", 0.3, 2.0),
        ] {
            let id = g.find(&format!("{bn}.{what}")).unwrap();
            g.set_initial_values(id, random(&mut rng, 8, lo, hi)).unwrap();
        }
    }
    g
}

fn as_model(graph: &Graph) -> Model {
    let metadata = Metadata {
        class_names: vec!["a".into(), "b".into(), "c".into()],
        input_shape: Shape::d4(BATCH, 3, 8, 8),
        preprocessing: Preprocessing::default(),
        provenance: "int8 test".into(),
    };
    let bytes = save_model(&ModelFile::from_graph(graph, metadata)).unwrap();
    Model::from_bytes(&bytes, Path::new("test.sprout")).unwrap()
}

fn samples(n: usize, seed: u64) -> DataSource {
    let mut rng = SplitMix::new(seed);
    let set = TensorSet {
        x: random(&mut rng, n * 3 * 64, -1.0, 1.0),
        y: (0..n).map(|i| (i % 3) as i32).collect(),
        sample_dims: vec![3, 8, 8],
        path: "calibration".into(),
    };
    DataSource::tensors(set, BATCH, seed, false)
}

/// Runs `graph`'s inference for `outputs` on `x` and returns each output's bytes.
fn infer(graph: &Graph, x: &[f32], outputs: &[&str]) -> Vec<Vec<u8>> {
    let ids: Vec<TensorId> = outputs.iter().map(|n| graph.find(n).unwrap()).collect();
    let plan = compile_inference(graph, &ids).unwrap();
    let mut memory = plan.initial_memory(graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = memory.regions();
    regions.write(&plan.operand("input").unwrap(), x).unwrap();
    exec.run(&mut regions).unwrap();
    outputs
        .iter()
        .map(|n| {
            let op = plan.operand(n).unwrap();
            memory.region(op.region)[op.offset..op.end()].to_vec()
        })
        .collect()
}

fn ints(graph: &Graph, name: &str) -> Vec<i32> {
    match graph.tensor(graph.find(name).unwrap()).init.as_ref().unwrap() {
        Init::Ints(v) => v.clone(),
        other => panic!("{name} holds {other:?}"),
    }
}

#[test]
fn a_quantized_graph_runs_the_int8_kernels_and_tracks_the_float_logits() {
    let float = float_model(3);
    let model = as_model(&float);
    let ranges = calibrate(&model, &mut samples(32, 1), RangeMethod::MinMax).unwrap();
    let int8 = quantize_graph(&float, &ranges, &QuantizeOptions::default()).unwrap().graph;
    // Batch norms folded, activations fused: one int8 op per layer.
    let kinds: Vec<&str> = int8.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(
        kinds,
        [
            "quantize",
            "qconv2d",
            "qconv2d",
            "qconv2d",
            "qadd",
            "qglobal_avg_pool",
            "qlinear",
            "dequantize",
            "cross_entropy"
        ]
    );

    let x = random(&mut SplitMix::new(9), BATCH * 3 * 64, -1.0, 1.0);
    let out = infer(&int8, &x, &["input.quantized", "stem_act", "head.dequantized"]);
    // The stem's output is conv2d_s8 of the stored codes, bit for bit.
    let stem = int8.nodes().iter().find(|n| n.op.kind() == "qconv2d").unwrap();
    let sprout_core::op::Op::QConv2d(q) = stem.op else { unreachable!() };
    let x_q: Vec<i8> = bytemuck::cast_slice(&out[0]).to_vec();
    let w: Vec<i8> = ints(&int8, "stem.weight").iter().map(|&v| v as i8).collect();
    let bias = ints(&int8, "stem.bias");
    let requant: Vec<Requantize> = ints(&int8, "stem.requant")
        .chunks(2)
        .map(|p| Requantize { multiplier: p[0], shift: p[1] })
        .collect();
    let g = sprout_core::geometry::Conv2dGeometry {
        n: BATCH,
        c_in: 3,
        h: 8,
        w: 8,
        c_out: 8,
        kh: 3,
        kw: 3,
        stride: (1, 1),
        padding: (1, 1),
        groups: 1,
        out_h: 8,
        out_w: 8,
    };
    let mut expected = vec![0i8; g.output_len()];
    let oq = OutputQuant { multipliers: &requant, zero_point: q.output.zero_point, act: q.act };
    let (x_zero_point, some_bias) = (q.input.zero_point, Some(&bias[..]));
    let args =
        QConv2dArgs { x: &x_q, x_zero_point, weights: &w, bias: some_bias, out: oq, shape: g };
    conv2d_s8(&args, &mut expected);
    let got: Vec<i8> = bytemuck::cast_slice(&out[1]).to_vec();
    assert_eq!(got, expected);
    // ReLU6 fused: nothing below the real zero or above six.
    let (lo, hi) = q.output.relu6_bounds();
    assert!(got.iter().all(|&v| v >= lo && v <= hi));

    // The int8 logits stay close to the float model's.
    let float_logits: Vec<f32> = bytemuck::cast_slice(&infer(&float, &x, &["head"])[0]).to_vec();
    let int8_logits: Vec<f32> = bytemuck::cast_slice(&out[2]).to_vec();
    let span = float_logits.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, b) in int8_logits.iter().zip(&float_logits) {
        assert!((a - b).abs() <= 0.08 * span, "int8 {a} vs float {b} (span {span})");
    }
}

#[test]
fn int8_weights_survive_the_model_file_bit_for_bit() {
    let float = float_model(4);
    let ranges =
        calibrate(&as_model(&float), &mut samples(8, 2), RangeMethod::Percentile(99.9)).unwrap();
    let int8 = quantize_graph(&float, &ranges, &QuantizeOptions::default()).unwrap().graph;
    let file = ModelFile::from_graph(&int8, as_model(&float).metadata);
    let back = sprout_core::load_model(&save_model(&file).unwrap()).unwrap().to_graph().unwrap();
    for name in ["stem.weight", "stem.bias", "stem.requant", "pw.weight", "head.requant"] {
        assert_eq!(ints(&back, name), ints(&int8, name), "{name}");
    }
    let x = random(&mut SplitMix::new(5), BATCH * 3 * 64, -1.0, 1.0);
    assert_eq!(infer(&back, &x, &["head.dequantized"]), infer(&int8, &x, &["head.dequantized"]));
}

/// Least-error ranges lie within the observed ones, some of them clipped, and quantize.
#[test]
fn mse_ranges_clip_some_observed_ranges_and_quantize() {
    let float = float_model(4);
    let model = as_model(&float);
    let observed = calibrate(&model, &mut samples(32, 2), RangeMethod::MinMax).unwrap();
    let mse = calibrate(&model, &mut samples(32, 2), RangeMethod::Mse).unwrap();
    assert_eq!(mse.keys().collect::<Vec<_>>(), observed.keys().collect::<Vec<_>>());
    for (name, &(lo, hi)) in &mse {
        let (min, max) = observed[name];
        assert!(min.min(0.0) <= lo.min(0.0) && hi.max(0.0) <= max.max(0.0), "{name}: {lo}..{hi}");
    }
    assert!(mse.iter().any(|(name, &range)| range != observed[name]), "nothing was clipped");
    quantize_graph(&float, &mse, &QuantizeOptions::default()).unwrap();
}

#[test]
fn quantizing_with_an_empty_calibration_set_is_refused() {
    let model = as_model(&float_model(1));
    let err = calibrate(&model, &mut samples(0, 1), RangeMethod::MinMax).unwrap_err();
    assert!(err.to_string().contains("calibration set is empty"), "{err}");
}

/// DenseNet's and pre-activation ResNets' batch norm -> ReLU with no convolution before it
/// becomes a depthwise 1x1 int8 convolution with the ReLU fused, within a step or so of the
/// float batch norm's output; a negative scale included.
#[test]
fn a_standalone_batch_norm_becomes_a_depthwise_int8_convolution() {
    let mut g = Graph::new(2);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let labels = g.labels("labels", BATCH).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv", x, 4, 3, same, true).unwrap();
    let halve =
        PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true };
    let h = g.max_pool2d("pool", h, halve).unwrap();
    let h = nn::batch_norm2d(&mut g, "pre_bn", h).unwrap();
    let h = g.relu("pre_act", h).unwrap();
    let point = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
    let h = nn::conv2d(&mut g, "pw", h, 4, 1, point, true).unwrap();
    let pooled = g.global_avg_pool("gap", h).unwrap();
    let logits = nn::linear(&mut g, "head", pooled, 3).unwrap();
    g.cross_entropy("loss", logits, labels).unwrap();
    for (what, values) in [
        ("weight", [1.3, -0.7, 0.4, 2.0]),
        ("bias", [0.2, 0.5, -0.1, 0.0]),
        ("running_mean", [0.1, -0.3, 0.2, 0.0]),
        ("running_var", [0.5, 1.5, 0.2, 3.0]),
    ] {
        let id = g.find(&format!("pre_bn.{what}")).unwrap();
        g.set_initial_values(id, values.to_vec()).unwrap();
    }
    let ranges = calibrate(&as_model(&g), &mut samples(32, 4), RangeMethod::MinMax).unwrap();
    let q = quantize_graph(&g, &ranges, &QuantizeOptions::default()).unwrap();
    assert_eq!(q.float_fallbacks, []);
    let bn = q.graph.nodes().iter().find(|n| n.name == "pre_act").unwrap();
    let Op::QConv2d(params) = bn.op else { panic!("pre_act is {}", bn.op.kind()) };
    assert_eq!(params.conv.groups, 4);
    assert_eq!(ints(&q.graph, "pre_bn.weight").len(), 4);

    let x = random(&mut SplitMix::new(6), BATCH * 3 * 64, -1.0, 1.0);
    let float: Vec<f32> = bytemuck::cast_slice(&infer(&g, &x, &["pre_act"])[0]).to_vec();
    let codes: Vec<i8> = bytemuck::cast_slice(&infer(&q.graph, &x, &["pre_act"])[0]).to_vec();
    let step = params.output.scale;
    for (&code, &f) in codes.iter().zip(&float) {
        let got = params.output.dequantize(code);
        assert!((got - f).abs() <= 3.0 * step, "int8 {got} vs float {f} (step {step})");
    }
}

#[test]
fn a_layer_that_cannot_be_int8_is_named() {
    // A dilated kernel: int8 convolutions take none.
    let mut g = Graph::new(1);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv", x, 4, 3, same, true).unwrap();
    let w = g.parameter("dilated.weight", Shape::d4(4, 4, 3, 3), Init::Constant(0.1)).unwrap();
    let wide = ConvParams { padding: (2, 2), ..same };
    g.dilated_conv2d("dilated", h, w, None, wide, (2, 2)).unwrap();
    let ranges = [("input", (-1.0, 1.0)), ("conv", (-2.0, 2.0)), ("dilated", (-1.0, 1.0))]
        .into_iter()
        .map(|(n, r)| (n.to_string(), r))
        .collect();
    let err = quantize_graph(&g, &ranges, &QuantizeOptions::default()).err().unwrap();
    assert!(matches!(err, QuantizeError::NoInt8Kernel { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "conv2d 'dilated' has no int8 kernel: its kernel is dilated, which int8 convolutions do not support"
    );
    // Allowed to, it runs in float on the dequantized convolution before it, and says so.
    let allow = QuantizeOptions { allow_float: true, ..QuantizeOptions::default() };
    let q = quantize_graph(&g, &ranges, &allow).unwrap();
    let fallback = FloatFallback {
        op: "conv2d",
        node: "dilated".into(),
        reason: "its kernel is dilated, which int8 convolutions do not support",
    };
    assert_eq!(q.float_fallbacks, [fallback]);
    assert!(q.graph.nodes().iter().any(|n| matches!(n.op, Op::Dequantize(_))));
    // And a range the calibration never saw is named too.
    let partial = [("input".to_string(), (-1.0, 1.0))].into_iter().collect();
    let err = quantize_graph(&g, &partial, &QuantizeOptions::default()).err().unwrap();
    assert_eq!(err.to_string(), "the calibration recorded no range for 'conv'");
}

/// `x → quantize → qlinear 1 (trainable, integer units) → qlinear 2 (frozen) → dequantize
/// → mse`, with fused ReLUs so the clamp masks matter.
struct TwoLayers {
    graph: Graph,
    w_bar: TensorId,
    b_bar: TensorId,
    loss: TensorId,
}

const K: usize = 6;
const H: usize = 5;
const M: usize = 4;
const X_P: QuantParams = QuantParams { scale: 0.02, zero_point: 3 };
const H_P: QuantParams = QuantParams { scale: 0.03, zero_point: -100 };
const Y_P: QuantParams = QuantParams { scale: 0.05, zero_point: -20 };

fn two_layers(qas: bool, seed: u64) -> TwoLayers {
    let mut rng = SplitMix::new(seed);
    let mut g = Graph::new(seed);
    let x = g.input("input", Shape::d2(BATCH, K)).unwrap();
    let target = g.target("target", Shape::d2(BATCH, M)).unwrap();
    let xq = g.quantize("xq", x, X_P).unwrap();
    let codes = |rng: &mut SplitMix, n: usize| -> Vec<f32> {
        (0..n).map(|_| (rng.uniform(-90.0, 90.0)).round()).collect()
    };
    let s1 =
        g.parameter("s1", Shape::d1(H), Init::Values(random(&mut rng, H, 0.004, 0.02))).unwrap();
    let w_bar = g.parameter("w1", Shape::d2(H, K), Init::Values(codes(&mut rng, H * K))).unwrap();
    let b_bar = g.parameter("b1", Shape::d1(H), Init::Values(codes(&mut rng, H))).unwrap();
    let w1 = g.round_weights("w1q", w_bar, s1, qas).unwrap();
    let b1 = g.round_bias("b1q", b_bar, s1, X_P.scale, qas).unwrap();
    let requant = |scales: &[f32], input: f32, output: f32| -> Vec<i32> {
        scales
            .iter()
            .flat_map(|&s| {
                let r = Requantize::from_scales(input, s, output).unwrap();
                [r.multiplier, r.shift]
            })
            .collect()
    };
    let scales1 = match g.tensor(s1).init.as_ref().unwrap() {
        Init::Values(v) => v.clone(),
        _ => unreachable!(),
    };
    let r1 = g
        .int_parameter(
            "r1",
            Shape::d2(H, 2),
            sprout_core::DType::I32,
            requant(&scales1, X_P.scale, H_P.scale),
        )
        .unwrap();
    let layer1 = Int8Weights { weight: w1, bias: b1, requant: r1, weight_scale: s1 };
    let p1 = sprout_core::op::QLinearParams { input: X_P, output: H_P, act: H_P.relu_bounds() };
    let h = g.qlinear("h", xq, layer1, p1).unwrap();
    let scales2 = random(&mut rng, M, 0.004, 0.02);
    let s2 = g.parameter("s2", Shape::d1(M), Init::Values(scales2.clone())).unwrap();
    let w2_codes: Vec<i32> = codes(&mut rng, M * H).iter().map(|&v| v as i32).collect();
    let w2 = g.int_parameter("w2", Shape::d2(M, H), sprout_core::DType::I8, w2_codes).unwrap();
    let b2 = g
        .int_parameter("b2", Shape::d1(M), sprout_core::DType::I32, vec![40, -30, 0, 900])
        .unwrap();
    let r2 = g
        .int_parameter(
            "r2",
            Shape::d2(M, 2),
            sprout_core::DType::I32,
            requant(&scales2, H_P.scale, Y_P.scale),
        )
        .unwrap();
    let layer2 = Int8Weights { weight: w2, bias: b2, requant: r2, weight_scale: s2 };
    let p2 = sprout_core::op::QLinearParams { input: H_P, output: Y_P, act: Y_P.relu_bounds() };
    let yq = g.qlinear("yq", h, layer2, p2).unwrap();
    let y = g.dequantize("y", yq, Y_P).unwrap();
    let loss = g.mse("loss", y, target).unwrap();
    TwoLayers { graph: g, w_bar, b_bar, loss }
}

fn f32s(graph: &Graph, name: &str) -> Vec<f32> {
    graph.tensor(graph.find(name).unwrap()).init.as_ref().unwrap().materialize(0)
}

#[test]
fn int8_layer_gradients_match_their_definition_with_and_without_qas() {
    let mut rng = SplitMix::new(77);
    let x = random(&mut rng, BATCH * K, -1.0, 1.5);
    let t = random(&mut rng, BATCH * M, 0.0, 3.0);
    for qas in [false, true] {
        let net = two_layers(qas, 11);
        let d = differentiate(&net.graph, net.loss, &[net.w_bar, net.b_bar]).unwrap();
        let (gw, gb) = (d.gradients[0].1, d.gradients[1].1);
        let g = &d.graph;
        let names = ["xq", "h", "yq", "loss"];
        let mut outputs: Vec<TensorId> = names.iter().map(|n| g.find(n).unwrap()).collect();
        outputs.extend([gw, gb]);
        let plan = compile_outputs(g, &outputs, Mode::Train).unwrap();
        let mut memory = plan.initial_memory(g);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let mut regions = memory.regions();
        regions.write(&plan.operand("input").unwrap(), &x).unwrap();
        regions.write(&plan.operand("target").unwrap(), &t).unwrap();
        exec.run(&mut regions).unwrap();
        let read_i8 = |n: &str| regions.read::<i8>(&plan.operand(n).unwrap()).unwrap().to_vec();
        let (xq, h, yq) = (read_i8("xq"), read_i8("h"), read_i8("yq"));
        let got_w = regions.read::<f32>(&plan.binding_of(gw).unwrap().operand).unwrap().to_vec();
        let got_b = regions.read::<f32>(&plan.binding_of(gb).unwrap().operand).unwrap().to_vec();

        // The definition, in f64: the loss gradient in real units, stopped where a fused
        // ReLU clamped, through layer 2's dequantized weights, then to layer 1's integer
        // units (times its scale) and, with QAS, divided by the scale squared.
        let (s1, s2) = (f32s(g, "s1"), f32s(g, "s2"));
        let w2: Vec<f64> = f32s(g, "w2").iter().map(|&v| f64::from(v)).collect();
        let real =
            |q: i8, p: QuantParams| f64::from(p.scale) * f64::from(i32::from(q) - p.zero_point);
        let inside = |q: i8, p: QuantParams| q > p.relu_bounds().0 && q < i8::MAX;
        let mut dh = [0f64; BATCH * H];
        for n in 0..BATCH {
            for m in 0..M {
                let y = real(yq[n * M + m], Y_P);
                let dy = 2.0 * (y - f64::from(t[n * M + m])) / (BATCH * M) as f64;
                if !inside(yq[n * M + m], Y_P) {
                    continue;
                }
                for k in 0..H {
                    dh[n * H + k] += dy * f64::from(s2[m]) * w2[m * H + k];
                }
            }
        }
        for j in 0..H {
            let (mut gw_row, mut gb_j) = (vec![0f64; K], 0f64);
            for n in 0..BATCH {
                if !inside(h[n * H + j], H_P) {
                    continue;
                }
                gb_j += dh[n * H + j];
                for k in 0..K {
                    gw_row[k] += dh[n * H + j] * real(xq[n * K + k], X_P);
                }
            }
            let s = f64::from(s1[j]);
            let (w_factor, b_factor) = if qas {
                (1.0 / s, 1.0 / (s * f64::from(X_P.scale)))
            } else {
                (s, s * f64::from(X_P.scale))
            };
            let close =
                |got: f32, want: f64| (f64::from(got) - want).abs() <= 1e-6 + 1e-4 * want.abs();
            for k in 0..K {
                let want = gw_row[k] * w_factor;
                assert!(
                    close(got_w[j * K + k], want),
                    "qas {qas}: dw̄[{j},{k}] {} vs {want}",
                    got_w[j * K + k]
                );
            }
            assert!(
                close(got_b[j], gb_j * b_factor),
                "qas {qas}: db̄[{j}] {} vs {}",
                got_b[j],
                gb_j * b_factor
            );
        }
        assert!(got_w.iter().any(|&v| v != 0.0), "the test must reach unclamped units");
    }
}

/// Mean loss of the last 10 of `steps` SGD steps training layer 1 of [`two_layers`].
fn trained_loss(qas: bool, steps: usize) -> f32 {
    let net = two_layers(qas, 5);
    let config = sprout_core::TrainConfig::sgd(0.0);
    let training =
        sprout_core::compile_training_step(&net.graph, net.loss, &[net.w_bar, net.b_bar], &config)
            .unwrap();
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut rng = SplitMix::new(3);
    let mut tail = 0.0;
    for step in 0..steps {
        let x = random(&mut rng, BATCH * K, -1.0, 1.5);
        // A fixed linear teacher the int8 layers can express.
        let t: Vec<f32> = (0..BATCH * M)
            .map(|i| {
                let (n, m) = (i / M, i % M);
                (0..K).map(|k| x[n * K + k] * ((m + k) % 3) as f32 * 0.4).sum::<f32>().max(0.0)
            })
            .collect();
        let mut regions = memory.regions();
        regions.write(&plan.operand("input").unwrap(), &x).unwrap();
        regions.write(&plan.operand("target").unwrap(), &t).unwrap();
        exec.train_step(&mut regions, 0.05).unwrap();
        if step >= steps - 10 {
            tail += regions.read::<f32>(&plan.operand("loss").unwrap()).unwrap()[0] / 10.0;
        }
    }
    tail
}

#[test]
fn qas_trains_an_inner_int8_layer_that_plain_int8_gradients_barely_move() {
    let (with, without) = (trained_loss(true, 300), trained_loss(false, 300));
    assert!(with < 0.5 * without, "loss with QAS {with}, without {without}");
}

/// The classic conv -> max-pool -> ReLU (and ReLU6) order: the activation has no layer to
/// fuse into, so it becomes an int8 clamp in the pooled tensor's units, the same values a
/// float ReLU of the dequantized tensor gives.
#[test]
fn an_activation_after_pooling_becomes_an_int8_clamp() {
    let mut g = Graph::new(3);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv", x, 4, 3, same, true).unwrap();
    let window =
        PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true };
    let p = g.max_pool2d("pool", h, window).unwrap();
    let r = g.relu("relu", p).unwrap();
    let r6 = g.relu6("relu6", r).unwrap();
    let flat = g.flatten("flat", r6).unwrap();
    nn::linear(&mut g, "head", flat, 3).unwrap();
    let ranges = [
        ("input", (-1.0, 1.0)),
        ("conv", (-3.0, 9.0)),
        ("pool", (-3.0, 9.0)),
        ("relu", (0.0, 9.0)),
        ("relu6", (0.0, 6.0)),
        ("flat", (0.0, 6.0)),
        ("head", (-5.0, 5.0)),
    ]
    .into_iter()
    .map(|(n, r)| (n.to_string(), r))
    .collect();
    let q = quantize_graph(&g, &ranges, &QuantizeOptions::default()).unwrap().graph;
    let clamps: Vec<_> = q.nodes().iter().filter(|n| matches!(n.op, Op::QClamp(_))).collect();
    assert_eq!(clamps.len(), 2, "{:?}", q.nodes().iter().map(|n| n.op).collect::<Vec<_>>());
    let x: Vec<f32> = random(&mut SplitMix::new(9), BATCH * 3 * 64, -1.0, 1.0);
    let [pooled, clamped] = &infer(&q, &x, &["pool", "relu6"])[..] else { unreachable!() };
    let pool = QuantParams::from_min_max(-3.0, 9.0).unwrap();
    let six = pool.relu6_bounds().1;
    for (&p, &c) in pooled.iter().zip(clamped) {
        let (p, c) = (p as i8, c as i8);
        assert_eq!(c, p.clamp(pool.zero_point as i8, six), "pooled {p}");
    }
    assert!(pooled.iter().any(|&p| (p as i8) < pool.zero_point as i8), "some values are clamped");
}

/// A slice of an int8 tensor (GoogLeNet's ceil_mode pools, ShuffleNet's channel split) is
/// an int8 copy of its run in the same quantization.
#[test]
fn a_slice_of_an_int8_tensor_stays_int8() {
    let mut g = Graph::new(4);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv", x, 4, 3, same, true).unwrap();
    let cut = g.slice("cut", h, 3, 2, 5).unwrap();
    let flat = g.flatten("flat", cut).unwrap();
    nn::linear(&mut g, "head", flat, 3).unwrap();
    let ranges = [("input", (-1.0, 1.0)), ("conv", (-3.0, 3.0)), ("cut", (-3.0, 3.0))];
    let ranges = ranges.into_iter().chain([("flat", (-3.0, 3.0)), ("head", (-5.0, 5.0))]);
    let ranges = ranges.map(|(n, r)| (n.to_string(), r)).collect();
    let q = quantize_graph(&g, &ranges, &QuantizeOptions::default()).unwrap();
    assert_eq!(q.float_fallbacks, []);
    let x: Vec<f32> = random(&mut SplitMix::new(6), BATCH * 3 * 64, -1.0, 1.0);
    let [conv, cut] = &infer(&q.graph, &x, &["conv", "cut"])[..] else { unreachable!() };
    let (conv, cut) = (int8_values(conv), int8_values(cut));
    assert_eq!(cut.len(), BATCH * 4 * 8 * 5);
    for (row, part) in conv.chunks_exact(8).zip(cut.chunks_exact(5)) {
        assert_eq!(part, &row[2..7]);
    }
}

/// MobileNetV3's and EfficientNet's patterns: hard swish after a layer, a squeeze-excitation
/// (pooling, dense, hard sigmoid, per-channel product), SiLU as `x · sigmoid(x)`, a channel
/// concatenation and a leaky ReLU.
fn excitation_model(seed: u64) -> Graph {
    let mut g = Graph::new(seed);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let labels = g.labels("labels", BATCH).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "stem", x, 4, 3, same, true).unwrap();
    let h = g.hard_swish("stem_act", h).unwrap();
    let squeezed = g.global_avg_pool("se_pool", h).unwrap();
    let gate = nn::linear(&mut g, "se_fc", squeezed, 4).unwrap();
    let gate = g.hard_sigmoid("se_gate", gate, 1.0 / 6.0, 0.5).unwrap();
    let excited = g.mul("se_mul", h, gate).unwrap();
    let c = nn::conv2d(&mut g, "conv", excited, 4, 3, same, true).unwrap();
    let s = g.sigmoid("silu_gate", c).unwrap();
    let silu = g.mul("silu", c, s).unwrap();
    let joined = g.concat("join", excited, silu, 1).unwrap();
    let leaky = g.leaky_relu("leaky", joined, 0.1).unwrap();
    let pooled = g.global_avg_pool("pool", leaky).unwrap();
    let logits = nn::linear(&mut g, "head", pooled, 3).unwrap();
    g.cross_entropy("loss", logits, labels).unwrap();
    g
}

/// The int8 values in an output's bytes.
fn int8_values(out: &[u8]) -> Vec<i8> {
    bytemuck::cast_slice(out).to_vec()
}

#[test]
fn tables_products_and_joins_keep_a_real_architecture_in_int8() {
    let float = excitation_model(5);
    let ranges = calibrate(&as_model(&float), &mut samples(32, 2), RangeMethod::MinMax).unwrap();
    let q = quantize_graph(&float, &ranges, &QuantizeOptions::default()).unwrap();
    assert_eq!(q.float_fallbacks, []);
    let kinds: Vec<&str> = q.graph.nodes().iter().map(|n| n.op.kind()).collect();
    let count = |kind| kinds.iter().filter(|&&k| k == kind).count();
    assert_eq!((count("qlut"), count("qmul"), count("qconcat")), (4, 2, 1), "{kinds:?}");
    assert_eq!(count("dequantize"), 1, "only the logits leave int8: {kinds:?}");

    let params = |name: &str| {
        let &(lo, hi) = ranges.get(name).unwrap();
        QuantParams::from_min_max(lo, hi).unwrap()
    };
    let x = random(&mut SplitMix::new(11), BATCH * 3 * 64, -1.0, 1.0);
    let names = ["stem", "stem_act", "se_gate", "se_mul", "conv", "silu_gate", "silu", "join"];
    let out = infer(&q.graph, &x, &[&names[..], &["head.dequantized"]].concat());
    let v: Vec<Vec<i8>> = out.iter().map(|o| int8_values(o)).collect();
    let (stem, act) = (params("stem"), params("stem_act"));
    // The table holds the float function of every int8 value: hard swish exactly so.
    let swish = |x: f32| x * (x + 3.0).clamp(0.0, 6.0) / 6.0;
    for (&s, &a) in v[0].iter().zip(&v[1]) {
        assert_eq!(a, act.quantize(swish(stem.dequantize(s))), "stem {s}");
    }
    // Products and joins round the real result to one step of the output.
    let within_a_step = |got: i8, real: f32, p: QuantParams| {
        let error = (p.dequantize(got) - real).abs();
        assert!(error <= p.scale * 1.01, "{} vs {real} (scale {})", p.dequantize(got), p.scale);
    };
    let (gate, excited) = (params("se_gate"), params("se_mul"));
    for (i, &e) in v[3].iter().enumerate() {
        let real = act.dequantize(v[1][i]) * gate.dequantize(v[2][i / 64]);
        within_a_step(e, real, excited);
    }
    let (c, s, silu) = (params("conv"), params("silu_gate"), params("silu"));
    for ((&ci, &si), &yi) in v[4].iter().zip(&v[5]).zip(&v[6]) {
        within_a_step(yi, c.dequantize(ci) * s.dequantize(si), silu);
    }
    let join = params("join");
    for (i, &j) in v[7].iter().enumerate() {
        let (sample, at) = (i / 512, i % 512);
        let real = match at < 256 {
            true => excited.dequantize(v[3][sample * 256 + at]),
            false => silu.dequantize(v[6][sample * 256 + at - 256]),
        };
        within_a_step(j, real, join);
    }
    // And the logits stay close to the float model's.
    let float_logits: Vec<f32> = bytemuck::cast_slice(&infer(&float, &x, &["head"])[0]).to_vec();
    let int8_logits: Vec<f32> = bytemuck::cast_slice(&out[8]).to_vec();
    let span = float_logits.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, b) in int8_logits.iter().zip(&float_logits) {
        assert!((a - b).abs() <= 0.1 * span, "int8 {a} vs float {b} (span {span})");
    }
}

/// A SiLU op (EfficientNet's `x · sigmoid(x)`, recorded as one op) is one int8 table of
/// its input: no product, and every output the calibrated rounding of the float SiLU of
/// its int8 input.
#[test]
fn silu_is_one_table_of_its_input() {
    let mut g = Graph::new(7);
    let x = g.input("input", Shape::d4(BATCH, 3, 8, 8)).unwrap();
    let labels = g.labels("labels", BATCH).unwrap();
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let c = nn::conv2d(&mut g, "conv", x, 4, 3, same, true).unwrap();
    let s = g.silu("silu", c).unwrap();
    let pooled = g.global_avg_pool("pool", s).unwrap();
    let logits = nn::linear(&mut g, "head", pooled, 3).unwrap();
    g.cross_entropy("loss", logits, labels).unwrap();
    let ranges = calibrate(&as_model(&g), &mut samples(32, 3), RangeMethod::MinMax).unwrap();
    let q = quantize_graph(&g, &ranges, &QuantizeOptions::default()).unwrap();
    assert_eq!(q.float_fallbacks, []);
    let kinds: Vec<&str> = q.graph.nodes().iter().map(|n| n.op.kind()).collect();
    let count = |kind| kinds.iter().filter(|&&k| k == kind).count();
    assert_eq!((count("qlut"), count("qmul")), (1, 0), "{kinds:?}");
    let params = |name: &str| {
        let &(lo, hi) = ranges.get(name).unwrap();
        QuantParams::from_min_max(lo, hi).unwrap()
    };
    let (conv, silu) = (params("conv"), params("silu"));
    let x = random(&mut SplitMix::new(13), BATCH * 3 * 64, -1.0, 1.0);
    let out = infer(&q.graph, &x, &["conv", "silu"]);
    let (v, y) = (int8_values(&out[0]), int8_values(&out[1]));
    for (&ci, &yi) in v.iter().zip(&y) {
        assert_eq!(yi, silu.quantize(Activation::Silu.apply(conv.dequantize(ci))), "conv {ci}");
    }
}

/// The gradient of `loss` with respect to the parameter `param` of `graph`, on `x` and labels.
fn gradient(graph: &Graph, param: &str, x: &[f32], labels: &[i32]) -> Vec<f32> {
    let (loss, p) = (graph.find("loss").unwrap(), graph.find(param).unwrap());
    let d = differentiate(graph, loss, &[p]).unwrap();
    let grad = d.gradients[0].1;
    let plan = compile_outputs(&d.graph, &[grad], Mode::Train).unwrap();
    let mut memory = plan.initial_memory(&d.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = memory.regions();
    regions.write(&plan.operand("input").unwrap(), x).unwrap();
    regions.write(&plan.operand("labels").unwrap(), labels).unwrap();
    exec.run(&mut regions).unwrap();
    regions.read::<f32>(&plan.binding_of(grad).unwrap().operand).unwrap().to_vec()
}

/// A trainable int8 stem under tables, products and a join: its gradient (in integer
/// units, so divided by each channel's scale) points where the float model's does.
#[test]
fn gradients_flow_through_tables_products_and_joins_like_the_float_ops() {
    let float = excitation_model(5);
    let ranges = calibrate(&as_model(&float), &mut samples(32, 2), RangeMethod::MinMax).unwrap();
    let options = QuantizeOptions {
        trainable: ["stem.weight".to_string()].into(),
        qas: false,
        ..QuantizeOptions::default()
    };
    let int8 = quantize_graph(&float, &ranges, &options).unwrap().graph;
    let x = random(&mut SplitMix::new(12), BATCH * 3 * 64, -1.0, 1.0);
    let labels = [0, 1, 2, 1];
    let want = gradient(&float, "stem.weight", &x, &labels);
    let got = gradient(&int8, "stem.weight", &x, &labels);
    let scales = f32s(&int8, "stem.weight_scale");
    let per_channel = want.len() / scales.len();
    let got: Vec<f32> = got.iter().enumerate().map(|(i, g)| g / scales[i / per_channel]).collect();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| f64::from(x * y)).sum::<f64>();
    let cosine = dot(&got, &want) / (dot(&got, &got) * dot(&want, &want)).sqrt();
    // Measured 0.93: rounding and saturated units make up the rest.
    assert!(cosine > 0.9, "cosine {cosine} between the int8 and the float gradient");
}

/// Trainable parameters after `steps` SGD steps of `training` on fixed data, as bit
/// patterns.
fn trained_bits(training: &sprout_core::Training, steps: usize) -> Vec<(String, Vec<u32>)> {
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let input = plan.operand("input").unwrap();
    let x = random(&mut SplitMix::new(21), input.len, -1.0, 1.0);
    let labels: Vec<i32> = (0..plan.operand("labels").unwrap().len).map(|i| i as i32 % 3).collect();
    for _ in 0..steps {
        let mut regions = memory.regions();
        regions.write(&input, &x).unwrap();
        regions.write(&plan.operand("labels").unwrap(), &labels).unwrap();
        exec.train_step(&mut regions, 0.05).unwrap();
    }
    let regions = memory.regions();
    let trained = plan.bindings.iter().filter(|b| b.role == sprout_core::Role::TrainableParam);
    trained
        .map(|b| {
            let values = regions.read::<f32>(&b.operand).unwrap();
            (b.name.clone(), values.iter().map(|v| v.to_bits()).collect())
        })
        .collect()
}

/// LeafNet at batch 1 in int8, calibrated on random pictures, the head float and the
/// layers with the weights `trainable` kept trainable-int8.
fn int8_leafnet(trainable: &[&str]) -> Graph {
    let float = sprout_zoo::build(sprout_zoo::Architecture::LeafNet, 1, 3).unwrap().graph;
    let mut rng = SplitMix::new(4);
    let set = TensorSet {
        x: random(&mut rng, 4 * 3 * 64 * 64, -1.0, 1.0),
        y: vec![0, 1, 2, 1],
        sample_dims: vec![3, 64, 64],
        path: "calibration".into(),
    };
    let mut data = DataSource::tensors(set, 1, 4, false);
    let ranges = calibrate(&as_model(&float), &mut data, RangeMethod::MinMax).unwrap();
    let options = QuantizeOptions {
        keep_float: ["classifier.1.weight".to_string()].into(),
        trainable: trainable.iter().map(|s| s.to_string()).collect(),
        ..QuantizeOptions::default()
    };
    quantize_graph(&float, &ranges, &options).unwrap().graph
}

/// LeafNet in int8 (the stem's weights kept trainable-int8, the head float) and its training
/// step for the stem's bias and the head, compiled with `in_place` and `clamp_masks` (and
/// no depthwise chains, which would take over some of the masks' gradients).
fn stem_bias_steps() -> impl Fn(bool, bool) -> sprout_core::Training {
    let int8 = int8_leafnet(&["features.0.0.weight"]);
    let loss = int8.find("loss").unwrap();
    let trainable: Vec<TensorId> =
        ["features.0.0.bias", "classifier.1.weight", "classifier.1.bias"]
            .iter()
            .map(|n| int8.find(n).unwrap_or_else(|| panic!("{n} is not in the int8 graph")))
            .collect();
    move |in_place, clamp_masks| {
        let placement =
            sprout_core::PlacementOptions { in_place, ..sprout_core::PlacementOptions::default() };
        let memory = sprout_core::MemoryOptions {
            placement,
            clamp_masks,
            depthwise_chains: false,
            ..Default::default()
        };
        let config = sprout_core::TrainConfig::sgd(0.0);
        sprout_core::compile_training_step_with(&int8, loss, &trainable, &config, &memory).unwrap()
    }
}

/// How many steps of `t`'s plan run the kernel `name`.
fn kernel_count(t: &sprout_core::Training, name: &str) -> usize {
    t.plan.steps.iter().filter(|s| s.kernel.name() == name).count()
}

/// The stem's bias bits in `bits` (from [`trained_bits`]).
fn stem_bias(bits: &[(String, Vec<u32>)]) -> Option<Vec<u32>> {
    bits.iter().find(|(n, _)| n == "features.0.0.bias").map(|(_, v)| v.clone())
}

/// Training LeafNet's stem bias reaches it through every frozen int8 layer, each of which
/// stops the gradient where its fused clamp saturated: that mask runs in place over the
/// incoming gradient where it dies, so the arena shrinks and the trained values stay the
/// same bit for bit.
#[test]
fn int8_clamp_gradients_run_in_place_without_changing_results() {
    let compile = stem_bias_steps();
    let (in_place, copied) = (compile(true, false), compile(false, false));
    let kernels = kernel_count;
    assert_eq!(kernels(&copied, "qclamp_grad_in_place"), 0);
    let masks = kernels(&copied, "qclamp_grad");
    // A mask whose incoming gradient is read later too (a residual join's) stays a copy.
    let dying = copied.plan.steps.iter().enumerate().filter(|(i, s)| {
        let dies = |b: &&sprout_core::Binding| b.operand == s.operands[1] && b.last_step == *i;
        s.kernel.name() == "qclamp_grad" && copied.plan.bindings.iter().any(|b| dies(&b))
    });
    let dying = dying.count();
    assert!(dying >= 20, "{dying} of {masks} incoming gradients die at their mask");
    assert_eq!(kernels(&in_place, "qclamp_grad_in_place"), dying);
    assert_eq!(kernels(&in_place, "qclamp_grad"), masks - dying);
    let (small, large) = (in_place.plan.sizes.arena, copied.plan.sizes.arena);
    assert!(small < large, "in-place clamp gradients must shrink the arena: {small} vs {large}");
    let (got, want) = (trained_bits(&in_place, 2), trained_bits(&copied, 2));
    assert_eq!(got.len(), 3);
    assert_eq!(got, want);
    let start = trained_bits(&in_place, 0);
    assert_ne!(stem_bias(&got), stem_bias(&start), "two steps must move the stem's bias");
}

/// The backward pass keeps a bit mask of each int8 clamp's output, taken as the output is
/// made, instead of the output itself: every clamp gradient reads a mask, the saved int8
/// outputs die in the forward pass, the arena shrinks by far, and training stays bit for
/// bit what it was.
#[test]
fn int8_clamp_masks_shrink_the_arena_without_changing_results() {
    let compile = stem_bias_steps();
    let (masked, saved) = (compile(true, true), compile(true, false));
    let clamps = kernel_count(&saved, "qclamp_grad") + kernel_count(&saved, "qclamp_grad_in_place");
    assert!(clamps >= 30, "{clamps} clamp gradients");
    assert_eq!(kernel_count(&masked, "qclamp_mask"), clamps);
    let through_masks =
        kernel_count(&masked, "qmask_grad") + kernel_count(&masked, "qmask_grad_in_place");
    assert_eq!(through_masks, clamps);
    assert_eq!(
        kernel_count(&masked, "qclamp_grad") + kernel_count(&masked, "qclamp_grad_in_place"),
        0
    );
    // Each mask is taken right after its clamp output is made, in the forward pass.
    let position = |name: &str| masked.plan.steps.iter().position(|s| s.kernel.name() == name);
    let first_mask = position("qclamp_mask").unwrap();
    assert_eq!(Some(first_mask), position("qconv2d").map(|stem| stem + 1));
    let last_mask = masked.plan.steps.iter().rposition(|s| s.kernel.name() == "qclamp_mask");
    assert!(last_mask < position("cross_entropy"), "the last mask runs at {last_mask:?}");
    let (small, large) = (masked.plan.sizes.arena, saved.plan.sizes.arena);
    assert!(small * 5 < large * 4, "masks must cut the arena by a fifth: {small} vs {large}");
    let (got, want) = (trained_bits(&masked, 2), trained_bits(&saved, 2));
    assert_eq!(got.len(), 3);
    assert_eq!(got, want);
    let start = trained_bits(&masked, 0);
    assert_ne!(stem_bias(&got), stem_bias(&start), "two steps must move the stem's bias");
}

/// The stem update's layers (`features.0` to `features.2`): their weights, kept
/// trainable-int8 as `sprout quantize --trainable-int8` keeps them, and their biases.
const STEM_LAYERS: [&str; 6] = [
    "features.0.0",
    "features.1.conv.0.0",
    "features.1.conv.1",
    "features.2.conv.0.0",
    "features.2.conv.1.0",
    "features.2.conv.2",
];

/// With depthwise chains, the backward pass of every inverted-residual block runs a hidden
/// channel at a time (one `qblock_grad` each, from `features.2` to `features.9`; the stem
/// block `features.1` has no 1x1 layer before its depthwise one, which takes the clamp and
/// bias gradients of `features.0` instead, and no input gradient: `qblock_bias_grad`): no
/// gradient of the expanded channels is ever stored, the arena shrinks by far, and training
/// the stem's biases stays bit for bit what it was.
#[test]
fn depthwise_chains_shrink_the_stem_update_without_changing_results() {
    let weights: Vec<String> = STEM_LAYERS.iter().map(|l| format!("{l}.weight")).collect();
    let int8 = int8_leafnet(&weights.iter().map(String::as_str).collect::<Vec<_>>());
    let loss = int8.find("loss").unwrap();
    let biases = STEM_LAYERS.iter().map(|l| format!("{l}.bias"));
    let names: Vec<String> =
        biases.chain(["classifier.1.weight".into(), "classifier.1.bias".into()]).collect();
    let trainable: Vec<TensorId> = names.iter().map(|n| int8.find(n).unwrap()).collect();
    let compile = |depthwise_chains| {
        let memory = sprout_core::MemoryOptions { depthwise_chains, ..Default::default() };
        let config = sprout_core::TrainConfig::sgd(0.0);
        sprout_core::compile_training_step_with(&int8, loss, &trainable, &config, &memory).unwrap()
    };
    let (fused, unfused) = (compile(true), compile(false));
    let chains =
        ["qblock_grad", "qblock_bias_grad", "qdepthwise_chain_grad", "qdepthwise_chain_bias_grad"];
    assert_eq!(chains.map(|k| kernel_count(&fused, k)), [8, 1, 0, 0]);
    assert_eq!(chains.map(|k| kernel_count(&unfused, k)), [0, 0, 0, 0]);
    let fused_steps = fused.plan.steps.len();
    // Each block's seven backward steps (the projection's and depthwise input gradients,
    // two masks, two bias gradients, the expansion's input gradient) become one.
    assert!(fused_steps + 8 * 4 <= unfused.plan.steps.len(), "{fused_steps} steps");
    let (small, large) = (fused.plan.sizes.arena, unfused.plan.sizes.arena);
    assert!(small * 2 < large, "chains must halve the arena: {small} vs {large}");
    let (got, want) = (trained_bits(&fused, 2), trained_bits(&unfused, 2));
    assert_eq!(got.len(), names.len());
    assert_eq!(got, want);
    let start = trained_bits(&fused, 0);
    for (name, bits) in &got {
        let before = &start.iter().find(|(n, _)| n == name).unwrap().1;
        assert_ne!(bits, before, "two steps must move {name}");
    }
}
