//! The device side of the link: the [`DeviceApp`] trait the firmware implements, and the
//! [`DeviceSession`] that reads requests from a byte stream, serves them from the app and
//! answers, in fixed buffers, without a clock, and without running anything twice.

use crc::Digest;
use embedded_io::{Read, ReadReady, Write};

use super::frame::{decode, encode, FrameReader, MAX_FRAME};
use super::inbound::{Inbound, Placement};
use super::message::{
    CheckpointInfo, Chunk, DeviceError, DeviceInfo, Request, Response, Split, TrainingConfig,
    TrainingProgress, MAX_CHUNK, PROTOCOL_VERSION,
};
use crate::checksum::CRC32;

/// What the firmware does for the link. The [`DeviceSession`] calls these methods while it
/// serves requests; each runs to completion (none may wait on the link). Methods returning a
/// [`DeviceError`] refuse the request with it, and the host shows the error to its user.
///
/// The session guarantees:
/// - every call corresponds to one request the host made, carried out once, even when frames
///   were lost, repeated or the host reconnected;
/// - sample and checkpoint chunks arrive in order, each once, inside their transfer
///   (`offset + bytes.len() <= total`, never empty), and their labels are in range;
/// - a pushed checkpoint's bytes match the CRC-32 it was announced with before
///   [`DeviceApp::commit_checkpoint`] is called.
///
/// Training itself is not run from here: the firmware's main loop alternates
/// [`DeviceSession::poll`] with its own training steps, so progress queries are answered
/// while the device trains.
pub trait DeviceApp {
    /// The model, its classes and sample shape, the samples stored and the checkpoint the
    /// device would send now ([`DeviceInfo::checkpoint`], which
    /// [`DeviceApp::read_checkpoint`] reads). Called for every hello, sample and pull chunk,
    /// so it must be cheap (keep the checkpoint's length and CRC with the checkpoint).
    fn info(&self) -> DeviceInfo;

    /// The name of class `label`, `None` past the last class.
    fn class_name(&self, label: u16) -> Option<&str>;

    /// Forgets every stored sample (refuse with [`DeviceError::Busy`] while training).
    fn clear_samples(&mut self) -> Result<(), DeviceError>;

    /// Takes one chunk of a sample. A chunk at offset 0 starts a new sample (drop any
    /// unfinished one); the sample is complete when `offset + bytes.len() == total`, and
    /// is stored then.
    fn receive_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError>;

    /// Starts training over the stored samples; [`DeviceApp::progress`] reports it.
    fn start_training(&mut self, config: TrainingConfig) -> Result<(), DeviceError>;

    /// Stops training after the current step, keeping the best checkpoint so far.
    fn stop_training(&mut self);

    /// Where training stands.
    fn progress(&self) -> TrainingProgress;

    /// Fills `buf` with the current checkpoint's bytes from `offset` (the session keeps the
    /// range inside [`DeviceInfo::checkpoint`]).
    fn read_checkpoint(&mut self, offset: u32, buf: &mut [u8]) -> Result<(), DeviceError>;

    /// Prepares to receive a checkpoint of `checkpoint.len` bytes, abandoning any earlier
    /// unfinished one. Refuse it if it cannot fit or training is running.
    fn begin_checkpoint(&mut self, checkpoint: CheckpointInfo) -> Result<(), DeviceError>;

    /// Stores bytes `offset..offset + bytes.len()` of the checkpoint being received.
    fn write_checkpoint(&mut self, offset: u32, bytes: &[u8]) -> Result<(), DeviceError>;

    /// Makes the fully received, CRC-checked checkpoint the current one (atomically: a
    /// failure keeps the previous one), or refuses it as unusable for this model.
    fn commit_checkpoint(&mut self) -> Result<(), DeviceError>;
}

/// One chunk of a sample: RGB8 pixels, row-major, interleaved, of [`DeviceInfo::sample`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleChunk<'a> {
    pub label: u16,
    pub split: Split,
    pub offset: u32,
    /// The sample's whole length in bytes.
    pub total: u32,
    pub bytes: &'a [u8],
}

/// What [`DeviceSession::poll`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// A request was answered (more bytes may be ready).
    Answered,
    /// Every byte waiting was handled; nothing more is ready.
    Idle,
    /// The stream ended (a closed socket); a UART never ends.
    EndOfStream,
}

