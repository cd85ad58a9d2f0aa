//! The streaming pipeline on real files: batches that do not depend on the worker count or the
//! read-ahead, bounded buffers on big JPEGs, the caches and their cap, and the file checks
//! (pixel limit from the header, FIFOs, devices, non-images).

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{config, generate_into, Scratch};
use image::codecs::jpeg::JpegEncoder;
use image::{ExtendedColorType, RgbImage};
use sprout_data::{
    decode_rgb, load_resized, Batch, CacheMode, DataError, Dataset, Domain, Limits, Loader,
    Pipeline, ResizeMode, Transform,
};

fn leaves(scratch: &Scratch) -> Dataset {
    generate_into(&config(&["healthy", "rust", "leaf_spot"], 9, Domain::Target), &scratch.0);
    Dataset::open(&scratch.0.join("train")).unwrap()
}

fn epoch(dataset: &Dataset, pipeline: &Pipeline, epoch: u64) -> Vec<Batch> {
    let mut loader = Loader::new(dataset.clone(), Transform::train(16), 5, 3, pipeline).unwrap();
    loader.epoch(epoch).map(Result::unwrap).collect()
}

#[test]
fn batches_do_not_depend_on_workers_read_ahead_or_cache() {
    let scratch = Scratch::new("workers");
    let dataset = leaves(&scratch);
    let one = Pipeline { workers: 1, prefetch: 1, cache: CacheMode::None, ..Pipeline::default() };
    let reference = epoch(&dataset, &one, 2);
    assert_eq!(reference.iter().map(Batch::len).sum::<usize>(), dataset.len());
    for (workers, prefetch) in [(2, 1), (3, 2), (8, 4)] {
        let pipeline = Pipeline { workers, prefetch, ..Pipeline::default() };
        assert_eq!(epoch(&dataset, &pipeline, 2), reference, "{workers} workers");
    }
    assert_ne!(epoch(&dataset, &one, 3), reference, "epochs differ");
    // Dropping an epoch half-way stops its workers.
    let mut loader = Loader::new(dataset, Transform::eval(16), 2, 0, &one).unwrap();
    assert!(loader.epoch(0).next().unwrap().is_ok());
}

/// A `width x height` photo-like JPEG (gradients and fine stripes) at `path`.
fn write_jpeg(path: &Path, width: u32, height: u32, seed: u32) {
    let picture = RgbImage::from_fn(width, height, |x, y| {
        let stripe = if (x / 3 + y / 5 + seed).is_multiple_of(2) { 40 } else { 0 };
        image::Rgb([
            (x * 200 / width + stripe) as u8,
            (y * 200 / height) as u8,
            (seed * 37 % 255) as u8,
        ])
    });
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, 85)
        .encode(picture.as_raw(), width, height, ExtendedColorType::Rgb8)
        .unwrap();
    fs::write(path, bytes).unwrap();
}

