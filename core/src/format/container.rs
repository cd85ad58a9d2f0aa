//! The framing of sprout's files (`.sprout` models, checkpoints): magic, version, body
//! length, body and a CRC-32 over all of it, checked in that order so a reader never
//! trusts a length it has not bounded.

pub use crate::checksum::CRC32;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
use core::fmt;

/// Which kind of file a frame holds: its magic bytes, the version this build writes (and
/// the only one it reads) and what a person does to turn an older file into a current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    pub magic: [u8; 8],
    pub version: u16,
    /// How to regenerate a file of an older version with this build, shown when one is
    /// refused (e.g. "run `sprout bundle` again").
    pub regenerate: &'static str,
}

/// The first eight bytes of every `.sprout` file (PNG's trick: a high byte catches 7-bit
/// transfers, the newline catches line-ending conversion).
pub const MAGIC: [u8; 8] = *b"\x89SPROUT\n";

/// The format version this build writes and the newest it reads.
pub const VERSION: u16 = 3;

/// The `.sprout` model file.
pub const MODEL: Framing = Framing {
    magic: MAGIC,
    version: VERSION,
    regenerate: "convert its ONNX source again with `sprout convert` (an older sprout's \
                 `sprout export` writes one) or train it again with `sprout train`",
};

/// Magic, version (`u16`) and body length (`u32`), all little-endian.
pub const HEADER_BYTES: usize = 8 + 2 + 4;

/// The CRC-32 after the body.
pub const CHECKSUM_BYTES: usize = 4;

/// Why a frame could not be written or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes do not start with the expected magic.
    BadMagic { found: [u8; 8], expected: [u8; 8] },
    /// The frame was written by a newer version of its format.
    UnsupportedVersion { found: u16, supported: u16 },
    /// The frame was written by an older version of its format, which this build no longer
    /// reads; `regenerate` says how to make a current file.
    OutdatedVersion { found: u16, current: u16, regenerate: &'static str },
    /// The bytes end before the header, body or checksum they announce.
    Truncated { needed: usize, available: usize },
    /// Bytes follow the checksum.
    TrailingBytes { count: usize },
    /// The stored CRC-32 differs from the one computed over the frame.
    ChecksumMismatch { stored: u32, computed: u32 },
    /// The body is larger than the 4 GiB a `u32` length can announce.
    TooLarge { bytes: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadMagic { found, expected } => {
                write!(f, "wrong kind of file: magic {found:02x?}, expected {expected:02x?}")
            }
            FrameError::UnsupportedVersion { found, supported } => write!(
                f,
                "format version {found} is not supported (this build reads up to {supported})"
            ),
            FrameError::OutdatedVersion { found, current, regenerate } => write!(
                f,
                "format version {found} is older than the version {current} this build reads; \
                 to regenerate the file, {regenerate}"
            ),
            FrameError::Truncated { needed, available } => {
                write!(f, "truncated: {needed} bytes needed, {available} available")
            }
            FrameError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the checksum")
            }
            FrameError::ChecksumMismatch { stored, computed } => {
                write!(f, "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            FrameError::TooLarge { bytes } => {
                write!(f, "a body of {bytes} bytes exceeds the format's 4 GiB limit")
            }
        }
    }
}

impl core::error::Error for FrameError {}