/// The device's side of a conversation: about 1.7 KiB of buffers and a little state. Keep
/// one for the device's whole run (across reconnects). The firmware's main loop calls
/// `session.poll(&mut uart, &mut app)` and, while the app is training, runs one training
/// step between calls; the UART only needs `embedded_io::{Read, ReadReady, Write}`.
pub struct DeviceSession {
    reader: FrameReader<MAX_FRAME>,
    /// The last answer, kept to send again when its request is repeated.
    reply: [u8; MAX_FRAME],
    chunk: [u8; MAX_CHUNK],
    state: Conversation,
}

impl Default for DeviceSession {
    fn default() -> Self {
        Self {
            reader: FrameReader::default(),
            reply: [0; MAX_FRAME],
            chunk: [0; MAX_CHUNK],
            state: Conversation::default(),
        }
    }
}

impl DeviceSession {
    /// Handles the bytes `io` has ready up to the end of one request, which is carried out
    /// through `app` and answered (a damaged frame is answered with a nack). Returns after
    /// that answer or when no byte is ready, so it never blocks and the firmware can train
    /// between requests; errors are the stream's own.
    pub fn poll<IO, A>(&mut self, io: &mut IO, app: &mut A) -> Result<Polled, IO::Error>
    where
        IO: Read + ReadReady + Write,
        A: DeviceApp + ?Sized,
    {
        let Self { reader, reply, chunk, state } = self;
        while io.read_ready()? {
            let mut byte = [0];
            if io.read(&mut byte)? == 0 {
                return Ok(Polled::EndOfStream);
            }
            let Some(frame) = reader.push(byte[0]) else { continue };
            match frame.and_then(decode::<Request<'_>>) {
                Ok((seq, request)) => {
                    let answer = state.answer(seq, request, app, chunk, reply);
                    io.write_all(answer)?;
                    io.flush()?;
                    return Ok(Polled::Answered);
                }
                Err(_) => {
                    let mut nack = [0; 16];
                    if let Ok(frame) = encode(0, &Response::Nack, &mut nack) {
                        io.write_all(frame)?;
                    }
                }
            }
            io.flush()?;
        }
        Ok(Polled::Idle)
    }
}

/// The state that outlives single requests.
struct Conversation {
    /// The host's session id from its last hello.
    session: Option<u32>,
    /// The sequence number of the last request and the length of its answer in `reply`.
    last: Option<(u16, usize)>,
    samples: Inbound<u32>,
    checkpoint: Inbound<CheckpointInfo>,
    /// CRC-32 of the checkpoint bytes received so far.
    digest: Digest<'static, u32>,
}

impl Default for Conversation {
    fn default() -> Self {
        Self {
            session: None,
            last: None,
            samples: Inbound::default(),
            checkpoint: Inbound::default(),
            digest: CRC32.digest(),
        }
    }
}

