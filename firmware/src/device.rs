//! The firmware's side of the host link: [`DeviceTrainer`] serves `sprout_core::link`'s
//! [`DeviceApp`] from a [`Trainer`] and a [`CheckpointStore`]. Pushed RGB8 pictures go,
//! normalized, straight into the backbone's input and are cached as features when
//! complete; training runs a few batches per [`DeviceTrainer::train_batches`] call from
//! the main loop, between link polls, so the link answers (progress: "running", with the
//! updates so far) however long an epoch takes; every new best checkpoint is saved to
//! flash and is what a pull sends. Checkpoints are the trainer's bytes
//! ([`sprout_core::format::device_checkpoint`]).
//!
//! A run first measures the held-out accuracy of the head as it is (reported as epoch 0),
//! which also becomes the run's best checkpoint so far (a previous run's best, scored on
//! other held-out samples, is forgotten), then decays the learning rate along a half cosine over its epochs, from the host's rate
//! (or the bundle's) towards zero, so the last epochs settle instead of jumping between
//! minima.
//!
//! A bundle that trains from its input ([`sprout_core::format::bundle::Bundle::streams`])
//! stores no sample: the host drives a streamed run ([`DeviceApp::start_stream`]), sending
//! the held-out samples (the start's accuracy, pass 0), then every epoch the training
//! samples, each trained on as its last chunk arrives, and the held-out ones again, each
//! pass closed by [`DeviceApp::end_epoch`], which keeps and saves the best checkpoint as a
//! stored run's epochs do.

use embedded_storage::nor_flash::NorFlash;
use sprout_core::link::{
    self, DeviceApp, DeviceError, DeviceInfo, SampleChunk, SampleShape, Split, TrainingConfig,
    TrainingProgress, TrainingState,
};
use sprout_core::schedule::{CosineWithWarmup, Schedule};
use sprout_core::{Host, Kernels};

use crate::storage::CheckpointStore;
use crate::trainer::{EpochReport, Log, StreamedPass, Trainer, TrainerError};
use sprout_core::format::bundle::PixelNormalization;

/// Why a [`DeviceTrainer`] could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupError {
    /// The model's input is not an RGB picture (`[3, height, width]`), which the link sends.
    NotAPicture,
    /// The checkpoint buffers hold fewer bytes than a checkpoint of this model.
    CheckpointBuffer { needed: usize, available: usize },
}

impl core::fmt::Display for SetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetupError::NotAPicture => f.write_str("the model's input is not a [3, H, W] picture"),
            SetupError::CheckpointBuffer { needed, available } => write!(
                f,
                "a checkpoint takes {needed} bytes, the checkpoint buffers hold {available}"
            ),
        }
    }
}

impl core::error::Error for SetupError {}

/// The training run the host started.
#[derive(Clone, Copy, Debug)]
struct Run {
    state: TrainingState,
    /// The host streams the samples ([`DeviceApp::start_stream`]).
    streamed: bool,
    epochs: u16,
    /// The trainer's epoch count and update count when the run started.
    first_epoch: u32,
    first_step: u32,
    /// The learning rate of the run's first epoch (see [`Run::learning_rate`]).
    base_rate: f32,
    /// Held-out accuracy of the head before the run's first epoch.
    initial_accuracy: Option<f32>,
    last: Option<EpochReport>,
}

/// A [`Trainer`] served over the link, with its checkpoints in flash.
pub struct DeviceTrainer<'b, 's, 'm, K, F> {
    trainer: Trainer<'b, 's, 'm, K>,
    store: CheckpointStore<F>,
    shape: SampleShape,
    pixels: PixelNormalization,
    /// The checkpoint a pull sends (the best so far, or restored, or pushed).
    checkpoint: &'m mut [u8],
    current: Option<link::CheckpointInfo>,
    /// A pushed checkpoint being received.
    incoming: &'m mut [u8],
    incoming_len: usize,
    /// The epoch of the best checkpoint last saved.
    saved_epoch: Option<u32>,
    run: Run,
}

