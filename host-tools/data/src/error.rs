//! `DataError`: everything that can go wrong generating, reading or batching a data set, each
//! message naming the file, folder or class at fault.

use std::path::PathBuf;

/// A data-set failure.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A class name the generator does not draw.
    #[error("unknown class '{class}' for the {domain} domain (known: {known})")]
    UnknownClass { class: String, domain: String, known: String },
    /// A generator setting out of range.
    #[error("invalid leaf configuration: {0}")]
    Config(String),
    /// Reading or writing a file or folder failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A file that is not a readable PNG or JPEG image.
    #[error("cannot decode image {}: {reason}", path.display())]
    Decode { path: PathBuf, reason: String },
    /// A path that is not a regular file (a folder, a FIFO, a device): never read.
    #[error("{}: not a regular file ({kind}); only PNG and JPEG files are read", path.display())]
    NotAFile { path: PathBuf, kind: String },
    /// A file bigger than the reading limit.
    #[error("{}: {bytes} bytes, over the limit of {limit} bytes for this file", path.display())]
    FileTooLarge { path: PathBuf, bytes: u64, limit: u64 },
    /// An image whose header declares more pixels than the limit: refused before decoding.
    #[error("{}: {width}x{height} pixels, over the limit of {limit} pixels for one image", path.display())]
    TooManyPixels { path: PathBuf, width: u64, height: u64, limit: u64 },
    /// A limit set in the environment that is not a size.
    #[error("{variable}={value}: {detail}")]
    BadLimit { variable: &'static str, value: String, detail: String },
    /// A declared size above the memory limit (see `Limits`): refused before allocating.
    #[error("{what} needs {bytes} bytes, over the memory limit of {limit} bytes (raise it with --max-memory or SPROUT_MAX_MEMORY)")]
    OverLimit { what: String, bytes: u64, limit: u64 },
    /// An archive member that would inflate more than the ratio limit allows (a zip bomb).
    #[error("{what}: {stored} bytes stored inflate to {inflated} bytes, over the limit of {ratio} times")]
    Inflation { what: String, stored: u64, inflated: u64, ratio: u64 },
    /// Writing an image failed.
    #[error("cannot encode image {}: {reason}", path.display())]
    Encode { path: PathBuf, reason: String },
    /// A folder that is not laid out as one sub-folder of images per class.
    #[error("bad data-set layout at {}: {detail}", path.display())]
    Layout { path: PathBuf, detail: String },
}

impl DataError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
