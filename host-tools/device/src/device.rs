//! `Device`: a connected device, from the host. It opens the port, says hello, and runs each
//! request through the link's retrying client; when the link fails (no answer, a closed
//! socket) it reconnects under the same session id, so a transfer resumes where it stood.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::thread;
use std::time::Duration;

use sprout_core::link::{
    CheckpointInfo, Client, ClientError, Clock, DeviceInfo, Limits, LinkStats, Pull, RetryPolicy,
    Split, TrainingConfig, TrainingProgress, TrainingState, Watch,
};

use crate::clock::StdClock;
use crate::error::LinkError;
use crate::port::{self, Port, PortSpec};

type LinkClient = Client<Port, StdClock>;

/// How long the stop sent after giving up on training may take.
const STOP_GRACE_MS: u32 = 2_000;
type LinkResult<T> = Result<T, ClientError<std::io::Error>>;

/// How to reach a device and how hard to try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    pub policy: RetryPolicy,
    /// Times one operation may reopen the port after the link failed.
    pub reconnects: u32,
    /// The deadline (from connecting) and stall timeout of everything done with the device.
    pub limits: Limits,
}

impl Default for ConnectOptions {
    /// Two reconnects; no deadline, a device stalled for two minutes is given up on.
    fn default() -> Self {
        let limits = Limits { deadline_ms: None, stall_ms: Some(120_000) };
        Self { policy: RetryPolicy::default(), reconnects: 2, limits }
    }
}

/// A device on the other end of a port.
pub struct Device {
    spec: PortSpec,
    options: ConnectOptions,
    session: u32,
    /// The clock of every connection, so the limits count across reconnects.
    clock: StdClock,
    client: LinkClient,
    info: DeviceInfo,
    /// Link statistics of the connections before the current one.
    earlier: LinkStats,
    reconnects: u32,
}

impl Device {
    /// Opens `spec` and says hello: fails on an unreachable port, a silent device or another
    /// protocol version.
    pub fn connect(spec: PortSpec, options: ConnectOptions) -> Result<Self, LinkError> {
        // A session id this device has not seen: it starts with fresh transfers.
        let session = RandomState::new().hash_one(std::process::id()) as u32;
        let mut clock = StdClock::default();
        let watch = Watch::start(options.limits, clock.now_ms());
        let mut client = Client::new(spec.open()?, clock, options.policy);
        client.set_watch(Some(watch));
        let info = client.hello(session).map_err(|source| link(&spec, source))?;
        Ok(Self {
            spec,
            options,
            session,
            clock,
            client,
            info,
            earlier: LinkStats::default(),
            reconnects: 0,
        })
    }

    /// What the device said in its last hello.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Everything that crossed the link, over all connections.
    pub fn stats(&self) -> LinkStats {
        let (a, b) = (self.earlier, self.client.stats());
        LinkStats {
            frames_sent: a.frames_sent + b.frames_sent,
            retries: a.retries + b.retries,
            frames_received: a.frames_received + b.frames_received,
            damaged_frames: a.damaged_frames + b.damaged_frames,
            payload_bytes: a.payload_bytes + b.payload_bytes,
        }
    }

    /// How often the port was reopened.
    pub fn reconnects(&self) -> u32 {
        self.reconnects
    }

    /// The device's class names, in label order.
    pub fn class_names(&mut self) -> Result<Vec<String>, LinkError> {
        (0..self.info.classes)
            .map(|label| self.retrying(|c| c.class_name(label, str::to_owned)))
            .collect()
    }

    pub fn clear_samples(&mut self) -> Result<(), LinkError> {
        self.retrying(|c| c.clear_samples())
    }

    /// Stops the training run the device is on, one a host that went away (a killed
    /// `sprout train` or service) started and the device went on with; returns its last
    /// report, or `None` when the device was not training.
    pub fn stop_running_training(&mut self) -> Result<Option<TrainingProgress>, LinkError> {
        let report = self.retrying(|c| c.progress())?;
        if report.state != TrainingState::Running {
            return Ok(None);
        }
        self.retrying(|c| c.stop_training())?;
        Ok(Some(report))
    }

    /// Sends one sample (RGB8 pixels of the device's sample shape) under `id`.
    pub fn push_sample(
        &mut self,
        id: u32,
        label: u16,
        split: Split,
        pixels: &[u8],
    ) -> Result<(), LinkError> {
        self.retrying(|c| c.push_sample(id, label, split, pixels))
    }

    /// Starts training and polls its progress every `poll` until it ends, telling
    /// `progress` each report; returns the last one. Training that reports the same epoch,
    /// step and state for the stall timeout counts as stalled. When the host gives up (the
    /// deadline passed, or training stalled) it asks the device to stop, for at most two
    /// seconds more, so the device is not left training for no one.
    pub fn train(
        &mut self,
        config: TrainingConfig,
        poll: Duration,
        progress: impl FnMut(&TrainingProgress),
    ) -> Result<TrainingProgress, LinkError> {
        self.stop_if_given_up(|device| device.poll_training(config, poll, progress))
    }

