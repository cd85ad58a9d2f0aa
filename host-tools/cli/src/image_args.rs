//! The options of how image folders and photos are read, shared by `train`, `eval`, `predict`
//! and `quantize --calib`: `--resize` everywhere, and the pipeline's threads and cache where
//! epochs repeat.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use sprout_data::{CacheMode, Pipeline, ResizeMode};

/// How a photo of another aspect ratio becomes the model's square input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ResizeArg {
    /// Shorter side to the input size, keeping the aspect ratio, then the centre square
    /// (torchvision's Resize + CenterCrop).
    #[default]
    Crop,
    /// Both sides to the input size, distorting the aspect ratio.
    Squash,
}

impl From<ResizeArg> for ResizeMode {
    fn from(arg: ResizeArg) -> Self {
        match arg {
            ResizeArg::Crop => ResizeMode::Crop,
            ResizeArg::Squash => ResizeMode::Squash,
        }
    }
}

/// `--resize`.
#[derive(Args, Debug, Clone)]
pub struct ResizeArgs {
    /// How images are fitted to the model's square input. A model records the mode it was
    /// trained or converted with, and a different one is refused; a model that records none
    /// takes this one [default: crop], and training records it.
    #[arg(long, value_enum)]
    pub resize: Option<ResizeArg>,
}

impl ResizeArgs {
    /// The resize mode asked for, if any.
    pub fn asked(&self) -> Option<ResizeMode> {
        self.resize.map(ResizeMode::from)
    }

    /// The pipeline for one pass over the data: a thread per core, no cache.
    pub fn pipeline(&self) -> Pipeline {
        Pipeline { cache: CacheMode::None, ..Pipeline::default() }
    }
}

/// Where resized images are kept between epochs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum CacheArg {
    /// In memory, up to --cache-mib; images beyond are decoded again.
    #[default]
    Memory,
    /// As files in --cache-dir, reused by later runs.
    Disk,
    /// Decode every image every epoch.
    None,
}

/// `--resize`, `--workers`, `--cache`, `--cache-dir` and `--cache-mib`: how image folders are
/// streamed.
#[derive(Args, Debug, Clone)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub resize: ResizeArgs,
    /// Image decoding threads (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..1025))]
    pub workers: Option<u64>,
    /// Where resized images are kept between epochs.
    #[arg(long, value_enum, default_value_t = CacheArg::Memory)]
    pub cache: CacheArg,
    /// With --cache disk: the cache folder.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// With --cache memory: the most MiB of resized images kept, for the training and the
    /// validation images each [default: 512].
    #[arg(long, value_name = "MIB")]
    pub cache_mib: Option<u64>,
}

impl PipelineArgs {
    /// The pipeline these options describe; an option that does nothing here is an error.
    pub fn pipeline(&self) -> anyhow::Result<Pipeline> {
        if self.cache_mib.is_some() && self.cache != CacheArg::Memory {
            anyhow::bail!("--cache-mib needs --cache memory");
        }
        let cache = match (self.cache, &self.cache_dir) {
            (CacheArg::Disk, Some(dir)) => CacheMode::Disk(dir.clone()),
            (CacheArg::Disk, None) => anyhow::bail!("--cache disk needs --cache-dir DIR"),
            (_, Some(_)) => anyhow::bail!("--cache-dir needs --cache disk"),
            (CacheArg::Memory, None) => {
                let mib = self.cache_mib.unwrap_or(512);
                let max_bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
                CacheMode::Memory { max_bytes }
            }
            (CacheArg::None, None) => CacheMode::None,
        };
        let mut pipeline = Pipeline { cache, ..self.resize.pipeline() };
        if let Some(workers) = self.workers {
            pipeline.workers = workers as usize;
        }
        Ok(pipeline)
    }
}
