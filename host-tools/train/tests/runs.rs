//! Run folders: the curve picture, the run record and its resume checks, `metrics.csv`,
//! early stopping and the stratified split of one image folder.

use std::fs;
use std::path::{Path, PathBuf};

use sprout_train::{
    encode_npy, open_data, open_eval_data, read_metrics, render_png, render_svg, run_folder, train,
    DataOptions, EpochRecord, Model, OptimizerChoice, Pipeline, RunRecord, SplitKind, TrainData,
    TrainEvent, TrainOptions, CURVE_SIZE, RECORD_FILE,
};
use sprout_zoo::Architecture;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-runs-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn history(epochs: u32) -> Vec<EpochRecord> {
    (1..=epochs)
        .map(|e| {
            let t = e as f32;
            EpochRecord {
                epoch: e,
                train_loss: 1.1 / t,
                val_loss: 1.2 / t + 0.05 * t,
                val_accuracy: 0.3 + 0.6 * (1.0 - 1.0 / t),
                learning_rate: 0.05,
            }
        })
        .collect()
}

/// Width, height and RGB pixels of PNG bytes.
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

#[test]
fn the_curve_is_a_png_and_an_svg_with_text_and_both_colours() {
    let png = render_png(&history(12)).unwrap();
    if let Ok(dir) = std::env::var("SPROUT_CURVE_DIR") {
        fs::write(Path::new(&dir).join("curve.png"), &png).unwrap();
    }
    let (width, height, rgb) = decode_png(&png);
    assert_eq!((width, height), CURVE_SIZE);
    let count = |c: [u8; 3]| rgb.chunks(3).filter(|p| *p == c).count();
    assert!(count([214, 39, 40]) > 200, "the train loss line is drawn");
    assert!(count([31, 119, 180]) > 400, "the validation lines are drawn");
    let svg = render_svg(&history(1)).unwrap();
    for text in ["epoch", "train loss", "validation loss", "validation accuracy", "accuracy (%)"] {
        assert!(svg.contains(&format!("\n{text}\n</text>")), "'{text}' missing from the SVG");
    }
}

/// Writes `counts[i]` 4x4 PNG images into `root/<classes[i]>/`.
fn image_folder(root: &Path, classes: &[&str], counts: &[usize]) {
    for (class, &n) in classes.iter().zip(counts) {
        let folder = root.join(class);
        fs::create_dir_all(&folder).unwrap();
        for i in 0..n {
            image::RgbImage::new(4, 4).save(folder.join(format!("{i:03}.png"))).unwrap();
        }
    }
}

/// A LeafNet for three classes whose names are fixed, as a `.sprout` file's are.
fn fixed_model(names: &[&str]) -> Model {
    let mut model = Model::from_zoo_for(Architecture::LeafNet, 4, names.len(), 0).unwrap();
    model.metadata.class_names = names.iter().map(|n| n.to_string()).collect();
    model.names_fixed = true;
    model
}

fn samples(source: &sprout_train::DataSource) -> Vec<(PathBuf, usize)> {
    match source {
        sprout_train::DataSource::Folder(b) => b.dataset().samples.clone(),
        _ => panic!("a folder source"),
    }
}

