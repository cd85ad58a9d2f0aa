//! The leaf generator end to end: layout and counts, byte-for-byte determinism, decodable
//! images of the right size, colour statistics per class, the domain shift and bad configs.

mod common;

use common::{config, generate_into, Scratch};
use sprout_data::{generate, DataError, Dataset, Domain, Image};

/// Every file under `dir` with its bytes, sorted by path.
fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn generation_writes_the_split_layout_and_is_deterministic() {
    let scratch = Scratch::new("layout");
    let config = config(&["healthy", "leaf_spot", "rust"], 10, Domain::Target);
    let (a, b) = (scratch.0.join("a"), scratch.0.join("b"));
    let mut calls = Vec::new();
    let summary = generate(&config, &a, |done, total| calls.push((done, total))).unwrap();
    assert_eq!((summary.train_per_class, summary.val_per_class, summary.images()), (8, 2, 30));
    assert_eq!(calls.len(), 30);
    assert_eq!(calls.last(), Some(&(30, 30)));
    generate_into(&config, &b);

    let written = files(&a);
    assert_eq!(written, files(&b), "two runs of one config differ");
    assert_eq!(written.len(), 30);
    assert_eq!(summary.bytes, written.iter().map(|(_, bytes)| bytes.len() as u64).sum::<u64>());
    for class in ["healthy", "leaf_spot", "rust"] {
        for (split, count) in [("train", 8), ("val", 2)] {
            let folder = a.join(split).join(class);
            let names: Vec<_> = (0..count).map(|i| folder.join(format!("{i:05}.png"))).collect();
            assert!(names.iter().all(|n| n.is_file()), "{folder:?} lacks files");
            assert_eq!(std::fs::read_dir(&folder).unwrap().count(), count, "{folder:?}");
        }
    }
    // A different seed gives different images.
    let other = scratch.0.join("c");
    generate_into(&sprout_data::LeafConfig { seed: 43, ..config }, &other);
    assert_ne!(files(&other), written);
}

#[test]
fn images_decode_at_the_requested_size() {
    let scratch = Scratch::new("decode");
    generate_into(&config(&["rust"], 3, Domain::Source), &scratch.0);
    let train = Dataset::open(&scratch.0.join("train")).unwrap();
    assert_eq!(train.classes, ["rust"]);
    for i in 0..train.len() {
        let image = train.image(i).unwrap();
        assert_eq!((image.width, image.height), (32, 32));
    }
}

/// Mean colour over every image of one class.
fn class_mean(images: &[Image]) -> [f32; 3] {
    let mut sum = [0.0; 3];
    for image in images {
        let mean = image.mean();
        (0..3).for_each(|c| sum[c] += mean[c] / images.len() as f32);
    }
    sum
}

/// The share of pixels that are orange (red well above green, green well above blue).
fn orange_share(images: &[Image]) -> f32 {
    let pixels = images.iter().flat_map(|i| &i.pixels);
    let orange = pixels.clone().filter(|p| p[0] > 0.55 && p[0] > p[1] + 0.2 && p[1] > p[2] + 0.15);
    orange.count() as f32 / pixels.count() as f32
}

/// The share of pixels that are dark brown (red above green above blue, all dim).
fn brown_share(images: &[Image]) -> f32 {
    let pixels = images.iter().flat_map(|i| &i.pixels);
    let brown = pixels
        .clone()
        .filter(|p| p[0] < 0.45 && p[0] > p[1] + 0.05 && p[1] > p[2] + 0.03 && p[1] < 0.3);
    brown.count() as f32 / pixels.count() as f32
}

/// Every image of `class` in `split`, decoded.
fn decoded(root: &std::path::Path, split: &str, class: &str) -> Vec<Image> {
    let dataset = Dataset::open_with_classes(&root.join(split), &[class]).unwrap();
    (0..dataset.len()).map(|i| dataset.image(i).unwrap()).collect()
}

