//! The host <-> device link: postcard messages in CRC-32-checked COBS frames over any
//! `embedded-io` byte stream (a UART, QEMU's serial socket, a host serial port or TCP).
//!
//! The host asks, the device answers, one request at a time ("stop and wait"):
//!
//! - **Frames** ([`frame`]): `COBS(postcard(seq, message) ++ CRC-32) ++ 0x00`. A frame that
//!   fails COBS, CRC or parsing is dropped with a typed [`FrameError`]; the device answers it
//!   with [`Response::Nack`] so the host sends again without waiting.
//! - **Sequence numbers and retries**: every request carries a new `seq`, and its answer
//!   carries the same one. The [`Client`] sends a request again after a timeout, a nack or a
//!   damaged answer, at most [`RetryPolicy::attempts`] times, and ignores stale answers. The
//!   [`DeviceSession`] keeps its last answer and sends it again for a repeated `seq`, so no
//!   request is carried out twice.
//! - **Chunked transfers and resume**: samples and checkpoints move in chunks of at most
//!   [`MAX_CHUNK`] bytes. The device acknowledges each with where the transfer stands
//!   ([`Response::Received`]), so a repeated chunk is acknowledged but not stored again and a
//!   host that reconnects (a hello with the same session id) continues at the last
//!   acknowledged byte. A pull is resumed by the host, which keeps its [`Pull`]. Whole
//!   checkpoints carry a CRC-32, checked by the receiver before anything is kept.
//! - **Time**: only the client waits; it reads time from a [`Clock`] (a tick counter on a
//!   microcontroller). A [`Watch`] adds an overall deadline and a stall timeout to whole
//!   operations ([`Limits`]), so a device that answers without getting anywhere is given up on. The device never blocks: [`DeviceSession::poll`] handles the bytes
//!   that are ready (`embedded_io::ReadReady`) and returns.
//!
//! Neither side allocates: frames are encoded and collected in fixed buffers (a
//! [`DeviceSession`] is about 1.7 KiB).

pub mod client;
pub mod device;
pub mod frame;
mod inbound;
pub mod message;

pub use client::{Client, ClientError, Clock, Limit, Limits, LinkStats, Pull, RetryPolicy, Watch};
pub use device::{DeviceApp, DeviceSession, Polled, SampleChunk};
pub use frame::{FrameError, FrameReader, MAX_FRAME};
pub use message::{
    CheckpointInfo, Chunk, DeviceError, DeviceInfo, Request, RequestKind, Response, SampleShape,
    Split, TrainingConfig, TrainingProgress, TrainingState, MAX_CHUNK, PROTOCOL_VERSION,
};
