//! `FakeApp`: an in-memory stand-in for the firmware behind a [`DeviceSession`]: it keeps
//! samples and one checkpoint in vectors and "trains" one epoch per progress query (or,
//! `hung`, none); one that `streams` stores no sample and ends an epoch per streamed pass
//! instead. The serving helpers run a session on a thread over a pipe or a TCP listener.

use std::cell::Cell;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use embedded_io::{Read, ReadReady, Write};
use sprout_core::link::{
    CheckpointInfo, DeviceApp, DeviceError, DeviceInfo, DeviceSession, Polled, SampleChunk,
    SampleShape, Split, TrainingConfig, TrainingProgress, TrainingState,
};
use sprout_device::StdStream;

pub const MODEL_HASH: u64 = 0x5eed_cafe_f00d_0001;
pub const CLASSES: [&str; 3] = ["healthy", "leaf_spot", "rust"];
/// 768-byte samples: two chunks each.
pub const SHAPE: SampleShape = SampleShape { width: 16, height: 16 };

pub struct FakeApp {
    /// The model hash it announces ([`MODEL_HASH`] unless a test sets a bundle's).
    pub model_hash: u64,
    /// Complete samples, in arrival order.
    pub samples: Vec<(u16, Split, Vec<u8>)>,
    partial: Vec<u8>,
    pub checkpoint: Vec<u8>,
    checkpoint_info: Option<CheckpointInfo>,
    /// The checkpoint being pushed.
    pub incoming: Vec<u8>,
    /// Offsets the host read the checkpoint at, in order.
    pub reads: Vec<u32>,
    /// How long completing a sample takes (a real device's backbone pass).
    pub compute: Duration,
    /// Training, once started, stays running at step 0 (a hung trainer).
    pub hung: bool,
    /// Trains from its input: refuses stored samples, takes streamed runs.
    pub streams: bool,
    /// Complete streamed samples, in arrival order: label and split.
    pub streamed: Vec<(u16, Split)>,
    /// Passes the streamed run in progress ended.
    passes: u16,
    training: Cell<TrainingProgress>,
}

impl FakeApp {
    pub fn new(checkpoint: Vec<u8>) -> Self {
        let idle = TrainingProgress {
            state: TrainingState::Idle,
            epoch: 0,
            epochs: 0,
            step: 0,
            loss: 0.0,
            accuracy: None,
        };
        let mut app = Self {
            model_hash: MODEL_HASH,
            samples: Vec::new(),
            partial: Vec::new(),
            checkpoint: Vec::new(),
            checkpoint_info: None,
            incoming: Vec::new(),
            reads: Vec::new(),
            compute: Duration::ZERO,
            hung: false,
            streams: false,
            streamed: Vec::new(),
            passes: 0,
            training: Cell::new(idle),
        };
        app.set_checkpoint(checkpoint);
        app
    }

    fn set_checkpoint(&mut self, bytes: Vec<u8>) {
        self.checkpoint_info = (!bytes.is_empty()).then(|| CheckpointInfo::of(&bytes).unwrap());
        self.checkpoint = bytes;
    }

    fn running(&self) -> bool {
        self.training.get().state == TrainingState::Running
    }

    /// Takes a sample's chunk; returns its pixels once the last chunk arrived (after
    /// [`FakeApp::compute`]).
    fn complete(&mut self, chunk: SampleChunk<'_>) -> Option<Vec<u8>> {
        if chunk.offset == 0 {
            self.partial.clear();
        }
        self.partial.extend_from_slice(chunk.bytes);
        if chunk.offset as usize + chunk.bytes.len() < chunk.total as usize {
            return None;
        }
        thread::sleep(self.compute);
        Some(std::mem::take(&mut self.partial))
    }
}