/// Frames a body: header, body, CRC-32 (IEEE) of everything before it.
#[cfg(feature = "alloc")]
pub fn seal(framing: Framing, body: &[u8]) -> Result<Vec<u8>, FrameError> {
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge { bytes: body.len() })?;
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len() + CHECKSUM_BYTES);
    out.extend_from_slice(&framing.magic);
    out.extend_from_slice(&framing.version.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    let crc = CRC32.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The body of a framed file, after checking magic, version, lengths and checksum.
pub fn open(framing: Framing, bytes: &[u8]) -> Result<&[u8], FrameError> {
    let frame = leading_frame(framing, bytes)?;
    if bytes.len() > frame.len() {
        return Err(FrameError::TrailingBytes { count: bytes.len() - frame.len() });
    }
    Ok(&frame[HEADER_BYTES..frame.len() - CHECKSUM_BYTES])
}

/// The whole frame at the start of `bytes` (header, body, checksum), checked as [`open`]
/// checks a file, whatever follows it: a bundle in a flash partition is followed by the
/// partition's erased bytes.
pub fn leading_frame(framing: Framing, bytes: &[u8]) -> Result<&[u8], FrameError> {
    let need = |needed: usize| match bytes.len() < needed {
        true => Err(FrameError::Truncated { needed, available: bytes.len() }),
        false => Ok(()),
    };
    need(framing.magic.len())?;
    let mut found = [0; 8];
    found.copy_from_slice(&bytes[..8]);
    if found != framing.magic {
        return Err(FrameError::BadMagic { found, expected: framing.magic });
    }
    need(10)?;
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version < framing.version {
        let (current, regenerate) = (framing.version, framing.regenerate);
        return Err(FrameError::OutdatedVersion { found: version, current, regenerate });
    }
    if version > framing.version {
        let supported = framing.version;
        return Err(FrameError::UnsupportedVersion { found: version, supported });
    }
    need(HEADER_BYTES)?;
    let len = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]);
    // Saturating: on a 32-bit target a 4 GiB length cannot be present anyway.
    let body_end = HEADER_BYTES.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
    let total = body_end.saturating_add(CHECKSUM_BYTES);
    need(total)?;
    let stored = u32::from_le_bytes([
        bytes[body_end],
        bytes[body_end + 1],
        bytes[body_end + 2],
        bytes[body_end + 3],
    ]);
    let computed = CRC32.checksum(&bytes[..body_end]);
    if stored != computed {
        return Err(FrameError::ChecksumMismatch { stored, computed });
    }
    Ok(&bytes[..total])
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn round_trip_and_layout() {
        let file = seal(MODEL, b"hello").unwrap();
        assert_eq!(file.len(), HEADER_BYTES + 5 + CHECKSUM_BYTES);
        assert_eq!(&file[..8], &MAGIC);
        assert_eq!(&file[8..10], &[3, 0]);
        assert_eq!(&file[10..14], &[5, 0, 0, 0]);
        assert_eq!(&file[14..19], b"hello");
        // The standard CRC-32 check value of "123456789" pins the algorithm.
        assert_eq!(CRC32.checksum(b"123456789"), 0xcbf4_3926);
        assert_eq!(open(MODEL, &file).unwrap(), b"hello");
    }

    #[test]
    fn a_huge_announced_length_is_truncation_not_allocation() {
        let mut file = seal(MODEL, b"").unwrap();
        file[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        let expected = HEADER_BYTES + u32::MAX as usize + CHECKSUM_BYTES;
        assert_eq!(
            open(MODEL, &file),
            Err(FrameError::Truncated { needed: expected, available: HEADER_BYTES + 4 })
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut file = seal(MODEL, b"abc").unwrap();
        file.extend_from_slice(&[0, 0]);
        assert_eq!(open(MODEL, &file), Err(FrameError::TrailingBytes { count: 2 }));
        assert_eq!(open(MODEL, &[0x89]), Err(FrameError::Truncated { needed: 8, available: 1 }));
    }

    #[test]
    fn a_leading_frame_ends_where_its_length_says_and_is_checked() {
        let mut partition = seal(MODEL, b"abc").unwrap();
        let frame = partition.clone();
        partition.resize(64, 0xFF);
        assert_eq!(leading_frame(MODEL, &partition), Ok(&frame[..]));
        assert_eq!(open(MODEL, leading_frame(MODEL, &partition).unwrap()), Ok(&b"abc"[..]));
        partition[HEADER_BYTES] = b'x';
        assert!(matches!(
            leading_frame(MODEL, &partition),
            Err(FrameError::ChecksumMismatch { .. })
        ));
        let erased = [0xFF; 64];
        assert!(matches!(leading_frame(MODEL, &erased), Err(FrameError::BadMagic { .. })));
    }

    #[test]
    fn an_older_version_is_refused_by_name_with_how_to_regenerate_a_newer_as_unsupported() {
        let framing = Framing { magic: MAGIC, version: 3, regenerate: "run `make` again" };
        let mut file = seal(framing, b"abc").unwrap();
        file[8..10].copy_from_slice(&2u16.to_le_bytes());
        let err = open(framing, &file).unwrap_err();
        assert_eq!(
            err,
            FrameError::OutdatedVersion { found: 2, current: 3, regenerate: "run `make` again" }
        );
        assert_eq!(
            err.to_string(),
            "format version 2 is older than the version 3 this build reads; to regenerate the \
             file, run `make` again"
        );
        file[8..10].copy_from_slice(&4u16.to_le_bytes());
        assert_eq!(
            open(framing, &file),
            Err(FrameError::UnsupportedVersion { found: 4, supported: 3 })
        );
    }
}
