//! Frames: a sequence number and a message, postcard-encoded, then the CRC-32 of those
//! bytes, all COBS-encoded and ended by one zero byte. Encoding, collecting and decoding
//! work in the caller's fixed buffers; nothing allocates.

use core::fmt;

use postcard::ser_flavors::{crc::CrcModifier, Cobs, Slice};
use serde::{Deserialize, Serialize};

use crate::checksum::CRC32;

/// Bytes of the CRC-32 at the end of a decoded frame.
const CHECKSUM_BYTES: usize = 4;

/// The longest frame either side sends (delimiter included): a [`super::MAX_CHUNK`] payload
/// with its largest header, CRC and COBS overhead fits, as a test proves.
pub const MAX_FRAME: usize = super::MAX_CHUNK + 64;

/// What travels inside a frame.
#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    seq: u16,
    body: T,
}

/// Why a frame could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// More bytes arrived before the delimiter than a frame may hold.
    Oversized { limit: usize },
    /// The bytes are not valid COBS.
    Cobs,
    /// Too few bytes for a sequence number, a message and the CRC-32.
    Short { len: usize },
    /// The stored CRC-32 differs from the one computed over the frame.
    Checksum { stored: u32, computed: u32 },
    /// The CRC matches but the bytes are not a message of this protocol.
    Message(postcard::Error),
    /// Bytes follow the message inside the frame.
    TrailingBytes { count: usize },
    /// The message does not fit the frame buffer (encoding).
    DoesNotFit { limit: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Oversized { limit } => {
                write!(f, "frame longer than the {limit}-byte limit")
            }
            FrameError::Cobs => write!(f, "frame is not valid COBS"),
            FrameError::Short { len } => write!(f, "frame of {len} bytes is too short"),
            FrameError::Checksum { stored, computed } => {
                write!(f, "frame CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            FrameError::Message(e) => write!(f, "frame holds no valid message: {e}"),
            FrameError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the message in a frame")
            }
            FrameError::DoesNotFit { limit } => {
                write!(f, "message does not fit a {limit}-byte frame")
            }
        }
    }
}

impl core::error::Error for FrameError {}

/// Encodes `body` with its sequence number into `buf`; returns the frame, delimiter included.
pub fn encode<'b, T: Serialize>(
    seq: u16,
    body: &T,
    buf: &'b mut [u8],
) -> Result<&'b [u8], FrameError> {
    let limit = buf.len();
    let does_not_fit = |_| FrameError::DoesNotFit { limit };
    let cobs = Cobs::try_new(Slice::new(buf)).map_err(does_not_fit)?;
    let flavor = CrcModifier::new(cobs, CRC32.digest());
    let frame =
        postcard::serialize_with_flavor(&Envelope { seq, body }, flavor).map_err(does_not_fit)?;
    Ok(frame)
}

/// Decodes a frame collected by [`FrameReader`] (COBS bytes, no delimiter), in place.
pub fn decode<'b, T: Deserialize<'b>>(frame: &'b mut [u8]) -> Result<(u16, T), FrameError> {
    parse(open(frame)?)
}

/// Undoes the COBS encoding of a collected frame in place and checks its CRC-32; returns the
/// checked bytes for [`parse`].
pub fn open(frame: &mut [u8]) -> Result<&[u8], FrameError> {
    let len = cobs::decode_in_place(frame).map_err(|_| FrameError::Cobs)?;
    if len <= CHECKSUM_BYTES {
        return Err(FrameError::Short { len });
    }
    let (data, stored) = frame[..len].split_at(len - CHECKSUM_BYTES);
    let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    let computed = CRC32.checksum(data);
    if stored != computed {
        return Err(FrameError::Checksum { stored, computed });
    }
    Ok(data)
}

/// The sequence number and message in the checked bytes of a frame.
pub fn parse<'b, T: Deserialize<'b>>(data: &'b [u8]) -> Result<(u16, T), FrameError> {
    let (envelope, rest): (Envelope<T>, _) =
        postcard::take_from_bytes(data).map_err(FrameError::Message)?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes { count: rest.len() });
    }
    Ok((envelope.seq, envelope.body))
}

