//! The image-folder loader and the batch loader on real files: class discovery, label order,
//! the errors for corrupt images and bad layouts, and seeded per-epoch shuffling.

mod common;

use std::fs;
use std::path::Path;

use common::{config, generate_into, Scratch};
use sprout_data::{CacheMode, DataError, Dataset, Domain, Loader, Pipeline, Transform};

#[test]
fn the_loader_finds_classes_alphabetically_and_every_sample() {
    let scratch = Scratch::new("find");
    generate_into(&config(&["rust", "healthy", "leaf_spot"], 5, Domain::Target), &scratch.0);
    let train = scratch.0.join("train");
    fs::write(train.join("rust").join("notes.txt"), "not an image").unwrap();
    fs::copy(train.join("rust/00000.png"), train.join("rust/extra.JPG")).unwrap();
    let dataset = Dataset::open(&train).unwrap();
    assert_eq!(dataset.classes, ["healthy", "leaf_spot", "rust"]);
    assert_eq!(dataset.len(), 4 + 4 + 5);
    let labels: Vec<usize> = dataset.samples.iter().map(|(_, label)| *label).collect();
    assert_eq!(labels, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
    assert!(dataset.samples[0].0.ends_with("healthy/00000.png"));
    // A PNG under a .JPG name still decodes: the content decides.
    assert_eq!(dataset.image(12).unwrap().width, 32);

    let ordered = Dataset::open_with_classes(&train, &["rust", "healthy"]).unwrap();
    assert_eq!(ordered.classes, ["rust", "healthy"]);
    assert_eq!(ordered.samples[0], (train.join("rust/00000.png"), 0));
    assert_eq!(ordered.len(), 5 + 4);
    let missing = Dataset::open_with_classes(&train, &["rust", "mosaic"]).unwrap_err();
    assert!(
        matches!(missing, DataError::Layout { ref path, .. } if path == &train.join("mosaic")),
        "{missing}"
    );
    assert!(missing.to_string().contains("mosaic"), "{missing}");
}

#[test]
fn a_corrupt_image_is_a_decode_error_naming_the_file() {
    let scratch = Scratch::new("corrupt");
    let class = scratch.0.join("healthy");
    fs::create_dir_all(&class).unwrap();
    fs::write(class.join("x.png"), b"definitely not a PNG").unwrap();
    let dataset = Dataset::open(&scratch.0).unwrap();
    let error = dataset.image(0).unwrap_err();
    assert!(
        matches!(error, DataError::Decode { ref path, .. } if path == &class.join("x.png")),
        "{error}"
    );
    assert!(error.to_string().contains("x.png"), "{error}");
    // The loader passes it on.
    let mut loader = Loader::new(dataset, Transform::eval(8), 4, 0, &Pipeline::default()).unwrap();
    assert!(matches!(loader.epoch(0).next(), Some(Err(DataError::Decode { .. }))));
}

fn layout_error(root: &Path) -> (std::path::PathBuf, String) {
    match Dataset::open(root) {
        Err(DataError::Layout { path, detail }) => (path, detail),
        other => panic!("expected a layout error for {root:?}, got {other:?}"),
    }
}

#[test]
fn bad_layouts_are_layout_errors() {
    let scratch = Scratch::new("layout");
    let (path, detail) = layout_error(&scratch.0);
    assert_eq!(path, scratch.0);
    assert!(detail.contains("no class folders"), "{detail}");

    fs::create_dir_all(scratch.0.join("healthy")).unwrap();
    let (path, detail) = layout_error(&scratch.0);
    assert_eq!(path, scratch.0.join("healthy"));
    assert!(detail.contains("no PNG/JPEG images"), "{detail}");

    fs::write(scratch.0.join("stray.jpeg"), b"").unwrap();
    let (path, detail) = layout_error(&scratch.0);
    assert_eq!(path, scratch.0);
    assert!(detail.contains("stray.jpeg"), "{detail}");

    // A split tree given at its top: the hint says to pick a split.
    let split = scratch.0.join("split");
    generate_into(&config(&["healthy"], 2, Domain::Source), &split);
    let (path, detail) = layout_error(&split);
    assert_eq!(path, split.join("train"));
    assert!(detail.contains("give ROOT/train"), "{detail}");
}

fn loader(dataset: &Dataset, transform: Transform, batch: usize, seed: u64) -> Loader {
    let pipeline = Pipeline { cache: CacheMode::None, ..Pipeline::default() };
    Loader::new(dataset.clone(), transform, batch, seed, &pipeline).unwrap()
}

#[test]
fn the_loader_covers_every_sample_once_per_epoch_in_a_seeded_order() {
    let scratch = Scratch::new("batcher");
    generate_into(&config(&["healthy", "rust"], 12, Domain::Target), &scratch.0);
    let dataset = Dataset::open(&scratch.0.join("train")).unwrap();
    let labels: Vec<i32> = dataset.samples.iter().map(|(_, l)| *l as i32).collect();
    let mut cached =
        Loader::new(dataset.clone(), Transform::train(16), 7, 5, &Pipeline::default()).unwrap();
    assert_eq!(cached.batches(), 3); // 20 samples: 7 + 7 + 6

    let (order0, order1) = (cached.order(0), cached.order(1));
    for order in [&order0, &order1] {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
    }
    assert_ne!(order0, order1, "the order does not change with the epoch");
    assert_ne!(order0, (0..20).collect::<Vec<_>>());
    let again = loader(&dataset, Transform::train(16), 7, 5);
    assert_eq!(again.order(1), order1, "the order is not reproducible from the seed");
    assert_ne!(loader(&dataset, Transform::train(16), 7, 6).order(1), order1);

    let batches: Vec<_> = cached.epoch(1).map(Result::unwrap).collect();
    assert_eq!(batches.iter().map(|b| b.len()).collect::<Vec<_>>(), [7, 7, 6]);
    assert_eq!(batches[2].x.len(), 6 * 3 * 16 * 16);
    let y: Vec<i32> = batches.iter().flat_map(|b| b.y.clone()).collect();
    assert_eq!(y, order1.iter().map(|&i| labels[i]).collect::<Vec<_>>());
    // Same seed and epoch, same inputs, augmentation included; cached or not.
    let mut uncached = loader(&dataset, Transform::train(16), 7, 5);
    assert_eq!(uncached.epoch(1).map(Result::unwrap).collect::<Vec<_>>(), batches);
    assert_eq!(cached.epoch(1).map(Result::unwrap).collect::<Vec<_>>(), batches);
    assert_eq!(cached.cached_bytes(), 20 * 3 * 16 * 16);

    let mut plain = loader(&dataset, Transform::eval(16), 8, 5).no_shuffle();
    assert_eq!(plain.order(3), (0..20).collect::<Vec<_>>());
    let y: Vec<i32> = plain.epoch(3).flat_map(|b| b.unwrap().y).collect();
    assert_eq!(y, labels);

    // A subset keeps the classes and takes the samples asked for.
    let split = dataset.subset(&[19, 0]);
    assert_eq!(split.classes, dataset.classes);
    assert_eq!(split.samples, [dataset.samples[19].clone(), dataset.samples[0].clone()]);
}

#[test]
fn unlabelled_images_are_found_at_any_depth_sorted_regular_files_only() {
    let scratch = Scratch::new("unlabelled");
    generate_into(&config(&["rust", "healthy"], 3, Domain::Target), &scratch.0);
    let root = &scratch.0;
    let deep = root.join("train/healthy/deeper/still");
    fs::create_dir_all(&deep).unwrap();
    fs::copy(root.join("train/healthy/00000.png"), deep.join("x.jpeg")).unwrap();
    fs::write(root.join("train/notes.txt"), "not an image").unwrap();
    fs::create_dir_all(root.join("folder.png")).unwrap();
    fs::copy(root.join("train/healthy/00000.png"), root.join(".hidden.png")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("train/healthy/00000.png"), root.join("link.png"))
        .unwrap();
    let set = Dataset::unlabelled(root).unwrap();
    let paths: Vec<_> = set.samples.iter().map(|(p, _)| p.strip_prefix(root).unwrap()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // 3 per class split into train and val, plus the deep copy.
    assert_eq!(set.len(), 2 * 3 + 1, "{paths:?}");
    assert!(paths.contains(&Path::new("train/healthy/deeper/still/x.jpeg")));
    assert!(set.samples.iter().all(|(_, label)| *label == 0));
    let empty = Scratch::new("unlabelled-empty");
    fs::create_dir_all(empty.0.join("nested/more")).unwrap();
    let error = Dataset::unlabelled(&empty.0).unwrap_err();
    assert!(error.to_string().contains("no PNG/JPEG images"), "{error}");
}
