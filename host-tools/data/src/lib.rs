//! `sprout-data`: the data sets sprout trains on: a synthetic plant-leaf generator, a loader for
//! folder-per-class image trees (PlantVillage layout) with a stratified train/validation split,
//! image transforms and a seeded batcher.
//!
//! ```no_run
//! use sprout_data::{generate, Batcher, Dataset, LeafConfig, Transform};
//! # fn main() -> Result<(), sprout_data::DataError> {
//! let out = std::path::Path::new("leaves");
//! generate(&LeafConfig::default(), out, |_, _| {})?;
//! let train = Dataset::open(&out.join("train"))?;
//! let mut batcher = Batcher::new(train, Transform::train(64), 32, 7);
//! for batch in batcher.epoch(0) {
//!     let batch = batch?; // batch.x: [N, 3, 64, 64], batch.y: [N]
//! }
//! # Ok(())
//! # }
//! ```

mod batch;
mod error;
mod folder;
mod leaves;
mod noise;
mod pixels;
mod rng;
mod split;
mod transform;

pub use batch::{Batch, Batcher, Epoch};
pub use error::DataError;
pub use folder::Dataset;
pub use leaves::{generate, Disease, Domain, LeafConfig, Summary};
pub use pixels::Image;
pub use rng::Rng;
pub use transform::{resize, Jitter, Normalize, Transform};
