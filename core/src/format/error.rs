//! What can be wrong with a `.sprout` file: each variant names the part that failed and the
//! expected against the found value.

use alloc::string::String;
use core::fmt;

/// Why a `.sprout` file could not be written or read.
#[derive(Clone, Debug, PartialEq)]
pub enum FormatError {
    /// The file does not start with [`super::MAGIC`].
    BadMagic { found: [u8; 8] },
    /// The file was written by a newer version of the format.
    UnsupportedVersion { found: u16, supported: u16 },
    /// The file ends before the header, body or checksum it announces.
    Truncated { needed: usize, available: usize },
    /// Bytes follow the checksum, or the encoded body inside it.
    TrailingBytes { count: usize },
    /// The stored CRC-32 differs from the one computed over the file.
    ChecksumMismatch { stored: u32, computed: u32 },
    /// The body is not a postcard-encoded model (or holds bytes after it).
    Body(postcard::Error),
    /// The body decodes but does not describe a usable graph with weights and metadata.
    BadGraph { detail: String },
    /// The encoded body is larger than the 4 GiB a `u32` length can announce.
    TooLarge { bytes: usize },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::BadMagic { found } => {
                write!(f, "not a .sprout file: magic {found:02x?}, expected {:02x?}", super::MAGIC)
            }
            FormatError::UnsupportedVersion { found, supported } => write!(
                f,
                ".sprout format version {found} is not supported (this build reads up to {supported})"
            ),
            FormatError::Truncated { needed, available } => write!(
                f,
                "truncated .sprout file: {needed} bytes needed, {available} available"
            ),
            FormatError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the .sprout checksum")
            }
            FormatError::ChecksumMismatch { stored, computed } => write!(
                f,
                ".sprout checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            FormatError::Body(e) => write!(f, "malformed .sprout body: {e}"),
            FormatError::BadGraph { detail } => write!(f, "invalid model in .sprout file: {detail}"),
            FormatError::TooLarge { bytes } => {
                write!(f, "model body of {bytes} bytes exceeds the format's 4 GiB limit")
            }
        }
    }
}

impl core::error::Error for FormatError {}

impl From<postcard::Error> for FormatError {
    fn from(e: postcard::Error) -> Self {
        FormatError::Body(e)
    }
}
