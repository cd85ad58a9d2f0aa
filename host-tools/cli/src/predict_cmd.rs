//! `sprout predict`: the class and probabilities of each image, read and resized as training
//! reads them (`--resize`) and normalised as the model's metadata says.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use sprout_data::{load_resized, Normalize, Rng, Transform};
use sprout_train::{argmax, softmax, Inference, Model};

use crate::image_args::ResizeArgs;

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The model.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// PNG or JPEG images.
    #[arg(value_name = "IMAGE", required = true)]
    images: Vec<PathBuf>,
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
        let resized = load_resized(path, size, size, pipeline.resize, &pipeline.limits)?;
        transform.apply(&resized, &mut Rng::new(0), &mut x);
    }
    let mut inference = Inference::new(&model)?;
    let logits = inference.logits(&x)?;
    let names = &model.metadata.class_names;
    for (path, row) in args.images.iter().zip(logits.chunks_exact(model.classes())) {
        let p = softmax(row);
        let best = argmax(row);
        let all: Vec<String> =
            names.iter().zip(&p).map(|(n, p)| format!("{n} {:.1}%", 100.0 * p)).collect();
        println!(
            "{}: {} ({:.1}%)  [{}]",
            path.display(),
            names[best],
            100.0 * p[best],
            all.join(", ")
        );
    }
    Ok(())
}