impl DeviceApp for FakeApp {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            model_hash: self.model_hash,
            classes: CLASSES.len() as u16,
            sample: SHAPE,
            samples: self.samples.len() as u32,
            checkpoint: self.checkpoint_info,
            streams: self.streams,
        }
    }

    fn class_name(&self, label: u16) -> Option<&str> {
        CLASSES.get(usize::from(label)).copied()
    }

    fn clear_samples(&mut self) -> Result<(), DeviceError> {
        if self.running() {
            return Err(DeviceError::Busy);
        }
        self.samples.clear();
        Ok(())
    }

    fn receive_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        if self.streams {
            return Err(DeviceError::StreamsSamples);
        }
        if let Some(pixels) = self.complete(chunk) {
            self.samples.push((chunk.label, chunk.split, pixels));
        }
        Ok(())
    }

    fn start_training(&mut self, config: TrainingConfig) -> Result<(), DeviceError> {
        if self.streams {
            return Err(DeviceError::StreamsSamples);
        }
        if self.samples.is_empty() {
            return Err(DeviceError::NoSamples);
        }
        let mut progress = self.training.get();
        progress.state = TrainingState::Running;
        (progress.epoch, progress.epochs, progress.step) = (0, config.epochs, 0);
        self.training.set(progress);
        Ok(())
    }

    fn stop_training(&mut self) {
        let mut progress = self.training.get();
        progress.state = TrainingState::Stopped;
        self.training.set(progress);
    }

    /// Each query while running a stored-sample run finishes one epoch of one step per
    /// sample.
    fn progress(&self) -> TrainingProgress {
        let mut progress = self.training.get();
        if progress.state == TrainingState::Running && !self.hung && !self.streams {
            progress.epoch += 1;
            progress.step += self.samples.len() as u32;
            progress.loss = 1.0 / f32::from(progress.epoch);
            progress.accuracy = Some(1.0 - progress.loss / 2.0);
            if progress.epoch >= progress.epochs {
                progress.state = TrainingState::Finished;
            }
            self.training.set(progress);
        }
        progress
    }

    fn read_checkpoint(&mut self, offset: u32, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.reads.push(offset);
        let start = offset as usize;
        buf.copy_from_slice(&self.checkpoint[start..start + buf.len()]);
        Ok(())
    }

    fn begin_checkpoint(&mut self, checkpoint: CheckpointInfo) -> Result<(), DeviceError> {
        if self.running() {
            return Err(DeviceError::Busy);
        }
        self.incoming = Vec::with_capacity(checkpoint.len as usize);
        Ok(())
    }

    fn write_checkpoint(&mut self, offset: u32, bytes: &[u8]) -> Result<(), DeviceError> {
        assert_eq!(offset as usize, self.incoming.len(), "the session delivers chunks in order");
        self.incoming.extend_from_slice(bytes);
        Ok(())
    }

    fn commit_checkpoint(&mut self) -> Result<(), DeviceError> {
        let bytes = std::mem::take(&mut self.incoming);
        self.set_checkpoint(bytes);
        Ok(())
    }

    fn start_stream(&mut self, config: TrainingConfig) -> Result<(), DeviceError> {
        if !self.streams {
            return Err(DeviceError::NotStreamed);
        }
        if self.running() {
            return Err(DeviceError::Busy);
        }
        let mut progress = self.training.get();
        progress.state = match config.epochs {
            0 => TrainingState::Finished,
            _ => TrainingState::Running,
        };
        (progress.epoch, progress.epochs, progress.step) = (0, config.epochs, 0);
        self.training.set(progress);
        self.passes = 0;
        Ok(())
    }

    /// A training sample counts a step when complete.
    fn stream_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        if !self.streams || !self.running() {
            return Err(DeviceError::NoStream);
        }
        if self.complete(chunk).is_some() {
            self.streamed.push((chunk.label, chunk.split));
            if chunk.split == Split::Train {
                let mut progress = self.training.get();
                progress.step += 1;
                self.training.set(progress);
            }
        }
        Ok(())
    }

    /// Pass 0 scores 25 %, epoch `e` has loss `1 / e` and accuracy `1 - 1 / 2e`.
    fn end_epoch(&mut self, epoch: u16) -> Result<TrainingProgress, DeviceError> {
        if !self.streams {
            return Err(DeviceError::NoStream);
        }
        if epoch < self.passes {
            return Ok(self.training.get());
        }
        if !self.running() {
            return Err(DeviceError::NoStream);
        }
        if epoch > self.passes {
            return Err(DeviceError::WrongEpoch { device: self.passes, host: epoch });
        }
        self.passes += 1;
        let mut progress = self.training.get();
        progress.accuracy = Some(0.25);
        if epoch > 0 {
            progress.epoch = epoch;
            progress.loss = 1.0 / f32::from(epoch);
            progress.accuracy = Some(1.0 - progress.loss / 2.0);
        }
        if epoch >= progress.epochs {
            progress.state = TrainingState::Finished;
        }
        self.training.set(progress);
        Ok(progress)
    }
}

/// Serves `io` with `session` until the stream ends, fails, or `stop` says so.
pub fn serve<IO: Read + ReadReady + Write>(
    session: &mut DeviceSession,
    app: &Mutex<FakeApp>,
    io: &mut IO,
    stop: impl Fn(&FakeApp) -> bool,
) {
    loop {
        let mut app = app.lock().unwrap();
        match session.poll(io, &mut *app) {
            Ok(Polled::Answered | Polled::Idle) if !stop(&app) => {}
            _ => return,
        }
        drop(app);
        thread::yield_now();
    }
}

/// A device on a thread, serving one in-memory stream.
pub fn spawn_device<IO>(app: Arc<Mutex<FakeApp>>, mut io: IO) -> JoinHandle<()>
where
    IO: Read + ReadReady + Write + Send + 'static,
{
    thread::spawn(move || serve(&mut DeviceSession::default(), &app, &mut io, |_| false))
}

/// A device on a thread behind a TCP listener on a free local port (returned), keeping one
/// session across connections. The first connection is dropped as soon as `cut` holds.
pub fn spawn_tcp_device(
    app: Arc<Mutex<FakeApp>>,
    cut: impl Fn(&FakeApp) -> bool + Send + 'static,
) -> u16 {
    spawn_tcp(app, cut, false)
}

/// [`spawn_tcp_device`], but once `cut` holds the first connection goes deaf instead of
/// closing: what arrives on it is read and never answered until the host closes it, and
/// only then is the next connection taken, one client at a time (as QEMU's serial socket
/// does).
pub fn spawn_tcp_device_going_deaf(
    app: Arc<Mutex<FakeApp>>,
    cut: impl Fn(&FakeApp) -> bool + Send + 'static,
) -> u16 {
    spawn_tcp(app, cut, true)
}

fn spawn_tcp(
    app: Arc<Mutex<FakeApp>>,
    cut: impl Fn(&FakeApp) -> bool + Send + 'static,
    deaf: bool,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut session = DeviceSession::default();
        for (connection, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            stream.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut io = StdStream::new(stream);
            serve(&mut session, &app, &mut io, |app| connection == 0 && cut(app));
            while deaf && connection == 0 && io.read(&mut [0; 64]).is_ok_and(|n| n > 0) {}
        }
    });
    port
}
