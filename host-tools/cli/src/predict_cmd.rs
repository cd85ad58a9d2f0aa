//! `sprout predict`: the class and probabilities of each image, resized and normalised as
//! the model's own preprocessing says (as `train` and `eval` read them).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sprout_data::{load_resized, Rng};
use sprout_train::{argmax, expect_kind, image_input, softmax, FileKind, Inference, Model};

use crate::backend_args::BackendArgs;
use crate::pass_args::PassArgs;
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
    #[command(flatten)]
    passes: PassArgs,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: &PredictArgs) -> Result<()> {
    let model = Model::open(&args.model)?;
    let input = image_input(&model, args.resize.asked())
        .with_context(|| format!("cannot read pictures for {}", args.model.display()))?;
    let mut x = Vec::new();
    let limits = args.resize.pipeline().limits;
    for path in &args.images {
        expect_kind(path, &[FileKind::Png, FileKind::Jpeg], "a PNG or JPEG image")?;
        let resized = load_resized(path, input.size, input.size, input.fit, &limits)?;
        input.eval.apply(&resized, &mut Rng::new(0), &mut x);
    }
    let batch = args.passes.pass_size(args.images.len());
    args.backend.announce();
    let logits = Inference::new(&model.with_batch(batch)?)?.run(&x)?;
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