impl<'b, 's, 'm, K: Kernels<Memory = Host> + Clone, F: NorFlash> DeviceTrainer<'b, 's, 'm, K, F> {
    /// Serves `trainer`; `checkpoint` and `incoming` each hold one checkpoint of its model.
    /// The newest checkpoint in `store` that fits the model is restored.
    pub fn new(
        mut trainer: Trainer<'b, 's, 'm, K>,
        mut store: CheckpointStore<F>,
        checkpoint: &'m mut [u8],
        incoming: &'m mut [u8],
    ) -> Result<Self, SetupError> {
        let bundle = trainer.bundle();
        let shape = match bundle.header.sample_shape.dims() {
            [3, h, w] => match (u16::try_from(*w), u16::try_from(*h)) {
                (Ok(width), Ok(height)) => SampleShape { width, height },
                _ => return Err(SetupError::NotAPicture),
            },
            _ => return Err(SetupError::NotAPicture),
        };
        let needed = sprout_core::format::device_checkpoint::CHECKPOINT_HEADER_BYTES
            + bundle.initial_state.len();
        let available = checkpoint.len().min(incoming.len());
        if available < needed {
            return Err(SetupError::CheckpointBuffer { needed, available });
        }
        let pixels = bundle.header.pixels;
        let mut current = None;
        if let Ok(Some(stored)) = store.load(checkpoint) {
            if trainer.restore(&checkpoint[..stored.len]).is_ok() {
                current = link::CheckpointInfo::of(&checkpoint[..stored.len]);
            }
        }
        let saved_epoch = trainer.best().map(|(info, _)| info.epoch);
        let run = Run {
            state: TrainingState::Idle,
            streamed: false,
            epochs: 0,
            first_epoch: trainer.epoch(),
            first_step: 0,
            base_rate: 0.0,
            initial_accuracy: None,
            last: None,
        };
        Ok(Self {
            trainer,
            store,
            shape,
            pixels,
            checkpoint,
            current,
            incoming,
            incoming_len: 0,
            saved_epoch,
            run,
        })
    }

    /// Whether a training run is going on.
    pub fn is_training(&self) -> bool {
        self.run.state == TrainingState::Running
    }

    /// Held-out accuracy of the head when the current (or last) run started.
    pub fn initial_accuracy(&self) -> Option<f32> {
        self.run.initial_accuracy
    }

    /// Whether the current (or last) run is streamed.
    pub fn is_streamed(&self) -> bool {
        self.run.streamed
    }

    /// The report of the current (or last) run's last epoch.
    pub fn last_epoch(&self) -> Option<EpochReport> {
        self.run.last
    }

