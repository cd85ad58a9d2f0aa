//! Every architecture records for several batch sizes, ends in `[N, classes]` logits, has
//! the parameter count its description implies and the torchvision names it documents.

use sprout_core::op::Op;
use sprout_core::{DType, Shape};
use sprout_zoo::{build, Architecture, ZooModel};

/// Weights of a bias-free `k`x`k` convolution from `i` to `o` channels.
fn conv(i: usize, o: usize, k: usize) -> usize {
    i * o * k * k
}

/// Scale and shift of a batch norm over `c` channels (running statistics are buffers).
fn bn(c: usize) -> usize {
    2 * c
}

/// Weight and bias of a linear layer.
fn linear(i: usize, o: usize) -> usize {
    i * o + o
}

/// Linear 64→128, Linear 128→64, Linear 64→10.
fn mlp_parameters() -> usize {
    linear(64, 128) + linear(128, 64) + linear(64, 10)
}

/// conv3x3(16)+BN stem, stages of 16, 32, 64 channels with 2 basic blocks each (a 1x1
/// conv+BN projection where the channels change), linear 64→10 head.
fn resnet_parameters() -> usize {
    let block = |i: usize, o: usize| {
        let projection = if i != o { conv(i, o, 1) + bn(o) } else { 0 };
        conv(i, o, 3) + bn(o) + conv(o, o, 3) + bn(o) + projection
    };
    let stages = [(16, 16), (16, 32), (32, 64)];
    let blocks: usize = stages.iter().map(|&(i, o)| block(i, o) + block(o, o)).sum();
    conv(3, 16, 3) + bn(16) + blocks + linear(64, 10)
}

/// conv3x3(16)+BN stem; inverted residuals 16→8 (t=1), then 8→16, 16→16, 16→24, 24→24,
/// 24→32, 32→32, 32→48, 48→48 (t=6); conv1x1(192)+BN; linear 192→3 head.
fn leafnet_parameters() -> usize {
    let inverted = |i: usize, o: usize, t: usize| {
        let h = i * t;
        let expand = if t != 1 { conv(i, h, 1) + bn(h) } else { 0 };
        expand + h * 9 + bn(h) + conv(h, o, 1) + bn(o)
    };
    let blocks = [(16, 8, 1), (8, 16, 6), (16, 16, 6), (16, 24, 6), (24, 24, 6)]
        .into_iter()
        .chain([(24, 32, 6), (32, 32, 6), (32, 48, 6), (48, 48, 6)])
        .map(|(i, o, t)| inverted(i, o, t))
        .sum::<usize>();
    conv(3, 16, 3) + bn(16) + blocks + conv(48, 192, 1) + bn(192) + linear(192, 3)
}

fn shape_of(model: &ZooModel, name: &str) -> Option<Shape> {
    model.graph.find(name).map(|id| model.graph.shape(id))
}

#[test]
fn every_architecture_builds_for_batch_1_and_8() {
    for arch in Architecture::ALL {
        for batch in [1, 8] {
            let m = build(arch, batch, 3).unwrap_or_else(|e| panic!("{arch} x{batch}: {e}"));
            let g = &m.graph;
            assert_eq!(g.shape(m.logits), Shape::d2(batch, arch.classes()), "{arch} x{batch}");
            assert_eq!(g.shape(m.input), arch.input_shape(batch));
            assert_eq!(g.shape(m.labels), Shape::d1(batch));
            assert_eq!(g.tensor(m.labels).dtype, DType::I32);
            assert_eq!(g.shape(m.loss), Shape::SCALAR);
            for (id, name) in [(m.input, "input"), (m.labels, "labels"), (m.loss, "loss")] {
                assert_eq!(g.find(name), Some(id), "{arch}: '{name}'");
            }
        }
    }
}

#[test]
fn parameter_counts_follow_the_descriptions() {
    assert_eq!(mlp_parameters(), 17_226);
    assert_eq!(resnet_parameters(), 175_258);
    assert_eq!(leafnet_parameters(), 105_379);
    let expected = [mlp_parameters(), resnet_parameters(), leafnet_parameters()];
    for (arch, expected) in Architecture::ALL.into_iter().zip(expected) {
        assert_eq!(build(arch, 2, 0).unwrap().parameter_count(), expected, "{arch}");
    }
}

#[test]
fn heads_are_the_final_linear_layers() {
    for (arch, head) in [
        (Architecture::Mlp, ["classifier.1.weight", "classifier.1.bias"]),
        (Architecture::ResNet, ["fc.weight", "fc.bias"]),
        (Architecture::LeafNet, ["classifier.1.weight", "classifier.1.bias"]),
    ] {
        let m = build(arch, 1, 0).unwrap();
        let names: Vec<&str> = m.head.iter().map(|&id| m.graph.tensor(id).name.as_str()).collect();
        assert_eq!(names, head, "{arch}");
    }
}

