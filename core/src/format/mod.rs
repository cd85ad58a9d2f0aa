//! The `.sprout` model file: a checked container (see [`container`]) around a postcard body
//! holding the graph, its weights by name and metadata (see [`model`]).
//!
//! Layout, little-endian: bytes `0..8` [`MAGIC`], `8..10` format [`VERSION`] (`u16`),
//! `10..14` body length `n` (`u32`), `14..14+n` the postcard-encoded [`ModelFile`], then
//! the CRC-32 (IEEE) of bytes `0..14+n`. A file is exactly `18 + n` bytes long.

//!
//! The framing ([`container`]) needs no heap, so devices open their files with it too; the
//! model body needs `alloc`.

pub mod container;
#[cfg(feature = "alloc")]
pub mod error;
#[cfg(feature = "alloc")]
pub mod model;

pub use container::{FrameError, MAGIC, VERSION};
#[cfg(feature = "alloc")]
pub use error::FormatError;
#[cfg(feature = "alloc")]
pub use model::{
    GraphRecord, HalfValues, Metadata, ModelFile, NamedWeight, Preprocessing, TensorRecord,
    WeightValues,
};

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

/// Encodes a model as a `.sprout` file.
#[cfg(feature = "alloc")]
pub fn save_model(model: &ModelFile) -> Result<Vec<u8>, FormatError> {
    Ok(container::seal(container::MODEL, &postcard::to_allocvec(model)?)?)
}

/// Decodes and validates a `.sprout` file: on `Ok`, [`ModelFile::to_graph`] succeeds.
#[cfg(feature = "alloc")]
pub fn load_model(bytes: &[u8]) -> Result<ModelFile, FormatError> {
    let body = container::open(container::MODEL, bytes)?;
    let (model, rest): (ModelFile, _) = postcard::take_from_bytes(body)?;
    if !rest.is_empty() {
        return Err(FormatError::TrailingBytes { count: rest.len() });
    }
    model.to_graph()?;
    Ok(model)
}