/// Collects received bytes into frames, in a fixed `N`-byte buffer.
pub struct FrameReader<const N: usize> {
    buf: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> Default for FrameReader<N> {
    fn default() -> Self {
        Self { buf: [0; N], len: 0, overflowed: false }
    }
}

impl<const N: usize> FrameReader<N> {
    /// Takes one received byte. At a frame's end (a zero byte) returns the frame, still
    /// COBS-encoded, for [`decode`], or why it was dropped. Empty frames are skipped.
    pub fn push(&mut self, byte: u8) -> Option<Result<&mut [u8], FrameError>> {
        if byte != 0 {
            match self.buf.get_mut(self.len) {
                Some(slot) => {
                    *slot = byte;
                    self.len += 1;
                }
                None => self.overflowed = true,
            }
            return None;
        }
        let len = core::mem::take(&mut self.len);
        if core::mem::take(&mut self.overflowed) {
            return Some(Err(FrameError::Oversized { limit: N }));
        }
        (len > 0).then(|| Ok(&mut self.buf[..len]))
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::{CheckpointInfo, Chunk, Request, Response, Split, MAX_CHUNK};
    use super::*;
    use crate::rng::SplitMix;

    /// Feeds `bytes` and returns what each completed frame decoded to.
    fn decode_all(bytes: &[u8]) -> [usize; 2] {
        let mut reader = FrameReader::<MAX_FRAME>::default();
        let mut counts = [0; 2];
        for &b in bytes {
            if let Some(frame) = reader.push(b) {
                match frame.and_then(decode::<Request<'_>>) {
                    Ok(_) => counts[0] += 1,
                    Err(_) => counts[1] += 1,
                }
            }
        }
        counts
    }

    fn round_trip(request: &Request<'_>) -> (u16, bool) {
        let mut buf = [0; MAX_FRAME];
        let frame = encode(7, request, &mut buf).unwrap();
        assert_eq!(frame.last(), Some(&0));
        assert!(!frame[..frame.len() - 1].contains(&0));
        let mut copy = [0; MAX_FRAME];
        copy[..frame.len() - 1].copy_from_slice(&frame[..frame.len() - 1]);
        let (seq, decoded) = decode::<Request<'_>>(&mut copy[..frame.len() - 1]).unwrap();
        (seq, decoded == *request)
    }

    #[test]
    fn frames_round_trip_and_contain_no_zero_before_the_delimiter() {
        let zeros = [0u8; 300];
        let sample = Request::PushSample {
            id: 3,
            label: 1,
            split: Split::Train,
            chunk: Chunk { offset: 0, bytes: &zeros },
        };
        assert_eq!(round_trip(&sample), (7, true));
        assert_eq!(round_trip(&Request::Hello { protocol: 1, session: 0 }), (7, true));
    }

    #[test]
    fn the_largest_messages_fit_a_frame() {
        let chunk = [0xffu8; MAX_CHUNK];
        let worst = CheckpointInfo { len: u32::MAX, crc: u32::MAX };
        let mut buf = [0; MAX_FRAME];
        let requests = [
            Request::PushSample {
                id: u32::MAX,
                label: u16::MAX,
                split: Split::Validation,
                chunk: Chunk { offset: u32::MAX, bytes: &chunk },
            },
            Request::PushCheckpoint {
                checkpoint: worst,
                chunk: Chunk { offset: u32::MAX, bytes: &chunk },
            },
            Request::StreamSample {
                id: u32::MAX,
                label: u16::MAX,
                split: Split::Validation,
                total: u32::MAX,
                chunk: Chunk { offset: u32::MAX, bytes: &chunk },
            },
        ];
        for request in &requests {
            encode(u16::MAX, request, &mut buf).unwrap();
        }
        let reply = Response::Checkpoint { checkpoint: worst, offset: u32::MAX, bytes: &chunk };
        encode(u16::MAX, &reply, &mut buf).unwrap();
    }

    #[test]
    fn damaged_frames_give_typed_errors() {
        let mut buf = [0; MAX_FRAME];
        let request = Request::PullCheckpoint { offset: 1024 };
        let frame = encode(1, &request, &mut buf).unwrap().len();
        let body = frame - 1;

        let mut flipped = buf;
        flipped[2] ^= 0x10;
        let result = decode::<Request<'_>>(&mut flipped[..body]);
        assert!(
            matches!(result, Err(FrameError::Checksum { .. }) | Err(FrameError::Cobs)),
            "{result:?}"
        );

        let mut cut = buf;
        assert!(decode::<Request<'_>>(&mut cut[..body - 3]).is_err());
        assert_eq!(decode::<Request<'_>>(&mut [0x02, 0x01]), Err(FrameError::Short { len: 1 }));
        // A COBS code byte pointing past the end.
        assert_eq!(decode::<Request<'_>>(&mut [0x09, 0x01]), Err(FrameError::Cobs));
    }

    #[test]
    fn a_valid_crc_over_a_foreign_message_is_a_message_error() {
        let mut buf = [0; MAX_FRAME];
        // Variant 200 of `Request` does not exist.
        let frame = encode(1, &(200u8, 5u8), &mut buf).unwrap().len();
        let result = decode::<Request<'_>>(&mut buf[..frame - 1]);
        assert!(matches!(result, Err(FrameError::Message(_))), "{result:?}");

        let frame = encode(1, &(Request::ClearSamples, 9u8), &mut buf).unwrap().len();
        let result = decode::<Request<'_>>(&mut buf[..frame - 1]);
        assert_eq!(result, Err(FrameError::TrailingBytes { count: 1 }));
    }

    #[test]
    fn an_overlong_frame_is_reported_once_and_the_next_one_decodes() {
        let mut stream = [0x01u8; MAX_FRAME + 10];
        stream[MAX_FRAME + 9] = 0;
        let mut bytes = [0u8; MAX_FRAME * 2];
        bytes[..stream.len()].copy_from_slice(&stream);
        let frame = encode(4, &Request::StopTraining, &mut bytes[stream.len()..]).unwrap().len();
        let total = stream.len() + frame;
        assert_eq!(decode_all(&bytes[..total]), [1, 1]);

        let mut reader = FrameReader::<8>::default();
        for _ in 0..9 {
            assert!(reader.push(1).is_none());
        }
        assert_eq!(reader.push(0), Some(Err(FrameError::Oversized { limit: 8 })));
    }

    #[test]
    fn random_bytes_never_panic_and_never_decode_by_accident() {
        let mut rng = SplitMix::new(0x5eed);
        let mut bytes = [0u8; 4096];
        let mut decoded = 0;
        let mut rejected = 0;
        for _ in 0..200 {
            for b in bytes.iter_mut() {
                // Zeros often enough to cut many short frames.
                let r = rng.next_u64();
                *b = if r.is_multiple_of(16) { 0 } else { (r >> 8) as u8 };
            }
            let [ok, bad] = decode_all(&bytes);
            decoded += ok;
            rejected += bad;
        }
        assert_eq!(decoded, 0, "random bytes passed the CRC-32");
        assert!(rejected > 10_000, "only {rejected} frames were tried");
    }
}
