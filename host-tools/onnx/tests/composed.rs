//! ONNX operators PyTorch's exporters write for `nn.Upsample` (nearest and bilinear),
//! `nn.PixelShuffle`, `nn.InstanceNorm2d` / `nn.GroupNorm`, `nn.PReLU` (recorded from ops
//! sprout has: `Resize`, `DepthToSpace`, `InstanceNormalization`, `PRelu`) and `nn.ELU`,
//! `nn.SELU`, `nn.Softplus` (also the dynamo exporter's thresholded form), `nn.Tanh`,
//! `nn.Mish`: written here with prost, imported, compared with loops in f64, exported and
//! read back.

mod common;

use common::*;
use prost::Message;
use sprout_core::Role;
use sprout_onnx::proto::{
    AttributeProto as A, Dim, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use sprout_onnx::{
    export_onnx, graph_weights, import, import_with, ImportOptions, Imported, OnnxError,
};

/// The opset-`opset` model of `nodes` from input `x` of `dims` to output `y`.
fn model(nodes: Vec<NodeProto>, init: Vec<TensorProto>, dims: [usize; 4], opset: i64) -> Vec<u8> {
    let graph = GraphProto {
        node: nodes,
        input: vec![ValueInfoProto::f32("x", &dims.map(|d| Dim::Fixed(d as i64)))],
        output: vec![ValueInfoProto::f32("y", &[])],
        initializer: init,
        ..Default::default()
    };
    ModelProto::new(graph, opset).encode_to_vec()
}

/// The imported model's output for `x`, checked against `expected`, and the same after
/// `sprout export` and import again.
fn check(imported: &Imported, x: &[f32], expected: &[f64]) -> Vec<usize> {
    let y = run(&imported.graph, imported.input, imported.outputs[0], x);
    assert_close(&y, expected, 1e-5);
    let bytes = export_onnx(&imported.graph, &graph_weights(&imported.graph)).expect("exports");
    let batch = imported.graph.shape(imported.input).dim(0);
    let back = import_with(&bytes, &ImportOptions { batch, ..Default::default() })
        .expect("its export imports");
    assert_eq!(run(&back.graph, back.input, back.outputs[0], x), y);
    imported.graph.shape(imported.outputs[0]).dims().to_vec()
}

/// A `Resize`'s string attributes.
type Attrs<'a> = &'a [(&'a str, &'a str)];

/// What a `Resize` resizes H and W to: constant scales or sizes.
enum To {
    Scales([f32; 2]),
    Sizes([i64; 2]),
}

fn resize(attrs: Attrs, inputs: &[&str]) -> NodeProto {
    attrs
        .iter()
        .fold(NodeProto::new("Resize", "up", inputs, &["y"]), |n, (k, v)| n.with(A::string(k, v)))
}

#[test]
fn nearest_resize_by_whole_factors_repeats_each_value() {
    let x = values(1, 2 * 3 * 4, -2.0, 2.0);
    let expected: Vec<f64> = (0..2 * 6 * 12)
        .map(|i| {
            let (c, r, col) = (i / 72, i / 12 % 6, i % 12);
            f64::from(x[c * 12 + r / 2 * 4 + col / 3])
        })
        .collect();
    // TorchScript's nn.Upsample: constant scales, asymmetric, floor.
    let scales = TensorProto::f32("scales", &[4], &[1.0, 1.0, 2.0, 3.0]);
    let roi = TensorProto::f32("roi", &[0], &[]);
    let node = resize(
        &[
            ("mode", "nearest"),
            ("coordinate_transformation_mode", "asymmetric"),
            ("nearest_mode", "floor"),
        ],
        &["x", "roi", "scales"],
    );
    let imported = import(&model(vec![node], vec![roi, scales], [1, 2, 3, 4], 11)).unwrap();
    assert_eq!(check(&imported, &x, &expected), [1, 2, 6, 12]);
    // Output sizes (F.interpolate(size=...)) with ONNX's defaults: half_pixel, rounding.
    let sizes = TensorProto::i64("sizes", &[4], &[1, 2, 6, 12]);
    let node = resize(&[("mode", "nearest")], &["x", "", "", "sizes"]);
    let imported = import(&model(vec![node], vec![sizes], [1, 2, 3, 4], 13)).unwrap();
    assert_eq!(check(&imported, &x, &expected), [1, 2, 6, 12]);
}

/// PyTorch's bilinear interpolation (`upsample_bilinear2d`) of the `[h, w]` planes of `x`
/// to `[oh, ow]`, written as PyTorch's kernel is: a source index clamped at 0, its
/// neighbour at the last index; `scales` (output over input) as written, or `None` for
/// `align_corners`.
fn bilinear(
    x: &[f32],
    [h, w]: [usize; 2],
    [oh, ow]: [usize; 2],
    scales: Option<[f64; 2]>,
) -> Vec<f64> {
    let source = |o: usize, from: usize, to: usize, scale: Option<f64>| match scale {
        Some(s) => ((o as f64 + 0.5) / s - 0.5).max(0.0),
        None if to > 1 => o as f64 * (from - 1) as f64 / (to - 1) as f64,
        None => 0.0,
    };
    let mut y = Vec::new();
    for plane in x.chunks(h * w) {
        for r in 0..oh {
            let sy = source(r, h, oh, scales.map(|s| s[0]));
            let (y0, ly) = (sy.floor() as usize, sy - sy.floor());
            let y1 = (y0 + 1).min(h - 1);
            for c in 0..ow {
                let sx = source(c, w, ow, scales.map(|s| s[1]));
                let (x0, lx) = (sx.floor() as usize, sx - sx.floor());
                let x1 = (x0 + 1).min(w - 1);
                let at = |i: usize, j: usize| f64::from(plane[i * w + j]);
                let top = (1.0 - lx) * at(y0, x0) + lx * at(y0, x1);
                let bottom = (1.0 - lx) * at(y1, x0) + lx * at(y1, x1);
                y.push((1.0 - ly) * top + ly * bottom);
            }
        }
    }
    y
}

#[test]
fn bilinear_resizes_up_down_and_to_any_size_as_pytorch_does() {
    let x = values(11, 2 * 2 * 4 * 6, -2.0, 2.0);
    let half_pixel = [("mode", "linear"), ("coordinate_transformation_mode", "half_pixel")];
    let align = [("mode", "linear"), ("coordinate_transformation_mode", "align_corners")];
    let pytorch = [("mode", "linear"), ("coordinate_transformation_mode", "pytorch_half_pixel")];
    // (attributes, scales or sizes, output [H, W], PyTorch's scales; None: align_corners)
    let cases = [
        (&half_pixel, To::Scales([2.0, 2.0]), [8, 12], Some([2.0, 2.0])),
        (&half_pixel, To::Scales([1.5, 0.75]), [6, 4], Some([1.5, 0.75])),
        (&pytorch, To::Sizes([3, 4]), [3, 4], Some([0.75, 4.0 / 6.0])),
        (&align, To::Sizes([7, 9]), [7, 9], None),
        (&align, To::Sizes([2, 5]), [2, 5], None),
    ];
    for (attrs, resize_to, [oh, ow], scales) in cases {
        let (init, inputs) = match resize_to {
            To::Scales([sh, sw]) => {
                (TensorProto::f32("scales", &[4], &[1.0, 1.0, sh, sw]), ["x", "", "scales", ""])
            }
            To::Sizes([h, w]) => {
                (TensorProto::i64("sizes", &[4], &[2, 2, h, w]), ["x", "", "", "sizes"])
            }
        };
        let node = resize(attrs, &inputs);
        let imported = import(&model(vec![node], vec![init], [2, 2, 4, 6], 13)).unwrap();
        let expected = bilinear(&x, [4, 6], [oh, ow], scales);
        assert_eq!(check(&imported, &x, &expected), [2, 2, oh, ow], "{attrs:?} to {oh}x{ow}");
        // Constant matrices, never trained: no parameter at all.
        assert_eq!(imported.graph.parameters().count(), 0);
    }
}

#[test]
fn resizes_sprout_cannot_run_are_refused_naming_the_node() {
    let scales = TensorProto::f32("scales", &[4], &[1.0, 1.0, 0.5, 0.5]);
    let cases = [
        (vec![A::string("coordinate_transformation_mode", "tf_crop_and_resize")], 13, "tf_crop"),
        (vec![A::string("mode", "linear"), A::int("antialias", 1)], 18, "antialias"),
        (vec![A::string("mode", "area")], 13, "mode 'area'"),
    ];
    for (attrs, opset, says) in cases {
        let node = NodeProto::new("Resize", "up", &["x", "", "scales"], &["y"]);
        let node = attrs.into_iter().fold(node, NodeProto::with);
        let bytes = model(vec![node], vec![scales.clone()], [1, 2, 4, 4], opset);
        let err = import(&bytes).err().expect("refused").to_string();
        assert!(err.contains("'up'") && err.contains(says), "{err}");
    }
    let channels = TensorProto::f32("scales", &[4], &[1.0, 2.0, 1.0, 1.0]);
    let bytes = model(vec![resize(&[], &["x", "", "scales"])], vec![channels], [1, 2, 4, 4], 13);
    let err = import(&bytes).err().expect("refused").to_string();
    assert!(err.contains("'up'") && err.contains("not N or C"), "{err}");
    // A hostile size: 2^31 columns would need 32 GiB of interpolation matrix, refused by
    // the memory limit before anything is allocated; a small limit refuses a small one.
    let huge = TensorProto::i64("sizes", &[4], &[1, 2, 4, 1 << 31]);
    let node = resize(&[("mode", "linear")], &["x", "", "", "sizes"]);
    let bytes = model(vec![node], vec![huge], [1, 2, 4, 4], 13);
    let err = import(&bytes).err().expect("refused").to_string();
    assert!(err.contains("'up'") && err.contains("memory limit of 2147483648 bytes"), "{err}");
    let sizes = TensorProto::i64("sizes", &[4], &[1, 2, 8, 8]);
    let node = resize(&[("mode", "linear")], &["x", "", "", "sizes"]);
    let bytes = model(vec![node], vec![sizes], [1, 2, 4, 4], 13);
    let tight = ImportOptions { max_memory: Some(255), ..Default::default() };
    let err = import_with(&bytes, &tight).err().expect("refused").to_string();
    assert!(err.contains("take 256 bytes"), "{err}");
    assert!(
        import_with(&bytes, &ImportOptions { max_memory: Some(256), ..Default::default() }).is_ok()
    );
}

#[test]
fn depth_to_space_moves_channels_into_blocks_in_both_orders() {
    let (b, c, h, w) = (2, 2, 2, 3);
    let x = values(2, 8 * h * w, -1.0, 1.0);
    for mode in ["CRD", "DCR"] {
        let node = NodeProto::new("DepthToSpace", "shuffle", &["x"], &["y"])
            .with(A::int("blocksize", b as i64))
            .with(A::string("mode", mode));
        let imported = import(&model(vec![node], vec![], [1, 8, h, w], 13)).unwrap();
        let expected: Vec<f64> = (0..c * h * b * w * b)
            .map(|i| {
                let (ch, r, col) = (i / (h * b * w * b), i / (w * b) % (h * b), i % (w * b));
                let (bi, bj) = (r % b, col % b);
                let from = match mode {
                    "CRD" => ch * b * b + bi * b + bj,
                    _ => (bi * b + bj) * c + ch,
                };
                f64::from(x[(from * h + r / b) * w + col / b])
            })
            .collect();
        assert_eq!(check(&imported, &x, &expected), [1, c, h * b, w * b], "{mode}");
        let transposes = imported.graph.nodes().iter().filter(|n| n.op.kind() == "transpose");
        assert!(transposes.count() <= 2, "{mode}: a 6-D shuffle as at most two transposes");
    }
}

/// Each `[n, c]` plane of `x` (`[2, 3, 2, 2]`) normalised, scaled and shifted.
fn instance_norm_expected(x: &[f32], scale: &[f32], shift: &[f32], eps: f64) -> Vec<f64> {
    x.chunks(4)
        .enumerate()
        .flat_map(|(plane, v)| {
            let v: Vec<f64> = v.iter().map(|&a| f64::from(a)).collect();
            let mean = v.iter().sum::<f64>() / 4.0;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 4.0;
            let (s, t) = (f64::from(scale[plane % 3]), f64::from(shift[plane % 3]));
            v.into_iter().map(move |a| (a - mean) / (var + eps).sqrt() * s + t)
        })
        .collect()
}

#[test]
fn instance_normalization_normalises_each_channel_and_trains_its_scale_and_shift() {
    let x = values(3, 24, -2.0, 2.0);
    let (scale, shift) = (values(4, 3, 0.5, 1.5), values(5, 3, -0.5, 0.5));
    let init = vec![
        TensorProto::f32("in.weight", &[3], &scale),
        TensorProto::f32("in.bias", &[3], &shift),
    ];
    let node =
        NodeProto::new("InstanceNormalization", "in", &["x", "in.weight", "in.bias"], &["y"])
            .with(A::float("epsilon", 1e-3));
    let imported = import(&model(vec![node], init, [2, 3, 2, 2], 13)).unwrap();
    check(&imported, &x, &instance_norm_expected(&x, &scale, &shift, 1e-3));
    for name in ["in.weight", "in.bias"] {
        let id = imported.graph.find(name).unwrap_or_else(|| panic!("{name} lost"));
        let role = imported.graph.tensor(id).role;
        assert!(matches!(role, Role::FrozenParam | Role::TrainableParam), "{name}: {role:?}");
    }

    // nn.GroupNorm(1, 3) as PyTorch exports it: [N, G, L], scale ones and shift zeros
    // (no convolution of its own), then its own scale and shift.
    let ones = TensorProto::f32("ones", &[1], &[1.0]);
    let zeros = TensorProto::f32("zeros", &[1], &[0.0]);
    let grouped = TensorProto::i64("grouped", &[3], &[2, 1, -1]);
    let back = TensorProto::i64("back", &[4], &[2, 3, 2, 2]);
    let nodes = vec![
        NodeProto::new("Reshape", "group", &["x", "grouped"], &["g"]),
        NodeProto::new("InstanceNormalization", "gn", &["g", "ones", "zeros"], &["n"]),
        NodeProto::new("Reshape", "ungroup", &["n", "back"], &["y"]),
    ];
    let imported =
        import(&model(nodes, vec![ones, zeros, grouped, back], [2, 3, 2, 2], 13)).unwrap();
    assert!(!imported.graph.nodes().iter().any(|n| n.op.kind() == "conv2d"));
    let expected: Vec<f64> = x
        .chunks(12)
        .flat_map(|v| {
            let v: Vec<f64> = v.iter().map(|&a| f64::from(a)).collect();
            let mean = v.iter().sum::<f64>() / 12.0;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 12.0;
            v.into_iter().map(move |a| (a - mean) / (var + 1e-5).sqrt())
        })
        .collect();
    check(&imported, &x, &expected);

    // Then GroupNorm's own weight and bias, `[C, 1, 1]` initializers read by a Mul and an
    // Add: both trained under their names, one depthwise convolution by both.
    let (weight, bias) = (values(12, 3, 0.5, 1.5), values(13, 3, -0.5, 0.5));
    let ones = TensorProto::f32("ones", &[1], &[1.0]);
    let zeros = TensorProto::f32("zeros", &[1], &[0.0]);
    let init = vec![
        ones,
        zeros,
        TensorProto::i64("grouped", &[3], &[2, 1, -1]),
        TensorProto::i64("back", &[4], &[2, 3, 2, 2]),
        TensorProto::f32("onnx::Mul_7", &[3, 1, 1], &weight),
        TensorProto::f32("onnx::Add_8", &[3, 1, 1], &bias),
    ];
    let nodes = vec![
        NodeProto::new("Reshape", "group", &["x", "grouped"], &["g"]),
        NodeProto::new("InstanceNormalization", "gn", &["g", "ones", "zeros"], &["n"]),
        NodeProto::new("Reshape", "ungroup", &["n", "back"], &["u"]),
        NodeProto::new("Mul", "scale", &["u", "onnx::Mul_7"], &["s"]),
        NodeProto::new("Add", "shift", &["s", "onnx::Add_8"], &["y"]),
    ];
    let imported = import(&model(nodes, init, [2, 3, 2, 2], 13)).unwrap();
    let affine: Vec<f64> = expected
        .iter()
        .enumerate()
        .map(|(i, v)| v * f64::from(weight[i / 4 % 3]) + f64::from(bias[i / 4 % 3]))
        .collect();
    check(&imported, &x, &affine);
    let g = &imported.graph;
    for name in ["onnx::Mul_7", "onnx::Add_8"] {
        let id = g.find(name).unwrap_or_else(|| panic!("{name} lost"));
        assert!(g.parameters().any(|p| p == id), "{name} is a parameter");
    }
    assert_eq!(g.nodes().iter().filter(|n| n.op.kind() == "conv2d").count(), 1);

    // Opset 21's GroupNormalization of the same: one node, scale and bias per channel.
    let init = vec![
        TensorProto::f32("gn.weight", &[3], &weight),
        TensorProto::f32("gn.bias", &[3], &bias),
    ];
    let node = NodeProto::new("GroupNormalization", "gn", &["x", "gn.weight", "gn.bias"], &["y"])
        .with(A::int("num_groups", 1));
    let imported = import(&model(vec![node.clone()], init.clone(), [2, 3, 2, 2], 21)).unwrap();
    check(&imported, &x, &affine);
    let g = &imported.graph;
    for name in ["gn.weight", "gn.bias"] {
        let id = g.find(name).unwrap_or_else(|| panic!("{name} lost"));
        assert!(g.parameters().any(|p| p == id), "{name} is a parameter");
    }
    // Two groups do not divide three channels.
    let node = NodeProto { attribute: vec![A::int("num_groups", 2)], ..node };
    let err = import(&model(vec![node], init, [2, 3, 2, 2], 21)).err().expect("refused");
    assert!(err.to_string().contains("'gn'") && err.to_string().contains("num_groups 2"), "{err}");
}

#[test]
fn prelu_with_a_slope_per_channel_or_one_for_all() {
    let x = values(6, 24, -2.0, 2.0);
    let slopes = values(7, 3, 0.05, 0.5);
    for (dims, slope) in [(&[3usize, 1, 1][..], slopes.clone()), (&[1][..], vec![0.25])] {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let init = vec![TensorProto::f32("act.weight", &dims, &slope)];
        let node = NodeProto::new("PRelu", "act", &["x", "act.weight"], &["y"]);
        let imported = import(&model(vec![node], init, [2, 3, 2, 2], 13)).unwrap();
        let expected: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let a = f64::from(slope[if slope.len() == 1 { 0 } else { i / 4 % 3 }]);
                if v > 0.0 {
                    f64::from(v)
                } else {
                    a * f64::from(v)
                }
            })
            .collect();
        check(&imported, &x, &expected);
        // A slope per channel or one for all trains under its name and ONNX shape.
        let g = &imported.graph;
        let id = g.find("act.weight").expect("the slope keeps its name");
        assert!(g.parameters().any(|p| p == id));
        assert_eq!(g.shape(id).dims(), &dims.iter().map(|&d| d as usize).collect::<Vec<_>>()[..]);
    }
    let init = vec![TensorProto::f32("act.weight", &[2], &[0.1, 0.2])];
    let node = NodeProto::new("PRelu", "act", &["x", "act.weight"], &["y"]);
    let err = import(&model(vec![node], init, [2, 3, 2, 2], 13)).err().expect("refused");
    assert!(
        matches!(&err, OnnxError::Unsupported { node_name, .. } if node_name == "act"),
        "{err}"
    );
}

