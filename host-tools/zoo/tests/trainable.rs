//! `--trainable` choices: keywords, name patterns, their union, and errors that name the
//! entry at fault.

use sprout_zoo::{build, select_trainable, Architecture, SelectError, ZooModel};

fn names(model: &ZooModel, choice: &str) -> Vec<String> {
    let ids = select_trainable(model, choice).unwrap_or_else(|e| panic!("'{choice}': {e}"));
    ids.iter().map(|&id| model.graph.tensor(id).name.clone()).collect()
}

#[test]
fn all_selects_every_parameter() {
    for arch in Architecture::ALL {
        let m = build(arch, 1, 0).unwrap();
        let all = select_trainable(&m, "all").unwrap();
        assert_eq!(all, m.graph.parameters().collect::<Vec<_>>(), "{arch}");
    }
    let leafnet = build(Architecture::LeafNet, 1, 0).unwrap();
    // 1 conv + 2 BN in the stem and the last conv; 3 conv + 6 BN per expanded block, 2 + 4
    // in the unexpanded one; the head's 2.
    assert_eq!(select_trainable(&leafnet, "all").unwrap().len(), 3 + 6 + 8 * 9 + 3 + 2);
}

#[test]
fn head_selects_the_classifier() {
    let m = build(Architecture::LeafNet, 2, 0).unwrap();
    assert_eq!(select_trainable(&m, "head").unwrap(), m.head);
    assert_eq!(names(&m, "head"), ["classifier.1.weight", "classifier.1.bias"]);
}

#[test]
fn bias_selects_linear_and_batch_norm_shifts() {
    let mlp = build(Architecture::Mlp, 1, 0).unwrap();
    assert_eq!(names(&mlp, "bias"), ["features.0.bias", "features.2.bias", "classifier.1.bias"]);
    let resnet = build(Architecture::ResNet, 1, 0).unwrap();
    let biases = names(&resnet, "bias");
    // bn1, two per basic block, one per projection, fc.
    assert_eq!(biases.len(), 1 + 2 * 6 + 2 + 1);
    assert!(biases.iter().all(|n| n.ends_with(".bias")));
    assert!(biases.contains(&"layer3.0.downsample.1.bias".to_string()));
    assert!(!biases.iter().any(|n| n.contains("running")));
}

#[test]
fn patterns_select_by_name_and_combine() {
    let m = build(Architecture::LeafNet, 1, 0).unwrap();
    assert_eq!(
        names(&m, "features.6.*,classifier.*"),
        [
            "features.6.conv.0.0.weight",
            "features.6.conv.0.1.weight",
            "features.6.conv.0.1.bias",
            "features.6.conv.1.0.weight",
            "features.6.conv.1.1.weight",
            "features.6.conv.1.1.bias",
            "features.6.conv.2.weight",
            "features.6.conv.3.weight",
            "features.6.conv.3.bias",
            "classifier.1.weight",
            "classifier.1.bias",
        ]
    );
    // Overlapping entries select each parameter once, in the graph's order.
    let union = names(&m, " classifier.1.bias , head,bias");
    let mut expected = names(&m, "bias");
    assert_eq!(expected.last().map(String::as_str), Some("classifier.1.bias"));
    expected.insert(expected.len() - 1, "classifier.1.weight".into());
    assert_eq!(union, expected);
}

#[test]
fn a_pattern_matching_nothing_is_named() {
    let m = build(Architecture::ResNet, 1, 0).unwrap();
    let err = select_trainable(&m, "fc.*,layer4.*").unwrap_err();
    assert_eq!(err, SelectError::NoMatch { pattern: "layer4.*".into() });
    assert!(err.to_string().contains("'layer4.*'"), "{err}");
    // Patterns match whole names; buffers are never parameters.
    for pattern in ["fc", "*.running_mean"] {
        let err = select_trainable(&m, pattern).unwrap_err();
        assert_eq!(err, SelectError::NoMatch { pattern: pattern.into() });
    }
    for choice in ["", "head,", "head,,bias"] {
        let err = select_trainable(&m, choice).unwrap_err();
        assert_eq!(err, SelectError::Empty { choice: choice.into() });
    }
}
