//! `sprout-data`: the data sets sprout trains on: a synthetic plant-leaf generator, a loader for
//! folder-per-class image trees (PlantVillage layout) with a stratified train/validation split,
//! a streaming pipeline that decodes, resizes and augments them on a pool of threads, and the
//! transforms it applies.
//!
//! ```no_run
//! use sprout_data::{generate, Dataset, LeafConfig, Loader, Pipeline, ResizeMode, Transform};
//! # fn main() -> Result<(), sprout_data::DataError> {
//! let out = std::path::Path::new("leaves");
//! generate(&LeafConfig::default(), out, |_, _| {})?;
//! let train = Dataset::open(&out.join("train"))?;
//! // Centre-cropped to 64x64 on a thread per core, two batches ahead, cached in memory.
//! let pipeline = Pipeline { resize: ResizeMode::Crop, ..Pipeline::default() };
//! let mut loader = Loader::new(train, Transform::train(64), 32, 7, &pipeline)?;
//! for batch in loader.epoch(0) {
//!     let batch = batch?; // batch.x: [N, 3, 64, 64], batch.y: [N]
//! }
//! # Ok(())
//! # }
//! ```

mod cache;
mod decode;
mod error;
mod files;
mod folder;
mod leaves;
mod limits;
mod loader;
mod noise;
mod pixels;
mod resize;
mod rng;
mod split;
mod transform;

pub use cache::CacheMode;
pub use decode::{decode_rgb, load_resized};
pub use error::DataError;
pub use files::{check_writable, folder_of, sync_folder, write_atomic, write_atomic_with};
pub use folder::Dataset;
pub use leaves::{generate, Disease, Domain, LeafConfig, Summary};
pub use limits::{parse_size, read_bounded, regular_file, Limits, MAX_MEMORY_ENV};
pub use loader::{Batch, Epoch, Loader, Pipeline};
pub use pixels::Image;
pub use resize::{resize, ResizeMode};
pub use rng::Rng;
pub use transform::{Jitter, Normalize, Transform};
