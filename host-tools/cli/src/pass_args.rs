//! `--batch-size` for the commands that only run a model (`run`, `eval`, `predict`): how many
//! samples one inference pass holds, whatever batch the file was recorded for.

use clap::Args;
use sprout_train::INFERENCE_BATCH;

/// `--batch-size` of an inference command.
#[derive(Args, Debug, Clone)]
pub struct PassArgs {
    /// Samples per pass: the model is re-recorded for N samples, and once more for a last
    /// pass of fewer; bounds the memory for large inputs [default: 32].
    #[arg(long, value_name = "N", alias = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: Option<u64>,
}

impl PassArgs {
    /// Samples per pass for `samples` samples in all: the size asked (or the default), no
    /// more than there are, at least one.
    pub fn pass_size(&self, samples: usize) -> usize {
        self.batch_size.map_or(INFERENCE_BATCH, |b| b as usize).min(samples).max(1)
    }
}
