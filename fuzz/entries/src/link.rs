//! Both ends of the device link under hostile bytes: the device's session (as the firmware
//! runs it) reading what a host sends, and the host's retrying client reading what a device
//! answers. An input is a list of records `[tag, len_lo, len_hi, bytes...]`: an even tag
//! makes `bytes` a frame's contents, sent in a valid frame (CRC-32 and COBS added, so edits
//! reach the message decoder), an odd tag sends `bytes` raw.

use std::cell::Cell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::rc::Rc;

use embedded_io::{ErrorType, Read, ReadReady, Write};
use sprout_core::checksum::CRC32;
use sprout_core::link::{
    frame, CheckpointInfo, Client, Clock, DeviceApp, DeviceError, DeviceInfo, DeviceSession,
    Polled, Pull, RetryPolicy, SampleChunk, SampleShape, Split, TrainingConfig, TrainingProgress,
    TrainingState,
};

/// The device's side: every request the records carry, served by [`App`], which checks
/// what the session promises its app. True when a pushed checkpoint was committed.
pub fn link_device(data: &[u8]) -> bool {
    let mut wire = Wire::new(wire_bytes(data));
    let mut session = DeviceSession::default();
    let mut app = App::default();
    while let Ok(Polled::Answered) = session.poll(&mut wire, &mut app) {}
    app.commits > 0
}

/// A real conversation, both directions as records: what [`link_host`] runs, answered by
/// a [`DeviceSession`] over [`App`]. Returns the host's records (a seed for
/// [`link_device`]) and the device's (a seed for [`link_host`]).
pub fn conversation() -> (Vec<u8>, Vec<u8>) {
    let mut wire = Loopback::default();
    let clock = wire.clock.clone();
    host_script(&mut wire, clock);
    (records(&wire.sent), records(&wire.answered))
}

/// The host's side: hello, class names, progress, a sample and a checkpoint pushed, a
/// checkpoint pulled, all answered by the records (the stream is asked again after it
/// runs dry, as a silent device, until the client gives up). True when the pull succeeded.
pub fn link_host(data: &[u8]) -> bool {
    let wire = Wire::new(wire_bytes(data));
    let clock = wire.clock.clone();
    host_script(wire, clock)
}

/// What the host does in [`link_host`], over `io`; whether the pull succeeded.
fn host_script<IO>(io: IO, clock: WaitClock) -> bool
where
    IO: Read + ReadReady + Write<Error = Infallible>,
{
    let policy = RetryPolicy { timeout_ms: 100, compute_timeout_ms: 200, attempts: 2 };
    let mut client = Client::new(io, clock, policy);
    let _ = client.hello(7);
    let _ = client.class_name(1, |name| name.len());
    let _ = client.progress();
    let _ = client.push_sample(1, 0, Split::Train, &[9; 3 * 8 * 8]);
    let _ = client.push_checkpoint(&[5; 700], |_| {});
    let mut pull = Pull::default();
    let mut pulled = Vec::new();
    let Ok(info) = client.pull_checkpoint(&mut pull, |_, bytes| pulled.extend(bytes)) else {
        return false;
    };
    assert_eq!(CheckpointInfo::of(&pulled), Some(info), "pulled bytes match their CRC");
    true
}

/// The bytes the records in `data` put on the wire.
fn wire_bytes(mut data: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    while let [tag, rest @ ..] = data {
        let (len, rest) = match rest {
            [lo, hi, rest @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), rest),
            _ => (rest.len(), &[][..]),
        };
        let (bytes, rest) = rest.split_at(len.min(rest.len()));
        if tag % 2 == 0 {
            let mut checked = bytes.to_vec();
            checked.extend(CRC32.checksum(bytes).to_le_bytes());
            let mut encoded = vec![0; cobs::max_encoding_length(checked.len())];
            let n = cobs::encode(&checked, &mut encoded);
            wire.extend(&encoded[..n]);
            wire.push(0);
        } else {
            wire.extend(bytes);
        }
        data = rest;
    }
    wire
}

/// The records of a frame stream (the inverse of [`wire_bytes`] for valid frames): how
/// seeds are made from a real conversation.
fn records(stream: &[u8]) -> Vec<u8> {
    let mut records = Vec::new();
    for frame in stream.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let mut frame = frame.to_vec();
        if let Ok(data) = frame::open(&mut frame) {
            records.push(0);
            records.extend((data.len() as u16).to_le_bytes());
            records.extend(data);
        }
    }
    records
}

/// A byte stream that reads a fixed script and keeps what is written.
#[derive(Default)]
struct Wire {
    incoming: VecDeque<u8>,
    written: Vec<u8>,
    clock: WaitClock,
}

impl Wire {
    fn new(incoming: Vec<u8>) -> Self {
        Self { incoming: incoming.into(), ..Self::default() }
    }
}

impl ErrorType for Wire {
    type Error = Infallible;
}

impl ReadReady for Wire {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        if self.incoming.is_empty() {
            self.clock.idle();
        }
        Ok(!self.incoming.is_empty())
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        read_from(&mut self.incoming, buf)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.written.extend(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// The host's stream with a device session on the other end, served in line: a read
/// first lets the device answer everything written so far. Keeps both directions.
#[derive(Default)]
struct Loopback {
    device: Wire,
    session: DeviceSession,
    app: App,
    sent: Vec<u8>,
    answered: Vec<u8>,
    unread: VecDeque<u8>,
    clock: WaitClock,
}

impl ErrorType for Loopback {
    type Error = Infallible;
}

impl ReadReady for Loopback {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        if self.unread.is_empty() {
            while let Ok(Polled::Answered) = self.session.poll(&mut self.device, &mut self.app) {}
            let answer = std::mem::take(&mut self.device.written);
            self.answered.extend(&answer);
            self.unread.extend(answer);
        }
        if self.unread.is_empty() {
            self.clock.idle();
        }
        Ok(!self.unread.is_empty())
    }
}

impl Read for Loopback {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        read_from(&mut self.unread, buf)
    }
}

