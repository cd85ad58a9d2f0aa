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

    /// Starts a streamed run ([`Request::StartStream`]). A device that trains from stored
    /// samples refuses it with [`DeviceError::NotStreamed`], as this default does.
    fn start_stream(&mut self, config: TrainingConfig) -> Result<(), DeviceError> {
        let _ = config;
        Err(DeviceError::NotStreamed)
    }

    /// Takes one chunk of a streamed sample, as [`DeviceApp::receive_sample`] takes a
    /// stored one (the session checked its range and that `total` is the device's sample
    /// size); with the last chunk the device trains on the sample or scores it, storing
    /// nothing.
    fn stream_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        let _ = chunk;
        Err(DeviceError::NotStreamed)
    }

    /// Ends pass `epoch` of the streamed run ([`Request::EndEpoch`]) and reports where the
    /// run stands; a pass that already ended is reported again, unchanged.
    fn end_epoch(&mut self, epoch: u16) -> Result<TrainingProgress, DeviceError> {
        let _ = epoch;
        Err(DeviceError::NotStreamed)
    }
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
                let total = app.info().sample.bytes();
                let sample =
                    SampleChunk { label, split, offset: chunk.offset, total, bytes: chunk.bytes };
                Response::Received { next: self.sample_chunk(id, sample, false, app)? }
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
            Request::StartStream(config) => {
                app.start_stream(config)?;
                Response::Ack
            }
            Request::StreamSample { id, label, split, total, chunk } => {
                let sample =
                    SampleChunk { label, split, offset: chunk.offset, total, bytes: chunk.bytes };
                Response::Received { next: self.sample_chunk(id, sample, true, app)? }
            }
            Request::EndEpoch { epoch } => Response::Progress(app.end_epoch(epoch)?),
        })
    }

    /// Places one chunk of sample `id` and hands it to the app, to store or, when
    /// `streamed`, to train on or score; returns where the sample's transfer continues.
    fn sample_chunk<A: DeviceApp + ?Sized>(
        &mut self,
        id: u32,
        sample: SampleChunk<'_>,
        streamed: bool,
        app: &mut A,
    ) -> Result<u32, DeviceError> {
        let info = app.info();
        if sample.label >= info.classes {
            return Err(DeviceError::UnknownLabel { label: sample.label, classes: info.classes });
        }
        let expected = info.sample.bytes();
        if sample.total != expected {
            return Err(DeviceError::SampleSize { expected, actual: sample.total });
        }
        let len = check_range(Chunk { offset: sample.offset, bytes: sample.bytes }, expected)?;
        if let Placement::Resume { next } = self.samples.place(id, sample.offset) {
            return Ok(next);
        }
        match streamed {
            true => app.stream_sample(sample)?,
            false => app.receive_sample(sample)?,
        }
        Ok(self.samples.advance(id, len))
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

#[cfg(test)]
mod tests {
    use super::super::message::{SampleShape, TrainingState};
    use super::*;

    /// A device that streams 4x4 samples of two classes: counts the bytes and the whole
    /// samples it was handed, and the passes ended.
    #[derive(Default)]
    struct Streaming {
        bytes: u32,
        samples: u32,
        passes: u16,
    }

    impl DeviceApp for Streaming {
        fn info(&self) -> DeviceInfo {
            let sample = SampleShape { width: 4, height: 4 };
            DeviceInfo {
                model_hash: 1,
                classes: 2,
                sample,
                samples: 0,
                checkpoint: None,
                streams: true,
            }
        }
        fn class_name(&self, _: u16) -> Option<&str> {
            None
        }
        fn clear_samples(&mut self) -> Result<(), DeviceError> {
            Ok(())
        }
        fn receive_sample(&mut self, _: SampleChunk<'_>) -> Result<(), DeviceError> {
            Err(DeviceError::StreamsSamples)
        }
        fn start_training(&mut self, _: TrainingConfig) -> Result<(), DeviceError> {
            Err(DeviceError::StreamsSamples)
        }
        fn stop_training(&mut self) {}
        fn progress(&self) -> TrainingProgress {
            TrainingProgress {
                state: TrainingState::Running,
                epoch: self.passes,
                epochs: 9,
                step: self.samples,
                loss: 0.0,
                accuracy: None,
            }
        }
        fn read_checkpoint(&mut self, _: u32, _: &mut [u8]) -> Result<(), DeviceError> {
            Err(DeviceError::NoCheckpoint)
        }
        fn begin_checkpoint(&mut self, _: CheckpointInfo) -> Result<(), DeviceError> {
            Err(DeviceError::CheckpointRejected)
        }
        fn write_checkpoint(&mut self, _: u32, _: &[u8]) -> Result<(), DeviceError> {
            Err(DeviceError::CheckpointRejected)
        }
        fn commit_checkpoint(&mut self) -> Result<(), DeviceError> {
            Err(DeviceError::CheckpointRejected)
        }
        fn start_stream(&mut self, _: TrainingConfig) -> Result<(), DeviceError> {
            Ok(())
        }
        fn stream_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
            self.bytes += chunk.bytes.len() as u32;
            if chunk.offset + chunk.bytes.len() as u32 == chunk.total {
                self.samples += 1;
            }
            Ok(())
        }
        fn end_epoch(&mut self, epoch: u16) -> Result<TrainingProgress, DeviceError> {
            self.passes = epoch + 1;
            Ok(self.progress())
        }
    }

    /// A session's conversation and the buffers it keeps between requests.
    struct Session {
        conversation: Conversation,
        app: Streaming,
        reply: [u8; MAX_FRAME],
    }

    impl Session {
        fn new() -> Self {
            let conversation = Conversation::default();
            Self { conversation, app: Streaming::default(), reply: [0; MAX_FRAME] }
        }

        /// The answer to `request` as request `seq`, decoded into `buf`.
        fn ask<'b>(
            &mut self,
            seq: u16,
            request: Request<'_>,
            buf: &'b mut [u8; MAX_FRAME],
        ) -> Response<'b> {
            let mut chunk = [0; MAX_CHUNK];
            let Self { conversation, app, reply } = self;
            let frame = conversation.answer(seq, request, app, &mut chunk, reply);
            let body = frame.len() - 1;
            buf[..body].copy_from_slice(&frame[..body]);
            let (answered, response) = decode::<Response<'_>>(&mut buf[..body]).unwrap();
            assert_eq!(answered, seq);
            response
        }
    }

    fn sample(id: u32, label: u16, total: u32, offset: u32, bytes: &[u8]) -> Request<'_> {
        let chunk = Chunk { offset, bytes };
        Request::StreamSample { id, label, split: Split::Train, total, chunk }
    }

    #[test]
    fn streamed_samples_of_hostile_sizes_are_refused_with_typed_errors() {
        let (mut session, mut buf) = (Session::new(), [0; MAX_FRAME]);
        let pixels = [7u8; 64];
        let refusals = [
            (
                sample(1, 0, 47, 0, &pixels[..16]),
                DeviceError::SampleSize { expected: 48, actual: 47 },
            ),
            (
                sample(1, 0, u32::MAX, 0, &pixels[..16]),
                DeviceError::SampleSize { expected: 48, actual: u32::MAX },
            ),
            (
                sample(1, 0, 48, 40, &pixels[..16]),
                DeviceError::OutOfRange { offset: 40, len: 16, total: 48 },
            ),
            (
                sample(1, 0, 48, u32::MAX, &pixels[..1]),
                DeviceError::OutOfRange { offset: u32::MAX, len: 1, total: 48 },
            ),
            (
                sample(1, 0, 48, 0, &pixels[..0]),
                DeviceError::OutOfRange { offset: 0, len: 0, total: 48 },
            ),
            (
                sample(1, 0, 48, 0, &pixels),
                DeviceError::OutOfRange { offset: 0, len: 64, total: 48 },
            ),
            (
                sample(1, 2, 48, 0, &pixels[..16]),
                DeviceError::UnknownLabel { label: 2, classes: 2 },
            ),
        ];
        for (seq, (request, error)) in refusals.into_iter().enumerate() {
            let answer = session.ask(seq as u16 + 1, request, &mut buf);
            assert_eq!(answer, Response::Error(error), "{request:?}");
        }
        let app = &session.app;
        assert_eq!((app.bytes, app.samples), (0, 0), "a refused chunk reaches no app");
    }

    #[test]
    fn a_streamed_sample_is_carried_out_once_however_often_its_chunks_come() {
        let (mut session, mut buf) = (Session::new(), [0; MAX_FRAME]);
        let pixels = [3u8; 48];
        let start = Request::StartStream(TrainingConfig { epochs: 9, learning_rate: None });
        assert_eq!(session.ask(1, start, &mut buf), Response::Ack);
        let first = sample(5, 1, 48, 0, &pixels[..32]);
        let last = sample(5, 1, 48, 32, &pixels[32..]);
        let answers = [(2, first, 32), (3, first, 32), (4, last, 48), (4, last, 48), (5, last, 48)];
        // Request 3 repeats the first chunk under a new sequence number (after a
        // reconnect), request 4 comes twice (a lost answer), request 5 repeats it again.
        for (seq, request, next) in answers {
            let answer = session.ask(seq, request, &mut buf);
            assert_eq!(answer, Response::Received { next }, "request {seq}");
        }
        assert_eq!((session.app.bytes, session.app.samples), (48, 1));
        // A gap in a new sample is answered with where it stands: nothing yet.
        let gap = sample(6, 0, 48, 16, &pixels[..16]);
        assert_eq!(session.ask(6, gap, &mut buf), Response::Received { next: 0 });
        let end = session.ask(7, Request::EndEpoch { epoch: 0 }, &mut buf);
        assert!(matches!(end, Response::Progress(p) if p.epoch == 1 && p.step == 1), "{end:?}");
    }
}
