//! The host side of the link, portable: a [`Client`] sends one request at a time with a
//! sequence number, waits for the matching answer with a timeout from an abstract [`Clock`],
//! retries a bounded number of times, and moves samples and checkpoints in resumable chunks.

use core::fmt;

use crc::Digest;
use embedded_io::{Read, ReadReady, Write};

use super::frame::{encode, open, parse, FrameError, FrameReader, MAX_FRAME};
use super::message::{
    CheckpointInfo, Chunk, DeviceError, DeviceInfo, Request, RequestKind, Response, Split,
    TrainingConfig, TrainingProgress, MAX_CHUNK, PROTOCOL_VERSION,
};
use crate::checksum::CRC32;

/// Milliseconds from any fixed point, wrapping: a `SysTick` counter on a microcontroller,
/// `Instant` on a host.
pub trait Clock {
    fn now_ms(&mut self) -> u32;
}

/// How long to wait for an answer and how often to send a request before giving up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub timeout_ms: u32,
    /// The wait for the answer to a transfer's last chunk, which the device answers only
    /// after computing on the whole (a sample's backbone pass, a checkpoint's check and
    /// flash write).
    pub compute_timeout_ms: u32,
    /// Sends of one request, the first included.
    pub attempts: u32,
}

impl Default for RetryPolicy {
    /// Half a second covers a 600-byte frame each way at 115200 baud several times over;
    /// half a minute covers a backbone pass on a slow core (about 2 s for LeafNet's int8
    /// backbone on an emulated Cortex-M4).
    fn default() -> Self {
        Self { timeout_ms: 500, compute_timeout_ms: 30_000, attempts: 8 }
    }
}

/// Limits on a whole operation, on top of each request's timeout: a device that keeps
/// answering without getting anywhere (training that stays "running" at the same step, a
/// transfer that trickles) or never finishes is given up on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Milliseconds the operation may take in all; `None`: no deadline.
    pub deadline_ms: Option<u32>,
    /// Milliseconds without progress (a request carried out, a chunk taken, training moving
    /// on) before the device counts as stalled; `None`: no stall detection.
    pub stall_ms: Option<u32>,
}

/// Which of the [`Limits`] ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Deadline,
    Stall,
}

/// The [`Limits`] of an operation and where it stands against them, in [`Clock`]
/// milliseconds; carry it to a new [`Client`] after a reconnect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    pub limits: Limits,
    started: u32,
    progressed: u32,
}

impl Watch {
    /// Limits counted from `now_ms`.
    pub fn start(limits: Limits, now_ms: u32) -> Self {
        Self { limits, started: now_ms, progressed: now_ms }
    }

    /// Progress was made at `now_ms`.
    pub fn progressed(&mut self, now_ms: u32) {
        self.progressed = now_ms;
    }

    /// The limit that ran out by `now_ms` and the milliseconds it allowed, if any.
    pub fn exceeded(&self, now_ms: u32) -> Option<(Limit, u32)> {
        let past =
            |since: u32, limit: Option<u32>| limit.filter(|&ms| now_ms.wrapping_sub(since) >= ms);
        past(self.started, self.limits.deadline_ms)
            .map(|ms| (Limit::Deadline, ms))
            .or_else(|| past(self.progressed, self.limits.stall_ms).map(|ms| (Limit::Stall, ms)))
    }
}