#[test]
fn one_folder_is_split_per_class_by_the_seed_and_layouts_are_checked() {
    let dir = temp_dir("split");
    let data = dir.join("photos");
    image_folder(&data, &["a", "b", "c"], &[10, 5, 2]);
    let open = |model: &mut Model, options: &DataOptions| open_data(model, &data, options);
    let mut model = Model::from_zoo_for(Architecture::LeafNet, 4, 3, 0).unwrap();
    let TrainData { train, val, split } = open(&mut model, &DataOptions::default()).unwrap();
    assert_eq!(split.to_string(), "13 train / 4 validation images (stratified, 20%, seed 0)");
    assert_eq!(split.kind, SplitKind::Stratified { fraction: 0.2, seed: 0 });
    let counts: Vec<(usize, usize)> = split.classes.iter().map(|c| (c.train, c.val)).collect();
    assert_eq!(counts, [(8, 2), (4, 1), (1, 1)]);
    let (t, v) = (samples(&train), samples(&val));
    assert!(t.iter().all(|s| !v.contains(s)), "train and validation are disjoint");
    assert_eq!(model.metadata.class_names, ["a", "b", "c"]);
    let again = open(&mut model, &DataOptions::default()).unwrap();
    assert_eq!((samples(&again.val), &again.split.hash), (v.clone(), &split.hash));
    let other = open(&mut model, &DataOptions { seed: 5, ..DataOptions::default() }).unwrap();
    assert_ne!(samples(&other.val), v, "another seed validates on other images");
    assert_ne!(other.split.hash, split.hash);
    let half = DataOptions { val_fraction: Some(0.5), ..DataOptions::default() };
    assert_eq!(open(&mut model, &half).unwrap().split.val, 5 + 3 + 1);

    // --val is for tensor files; a fraction outside (0, 1) is refused.
    let val_file = DataOptions { val: Some(dir.join("v.npz")), ..DataOptions::default() };
    let err = open(&mut model, &val_file).err().unwrap().to_string();
    assert!(err.contains("--val") && err.contains("tensor files"), "{err}");
    let whole = DataOptions { val_fraction: Some(1.0), ..DataOptions::default() };
    assert!(open(&mut model, &whole).err().unwrap().to_string().contains("--val-fraction 1"));

    // A model with fixed class names: an unknown folder and a missing class are named.
    let mut fixed = fixed_model(&["a", "b", "z"]);
    let err = open(&mut fixed, &DataOptions::default()).err().unwrap().to_string();
    assert!(err.contains("class folders the model does not have: c"), "{err}");
    assert!(err.contains("no folder for classes of the model: z"), "{err}");
    let err =
        open_eval_data(&mut fixed, &data, &Pipeline::default(), None).err().unwrap().to_string();
    assert!(err.contains("does not have: c"), "{err}");
    // Fixed names in another order give the labels of that order.
    let mut reordered = fixed_model(&["c", "b", "a"]);
    let eval = open_eval_data(&mut reordered, &data, &Pipeline::default(), None).unwrap();
    assert_eq!(samples(&eval).len(), 17, "eval measures the whole folder");
    assert!(samples(&eval).iter().all(|(p, l)| p.starts_with(data.join(["c", "b", "a"][*l]))));

    // train/ and val/ are used as given; their classes must agree.
    let tree = dir.join("tree");
    image_folder(&tree.join("train"), &["a", "b"], &[3, 3]);
    image_folder(&tree.join("val"), &["a", "b"], &[1, 2]);
    let mut model = Model::from_zoo_for(Architecture::LeafNet, 4, 2, 0).unwrap();
    let given = open_data(&mut model, &tree, &DataOptions::default()).unwrap().split;
    assert_eq!((given.kind, given.train, given.val), (SplitKind::Folders, 6, 3));
    let err = open_data(&mut model, &tree, &half).err().unwrap().to_string();
    assert!(err.contains("--val-fraction 0.5") && err.contains("used as given"), "{err}");
    image_folder(&tree.join("val"), &["d"], &[1]);
    let err = open_data(&mut model, &tree, &DataOptions::default()).err().unwrap().to_string();
    assert!(err.contains("val") && err.contains("train/ does not have: d"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn each_run_gets_its_own_folder() {
    let dir = temp_dir("folders");
    let base = dir.join("runs").join("mlp");
    let first = run_folder(&base, None, None).unwrap();
    let second = run_folder(&base, None, None).unwrap();
    let third = run_folder(&base, None, None).unwrap();
    assert_eq!(
        [first, second, third],
        [base.clone(), dir.join("runs/mlp-2"), dir.join("runs/mlp-3")]
    );
    // An exact --out-dir: new or empty, else refused.
    let exact = dir.join("exact");
    assert_eq!(run_folder(&base, Some(&exact), None).unwrap(), exact);
    fs::write(exact.join("best.sprout"), b"x").unwrap();
    let err = run_folder(&base, Some(&exact), None).err().unwrap().to_string();
    assert!(err.contains("not empty"), "{err}");
    // Resuming continues in the checkpoint's folder; another --out-dir is refused.
    let checkpoint = exact.join("checkpoint-epoch-001.ckpt");
    assert_eq!(run_folder(&base, None, Some(&checkpoint)).unwrap(), exact);
    assert_eq!(run_folder(&base, Some(&exact), Some(&checkpoint)).unwrap(), exact);
    let err = run_folder(&base, Some(&base), Some(&checkpoint)).err().unwrap().to_string();
    assert!(err.contains("continues in the folder of its checkpoint"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

/// `n` samples of 64 features for the zoo MLP (10 classes), labels by the sign pattern.
fn tensor_set(path: &Path, n: usize) {
    let x: Vec<f32> = (0..n * 64).map(|i| ((i * 7919 % 23) as f32 - 11.0) / 11.0).collect();
    let y: Vec<i64> = (0..n).map(|i| (i % 10) as i64).collect();
    let mut npy_y = Vec::new();
    {
        use npyz::WriterBuilder;
        let mut w = npyz::WriteOptions::<i64>::new()
            .default_dtype()
            .shape(&[n as u64])
            .writer(&mut npy_y)
            .begin_nd()
            .unwrap();
        w.extend(y).unwrap();
        w.finish().unwrap();
    }
    let file = fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let stored = zip::write::SimpleFileOptions::default();
    for (name, bytes) in [("x.npy", encode_npy(&[n, 64], &x)), ("y.npy", npy_y)] {
        zip.start_file(name, stored).unwrap();
        std::io::Write::write_all(&mut zip, &bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// Trains the zoo MLP on `data` into `out` with `options` and a run record.
fn run(data: &Path, out: &Path, options: TrainOptions) -> Result<sprout_train::Outcome, String> {
    let mut model = Model::from_zoo(Architecture::Mlp, 8, 3).unwrap();
    let mut opened = open_data(&mut model, data, &DataOptions::default()).unwrap();
    let mut record = RunRecord::new(vec!["sprout".into(), "train".into()]);
    record.set("--data", data);
    record.data = Some(opened.split.clone());
    let options = TrainOptions { out_dir: Some(out.into()), record: Some(record), ..options };
    let mut stops = Vec::new();
    let outcome = train(&model, &mut opened.train, &mut opened.val, &options, &mut |e| {
        if let TrainEvent::EarlyStop { epoch, best_epoch, patience } = e {
            stops.push((epoch, best_epoch, patience));
        }
    });
    let outcome = outcome.map_err(|e| e.to_string())?;
    assert_eq!(
        stops.first().copied(),
        outcome.stopped_early.map(|e| (e, outcome.best_epoch.unwrap(), options.patience.unwrap()))
    );
    Ok(outcome)
}

#[test]
fn the_run_record_and_metrics_are_written_and_resume_refuses_changes() {
    let dir = temp_dir("record");
    let data = dir.join("data.npz");
    tensor_set(&data, 32);
    let out = dir.join("run");
    let options = TrainOptions { epochs: 2, seed: 4, ..TrainOptions::default() };
    run(&data, &out, options.clone()).unwrap();
    let record = RunRecord::read(&out).unwrap();
    assert_eq!(record.options["--lr"], serde_json::json!(0.05));
    assert_eq!(record.options["--epochs"], serde_json::json!(2));
    assert_eq!(record.data.as_ref().unwrap().train, 32);
    assert!(record.sprout.starts_with(env!("CARGO_PKG_VERSION")));
    let text = fs::read_to_string(out.join(RECORD_FILE)).unwrap();
    assert!(text.contains("\"--optimizer\": \"sgd\""), "{text}");
    let csv = fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert!(
        csv.starts_with(
            "epoch,train_loss,val_loss,val_accuracy,learning_rate,images_per_second,seconds\n1,"
        ),
        "{csv}"
    );
    assert_eq!(read_metrics(&out.join("metrics.csv")).unwrap().len(), 2);

    let checkpoint = out.join("checkpoint-epoch-002.ckpt");
    let resume =
        |options: TrainOptions| TrainOptions { resume: Some(checkpoint.clone()), ..options };
    let err =
        run(&data, &out, resume(TrainOptions { learning_rate: 0.1, epochs: 3, ..options.clone() }))
            .err()
            .unwrap();
    assert!(err.contains("--resume: --lr was 0.05, now 0.1"), "{err}");
    let err = run(
        &data,
        &out,
        resume(TrainOptions {
            schedule: sprout_train::ScheduleChoice::Cosine,
            optimizer: OptimizerChoice::AdamW { weight_decay: 0.0 },
            ..options.clone()
        }),
    )
    .err()
    .unwrap();
    assert!(
        err.contains("--optimizer was sgd, now adamw")
            && err.contains("--schedule was constant, now cosine"),
        "{err}"
    );
    // Another data set with the same file name and shape.
    let moved = dir.join("moved.npz");
    fs::rename(&data, &moved).unwrap();
    tensor_set(&data, 40);
    let err =
        run(&data, &out, resume(TrainOptions { epochs: 3, ..options.clone() })).err().unwrap();
    assert!(err.contains("--resume: the data changed"), "{err}");
    fs::rename(&moved, &data).unwrap();
    // --epochs may grow.
    let grown = run(&data, &out, resume(TrainOptions { epochs: 3, ..options })).unwrap();
    assert_eq!(grown.history.len(), 3);
    assert_eq!(read_metrics(&out.join("metrics.csv")).unwrap().len(), 3);
    assert_eq!(RunRecord::read(&out).unwrap().options["--epochs"], serde_json::json!(3));
    fs::remove_file(out.join(RECORD_FILE)).unwrap();
    let checkpoint = out.join("checkpoint-epoch-003.ckpt");
    let again = TrainOptions { resume: Some(checkpoint), epochs: 4, ..TrainOptions::default() };
    let err = run(&data, &out, TrainOptions { seed: 4, ..again }).err().unwrap();
    assert!(err.contains("its folder has no args.json"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn patience_stops_a_run_that_no_longer_improves() {
    let dir = temp_dir("patience");
    let data = dir.join("data.npz");
    tensor_set(&data, 32);
    // A learning rate of 0 never changes the accuracy: epoch 1 stays the best.
    let options = TrainOptions {
        epochs: 10,
        learning_rate: 0.0,
        patience: Some(2),
        ..TrainOptions::default()
    };
    let outcome = run(&data, &dir.join("run"), options).unwrap();
    assert_eq!((outcome.stopped_early, outcome.best_epoch), (Some(3), Some(1)));
    assert_eq!(outcome.history.len(), 3);
    assert!(dir.join("run/checkpoint-epoch-003.ckpt").is_file());
    assert!(!dir.join("run/checkpoint-epoch-004.ckpt").exists());
    let _ = fs::remove_dir_all(&dir);
}