    /// The trainer, e.g. to evaluate.
    pub fn trainer(&mut self) -> &mut Trainer<'b, 's, 'm, K> {
        &mut self.trainer
    }

    /// Trains at most `batches` batches (training or held-out ones) of the current epoch
    /// when a run is going on; returns the epoch's report when it ended with them, after
    /// saving a new best checkpoint to flash. A failed epoch or save ends the run as failed.
    /// The main loop calls it between link polls, so a few batches keep the link answering.
    /// A streamed run trains as its samples arrive, not here.
    pub fn train_batches(
        &mut self,
        batches: usize,
        log: &mut impl Log,
    ) -> Option<Result<Option<EpochReport>, TrainerError>> {
        if !self.is_training() || self.run.streamed {
            return None;
        }
        self.set_epoch_rate();
        match self.trainer.train_batches(batches, log) {
            Ok(None) => Some(Ok(None)),
            Ok(Some(report)) => {
                self.epoch_ended(report);
                Some(Ok(Some(report)))
            }
            Err(e) => {
                self.run.state = TrainingState::Failed;
                Some(Err(e))
            }
        }
    }

    /// Sets the learning rate of the epoch in progress.
    fn set_epoch_rate(&mut self) {
        let done = self.trainer.epoch().saturating_sub(self.run.first_epoch);
        self.trainer.set_learning_rate(self.run.learning_rate(done));
    }

    /// Ends the run as failed on a non-finite loss, else saves a new best checkpoint (a
    /// failed save fails the run) and finishes the run after its last epoch.
    fn epoch_ended(&mut self, report: EpochReport) {
        if !report.loss.is_finite() {
            self.run.state = TrainingState::Failed;
            return;
        }
        self.run.last = Some(report);
        if self.save_best().is_err() {
            self.run.state = TrainingState::Failed;
        } else if self.trainer.epoch() - self.run.first_epoch >= u32::from(self.run.epochs) {
            self.run.state = TrainingState::Finished;
        }
    }

    /// Passes of the streamed run ended so far: the start's evaluation, then its epochs.
    fn passes_ended(&self) -> u32 {
        match self.run.initial_accuracy {
            None => 0,
            Some(_) => 1 + self.trainer.epoch().saturating_sub(self.run.first_epoch),
        }
    }

    /// Encodes the trainer's best checkpoint and saves it, unless it is saved already.
    fn save_best(&mut self) -> Result<(), ()> {
        let Some((info, _)) = self.trainer.best() else { return Ok(()) };
        if self.saved_epoch == Some(info.epoch) {
            return Ok(());
        }
        let len = self.trainer.encode_best(self.checkpoint).map_err(|_| ())?;
        self.current = link::CheckpointInfo::of(&self.checkpoint[..len]);
        self.saved_epoch = Some(info.epoch);
        self.store.save(&self.checkpoint[..len]).map(|_| ()).map_err(|_| ())
    }

    /// Writes a chunk of RGB8 bytes (interleaved, row-major) at byte `offset` of the picture
    /// into the backbone's input: channel planes, normalized.
    fn place_pixels(&mut self, offset: u32, bytes: &[u8]) -> Result<(), DeviceError> {
        let plane = usize::from(self.shape.width) * usize::from(self.shape.height);
        let PixelNormalization { mean, std } = self.pixels;
        let input = self.trainer.sample_input().map_err(|_| DeviceError::Failed)?;
        for (i, &byte) in bytes.iter().enumerate() {
            let at = (offset as usize).saturating_add(i);
            let (pixel, channel) = (at / 3, at % 3);
            let value = input.get_mut(channel * plane + pixel).ok_or(DeviceError::Failed)?;
            *value = (f32::from(byte) / 255.0 - mean[channel]) / std[channel];
        }
        Ok(())
    }
}