#[test]
fn an_epoch_of_big_jpegs_keeps_the_buffers_small() {
    let scratch = Scratch::new("bounded");
    for class in ["a", "b", "c"] {
        fs::create_dir_all(scratch.0.join(class)).unwrap();
        for i in 0..10 {
            write_jpeg(&scratch.0.join(class).join(format!("{i}.jpg")), 1024, 768, i);
        }
    }
    let dataset = Dataset::open(&scratch.0).unwrap();
    let pipeline =
        Pipeline { workers: 2, prefetch: 2, cache: CacheMode::None, ..Pipeline::default() };
    let mut loader = Loader::new(dataset, Transform::train(32), 4, 0, &pipeline).unwrap();
    let mut epoch = loader.epoch(0);
    let samples: usize = epoch.by_ref().map(|b| b.unwrap().len()).sum();
    assert_eq!(samples, 30);
    let peak = epoch.peak_buffered_bytes();
    // At most 2 batches of 4 ready samples (12 KiB each) and 2 photos in flight, each read
    // from disk and decoded at 1/8 scale (128x96): never one full-size photo (2.3 MB), let
    // alone the 70 MB of all 30.
    let largest_file = fs::read_dir(scratch.0.join("a"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len() as usize)
        .max()
        .unwrap();
    let bound = 8 * 3 * 32 * 32 * 4 + 2 * (largest_file + 128 * 96 * 3 + 3 * 32 * 32 * 5);
    assert!(peak > 0 && peak <= bound, "peak {peak} bytes, bound {bound}");
    assert!(peak < 1024 * 768 * 3, "peak {peak} bytes");
}

#[test]
fn the_memory_cache_stops_at_its_cap_and_the_disk_cache_persists() {
    let scratch = Scratch::new("cache");
    let dataset = leaves(&scratch);
    let picture = 3 * 16 * 16;
    let capped = Pipeline {
        cache: CacheMode::Memory { max_bytes: 5 * picture + 10 },
        ..Pipeline::default()
    };
    let mut loader = Loader::new(dataset.clone(), Transform::train(16), 5, 3, &capped).unwrap();
    let first: Vec<Batch> = loader.epoch(1).map(Result::unwrap).collect();
    assert_eq!(loader.cached_bytes(), 5 * picture);
    let again: Vec<Batch> = loader.epoch(1).map(Result::unwrap).collect();
    assert_eq!(again, first);
    assert_eq!(loader.cached_bytes(), 5 * picture);

    let dir = scratch.0.join("cache");
    let disk = Pipeline { cache: CacheMode::Disk(dir.clone()), ..Pipeline::default() };
    assert_eq!(epoch(&dataset, &disk, 1), first);
    let files = |dir: &PathBuf| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let written = files(&dir);
    assert_eq!(written.len(), dataset.len());
    assert!(written.iter().all(|n| n.len() == 20 && n.ends_with(".rgb")), "{written:?}");
    // A second run reads them (the same batches), and a damaged entry is decoded again.
    fs::write(dir.join(&written[0]), b"SPRTRSZ1 truncated").unwrap();
    assert_eq!(epoch(&dataset, &disk, 1), first);
    // Another resize mode is another entry.
    let squash = Pipeline { resize: ResizeMode::Squash, ..disk };
    epoch(&dataset, &squash, 1);
    assert_eq!(files(&dir).len(), 2 * dataset.len());
}

#[test]
fn a_header_over_the_pixel_limit_is_refused_before_decoding() {
    let scratch = Scratch::new("limits");
    // A real JPEG whose frame header is patched to declare 65000x65000 pixels: decoding it
    // would need 12 GB.
    let path = scratch.0.join("huge.jpg");
    write_jpeg(&path, 64, 48, 1);
    let mut bytes = fs::read(&path).unwrap();
    let sof = bytes.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    bytes[sof + 5..sof + 9].copy_from_slice(&[0xFD, 0xE8, 0xFD, 0xE8]);
    fs::write(&path, bytes).unwrap();
    let error = decode_rgb(&path, 0, &Limits::default()).unwrap_err();
    assert!(
        matches!(
            error,
            DataError::TooManyPixels { width: 65000, height: 65000, limit: 100_000_000, .. }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("100000000"), "{error}");
    // A PNG over a lower limit, and a file over the byte limit.
    generate_into(&config(&["healthy"], 1, Domain::Source), &scratch.0.join("png"));
    let png = scratch.0.join("png/train/healthy/00000.png");
    let small = Limits { max_pixels: 1000, ..Limits::default() };
    assert!(matches!(decode_rgb(&png, 0, &small), Err(DataError::TooManyPixels { width: 32, .. })));
    let tiny = Limits { max_file_bytes: 100, ..Limits::default() };
    assert!(matches!(decode_rgb(&png, 0, &tiny), Err(DataError::FileTooLarge { limit: 100, .. })));
}

#[test]
fn big_jpegs_are_decoded_at_a_reduced_scale_and_resized_by_mode() {
    let scratch = Scratch::new("scale");
    let path = scratch.0.join("photo.jpg");
    write_jpeg(&path, 800, 400, 0);
    assert_eq!(decode_rgb(&path, 0, &Limits::default()).unwrap().dimensions(), (800, 400));
    // The smallest of 1/8, 1/4, 1/2 whose shorter side is at least 90: 1/4.
    assert_eq!(decode_rgb(&path, 90, &Limits::default()).unwrap().dimensions(), (200, 100));
    for mode in [ResizeMode::Crop, ResizeMode::Squash] {
        assert_eq!(
            load_resized(&path, 24, 24, mode, &Limits::default()).unwrap().dimensions(),
            (24, 24)
        );
    }
}

#[cfg(unix)]
#[test]
fn fifos_devices_and_non_images_are_typed_errors() {
    let scratch = Scratch::new("special");
    let fifo = scratch.0.join("pipe.png");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let error = decode_rgb(&fifo, 0, &Limits::default()).unwrap_err();
    assert!(matches!(error, DataError::NotAFile { ref kind, .. } if kind == "a FIFO"), "{error}");
    assert!(error.to_string().contains("pipe.png"), "{error}");

    let zero = scratch.0.join("x.png");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let error = decode_rgb(&zero, 0, &Limits::default()).unwrap_err();
    assert!(
        matches!(error, DataError::NotAFile { ref kind, .. } if kind == "a character device"),
        "{error}"
    );

    let text = scratch.0.join("notes.jpg");
    fs::write(&text, "hello").unwrap();
    let error = decode_rgb(&text, 0, &Limits::default()).unwrap_err();
    assert!(
        matches!(error, DataError::Decode { ref reason, .. } if reason.contains("not a PNG or JPEG")),
        "{error}"
    );
    let error = decode_rgb(&scratch.0.join("missing.png"), 0, &Limits::default()).unwrap_err();
    assert!(matches!(error, DataError::Io { .. }), "{error}");
}