#[test]
fn classes_differ_in_colour_statistics() {
    let scratch = Scratch::new("colours");
    // The target domain's green and grey backgrounds keep brown and orange to the disease.
    generate_into(&config(&["healthy", "leaf_spot", "rust"], 20, Domain::Target), &scratch.0);
    let [healthy, spot, rust] =
        ["healthy", "leaf_spot", "rust"].map(|c| decoded(&scratch.0, "train", c));
    let (orange_healthy, orange_rust) = (orange_share(&healthy), orange_share(&rust));
    assert!(
        orange_rust > 0.01 && orange_rust > 10.0 * orange_healthy,
        "{orange_rust} vs {orange_healthy}"
    );
    let (brown_healthy, brown_spot) = (brown_share(&healthy), brown_share(&spot));
    assert!(
        brown_spot > 0.01 && brown_spot > 3.0 * brown_healthy,
        "{brown_spot} vs {brown_healthy}"
    );
}

#[test]
fn source_and_target_domains_differ() {
    let scratch = Scratch::new("domains");
    let (source, target) = (scratch.0.join("source"), scratch.0.join("target"));
    generate_into(&config(&["healthy"], 20, Domain::Source), &source);
    generate_into(&config(&["healthy"], 20, Domain::Target), &target);
    let (s, t) = (
        class_mean(&decoded(&source, "train", "healthy")),
        class_mean(&decoded(&target, "train", "healthy")),
    );
    // Soil and wood among the source's backgrounds make it redder than it is green on
    // average; the target (grass and grey only) is greener and bluer.
    assert!(s[0] - s[1] > t[0] - t[1] + 0.03, "source {s:?} target {t:?}");
    assert!(t[2] > s[2] + 0.02, "source {s:?} target {t:?}");
}

#[test]
fn the_soil_domain_is_the_source_without_the_field() {
    let scratch = Scratch::new("soil");
    let (soil, source) = (scratch.0.join("soil"), scratch.0.join("source"));
    generate_into(&config(&["healthy", "blight"], 20, Domain::Soil), &soil);
    generate_into(&config(&["healthy"], 20, Domain::Source), &source);
    let (s, b) = (
        class_mean(&decoded(&soil, "train", "healthy")),
        class_mean(&decoded(&source, "train", "healthy")),
    );
    // Brown soil and wood only: redder than green, and more so than the broad source
    // whose backgrounds include grass and grey.
    assert!(s[0] > s[1], "soil {s:?}");
    assert!(s[0] - s[1] > b[0] - b[1] + 0.03, "soil {s:?} source {b:?}");
}

#[test]
fn bad_configurations_are_refused_before_writing() {
    let scratch = Scratch::new("bad");
    let out = scratch.0.join("out");
    let error =
        generate(&config(&["healthy", "blight"], 2, Domain::Target), &out, |_, _| {}).unwrap_err();
    assert!(
        matches!(error, DataError::UnknownClass { ref class, .. } if class == "blight"),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "unknown class 'blight' for the target domain (known: healthy, leaf_spot, rust)"
    );
    assert!(!out.exists(), "a refused config wrote {out:?}");
    // The source domain knows it.
    generate_into(&config(&["blight"], 1, Domain::Source), &out);
    for (bad, expected) in [
        (
            sprout_data::LeafConfig { per_class: 0, ..config(&["rust"], 1, Domain::Source) },
            "per_class",
        ),
        (sprout_data::LeafConfig { size: 4, ..config(&["rust"], 1, Domain::Source) }, "size 4"),
        (
            sprout_data::LeafConfig { val_fraction: 1.0, ..config(&["rust"], 1, Domain::Source) },
            "val_fraction",
        ),
        (config(&["rust", "rust"], 1, Domain::Source), "twice"),
        (config(&[], 1, Domain::Source), "no classes"),
    ] {
        let error = generate(&bad, &scratch.0.join("never"), |_, _| {}).unwrap_err();
        assert!(
            matches!(error, DataError::Config(_)) && error.to_string().contains(expected),
            "{error}"
        );
    }
    assert!(!scratch.0.join("never").exists());
}
