//! `sprout run`: a model's logits for a float32 `.npy` tensor of any number of samples,
//! written as `.npy` (run in chunks of the recorded batch size, the last chunk padded).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use sprout_train::{encode_npy, read_npy, write_atomic, Inference, Model};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// float32 samples [M, ...] with the model's sample shape.
    #[arg(long, value_name = "x.npy")]
    input: PathBuf,
    /// Where the logits [M, classes] go (float32 .npy).
    #[arg(short, long, value_name = "y.npy")]
    output: PathBuf,
}

pub fn run(args: &RunArgs) -> Result<()> {
    let model = Model::open(&args.model)?;
    let (shape, x) = read_npy(&args.input)?;
    if shape[1..] != model.sample_dims()[..] || shape[0] == 0 {
        bail!(
            "{}: tensor 'x': expected shape [M, {}] with M >= 1, found {shape:?}",
            args.input.display(),
            model.sample_dims().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let mut inference = Inference::new(&model)?;
    let logits = inference.logits(&x)?;
    write_atomic(&args.output, &encode_npy(&[shape[0], model.classes()], &logits))?;
    println!(
        "{} samples -> {} ([{}, {}])",
        shape[0],
        args.output.display(),
        shape[0],
        model.classes()
    );
    Ok(())
}
