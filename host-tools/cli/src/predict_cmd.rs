//! `sprout predict`: the class and probabilities of each image, read and resized as training
//! reads them (`--resize`) and normalised as the model's metadata says.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use sprout_data::{load_resized, Normalize, Rng, Transform};
use sprout_train::{argmax, expect_kind, softmax, FileKind, Inference, Model};

use crate::summary::{print_json, ClassProbability, PredictSummary, Prediction};

use crate::image_args::ResizeArgs;

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The model.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// PNG or JPEG images.
    #[arg(value_name = "IMAGE", required = true)]
    images: Vec<PathBuf>,
    /// Print the predictions as one JSON object on standard output: predictions, one per
    /// image in the order given, each with path, class (the most probable), class_index,
    /// probability and probabilities (every class with its probability, in class order).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    resize: ResizeArgs,
}

pub fn run(args: &PredictArgs) -> Result<()> {
    let model = Model::open(&args.model)?;
    let Some(size) = model.image_size() else {
        bail!(
            "{} takes {:?} samples, not [3, S, S] images",
            args.model.display(),
            model.sample_dims()
        );
    };
    let prep = &model.metadata.preprocessing;
    let normalize = match (&prep.mean[..], &prep.std[..]) {
        (&[m0, m1, m2], &[s0, s1, s2]) => Normalize { mean: [m0, m1, m2], std: [s0, s1, s2] },
        ([], []) => Normalize { mean: [0.0; 3], std: [1.0; 3] },
        _ => bail!("{}: preprocessing needs 3 channel means", args.model.display()),
    };
    let resize = prep.resize.map_or(size, |(h, _)| h);
    if resize != size {
        bail!(
            "{}: preprocessing resizes to {resize}, the model takes {size}",
            args.model.display()
        );
    }
    let transform = Transform { normalize, ..Transform::eval(size) };
    let mut x = Vec::new();
    let pipeline = args.resize.pipeline();
    for path in &args.images {
        expect_kind(path, &[FileKind::Png, FileKind::Jpeg], "a PNG or JPEG image")?;
        let resized = load_resized(path, size, size, pipeline.resize, &pipeline.limits)?;
        transform.apply(&resized, &mut Rng::new(0), &mut x);
    }
    let mut inference = Inference::new(&model)?;
    let logits = inference.run(&x)?;
    let names = &model.metadata.class_names;
    let predictions: Vec<Prediction> = args
        .images
        .iter()
        .zip(logits.chunks_exact(model.classes()))
        .map(|(path, row)| {
            let p = softmax(row);
            let best = argmax(row);
            Prediction {
                path: path.display().to_string(),
                class: names[best].clone(),
                class_index: best,
                probability: p[best],
                probabilities: names
                    .iter()
                    .zip(p)
                    .map(|(class, probability)| ClassProbability {
                        class: class.clone(),
                        probability,
                    })
                    .collect(),
            }
        })
        .collect();
    if args.json {
        return print_json(&PredictSummary { predictions });
    }
    for prediction in &predictions {
        let all: Vec<String> = prediction
            .probabilities
            .iter()
            .map(|c| format!("{} {:.1}%", c.class, 100.0 * c.probability))
            .collect();
        println!(
            "{}: {} ({:.1}%)  [{}]",
            prediction.path,
            prediction.class,
            100.0 * prediction.probability,
            all.join(", ")
        );
    }
    Ok(())
}
