//! `sprout run`: a model's output (logits, features or a feature map, any rank) for a
//! float32 `.npy` tensor of any number of samples, written as `.npy` `[samples, ...]`; the
//! graph is re-recorded for passes of `--batch-size` samples and for the remainder. Input
//! and output stream through in chunks of whole passes, so memory stays bounded whatever
//! the file's size; the output appears whole when every sample has run, or not at all.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use sprout_train::{check_output, write_npy_chunks, Inference, Network, NpySamples};

use crate::backend_args::BackendArgs;
use crate::pass_args::PassArgs;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The model.
    #[arg(value_name = "MODEL.sprout")]
    model: PathBuf,
    /// float32 samples [M, ...] with the model's sample shape.
    #[arg(long, value_name = "x.npy")]
    input: PathBuf,
    /// Where the outputs [M, ...] go (float32 .npy).
    #[arg(short, long, value_name = "y.npy")]
    output: PathBuf,
    #[command(flatten)]
    passes: PassArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// Time every kernel call of the passes and print each kernel's calls, milliseconds
    /// and share of the total.
    #[arg(long)]
    profile: bool,
}

/// Samples read, run and written at a time (rounded to whole passes): a few MiB of LeafNet
/// inputs, and passes enough that each chunk keeps every thread busy.
const CHUNK_SAMPLES: usize = 256;

pub fn run(args: &RunArgs) -> Result<()> {
    check_output(&args.output, &[("MODEL", &args.model), ("--input", &args.input)])?;
    let network = Network::open(&args.model)?;
    let mut input = NpySamples::open(&args.input)?;
    let shape = input.shape().to_vec();
    if shape[1..] != network.sample_dims()[..] || shape[0] == 0 {
        bail!(
            "{}: tensor 'x': expected shape [M, {}] with M >= 1, found {shape:?}",
            args.input.display(),
            network.sample_dims().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let samples = shape[0];
    let batch = args.passes.pass_size(samples);
    args.backend.announce();
    let mut inference = Inference::of_network(&network, batch)?;
    if args.profile {
        inference.profile_kernels();
    }
    let dims: Vec<usize> = [samples].into_iter().chain(network.output_dims()).collect();
    let chunk = batch * (CHUNK_SAMPLES / batch).max(1);
    let mut x = Vec::new();
    write_npy_chunks(&args.output, &dims, || {
        input.read_into(chunk, &mut x)?;
        if x.is_empty() {
            return Ok(Vec::new());
        }
        inference.run(&x)
    })?;
    println!("{samples} samples -> {} ({dims:?})", args.output.display());
    if let Some(profile) = inference.kernel_profile() {
        println!("time per kernel over every pass:\n{profile}");
    }
    Ok(())
}
