//! The one CRC-32 (IEEE, ISO-HDLC) sprout checks its files and link frames with: the
//! `.sprout` container, checkpoints and every frame on the host <-> device link.

use crc::{Crc, CRC_32_ISO_HDLC};

/// A `static` (not a `const`) so its digests are `'static` and can live in long-lived state,
/// such as a link transfer that spans many frames.
pub static CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);
