//! Every file sprout writes and reads, one submodule per format, all framed by
//! [`container`] (magic, version, length, CRC-32) and refused by name when damaged or old.
//!
//! - [`container`]: the framing, and the version check that names an older file's version
//!   and how to regenerate it (no heap; sealing needs `alloc`);
//! - [`model`]: the `.sprout` model file: graph, weights, metadata, optional plan (`alloc`);
//! - [`bundle`]: the device bundle: the plans, frozen weights and initial state the
//!   firmware runs, decoded without a heap (`serde`);
//! - [`device_checkpoint`]: the device trainer's checkpoint bytes and their host file
//!   (`serde`, no heap);
//! - [`host_checkpoint`]: the host trainer's resumable checkpoint (`alloc`).
//!
//! A plan travels inside a model or a bundle as its postcard encoding ([`crate::plan`]).

#[cfg(feature = "serde")]
pub mod bundle;
pub mod container;
#[cfg(feature = "serde")]
pub mod device_checkpoint;
#[cfg(feature = "alloc")]
pub mod error;
#[cfg(feature = "alloc")]
pub mod host_checkpoint;
#[cfg(feature = "alloc")]
pub mod model;

pub use container::{FrameError, MAGIC, VERSION};
#[cfg(feature = "alloc")]
pub use error::FormatError;
#[cfg(feature = "alloc")]
pub use model::{
    load_model, save_model, Fit, GraphRecord, HalfValues, Metadata, ModelFile, NamedWeight,
    Preprocessing, TensorRecord, WeightValues,
};
