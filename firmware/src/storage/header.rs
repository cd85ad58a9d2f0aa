//! The header at the start of a checkpoint slot: magic, version, generation, payload length
//! and CRC-32s of the payload and of the header itself, little-endian; and the commit marker
//! that follows it and is programmed last.

use sprout_core::format::container::CRC32;

/// `"SPCK"`: a sprout checkpoint slot.
pub const MAGIC: [u8; 4] = *b"SPCK";

/// The slot layout this build writes and reads.
pub const VERSION: u16 = 1;

/// Bytes of an encoded header.
pub const HEADER_BYTES: usize = 24;

/// The commit marker: programmed after header and payload, so a slot whose marker reads
/// exactly this value was written to the end. Erased flash reads `0xFFFF_FFFF`, and a
/// half-programmed marker differs from it.
pub const COMMITTED: [u8; 4] = 0x5350_4F4B_u32.to_le_bytes();

/// What a slot's header says about its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Higher is newer.
    pub generation: u32,
    pub len: u32,
    pub payload_crc: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        // Bytes 6..8 are reserved and zero.
        out[8..12].copy_from_slice(&self.generation.to_le_bytes());
        out[12..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..20].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = CRC32.checksum(&out[..20]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The header in `bytes`, or `None` when magic, version, reserved bytes or the header's
    /// own CRC are wrong (an erased, torn or foreign slot).
    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> Option<Header> {
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        let intact = bytes[0..4] == MAGIC
            && version == VERSION
            && bytes[6..8] == [0, 0]
            && CRC32.checksum(&bytes[..20]) == word(20);
        intact.then(|| Header { generation: word(8), len: word(12), payload_crc: word(16) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_any_flipped_bit_is_refused() {
        let header = Header { generation: 7, len: 300, payload_crc: 0xdead_beef };
        let bytes = header.encode();
        assert_eq!(Header::decode(&bytes), Some(header));
        for bit in 0..HEADER_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Header::decode(&damaged), None, "bit {bit}");
        }
        assert_eq!(Header::decode(&[0xff; HEADER_BYTES]), None);
    }
}