impl Conversation {
    /// The encoded answer to `request`: carried out now, or the kept answer if this is a
    /// repeat of the last request. Hellos are always carried out (they change nothing a
    /// repeat could break) and start a fresh sequence.
    fn answer<'r, A: DeviceApp + ?Sized>(
        &mut self,
        seq: u16,
        request: Request<'_>,
        app: &mut A,
        chunk: &mut [u8; MAX_CHUNK],
        reply: &'r mut [u8; MAX_FRAME],
    ) -> &'r [u8] {
        let hello = matches!(request, Request::Hello { .. });
        if let (false, Some((last, len))) = (hello, self.last) {
            if last == seq {
                return &reply[..len];
            }
        }
        let response = self.carry_out(request, app, chunk).unwrap_or_else(Response::Error);
        let len = match encode(seq, &response, reply) {
            Ok(frame) => frame.len(),
            Err(_) => encode(seq, &Response::Error(DeviceError::ReplyTooLarge), reply)
                .map_or(0, |frame| frame.len()),
        };
        self.last = (!hello).then_some((seq, len));
        &reply[..len]
    }

    fn carry_out<'a, A: DeviceApp + ?Sized>(
        &mut self,
        request: Request<'_>,
        app: &'a mut A,
        chunk: &'a mut [u8; MAX_CHUNK],
    ) -> Result<Response<'a>, DeviceError> {
        Ok(match request {
            Request::Hello { session, .. } => {
                if self.session != Some(session) {
                    self.session = Some(session);
                    self.samples.reset();
                    self.checkpoint.reset();
                }
                Response::Hello { protocol: PROTOCOL_VERSION, device: app.info() }
            }
            Request::ClassName { label } => {
                let app: &'a A = app;
                let classes = app.info().classes;
                Response::ClassName(
                    app.class_name(label).ok_or(DeviceError::UnknownLabel { label, classes })?,
                )
            }
            Request::ClearSamples => {
                app.clear_samples()?;
                self.samples.reset();
                Response::Ack
            }
            Request::PushSample { id, label, split, chunk } => {
                let info = app.info();
                if label >= info.classes {
                    return Err(DeviceError::UnknownLabel { label, classes: info.classes });
                }
                let total = info.sample.bytes();
                let len = check_range(chunk, total)?;
                if let Placement::Resume { next } = self.samples.place(id, chunk.offset) {
                    return Ok(Response::Received { next });
                }
                let offset = chunk.offset;
                app.receive_sample(SampleChunk {
                    label,
                    split,
                    offset,
                    total,
                    bytes: chunk.bytes,
                })?;
                Response::Received { next: self.samples.advance(id, len) }
            }
            Request::StartTraining(config) => {
                app.start_training(config)?;
                Response::Ack
            }
            Request::StopTraining => {
                app.stop_training();
                Response::Ack
            }
            Request::QueryProgress => Response::Progress(app.progress()),
            Request::PullCheckpoint { offset } => {
                let checkpoint = app.info().checkpoint.ok_or(DeviceError::NoCheckpoint)?;
                let total = checkpoint.len;
                if offset >= total {
                    return Err(DeviceError::OutOfRange { offset, len: 0, total });
                }
                let len = (total - offset).min(MAX_CHUNK as u32) as usize;
                app.read_checkpoint(offset, &mut chunk[..len])?;
                let chunk: &'a [u8; MAX_CHUNK] = chunk;
                Response::Checkpoint { checkpoint, offset, bytes: &chunk[..len] }
            }
            Request::PushCheckpoint { checkpoint, chunk } => {
                Response::Received { next: self.store_checkpoint_chunk(checkpoint, chunk, app)? }
            }
        })
    }

    /// Places one pushed checkpoint chunk; commits the checkpoint with its last byte.
    /// Returns where the transfer continues.
    fn store_checkpoint_chunk<A: DeviceApp + ?Sized>(
        &mut self,
        checkpoint: CheckpointInfo,
        chunk: Chunk<'_>,
        app: &mut A,
    ) -> Result<u32, DeviceError> {
        let len = check_range(chunk, checkpoint.len)?;
        match self.checkpoint.place(checkpoint, chunk.offset) {
            Placement::Resume { next } => return Ok(next),
            Placement::Start => {
                app.begin_checkpoint(checkpoint)?;
                self.digest = CRC32.digest();
            }
            Placement::Append => {}
        }
        app.write_checkpoint(chunk.offset, chunk.bytes)?;
        self.digest.update(chunk.bytes);
        let received = self.checkpoint.advance(checkpoint, len);
        if received == checkpoint.len {
            let computed = self.digest.clone().finalize();
            let committed = match computed == checkpoint.crc {
                true => app.commit_checkpoint(),
                false => Err(DeviceError::ChecksumMismatch { expected: checkpoint.crc, computed }),
            };
            if committed.is_err() {
                // A repeat of the last chunk must not pass for success: start over.
                self.checkpoint.reset();
            }
            committed?;
        }
        Ok(received)
    }
}

/// The chunk's length, if it is non-empty and inside a transfer of `total` bytes.
fn check_range(chunk: Chunk<'_>, total: u32) -> Result<u32, DeviceError> {
    let len = u32::try_from(chunk.bytes.len()).unwrap_or(u32::MAX);
    let end = u64::from(chunk.offset) + u64::from(len);
    if len == 0 || end > u64::from(total) {
        return Err(DeviceError::OutOfRange { offset: chunk.offset, len, total });
    }
    Ok(len)
}
