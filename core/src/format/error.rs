//! What can be wrong with a `.sprout` file: each variant names the part that failed and the
//! expected against the found value.

use super::container::FrameError;
use alloc::string::String;
use core::fmt;

/// Why a `.sprout` file could not be written or read.
#[derive(Clone, Debug, PartialEq)]
pub enum FormatError {
    /// The framing (magic, version, lengths, checksum) is wrong.
    Frame(FrameError),
    /// Bytes follow the encoded body inside the frame.
    TrailingBytes { count: usize },
    /// The body is not a postcard-encoded model (or holds bytes after it).
    Body(postcard::Error),
    /// The body decodes but does not describe a usable graph with weights and metadata.
    BadGraph { detail: String },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Frame(e) => write!(f, "bad .sprout file: {e}"),
            FormatError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the .sprout body")
            }
            FormatError::Body(e) => write!(f, "malformed .sprout body: {e}"),
            FormatError::BadGraph { detail } => {
                write!(f, "invalid model in .sprout file: {detail}")
            }
        }
    }
}

impl core::error::Error for FormatError {}

impl From<FrameError> for FormatError {
    fn from(e: FrameError) -> Self {
        FormatError::Frame(e)
    }
}

impl From<postcard::Error> for FormatError {
    fn from(e: postcard::Error) -> Self {
        FormatError::Body(e)
    }
}