/// An activation's value at one point.
type Formula<'a> = dyn Fn(f64) -> f64 + 'a;

#[test]
fn elu_selu_softplus_tanh_and_mish_match_pytorchs_formulas() {
    let x = values(8, 24, -4.0, 4.0);
    let softplus = |v: f64| (1.0 + v.exp()).ln();
    let elu = |alpha: f64| move |v: f64| if v > 0.0 { v } else { alpha * (v.exp() - 1.0) };
    let (selu_alpha, selu_gamma) = (1.673_263_242_354_377_3, 1.050_700_987_355_480_5);
    let cases: [(NodeProto, i64, &Formula<'_>); 5] = [
        (NodeProto::new("Elu", "act", &["x"], &["y"]).with(A::float("alpha", 0.7)), 13, &elu(0.7)),
        (NodeProto::new("Selu", "act", &["x"], &["y"]), 13, &|v| selu_gamma * elu(selu_alpha)(v)),
        (NodeProto::new("Softplus", "act", &["x"], &["y"]), 13, &softplus),
        (NodeProto::new("Tanh", "act", &["x"], &["y"]), 13, &f64::tanh),
        (NodeProto::new("Mish", "act", &["x"], &["y"]), 18, &|v| v * softplus(v).tanh()),
    ];
    for (node, opset, f) in cases {
        let op = node.op_type.clone().unwrap();
        let imported = import(&model(vec![node], vec![], [2, 3, 2, 2], opset)).expect(&op);
        let expected: Vec<f64> = f64s(&x).into_iter().map(f).collect();
        check(&imported, &x, &expected);
    }
}

/// `Where(Greater(s, threshold), x, y)` after the nodes `head`, with `s` and `y` named by
/// it, as the dynamo exporter writes `nn.Softplus(beta)`.
fn thresholded(
    head: Vec<NodeProto>,
    s: &str,
    y: &str,
    threshold: f32,
) -> (Vec<NodeProto>, Vec<TensorProto>) {
    let mut nodes = head;
    nodes.push(NodeProto::new("Greater", "above", &[s, "threshold"], &["big"]));
    nodes.push(NodeProto::new("Where", "pick", &["big", "x", y], &["y"]));
    (nodes, vec![TensorProto::f32("threshold", &[], &[threshold])])
}

#[test]
fn softplus_with_pytorchs_threshold_as_the_dynamo_exporter_writes_it() {
    // Inputs beyond 20 / beta too, where softplus is x itself.
    let mut x = values(14, 24, -4.0, 4.0);
    x[..4].copy_from_slice(&[25.0, 21.0, 11.0, -30.0]);
    for beta in [1.0f32, 2.0] {
        let b = f64::from(beta);
        let softplus = |v: f64| if v * b > 20.0 { v } else { (1.0 + (v * b).exp()).ln() / b };
        let (nodes, mut init) = if beta == 1.0 {
            thresholded(vec![NodeProto::new("Softplus", "soft", &["x"], &["t"])], "x", "t", 20.0)
        } else {
            let head = vec![
                NodeProto::new("Mul", "scaled", &["x", "beta"], &["s"]),
                NodeProto::new("Softplus", "soft", &["s"], &["t"]),
                NodeProto::new("Div", "unscaled", &["t", "beta"], &["u"]),
            ];
            thresholded(head, "s", "u", 20.0)
        };
        init.push(TensorProto::f32("beta", &[], &[beta]));
        let imported = import(&model(nodes, init, [2, 3, 2, 2], 20)).expect("imports");
        let kinds: Vec<&str> = imported.graph.nodes().iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "softplus").count(), 1, "{kinds:?}");
        let expected: Vec<f64> = f64s(&x).into_iter().map(softplus).collect();
        check(&imported, &x, &expected);
    }
    // Another threshold is no softplus of sprout's: refused, naming the Greater node.
    let head = vec![NodeProto::new("Softplus", "soft", &["x"], &["t"])];
    let (nodes, init) = thresholded(head, "x", "t", 10.0);
    let err = import(&model(nodes, init, [2, 3, 2, 2], 20)).err().expect("refused");
    assert!(
        matches!(&err, OnnxError::UnsupportedOp { op_type, node_name } if op_type == "Greater" && node_name == "above"),
        "{err}"
    );
}