impl Write for Loopback {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.sent.extend(buf);
        self.device.incoming.extend(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// Moves the first bytes of `from` into `buf`; returns how many.
fn read_from(from: &mut VecDeque<u8>, buf: &mut [u8]) -> Result<usize, Infallible> {
    let n = buf.len().min(from.len());
    for (slot, byte) in buf.iter_mut().zip(from.drain(..n)) {
        *slot = byte;
    }
    Ok(n)
}

/// Time that passes only while the host waits on a dry stream: 50 ms per empty poll, so a
/// silent device times out after a few polls and a long answer never does.
#[derive(Clone, Default)]
struct WaitClock(Rc<Cell<u32>>);

impl WaitClock {
    /// Notes one poll of a stream with nothing to read.
    fn idle(&self) {
        self.0.set(self.0.get().wrapping_add(50));
    }
}

impl Clock for WaitClock {
    fn now_ms(&mut self) -> u32 {
        self.0.get()
    }
}

/// Sample bytes of the fuzzed device: 8x8 RGB.
const SAMPLE: SampleShape = SampleShape { width: 8, height: 8 };
/// Classes of the fuzzed device.
const CLASSES: [&str; 3] = ["healthy", "rust", "scab"];
/// The most checkpoint bytes the fuzzed device stores.
const CHECKPOINT_ROOM: usize = 2048;

/// A device app in memory that asserts the session's guarantees: chunks in order, inside
/// their transfer, never empty, labels in range, pushed checkpoints CRC-checked.
struct App {
    sample: Vec<u8>,
    samples: u32,
    checkpoint: Vec<u8>,
    incoming: Option<(CheckpointInfo, Vec<u8>)>,
    training: bool,
    /// Checkpoints committed.
    commits: u32,
}

impl Default for App {
    fn default() -> Self {
        Self {
            sample: Vec::new(),
            samples: 0,
            checkpoint: (0..600u32).map(|i| (i * 7) as u8).collect(),
            incoming: None,
            training: false,
            commits: 0,
        }
    }
}

impl DeviceApp for App {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            model_hash: 0x5eed,
            classes: CLASSES.len() as u16,
            sample: SAMPLE,
            samples: self.samples,
            checkpoint: CheckpointInfo::of(&self.checkpoint),
            streams: false,
        }
    }

    fn class_name(&self, label: u16) -> Option<&str> {
        CLASSES.get(usize::from(label)).copied()
    }

    fn clear_samples(&mut self) -> Result<(), DeviceError> {
        self.samples = 0;
        Ok(())
    }

    fn receive_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        assert!(usize::from(chunk.label) < CLASSES.len(), "label {} passed", chunk.label);
        assert!(!chunk.bytes.is_empty(), "empty sample chunk");
        let end = u64::from(chunk.offset) + chunk.bytes.len() as u64;
        assert!(end <= u64::from(chunk.total), "sample chunk past its end");
        if chunk.offset == 0 {
            self.sample.clear();
        }
        assert_eq!(chunk.offset as usize, self.sample.len(), "sample chunk out of order");
        self.sample.extend(chunk.bytes);
        if end == u64::from(chunk.total) {
            self.samples += 1;
        }
        Ok(())
    }

    fn start_training(&mut self, _: TrainingConfig) -> Result<(), DeviceError> {
        self.training = true;
        Ok(())
    }

    fn stop_training(&mut self) {
        self.training = false;
    }

    fn progress(&self) -> TrainingProgress {
        let state = if self.training { TrainingState::Running } else { TrainingState::Idle };
        TrainingProgress { state, epoch: 1, epochs: 2, step: 3, loss: 0.5, accuracy: None }
    }

    fn read_checkpoint(&mut self, offset: u32, buf: &mut [u8]) -> Result<(), DeviceError> {
        let start = offset as usize;
        let bytes = self.checkpoint.get(start..start + buf.len()).expect("read inside");
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn begin_checkpoint(&mut self, checkpoint: CheckpointInfo) -> Result<(), DeviceError> {
        if checkpoint.len as usize > CHECKPOINT_ROOM {
            return Err(DeviceError::CheckpointTooLarge { capacity: CHECKPOINT_ROOM as u32 });
        }
        self.incoming = Some((checkpoint, Vec::new()));
        Ok(())
    }

    fn write_checkpoint(&mut self, offset: u32, bytes: &[u8]) -> Result<(), DeviceError> {
        let (info, received) = self.incoming.as_mut().expect("a checkpoint was begun");
        assert!(!bytes.is_empty(), "empty checkpoint chunk");
        assert_eq!(offset as usize, received.len(), "checkpoint chunk out of order");
        received.extend(bytes);
        assert!(received.len() <= info.len as usize, "checkpoint past its announced end");
        Ok(())
    }

    fn commit_checkpoint(&mut self) -> Result<(), DeviceError> {
        let (info, received) = self.incoming.take().expect("a checkpoint was begun");
        assert_eq!(CheckpointInfo::of(&received), Some(info), "committed unchecked bytes");
        self.checkpoint = received;
        self.commits += 1;
        Ok(())
    }
}