impl<K: Kernels<Memory = Host> + Clone, F: NorFlash> DeviceApp for DeviceTrainer<'_, '_, '_, K, F> {
    fn info(&self) -> DeviceInfo {
        let bundle = self.trainer.bundle();
        let (train, held_out) = self.trainer.samples();
        DeviceInfo {
            model_hash: bundle.header.model_hash,
            classes: bundle.classes() as u16,
            sample: self.shape,
            samples: (train + held_out) as u32,
            checkpoint: self.current,
            streams: bundle.streams(),
        }
    }

    fn class_name(&self, label: u16) -> Option<&str> {
        self.trainer.bundle().header.class_names.get(usize::from(label)).copied()
    }

    fn clear_samples(&mut self) -> Result<(), DeviceError> {
        if self.is_training() {
            return Err(DeviceError::Busy);
        }
        self.trainer.clear_samples();
        Ok(())
    }

    fn receive_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        if self.is_training() {
            return Err(DeviceError::Busy);
        }
        if self.trainer.bundle().streams() {
            return Err(DeviceError::StreamsSamples);
        }
        let held_out = chunk.split == Split::Validation;
        let (train, validation) = self.trainer.samples();
        let (train_capacity, validation_capacity) = self.trainer.capacity();
        let (have, capacity) = match held_out {
            true => (validation, validation_capacity),
            false => (train, train_capacity),
        };
        if have >= capacity {
            return Err(DeviceError::SamplesFull { capacity: capacity as u32 });
        }
        self.place_pixels(chunk.offset, chunk.bytes)?;
        if chunk.offset as usize + chunk.bytes.len() < chunk.total as usize {
            return Ok(());
        }
        match self.trainer.add_staged_sample(i32::from(chunk.label), held_out) {
            Ok(()) => Ok(()),
            Err(TrainerError::Full { capacity }) => {
                Err(DeviceError::SamplesFull { capacity: capacity as u32 })
            }
            Err(_) => Err(DeviceError::Failed),
        }
    }

    fn start_training(&mut self, config: TrainingConfig) -> Result<(), DeviceError> {
        if self.is_training() {
            return Err(DeviceError::Busy);
        }
        if self.trainer.bundle().streams() {
            return Err(DeviceError::StreamsSamples);
        }
        let (train, held_out) = self.trainer.samples();
        if train < self.trainer.bundle().head_batch() || held_out == 0 {
            return Err(DeviceError::NoSamples);
        }
        let learning_rate =
            config.learning_rate.unwrap_or(self.trainer.bundle().header.learning_rate);
        let initial_accuracy = self.trainer.evaluate().map_err(|_| DeviceError::Failed)?;
        // The run's best starts as its starting head, scored on this run's held-out samples
        // (a previous run's best was scored on others); it is saved after the first epoch.
        self.trainer.reset_best(initial_accuracy);
        // A stopped run's unfinished epoch is not this run's.
        self.trainer.abandon_epoch();
        self.saved_epoch = None;
        self.run = Run {
            state: TrainingState::Running,
            streamed: false,
            epochs: config.epochs,
            first_epoch: self.trainer.epoch(),
            first_step: self.trainer.updates(),
            base_rate: learning_rate,
            initial_accuracy: Some(initial_accuracy),
            last: None,
        };
        if config.epochs == 0 {
            self.run.state = TrainingState::Finished;
        }
        Ok(())
    }

    fn stop_training(&mut self) {
        if self.is_training() {
            self.run.state = TrainingState::Stopped;
        }
    }

    fn progress(&self) -> TrainingProgress {
        let epoch = self.trainer.epoch().saturating_sub(self.run.first_epoch);
        let running = self.run.state == TrainingState::Running;
        TrainingProgress {
            state: self.run.state,
            epoch: u16::try_from(epoch).unwrap_or(u16::MAX),
            epochs: self.run.epochs,
            // Updates so far while running (an epoch may take many polls), else the last
            // epoch's.
            step: match running {
                true => self.trainer.updates(),
                false => self.run.last.map_or(self.run.first_step, |r| r.step),
            }
            .saturating_sub(self.run.first_step),
            // While running, the loss so far of the epoch in progress (once it trained a
            // batch), else the last finished epoch's.
            loss: (self.trainer.epoch_loss().filter(|_| running))
                .or(self.run.last.map(|r| r.loss))
                .or(self.trainer.epoch_loss())
                .unwrap_or(0.0),
            accuracy: self.run.last.map(|r| r.accuracy).or(self.run.initial_accuracy),
        }
    }

    fn read_checkpoint(&mut self, offset: u32, buf: &mut [u8]) -> Result<(), DeviceError> {
        let len = self.current.map_or(0, |c| c.len as usize);
        let start = offset as usize;
        let end = start.saturating_add(buf.len());
        let bytes = self
            .checkpoint
            .get(start..end)
            .filter(|_| end <= len)
            .ok_or(DeviceError::NoCheckpoint)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn begin_checkpoint(&mut self, checkpoint: link::CheckpointInfo) -> Result<(), DeviceError> {
        if self.is_training() {
            return Err(DeviceError::Busy);
        }
        if checkpoint.len as usize > self.incoming.len() {
            return Err(DeviceError::CheckpointTooLarge { capacity: self.incoming.len() as u32 });
        }
        self.incoming_len = checkpoint.len as usize;
        Ok(())
    }

    fn write_checkpoint(&mut self, offset: u32, bytes: &[u8]) -> Result<(), DeviceError> {
        let start = offset as usize;
        let end = start.saturating_add(bytes.len());
        let total = self.incoming_len as u32;
        let target = self
            .incoming
            .get_mut(start..end)
            .filter(|_| end <= self.incoming_len)
            .ok_or(DeviceError::OutOfRange { offset, len: bytes.len() as u32, total })?;
        target.copy_from_slice(bytes);
        Ok(())
    }

    fn start_stream(&mut self, config: TrainingConfig) -> Result<(), DeviceError> {
        if self.is_training() {
            return Err(DeviceError::Busy);
        }
        if !self.trainer.bundle().streams() {
            return Err(DeviceError::NotStreamed);
        }
        let learning_rate =
            config.learning_rate.unwrap_or(self.trainer.bundle().header.learning_rate);
        // Until pass 0 scores it, the starting state is the run's best (at no accuracy): a
        // previous run's best was scored on other held-out samples.
        self.trainer.reset_best(0.0);
        self.trainer.abandon_epoch();
        self.saved_epoch = None;
        self.run = Run {
            state: TrainingState::Running,
            streamed: true,
            epochs: config.epochs,
            first_epoch: self.trainer.epoch(),
            first_step: self.trainer.updates(),
            base_rate: learning_rate,
            initial_accuracy: None,
            last: None,
        };
        if config.epochs == 0 {
            self.run.state = TrainingState::Finished;
        }
        Ok(())
    }

    fn stream_sample(&mut self, chunk: SampleChunk<'_>) -> Result<(), DeviceError> {
        if !self.run.streamed || !self.is_training() {
            return Err(DeviceError::NoStream);
        }
        let pass = self.passes_ended();
        if chunk.split == Split::Train && pass == 0 {
            // Training before the start was scored: the host skipped pass 0.
            return Err(DeviceError::WrongEpoch { device: 0, host: 1 });
        }
        self.place_pixels(chunk.offset, chunk.bytes)?;
        if chunk.offset as usize + chunk.bytes.len() < chunk.total as usize {
            return Ok(());
        }
        let label = i32::from(chunk.label);
        let done = match chunk.split {
            Split::Train => {
                self.set_epoch_rate();
                self.trainer.train_streamed(label).map(|_| ())
            }
            Split::Validation => self.trainer.evaluate_streamed(label).map(|_| ()),
        };
        done.map_err(|_| {
            self.run.state = TrainingState::Failed;
            DeviceError::Failed
        })
    }

    fn end_epoch(&mut self, epoch: u16) -> Result<TrainingProgress, DeviceError> {
        if !self.run.streamed || self.run.state == TrainingState::Idle {
            return Err(DeviceError::NoStream);
        }
        let next = self.passes_ended();
        if u32::from(epoch) < next {
            return Ok(self.progress());
        }
        if !self.is_training() {
            return Err(DeviceError::NoStream);
        }
        if u32::from(epoch) > next {
            let device = u16::try_from(next).unwrap_or(u16::MAX);
            return Err(DeviceError::WrongEpoch { device, host: epoch });
        }
        match self.trainer.end_streamed_pass(&mut ()) {
            Ok(StreamedPass::Evaluated(accuracy)) if next == 0 => {
                self.trainer.reset_best(accuracy);
                self.run.initial_accuracy = Some(accuracy);
            }
            Ok(StreamedPass::Evaluated(_)) => return Err(DeviceError::NoSamples),
            Ok(StreamedPass::Epoch(report)) => self.epoch_ended(report),
            Err(_) => return Err(DeviceError::NoSamples),
        }
        Ok(self.progress())
    }

    fn commit_checkpoint(&mut self) -> Result<(), DeviceError> {
        let bytes = &self.incoming[..self.incoming_len];
        let kept = self.checkpoint.get_mut(..bytes.len()).ok_or(DeviceError::CheckpointRejected)?;
        let info = self.trainer.restore(bytes).map_err(|_| DeviceError::CheckpointRejected)?;
        kept.copy_from_slice(bytes);
        self.current = link::CheckpointInfo::of(bytes);
        self.saved_epoch = Some(info.epoch);
        self.run.first_epoch = self.trainer.epoch();
        self.store.save(bytes).map(|_| ()).map_err(|_| DeviceError::Storage)
    }
}

impl Run {
    /// The learning rate after `done` of the run's epochs: its base rate at the first
    /// epoch, decaying along a half cosine to zero after `epochs` (the schedule counts
    /// epochs, not updates).
    fn learning_rate(&self, done: u32) -> f32 {
        let schedule = CosineWithWarmup {
            base: self.base_rate,
            min: 0.0,
            warmup: 0,
            total: self.epochs.into(),
        };
        schedule.learning_rate(done)
    }
}