#[test]
fn parameters_carry_torchvision_names() {
    let leafnet = build(Architecture::LeafNet, 1, 0).unwrap();
    for (name, shape) in [
        ("features.0.0.weight", Shape::d4(16, 3, 3, 3)),
        ("features.0.1.bias", Shape::d1(16)),
        ("features.1.conv.0.0.weight", Shape::d4(16, 1, 3, 3)),
        ("features.1.conv.1.weight", Shape::d4(8, 16, 1, 1)),
        ("features.1.conv.2.weight", Shape::d1(8)),
        ("features.3.conv.0.0.weight", Shape::d4(96, 16, 1, 1)),
        ("features.3.conv.1.0.weight", Shape::d4(96, 1, 3, 3)),
        ("features.3.conv.2.weight", Shape::d4(16, 96, 1, 1)),
        ("features.3.conv.3.running_var", Shape::d1(16)),
        ("features.9.conv.2.weight", Shape::d4(48, 288, 1, 1)),
        ("features.10.0.weight", Shape::d4(192, 48, 1, 1)),
        ("classifier.1.weight", Shape::d2(3, 192)),
    ] {
        assert_eq!(shape_of(&leafnet, name), Some(shape), "leafnet '{name}'");
    }
    assert_eq!(shape_of(&leafnet, "features.11.0.weight"), None);

    let resnet = build(Architecture::ResNet, 1, 0).unwrap();
    for (name, shape) in [
        ("conv1.weight", Shape::d4(16, 3, 3, 3)),
        ("layer1.1.bn2.bias", Shape::d1(16)),
        ("layer2.0.conv1.weight", Shape::d4(32, 16, 3, 3)),
        ("layer2.0.downsample.0.weight", Shape::d4(32, 16, 1, 1)),
        ("layer3.1.conv2.weight", Shape::d4(64, 64, 3, 3)),
        ("fc.weight", Shape::d2(10, 64)),
    ] {
        assert_eq!(shape_of(&resnet, name), Some(shape), "resnet '{name}'");
    }
    assert_eq!(shape_of(&resnet, "layer1.0.downsample.0.weight"), None);
    assert_eq!(shape_of(&resnet, "conv1.bias"), None, "convolutions before BN have no bias");
}

#[test]
fn residual_adds_where_the_shape_allows() {
    let adds = |arch| {
        let m = build(arch, 1, 0).unwrap();
        m.graph.nodes().iter().filter(|n| n.op == Op::Add).map(|n| n.name.clone()).collect()
    };
    // Every basic block has a shortcut, identity or projected.
    let resnet: Vec<String> = adds(Architecture::ResNet);
    assert_eq!(resnet.len(), 6);
    // Inverted residuals add only with stride 1 and unchanged channels.
    let leafnet: Vec<String> = adds(Architecture::LeafNet);
    assert_eq!(leafnet, ["features.3.add", "features.5.add", "features.7.add", "features.9.add"]);
}

#[test]
fn the_seed_drives_weights_and_dropout() {
    let dropout_seeds = |m: &ZooModel| -> Vec<u64> {
        let nodes = m.graph.nodes().iter();
        nodes.filter_map(|n| if let Op::Dropout(c) = n.op { Some(c.seed) } else { None }).collect()
    };
    let weight = |m: &ZooModel| m.graph.tensor(m.head[0]).init.clone();
    for arch in Architecture::ALL {
        let (a, b, c) =
            (build(arch, 1, 1).unwrap(), build(arch, 1, 1).unwrap(), build(arch, 1, 2).unwrap());
        assert_eq!(dropout_seeds(&a).len(), 1, "{arch}");
        assert_eq!(dropout_seeds(&a), dropout_seeds(&b), "{arch}");
        assert_ne!(dropout_seeds(&a), dropout_seeds(&c), "{arch}");
        assert_eq!(weight(&a), weight(&b), "{arch}");
        assert_ne!(weight(&a), weight(&c), "{arch}");
    }
}

#[test]
fn names_round_trip() {
    for arch in Architecture::ALL {
        assert_eq!(Architecture::from_name(arch.name()), Some(arch));
        assert!(!arch.description().is_empty());
    }
    let names: Vec<&str> = Architecture::ALL.iter().map(|a| a.name()).collect();
    assert_eq!(names, ["mlp", "resnet", "leafnet"]);
    assert_eq!(Architecture::from_name("vgg"), None);
}