/// What crossed the link so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Request frames written, repeats included.
    pub frames_sent: u64,
    /// Requests sent again: after a timeout, a nack or a damaged answer.
    pub retries: u64,
    /// Answers that arrived intact (late ones to earlier requests included).
    pub frames_received: u64,
    /// Frames that arrived damaged (bad COBS, CRC, length or content).
    pub damaged_frames: u64,
    /// Payload bytes of samples and checkpoints that the other side took (bytes it
    /// already had, skipped on resume, do not count).
    pub payload_bytes: u64,
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientError<E> {
    /// The stream failed.
    Transport(E),
    /// The stream ended (the peer closed it).
    EndOfStream,
    /// No intact answer to `request` after `attempts` sends.
    NoAnswer { request: RequestKind, attempts: u32 },
    /// The device speaks another protocol version.
    ProtocolMismatch { host: u16, device: u16 },
    /// The device refused `request`.
    Device { request: RequestKind, error: DeviceError },
    /// The device answered `request` with something that is not an answer to it.
    UnexpectedReply { request: RequestKind, detail: &'static str },
    /// The device's checkpoint changed during a pull (training saved a better one).
    CheckpointChanged { before: CheckpointInfo, now: CheckpointInfo },
    /// The pulled bytes do not match the checkpoint's CRC-32.
    ChecksumMismatch { expected: u32, computed: u32 },
    /// The device kept answering a transfer's chunks without moving on.
    Stalled { request: RequestKind, offset: u32 },
    /// More than the 4 GiB a transfer can announce.
    TooLarge { bytes: usize },
    /// The device announced a checkpoint larger than the pull takes.
    CheckpointTooLarge { len: u32, limit: u32 },
    /// A limit of the [`Watch`] ran out while waiting on `request`.
    TimedOut { request: RequestKind, limit: Limit, ms: u32 },
    /// A request did not fit a frame (a bug: requests carry bounded chunks).
    Encode(FrameError),
}

impl<E: fmt::Display> fmt::Display for ClientError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Transport(e) => write!(f, "link failed: {e}"),
            ClientError::EndOfStream => write!(f, "the device closed the link"),
            ClientError::NoAnswer { request, attempts } => {
                write!(f, "the device did not answer {request} after {attempts} attempts")
            }
            ClientError::ProtocolMismatch { host, device } => write!(
                f,
                "link protocol version mismatch: this host speaks {host}, the device {device}"
            ),
            ClientError::Device { request, error } => {
                write!(f, "the device refused {request}: {error}")
            }
            ClientError::UnexpectedReply { request, detail } => {
                write!(f, "unexpected answer to {request}: {detail}")
            }
            ClientError::CheckpointChanged { before, now } => write!(
                f,
                "the device's checkpoint changed during the pull ({} bytes, CRC {:#010x} -> \
                 {} bytes, CRC {:#010x}); stop training or pull again",
                before.len, before.crc, now.len, now.crc
            ),
            ClientError::ChecksumMismatch { expected, computed } => write!(
                f,
                "corrupt checkpoint: the device announced CRC {expected:#010x}, the received \
                 bytes give {computed:#010x}"
            ),
            ClientError::Stalled { request, offset } => {
                write!(f, "the device stopped taking {request} chunks at byte {offset}")
            }
            ClientError::TooLarge { bytes } => {
                write!(f, "{bytes} bytes exceed the link's 4 GiB transfer limit")
            }
            ClientError::CheckpointTooLarge { len, limit } => write!(
                f,
                "the device announced a {len}-byte checkpoint, more than the {limit} bytes \
                 this pull takes"
            ),
            ClientError::TimedOut { request, limit: Limit::Deadline, ms } => {
                write!(f, "gave up on {request}: the deadline of {} passed", Seconds(*ms))
            }
            ClientError::TimedOut { request, limit: Limit::Stall, ms } => {
                write!(f, "gave up on {request}: no progress for {} (stall timeout)", Seconds(*ms))
            }
            ClientError::Encode(e) => write!(f, "cannot send the request: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for ClientError<E> {}

/// Milliseconds shown as seconds (`0.25 s`, `600 s`).
struct Seconds(u32);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, ms) = (self.0 / 1000, self.0 % 1000);
        match ms {
            0 => write!(f, "{s} s"),
            _ if ms % 100 == 0 => write!(f, "{s}.{} s", ms / 100),
            _ if ms % 10 == 0 => write!(f, "{s}.{:02} s", ms / 10),
            _ => write!(f, "{s}.{ms:03} s"),
        }
    }
}

/// Where a checkpoint pull stands; keep it across a reconnect to resume at the last
/// acknowledged byte.
#[derive(Clone)]
pub struct Pull {
    offset: u32,
    checkpoint: Option<CheckpointInfo>,
    digest: Digest<'static, u32>,
    limit: u32,
}

impl Default for Pull {
    /// A pull of any size the link can announce.
    fn default() -> Self {
        Self::at_most(u32::MAX)
    }
}

