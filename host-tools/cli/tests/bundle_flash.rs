//! `sprout bundle` and `sprout flash` end to end: a bundle written from a model file decodes
//! on the firmware side; flashing without a probe, to an unknown board or from a file that
//! is not an ARM ELF fails with a clear message and a non-zero exit.

mod common;

use sprout_core::format::bundle::MAX_TRAINABLE;
use sprout_core::{save_model, ModelFile, Step};
use sprout_train::Model;
use sprout_zoo::Architecture;

use common::{fails, ok, s, sprout, text, Scratch};

/// The smallest file that passes as a 32-bit little-endian ARM ELF header.
fn arm_elf_header() -> Vec<u8> {
    let mut elf = vec![0u8; 52];
    elf[..4].copy_from_slice(b"\x7fELF");
    (elf[4], elf[5], elf[6]) = (1, 1, 1);
    elf[18..20].copy_from_slice(&40u16.to_le_bytes());
    elf
}

#[test]
fn bundle_writes_a_bundle_the_firmware_decodes() {
    let scratch = Scratch::new("bundle");
    let dir = &scratch.0;
    let model = Model::from_zoo(Architecture::Mlp, 16, 1).unwrap();
    let file = ModelFile::from_graph(&model.zoo.graph, model.metadata.clone());
    let model_path = dir.join("mlp.sprout");
    std::fs::write(&model_path, save_model(&file).unwrap()).unwrap();
    let out = dir.join("mlp.bundle");
    let output = sprout(&[
        "bundle",
        model_path.to_str().unwrap(),
        "--trainable",
        "head",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "features 64 per sample (256 bytes cached per sample), 10 classes, head batch 8"
        ),
        "{stdout}"
    );
    let bytes = std::fs::read(&out).unwrap();
    let mut steps = Box::new(heapless::Vec::<Step, 64>::new());
    let bundle = sprout_core::format::bundle::decode(&bytes, &mut steps).unwrap();
    assert_eq!(bundle.header.model_hash, model.graph_hash());

    let output =
        sprout(&["bundle", model_path.to_str().unwrap(), "--trainable", "nothing.*", "-o", "x"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("'nothing.*' matches no parameter"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn flash_without_a_probe_says_so_and_fails() {
    let scratch = Scratch::new("flash-no-probe");
    let dir = &scratch.0;
    let elf = dir.join("firmware.elf");
    std::fs::write(&elf, arm_elf_header()).unwrap();
    for board in ["stm32f746g-disco", "nrf52840-dk"] {
        let output = sprout(&["flash", "--board", board, elf.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1));
        assert!(text(&output.stderr).contains("no debug probe found"), "{}", text(&output.stderr));
    }
}

#[test]
fn flash_refuses_unknown_boards_and_non_arm_elf_files() {
    let scratch = Scratch::new("flash-bad");
    let dir = &scratch.0;
    let elf = dir.join("firmware.elf");
    std::fs::write(&elf, arm_elf_header()).unwrap();
    let output = sprout(&["flash", "--board", "arduino-uno", elf.to_str().unwrap()]);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(
        message
            .contains("unknown board 'arduino-uno'; known boards: stm32f746g-disco, nrf52840-dk"),
        "{message}"
    );

    let missing = dir.join("missing.elf");
    let output = sprout(&["flash", "--board", "nrf52840-dk", missing.to_str().unwrap()]);
    assert!(!output.status.success());
    let expected = format!("error: not found: {}\n", missing.display());
    assert_eq!(text(&output.stderr), expected);

    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "not firmware").unwrap();
    let output = sprout(&["flash", "--board", "nrf52840-dk", notes.to_str().unwrap()]);
    let expected = format!(
        "error: {} is a file of unknown kind, not an ELF firmware image\n",
        notes.display()
    );
    assert_eq!(text(&output.stderr), expected);

    let mut x86 = arm_elf_header();
    x86[18..20].copy_from_slice(&62u16.to_le_bytes());
    std::fs::write(&elf, x86).unwrap();
    let output = sprout(&["flash", "--board", "nrf52840-dk", elf.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("machine 62"), "{}", text(&output.stderr));
}

#[test]
fn a_sparse_bundle_trains_what_fits_its_budget() {
    let scratch = Scratch::new("bundle-sparse");
    let (model, int8, leaves) =
        (scratch.path("m.sprout"), scratch.path("q.sprout"), scratch.path("leaves"));
    common::tiny_model(&model);
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "2", "--size", "16"]);
    let float_head = ["--keep-float", "classifier.*", "--trainable-int8", "features.*"];
    ok(&[&["quantize", s(&model), "--calib", s(&leaves), "-o", s(&int8)][..], &float_head]
        .concat());

    let out = scratch.path("sparse.bundle");
    let sparse = |budget: &str| {
        sprout(&[
            "bundle",
            s(&int8),
            "--sparse-budget",
            budget,
            "--cache-samples",
            "8",
            "-o",
            s(&out),
        ])
    };
    let wide = sparse("1MiB");
    assert!(wide.status.success(), "{}", text(&wide.stderr));
    let stdout = text(&wide.stdout);
    assert!(stdout.contains("head, 1 int8 biases, 1 pointwise weights"), "{stdout}");
    assert!(
        stdout.contains("  biases: features.0.bias\n  weights: features.0.weight\n"),
        "{stdout}"
    );
    // The whole model trains, so the device caches the quantized input: 768 + 4 bytes.
    assert!(stdout.contains("feature cache 8 samples x 772 B = 6176 B"), "{stdout}");
    let bytes = std::fs::read(&out).unwrap();
    let mut steps = Box::new(heapless::Vec::<Step, 64>::new());
    let bundle = sprout_core::format::bundle::decode(&bytes, &mut steps).unwrap();
    let names: Vec<&str> = bundle.header.trainable.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        ["features.0.weight", "features.0.bias", "classifier.weight", "classifier.bias"]
    );

    assert!(!stdout.contains("next deeper"), "{stdout}");

    let narrow = sparse("2KiB");
    assert!(!narrow.status.success());
    let stderr = text(&narrow.stderr);
    assert!(stderr.contains("no update fits 2048 bytes of device memory"), "{stderr}");
    // A budget the head alone fits leaves the bias out, and says what it would need.
    let head_alone = stderr.rsplit("training the head alone needs ").next().unwrap().trim();
    let head = sparse(head_alone);
    assert!(head.status.success(), "{}", text(&head.stderr));
    let stdout = text(&head.stdout);
    assert!(stdout.contains("head, 0 int8 biases, 0 pointwise weights"), "{stdout}");
    assert!(
        stdout.contains("the next deeper update, biases from features.0.bias, needs "),
        "{stdout}"
    );
    fails(
        &["bundle", s(&int8), "--trainable", "head", "--sparse-budget", "1MiB", "-o", "x"],
        "cannot be used with",
    );
}

#[test]
fn a_sparse_update_stops_at_the_tensors_a_bundle_names() {
    let scratch = Scratch::new("bundle-sparse-deep");
    let (model, int8, leaves) =
        (scratch.path("m.sprout"), scratch.path("q.sprout"), scratch.path("leaves"));
    common::deep_model(&model, MAX_TRAINABLE);
    ok(&["data", "leaves", "--out", s(&leaves), "--per-class", "2", "--size", "16"]);
    let float_head = ["--keep-float", "classifier.*", "--trainable-int8", "features.*"];
    ok(&[&["quantize", s(&model), "--calib", s(&leaves), "-o", s(&int8)][..], &float_head]
        .concat());
    let out = scratch.path("sparse.bundle");
    let args = ["bundle", s(&int8), "--sparse-budget", "1MiB", "--cache-samples", "8", "-o"];
    let output = sprout(&[&args[..], &[s(&out)]].concat());
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    // The head's weight and bias take two of the bundle's tensors; biases fill the rest.
    let biases = MAX_TRAINABLE - 2;
    assert!(
        stdout.contains(&format!("head, {biases} int8 biases, 0 pointwise weights")),
        "{stdout}"
    );
    let capped = format!("a bundle names at most {MAX_TRAINABLE} trainable tensors");
    assert!(stdout.contains(&capped), "{stdout}");
    let bytes = std::fs::read(&out).unwrap();
    let mut steps = Box::new(heapless::Vec::<Step, 512>::new());
    let bundle = sprout_core::format::bundle::decode(&bytes, &mut steps).unwrap();
    assert_eq!(bundle.header.trainable.len(), MAX_TRAINABLE);
}