    /// Runs `run`; when the host gave up on it (the deadline passed, or the device stalled)
    /// asks the device to stop, for at most two seconds more, so it does not train for no
    /// one.
    pub(crate) fn stop_if_given_up<R>(
        &mut self,
        run: impl FnOnce(&mut Self) -> Result<R, LinkError>,
    ) -> Result<R, LinkError> {
        let result = run(self);
        let gave_up = matches!(
            &result,
            Err(LinkError::Link {
                source: ClientError::TimedOut { .. } | ClientError::Stalled { .. },
                ..
            })
        );
        if gave_up {
            let watch = self.client.watch();
            let grace = Limits { deadline_ms: Some(STOP_GRACE_MS), stall_ms: None };
            self.client.set_watch(Some(Watch::start(grace, self.clock.now_ms())));
            // The timeout is what the caller hears; a device that does not take the stop
            // either is no worse off than before.
            let _ = self.client.stop_training();
            self.client.set_watch(watch);
        }
        result
    }

    /// [`Device::train`] up to its end or the first failure.
    fn poll_training(
        &mut self,
        config: TrainingConfig,
        poll: Duration,
        mut progress: impl FnMut(&TrainingProgress),
    ) -> Result<TrainingProgress, LinkError> {
        // Polls come at least twice per stall timeout, so a device moving on is seen to.
        let half_stall =
            self.options.limits.stall_ms.map(|ms| Duration::from_millis(u64::from(ms) / 2));
        let poll = half_stall.map_or(poll, |half| poll.min(half));
        self.retrying(|c| c.start_training(config))?;
        let mut last = None;
        loop {
            thread::sleep(poll);
            let report = self.retrying(|c| c.progress())?;
            let now = (report.state, report.epoch, report.step);
            if last.replace(now) != Some(now) {
                self.client.progressed();
            }
            progress(&report);
            match report.state {
                TrainingState::Idle | TrainingState::Running => continue,
                TrainingState::Finished | TrainingState::Stopped => return Ok(report),
                TrainingState::Failed => {
                    return Err(LinkError::TrainingFailed { epoch: report.epoch })
                }
            }
        }
    }

    /// Pulls the device's checkpoint, CRC-checked, refusing one announced larger than
    /// `limit` bytes before taking any of it; `received` hears the bytes so far and the
    /// total. Resumes across reconnects at the last acknowledged byte.
    pub fn pull_checkpoint(
        &mut self,
        limit: u32,
        mut received: impl FnMut(u32, u32),
    ) -> Result<(Vec<u8>, CheckpointInfo), LinkError> {
        let mut pull = Pull::at_most(limit);
        let mut bytes = Vec::new();
        let checkpoint = self.retrying(|c| {
            c.pull_checkpoint(&mut pull, |checkpoint, chunk| {
                // The announced length is at most `limit`, checked before this chunk.
                bytes.reserve_exact((checkpoint.len as usize).saturating_sub(bytes.len()));
                bytes.extend_from_slice(chunk);
                received(bytes.len() as u32, checkpoint.len);
            })
        })?;
        Ok((bytes, checkpoint))
    }

    /// Sends a checkpoint for the device to store; `sent` hears the bytes acknowledged.
    pub fn push_checkpoint(
        &mut self,
        bytes: &[u8],
        mut sent: impl FnMut(u32),
    ) -> Result<(), LinkError> {
        self.retrying(|c| c.push_checkpoint(bytes, &mut sent))
    }

    /// Runs `operation`, reconnecting (at most `options.reconnects` times) when the link
    /// fails, then running it again: operations keep their progress outside the client.
    pub(crate) fn retrying<R>(
        &mut self,
        mut operation: impl FnMut(&mut LinkClient) -> LinkResult<R>,
    ) -> Result<R, LinkError> {
        let mut reconnects = 0;
        loop {
            match operation(&mut self.client) {
                Err(e) if link_failed(&e) && reconnects < self.options.reconnects => {
                    reconnects += 1;
                    self.reconnect()?;
                }
                result => return result.map_err(|source| link(&self.spec, source)),
            }
        }
    }

    /// Closes the connection, then opens a new one and says hello. The old connection goes
    /// first: QEMU's serial socket serves one client at a time (a second one is never read
    /// while the first is open) and a serial port may be opened exclusively.
    fn reconnect(&mut self) -> Result<(), LinkError> {
        self.earlier = self.stats();
        let watch = self.client.watch();
        let closed = Client::new(port::closed(), self.clock, self.options.policy);
        drop(std::mem::replace(&mut self.client, closed));
        let mut client = Client::new(self.spec.open()?, self.clock, self.options.policy);
        client.set_watch(watch);
        self.info = client.hello(self.session).map_err(|source| link(&self.spec, source))?;
        self.client = client;
        self.reconnects += 1;
        Ok(())
    }
}

/// Whether reopening the port could help.
fn link_failed(e: &ClientError<std::io::Error>) -> bool {
    matches!(e, ClientError::NoAnswer { .. } | ClientError::EndOfStream | ClientError::Transport(_))
}

fn link(spec: &PortSpec, source: ClientError<std::io::Error>) -> LinkError {
    LinkError::Link { port: spec.name(), source }
}