impl Pull {
    /// A pull that refuses a checkpoint announced larger than `limit` bytes before taking
    /// any of it.
    pub fn at_most(limit: u32) -> Self {
        Self { offset: 0, checkpoint: None, digest: CRC32.digest(), limit }
    }

    /// Bytes received so far.
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// The checkpoint being pulled, once the first chunk arrived.
    pub fn checkpoint(&self) -> Option<CheckpointInfo> {
        self.checkpoint
    }
}

/// The requesting end of the link over any byte stream `IO`.
pub struct Client<IO, C> {
    io: IO,
    clock: C,
    policy: RetryPolicy,
    seq: u16,
    reader: FrameReader<MAX_FRAME>,
    request: [u8; MAX_FRAME],
    /// The checked bytes of the answer being handled.
    answer: [u8; MAX_FRAME],
    stats: LinkStats,
    watch: Option<Watch>,
}

type Result<T, E> = core::result::Result<T, ClientError<E>>;

impl<IO, C> Client<IO, C>
where
    IO: Read + ReadReady + Write,
    C: Clock,
{
    pub fn new(io: IO, clock: C, policy: RetryPolicy) -> Self {
        Self {
            io,
            clock,
            policy,
            seq: 0,
            reader: FrameReader::default(),
            request: [0; MAX_FRAME],
            answer: [0; MAX_FRAME],
            stats: LinkStats::default(),
            watch: None,
        }
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Holds every request from now on to `watch`'s limits (none: only the retry policy).
    pub fn set_watch(&mut self, watch: Option<Watch>) {
        self.watch = watch;
    }

    /// The limits requests are held to and where they stand.
    pub fn watch(&self) -> Option<Watch> {
        self.watch
    }

    /// Tells the watch that the operation moved on (training reported a new step): the
    /// stall timeout counts from now.
    pub fn progressed(&mut self) {
        let now = self.clock.now_ms();
        if let Some(watch) = &mut self.watch {
            watch.progressed(now);
        }
    }

    /// Fails with the limit of the watch that ran out, if one did.
    fn check_watch(&mut self, request: RequestKind) -> Result<(), IO::Error> {
        let now = self.clock.now_ms();
        match self.watch.and_then(|w| w.exceeded(now)) {
            Some((limit, ms)) => Err(ClientError::TimedOut { request, limit, ms }),
            None => Ok(()),
        }
    }

    /// Opens the conversation as `session` (keep it across reconnects so transfers resume)
    /// and checks the protocol version.
    pub fn hello(&mut self, session: u32) -> Result<DeviceInfo, IO::Error> {
        let request = Request::Hello { protocol: PROTOCOL_VERSION, session };
        self.call(&request, |answer| match answer {
            Response::Hello { protocol: PROTOCOL_VERSION, device } => Ok(device),
            Response::Hello { protocol, .. } => {
                Err(ClientError::ProtocolMismatch { host: PROTOCOL_VERSION, device: protocol })
            }
            other => Err(unexpected(RequestKind::Hello, other)),
        })
    }

    /// Hands the name of class `label` to `take`.
    pub fn class_name<R>(
        &mut self,
        label: u16,
        take: impl FnOnce(&str) -> R,
    ) -> Result<R, IO::Error> {
        self.call(&Request::ClassName { label }, |answer| match answer {
            Response::ClassName(name) => Ok(take(name)),
            other => Err(unexpected(RequestKind::ClassName, other)),
        })
    }

    pub fn clear_samples(&mut self) -> Result<(), IO::Error> {
        self.command(&Request::ClearSamples)
    }

    pub fn start_training(&mut self, config: TrainingConfig) -> Result<(), IO::Error> {
        self.command(&Request::StartTraining(config))
    }

    pub fn stop_training(&mut self) -> Result<(), IO::Error> {
        self.command(&Request::StopTraining)
    }

    pub fn progress(&mut self) -> Result<TrainingProgress, IO::Error> {
        self.call(&Request::QueryProgress, |answer| match answer {
            Response::Progress(progress) => Ok(progress),
            other => Err(unexpected(RequestKind::QueryProgress, other)),
        })
    }

    /// Sends sample `id` (RGB8 pixels of the device's sample shape). Sending the same id
    /// again after a reconnect resumes it; the device stores each sample once.
    pub fn push_sample(
        &mut self,
        id: u32,
        label: u16,
        split: Split,
        pixels: &[u8],
    ) -> Result<(), IO::Error> {
        self.send_chunks(pixels, |chunk| Request::PushSample { id, label, split, chunk }, |_| {})
    }

    /// Starts a streamed run ([`Request::StartStream`]).
    pub fn start_stream(&mut self, config: TrainingConfig) -> Result<(), IO::Error> {
        self.command(&Request::StartStream(config))
    }

    /// Streams sample `id` (RGB8 pixels of the device's sample shape), which the device
    /// trains one step on or scores with its last chunk. Ids must be new for every sample
    /// streamed; the same id again after a reconnect resumes it, never carried out twice.
    pub fn stream_sample(
        &mut self,
        id: u32,
        label: u16,
        split: Split,
        pixels: &[u8],
    ) -> Result<(), IO::Error> {
        let total = u32::try_from(pixels.len())
            .map_err(|_| ClientError::TooLarge { bytes: pixels.len() })?;
        let wrap = |chunk| Request::StreamSample { id, label, split, total, chunk };
        self.send_chunks(pixels, wrap, |_| {})
    }

    /// Ends pass `epoch` of the streamed run; returns the run's progress after it.
    pub fn end_epoch(&mut self, epoch: u16) -> Result<TrainingProgress, IO::Error> {
        self.call(&Request::EndEpoch { epoch }, |answer| match answer {
            Response::Progress(progress) => Ok(progress),
            other => Err(unexpected(RequestKind::EndEpoch, other)),
        })
    }

    /// Sends a checkpoint for the device to store; `sent` hears the bytes acknowledged so
    /// far. After a reconnect, pushing the same bytes again resumes where the device is.
    pub fn push_checkpoint(
        &mut self,
        bytes: &[u8],
        sent: impl FnMut(u32),
    ) -> Result<(), IO::Error> {
        let checkpoint =
            CheckpointInfo::of(bytes).ok_or(ClientError::TooLarge { bytes: bytes.len() })?;
        self.send_chunks(bytes, |chunk| Request::PushCheckpoint { checkpoint, chunk }, sent)
    }

    /// Pulls the device's checkpoint from `pull.offset()` to its end, handing each chunk to
    /// `sink` in order, and checks the whole against its CRC-32. After an error, the same
    /// `pull` on a new connection resumes at the last acknowledged byte.
    pub fn pull_checkpoint(
        &mut self,
        pull: &mut Pull,
        mut sink: impl FnMut(CheckpointInfo, &[u8]),
    ) -> Result<CheckpointInfo, IO::Error> {
        const KIND: RequestKind = RequestKind::PullCheckpoint;
        loop {
            if let Some(checkpoint) = pull.checkpoint.filter(|c| pull.offset == c.len) {
                let computed = pull.digest.clone().finalize();
                if computed != checkpoint.crc {
                    return Err(ClientError::ChecksumMismatch {
                        expected: checkpoint.crc,
                        computed,
                    });
                }
                return Ok(checkpoint);
            }
            let offset = pull.offset;
            let len = self.call(&Request::PullCheckpoint { offset }, |answer| {
                let Response::Checkpoint { checkpoint, offset: at, bytes } = answer else {
                    return Err(unexpected(KIND, answer));
                };
                if let Some(before) = pull.checkpoint.filter(|b| *b != checkpoint) {
                    return Err(ClientError::CheckpointChanged { before, now: checkpoint });
                }
                if checkpoint.len > pull.limit {
                    let limit = pull.limit;
                    return Err(ClientError::CheckpointTooLarge { len: checkpoint.len, limit });
                }
                let end = u64::from(at) + bytes.len() as u64;
                if at != offset || bytes.is_empty() || end > u64::from(checkpoint.len) {
                    let detail = "a chunk at another offset or outside the checkpoint";
                    return Err(ClientError::UnexpectedReply { request: KIND, detail });
                }
                pull.checkpoint = Some(checkpoint);
                pull.digest.update(bytes);
                sink(checkpoint, bytes);
                Ok(bytes.len() as u32)
            })?;
            pull.offset += len;
            self.stats.payload_bytes += u64::from(len);
        }
    }

    /// A request answered by a plain acknowledgement.
    fn command(&mut self, request: &Request<'_>) -> Result<(), IO::Error> {
        let kind = request.kind();
        self.call(request, |answer| match answer {
            Response::Ack => Ok(()),
            other => Err(unexpected(kind, other)),
        })
    }

    /// Sends `bytes` in chunks, each wrapped into a request by `wrap`, going on wherever
    /// the device says the transfer stands. At least one chunk is sent, so the device
    /// refuses an empty transfer itself.
    fn send_chunks<'b>(
        &mut self,
        bytes: &'b [u8],
        wrap: impl Fn(Chunk<'b>) -> Request<'b>,
        mut sent: impl FnMut(u32),
    ) -> Result<(), IO::Error> {
        let total =
            u32::try_from(bytes.len()).map_err(|_| ClientError::TooLarge { bytes: bytes.len() })?;
        let mut offset = 0u32;
        let mut stalls = 0;
        loop {
            let end = (offset as usize + MAX_CHUNK).min(bytes.len());
            let carried = (end - offset as usize) as u32;
            let request = wrap(Chunk { offset, bytes: &bytes[offset as usize..end] });
            let kind = request.kind();
            let timeout_ms = match end == bytes.len() {
                true => self.policy.compute_timeout_ms,
                false => self.policy.timeout_ms,
            };
            let next = self.call_waiting(&request, timeout_ms, |answer| match answer {
                Response::Received { next } if next <= total => Ok(next),
                other => Err(unexpected(kind, other)),
            })?;
            if next == offset + carried {
                self.stats.payload_bytes += u64::from(carried);
            }
            if next > offset {
                stalls = 0;
                self.progressed();
            } else {
                stalls += 1;
                if stalls > self.policy.attempts {
                    return Err(ClientError::Stalled { request: kind, offset });
                }
            }
            offset = next;
            sent(offset);
            if offset == total {
                return Ok(());
            }
        }
    }

    /// Sends `request` until its answer arrives intact (at most `policy.attempts` times) and
    /// hands the answer to `accept`.
    fn call<R>(
        &mut self,
        request: &Request<'_>,
        accept: impl FnOnce(Response<'_>) -> Result<R, IO::Error>,
    ) -> Result<R, IO::Error> {
        self.call_waiting(request, self.policy.timeout_ms, accept)
    }

    /// [`Self::call`], waiting `timeout_ms` for each answer.
    fn call_waiting<R>(
        &mut self,
        request: &Request<'_>,
        timeout_ms: u32,
        accept: impl FnOnce(Response<'_>) -> Result<R, IO::Error>,
    ) -> Result<R, IO::Error> {
        let kind = request.kind();
        self.seq = self.seq.wrapping_add(1);
        let len = encode(self.seq, request, &mut self.request).map_err(ClientError::Encode)?.len();
        for attempt in 0..self.policy.attempts {
            if attempt > 0 {
                self.stats.retries += 1;
            }
            self.check_watch(kind)?;
            self.io.write_all(&self.request[..len]).map_err(ClientError::Transport)?;
            self.io.flush().map_err(ClientError::Transport)?;
            self.stats.frames_sent += 1;
            let Some(answer_len) = self.await_answer(kind, timeout_ms)? else { continue };
            // `await_answer` parsed these bytes already.
            if let Ok((_, answer)) = parse::<Response<'_>>(&self.answer[..answer_len]) {
                let accepted = match answer {
                    Response::Error(error) => Err(ClientError::Device { request: kind, error }),
                    answer => accept(answer),
                };
                // A progress report moves on only when its content does (the caller
                // tells), a chunk only when the transfer does (`send_chunks` tells).
                let judged_later = matches!(
                    kind,
                    RequestKind::QueryProgress
                        | RequestKind::PushSample
                        | RequestKind::StreamSample
                        | RequestKind::PushCheckpoint
                );
                if accepted.is_ok() && !judged_later {
                    self.progressed();
                }
                return accepted;
            }
        }
        Err(ClientError::NoAnswer { request: kind, attempts: self.policy.attempts })
    }

    /// Reads until the answer to the current request arrives (copied into `self.answer`,
    /// its length returned), or until a nack, a damaged frame or the timeout says to send
    /// the request again (`None`).
    fn await_answer(
        &mut self,
        kind: RequestKind,
        timeout_ms: u32,
    ) -> Result<Option<usize>, IO::Error> {
        let started = self.clock.now_ms();
        while self.clock.now_ms().wrapping_sub(started) < timeout_ms {
            self.check_watch(kind)?;
            if !self.io.read_ready().map_err(ClientError::Transport)? {
                continue;
            }
            let mut byte = [0];
            if self.io.read(&mut byte).map_err(ClientError::Transport)? == 0 {
                return Err(ClientError::EndOfStream);
            }
            let Some(frame) = self.reader.push(byte[0]) else { continue };
            let Ok(data) = frame.and_then(open) else {
                self.stats.damaged_frames += 1;
                return Ok(None);
            };
            match parse::<Response<'_>>(data) {
                Ok((_, Response::Nack)) => return Ok(None),
                Ok((seq, _)) if seq == self.seq => {
                    self.stats.frames_received += 1;
                    self.answer[..data.len()].copy_from_slice(data);
                    return Ok(Some(data.len()));
                }
                Ok(_) => self.stats.frames_received += 1,
                Err(_) => match hello_from_another_version(data) {
                    Some((seq, device)) if seq == self.seq && kind == RequestKind::Hello => {
                        return Err(ClientError::ProtocolMismatch {
                            host: PROTOCOL_VERSION,
                            device,
                        });
                    }
                    _ => {
                        self.stats.damaged_frames += 1;
                        return Ok(None);
                    }
                },
            }
        }
        Ok(None)
    }
}

/// A hello answer in another protocol version: its sequence number and the device's
/// version. Every version keeps `Response::Hello { protocol, .. }` first, so this parses.
fn hello_from_another_version(data: &[u8]) -> Option<(u16, u16)> {
    let ((seq, variant, protocol), _): ((u16, u32, u16), _) =
        postcard::take_from_bytes(data).ok()?;
    (variant == 0).then_some((seq, protocol))
}

/// `answer` does not answer `request`.
fn unexpected<E>(request: RequestKind, answer: Response<'_>) -> ClientError<E> {
    let detail = match answer {
        Response::Hello { .. } => "a hello",
        Response::ClassName(_) => "a class name",
        Response::Ack => "an acknowledgement",
        Response::Received { .. } => "a chunk receipt (or one past the transfer's end)",
        Response::Progress(_) => "a progress report",
        Response::Checkpoint { .. } => "a checkpoint chunk",
        Response::Error(_) => "an error",
        Response::Nack => "a nack",
    };
    ClientError::UnexpectedReply { request, detail }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn the_watch_counts_across_a_clock_wrap_and_progress_restarts_the_stall() {
        let limits = Limits { deadline_ms: Some(1000), stall_ms: Some(300) };
        let start = u32::MAX - 100;
        let mut watch = Watch::start(limits, start);
        assert_eq!(watch.exceeded(start.wrapping_add(299)), None);
        assert_eq!(watch.exceeded(start.wrapping_add(300)), Some((Limit::Stall, 300)));
        watch.progressed(start.wrapping_add(250));
        assert_eq!(watch.exceeded(start.wrapping_add(549)), None);
        watch.progressed(start.wrapping_add(900));
        assert_eq!(watch.exceeded(start.wrapping_add(1000)), Some((Limit::Deadline, 1000)));
        assert_eq!(Watch::start(Limits::default(), 0).exceeded(u32::MAX), None);
    }

    #[test]
    fn limits_are_told_in_seconds() {
        let error = |limit, ms| {
            ClientError::<&str>::TimedOut { request: RequestKind::PushSample, limit, ms }
                .to_string()
        };
        assert_eq!(
            error(Limit::Deadline, 1_800_000),
            "gave up on push sample: the deadline of 1800 s passed"
        );
        assert_eq!(
            error(Limit::Stall, 250),
            "gave up on push sample: no progress for 0.25 s (stall timeout)"
        );
        assert!(error(Limit::Stall, 1_001).contains("1.001 s"));
    }
}
