//! The on-device trainer: runs the frozen backbone once per labeled sample and caches its
//! features, trains the head for epochs over the cache with the bundle's training plan,
//! evaluates held-out samples with the evaluation plan (dropout off) and keeps the best
//! state. An epoch can run a few batches at a time ([`Trainer::train_batches`]), so a
//! caller serving a link between them stays responsive. A bundle that trains from its
//! input ([`Bundle::streams`]) caches nothing: each sample arrives every epoch and is
//! trained on or scored at once ([`Trainer::train_streamed`],
//! [`Trainer::evaluate_streamed`], [`Trainer::end_streamed_pass`]). Generic over the
//! kernels and a progress log; all memory is the caller's.

mod samples;

pub use samples::SampleCache;

use core::fmt;
use sprout_core::format::bundle::Bundle;
use sprout_core::format::device_checkpoint::{self as checkpoint, CheckpointError, CheckpointInfo};
use sprout_core::rng::SplitMix;
use sprout_core::{ExecError, Executor, Host, Kernels, Operand, Regions};

/// What the trainer reports after each epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EpochReport {
    /// Epochs completed.
    pub epoch: u32,
    /// Optimizer updates so far.
    pub step: u32,
    /// Mean training loss over the epoch's batches.
    pub loss: f32,
    /// Held-out accuracy after the epoch, in `[0, 1]`.
    pub accuracy: f32,
    /// The best held-out accuracy so far (the kept checkpoint's).
    pub best_accuracy: f32,
    /// Training samples the epoch trained on.
    pub samples: u32,
}

/// How a pass of a streamed run ended ([`Trainer::end_streamed_pass`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamedPass {
    /// Held-out samples only: their accuracy, in `[0, 1]`; no epoch counted.
    Evaluated(f32),
    /// Training samples, then held-out ones: an epoch.
    Epoch(EpochReport),
}

/// Where progress goes: `defmt` on a board, semihosting under QEMU, nothing in a test.
pub trait Log {
    fn epoch(&mut self, report: &EpochReport);
}

impl Log for () {
    fn epoch(&mut self, _: &EpochReport) {}
}

/// Why the trainer refused a call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TrainerError {
    /// A plan failed to run.
    Exec(ExecError),
    /// A sample has another number of values than the model's input.
    SampleLength { expected: usize, actual: usize },
    /// A label is not a class index of the model.
    Label { label: i32, classes: usize },
    /// The sample cache is full.
    Full { capacity: usize },
    /// Fewer training samples than one batch, or no held-out sample.
    NotEnoughSamples { have: usize, need: usize },
    /// A memory buffer given to the trainer is too small.
    Memory { what: &'static str, needed: usize, actual: usize },
    /// Checkpoint bytes do not fit this model.
    Checkpoint(CheckpointError),
}

impl fmt::Display for TrainerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainerError::Exec(e) => write!(f, "training failed: {e}"),
            TrainerError::SampleLength { expected, actual } => {
                write!(f, "a sample has {actual} values, the model takes {expected}")
            }
            TrainerError::Label { label, classes } => {
                write!(f, "label {label} is not one of the model's {classes} classes")
            }
            TrainerError::Full { capacity } => {
                write!(f, "the sample cache holds {capacity} samples")
            }
            TrainerError::NotEnoughSamples { have, need } => {
                write!(f, "{have} samples given, at least {need} needed")
            }
            TrainerError::Memory { what, needed, actual } => {
                write!(f, "the {what} buffer holds {actual} bytes, {needed} are needed")
            }
            TrainerError::Checkpoint(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for TrainerError {}

impl From<ExecError> for TrainerError {
    fn from(e: ExecError) -> Self {
        TrainerError::Exec(e)
    }
}

/// The caller's memory for a trainer (state, arena and best state 4-byte aligned).
pub struct TrainerMemory<'m> {
    /// The state region: at least the bundle's initial state.
    pub state: &'m mut [u8],
    /// The arena: at least [`Bundle::arena_bytes`].
    pub arena: &'m mut [u8],
    /// A copy of the best state: as large as the state.
    pub best_state: &'m mut [u8],
    /// Features of the training samples.
    pub train: SampleCache<'m>,
    /// Features of the held-out samples.
    pub held_out: SampleCache<'m>,
}

impl<'m> TrainerMemory<'m> {
    /// The regions a plan runs over (the bundle's `frozen` weights, the first `state_len`
    /// bytes of the state, the arena) and, beside them, the training and held-out caches,
    /// which stay readable while a plan runs.
    fn regions<'a>(
        &'a mut self,
        frozen: &'a [u8],
        state_len: usize,
    ) -> (Regions<'a>, &'a SampleCache<'m>, &'a SampleCache<'m>) {
        let regions =
            Regions { frozen, state: &mut self.state[..state_len], arena: &mut *self.arena };
        (regions, &self.train, &self.held_out)
    }
}

/// Trains a bundle's head on the device.
pub struct Trainer<'b, 's, 'm, K> {
    bundle: &'b Bundle<'b, 's>,
    backbone: Executor<'s, K>,
    train: Executor<'s, K>,
    eval: Executor<'s, K>,
    memory: TrainerMemory<'m>,
    state_len: usize,
    epoch: u32,
    learning_rate: f32,
    best: Option<CheckpointInfo>,
    rng: SplitMix,
    /// The epoch (or streamed pass) in progress.
    pass: Option<Pass>,
}

/// An epoch in progress: training batches in the order `order_seed` draws, then the
/// held-out samples.
#[derive(Clone, Copy, Debug, Default)]
struct Pass {
    order_seed: u64,
    /// Training batches done, and the sum of their losses.
    trained: usize,
    loss_sum: f32,
    /// Held-out samples evaluated, and how many of them the head got right.
    evaluated: usize,
    correct: usize,
}

impl<'b, 's, 'm, K: Kernels<Memory = Host> + Clone> Trainer<'b, 's, 'm, K> {
    /// Checks the memory and copies the bundle's initial state into it. `seed` drives the
    /// order in which training samples are batched.
    pub fn new(
        bundle: &'b Bundle<'b, 's>,
        kernels: K,
        memory: TrainerMemory<'m>,
        seed: u64,
    ) -> Result<Self, TrainerError> {
        let state_len = bundle.initial_state.len();
        let checks = [
            ("state", state_len, memory.state.len()),
            ("best state", state_len, memory.best_state.len()),
            ("arena", bundle.arena_bytes(), memory.arena.len()),
        ];
        for (what, needed, actual) in checks {
            if actual < needed {
                return Err(TrainerError::Memory { what, needed, actual });
            }
        }
        let row = bundle.feature_bytes();
        for (what, cache) in
            [("training cache row", &memory.train), ("held-out cache row", &memory.held_out)]
        {
            if cache.row_bytes() != row {
                return Err(TrainerError::Memory { what, needed: row, actual: cache.row_bytes() });
            }
        }
        let trainer = Self {
            backbone: Executor::new(bundle.backbone, kernels.clone())?,
            train: Executor::new(bundle.train, kernels.clone())?,
            eval: Executor::new(bundle.eval, kernels)?,
            bundle,
            memory,
            state_len,
            epoch: 0,
            learning_rate: bundle.header.learning_rate,
            best: None,
            rng: SplitMix::new(seed),
            pass: None,
        };
        trainer.memory.state[..state_len].copy_from_slice(bundle.initial_state);
        Ok(trainer)
    }

    /// Runs the backbone on one sample and caches its features with `label`, for training
    /// or, when `held_out`, for evaluation.
    pub fn add_sample(
        &mut self,
        sample: &[f32],
        label: i32,
        held_out: bool,
    ) -> Result<(), TrainerError> {
        let input = self.sample_input()?;
        if sample.len() != input.len() {
            return Err(TrainerError::SampleLength { expected: input.len(), actual: sample.len() });
        }
        input.copy_from_slice(sample);
        self.add_staged_sample(label, held_out)
    }

    /// The backbone's input in the arena, to fill in place (e.g. chunk by chunk as a
    /// sample arrives) before [`Self::add_staged_sample`]. Training and evaluation
    /// overwrite it.
    pub fn sample_input(&mut self) -> Result<&mut [f32], TrainerError> {
        let op = self.bundle.header.backbone_io.sample;
        let bytes = self
            .memory
            .arena
            .get_mut(op.offset..op.end())
            .ok_or(ExecError::ValueLength { expected: op.len, actual: 0 })?;
        bytemuck::try_cast_slice_mut(bytes)
            .map_err(|_| TrainerError::Exec(ExecError::Misaligned { region: op.region }))
    }

    /// Runs the backbone on the sample in [`Self::sample_input`] and caches its features
    /// with `label`, for training or, when `held_out`, for evaluation.
    pub fn add_staged_sample(&mut self, label: i32, held_out: bool) -> Result<(), TrainerError> {
        self.check_label(label)?;
        let cache = if held_out { &self.memory.held_out } else { &self.memory.train };
        if cache.len() >= cache.capacity() {
            return Err(TrainerError::Full { capacity: cache.capacity() });
        }
        // An epoch in progress drew its order for the samples cached before.
        self.pass = None;
        let (mut regions, ..) = self.memory.regions(self.bundle.frozen, self.state_len);
        self.backbone.run(&mut regions)?;
        let op = self.bundle.header.backbone_io.features;
        let features = &self.memory.arena[op.offset..op.end()];
        let cache = if held_out { &mut self.memory.held_out } else { &mut self.memory.train };
        cache.push(features, label);
        Ok(())
    }

    /// Refuses a label that is not a class index of the model.
    fn check_label(&self, label: i32) -> Result<(), TrainerError> {
        let classes = self.bundle.classes();
        match (0..classes as i64).contains(&i64::from(label)) {
            true => Ok(()),
            false => Err(TrainerError::Label { label, classes }),
        }
    }

    /// Trains one step on the sample in [`Self::sample_input`] with `label`, caching nothing
    /// (a bundle that [`Bundle::streams`]), at the current learning rate; counts towards the
    /// pass in progress. Returns its loss.
    pub fn train_streamed(&mut self, label: i32) -> Result<f32, TrainerError> {
        self.check_label(label)?;
        let io = self.bundle.header.train_io;
        self.stage_features(&io.features)?;
        let (mut regions, ..) = self.memory.regions(self.bundle.frozen, self.state_len);
        write_row(&mut regions, &io.labels, 0, bytemuck::bytes_of(&label))?;
        self.train.train_step(&mut regions, self.learning_rate)?;
        let loss = regions.read::<f32>(&io.loss)?[0];
        let pass = self.pass.get_or_insert_with(Pass::default);
        pass.trained += 1;
        pass.loss_sum += loss;
        Ok(loss)
    }

    /// Scores the sample in [`Self::sample_input`] against `label` with the evaluation plan,
    /// caching nothing; counts towards the pass in progress. Returns whether it was right.
    pub fn evaluate_streamed(&mut self, label: i32) -> Result<bool, TrainerError> {
        self.check_label(label)?;
        let io = self.bundle.header.eval_io;
        self.stage_features(&io.features)?;
        let (mut regions, ..) = self.memory.regions(self.bundle.frozen, self.state_len);
        self.eval.run(&mut regions)?;
        let logits = regions.read::<f32>(&io.logits)?;
        let classes = self.bundle.classes().min(logits.len());
        let right = argmax(&logits[..classes]) as i32 == label;
        let pass = self.pass.get_or_insert_with(Pass::default);
        pass.evaluated += 1;
        pass.correct += usize::from(right);
        Ok(right)
    }

    /// Ends the streamed pass in progress: an epoch when it trained (the state is kept if
    /// it is the best, as [`Self::train_batches`] keeps it), else the accuracy of the
    /// held-out samples it scored. A pass that scored no held-out sample is refused.
    pub fn end_streamed_pass(&mut self, log: &mut impl Log) -> Result<StreamedPass, TrainerError> {
        let pass = self.pass.take().unwrap_or_default();
        if pass.evaluated == 0 {
            return Err(TrainerError::NotEnoughSamples { have: 0, need: 1 });
        }
        Ok(match pass.trained {
            0 => StreamedPass::Evaluated(pass.correct as f32 / pass.evaluated as f32),
            _ => StreamedPass::Epoch(self.finish_epoch(&pass, pass.trained, log)),
        })
    }

    /// Runs the backbone on the sample in [`Self::sample_input`] and moves its features to
    /// the first row of `target` (a plan's batch input) inside the arena.
    fn stage_features(&mut self, target: &Operand) -> Result<(), TrainerError> {
        let (mut regions, ..) = self.memory.regions(self.bundle.frozen, self.state_len);
        self.backbone.run(&mut regions)?;
        let from = self.bundle.header.backbone_io.features;
        let bytes = from.len * from.dtype.size();
        let arena = self.memory.arena.len();
        let room = target.len * target.dtype.size();
        if from.end() > arena || room < bytes || target.offset.saturating_add(bytes) > arena {
            let error = ExecError::ValueLength { expected: room, actual: bytes };
            return Err(TrainerError::Exec(error));
        }
        self.memory.arena.copy_within(from.offset..from.offset + bytes, target.offset);
        Ok(())
    }

    /// One epoch over the cached training samples in a new random order (a last partial
    /// batch waits for a later epoch), then evaluation; keeps the state if it is the best.
    /// Finishes an epoch [`Self::train_batches`] began.
    pub fn train_epoch(&mut self, log: &mut impl Log) -> Result<EpochReport, TrainerError> {
        loop {
            if let Some(report) = self.train_batches(usize::MAX, log)? {
                return Ok(report);
            }
        }
    }

    /// At most `batches` batches of the current epoch, training batches first, then
    /// held-out ones, so a caller between link polls bounds its work; the first begins an
    /// epoch in a new random order. Returns the epoch's report when its last evaluation
    /// batch is done (see [`Self::train_epoch`]), `None` while it goes on.
    pub fn train_batches(
        &mut self,
        batches: usize,
        log: &mut impl Log,
    ) -> Result<Option<EpochReport>, TrainerError> {
        let batch = self.bundle.head_batch();
        let have = self.memory.train.len();
        let held_out = self.memory.held_out.len();
        if have < batch || held_out == 0 {
            return Err(TrainerError::NotEnoughSamples { have, need: batch });
        }
        // A failed batch drops the epoch: the next call begins a new one.
        let mut pass = match self.pass.take() {
            Some(pass) => pass,
            None => Pass { order_seed: self.rng.next_u64(), ..Pass::default() },
        };
        let training = have / batch;
        for _ in 0..batches {
            if pass.trained < training {
                pass.loss_sum += self.train_batch(pass.trained * batch, pass.order_seed)?;
                pass.trained += 1;
            } else if pass.evaluated < held_out {
                pass.correct += self.evaluate_batch(pass.evaluated)?;
                pass.evaluated = held_out.min(pass.evaluated + batch);
            } else {
                break;
            }
        }
        if pass.evaluated < held_out {
            self.pass = Some(pass);
            return Ok(None);
        }
        Ok(Some(self.finish_epoch(&pass, pass.trained * batch, log)))
    }

    /// Counts the epoch `pass` ended (`samples` trained on), keeps the state if its
    /// held-out accuracy is the best, and logs and returns its report.
    fn finish_epoch(&mut self, pass: &Pass, samples: usize, log: &mut impl Log) -> EpochReport {
        self.epoch += 1;
        let accuracy = pass.correct as f32 / pass.evaluated.max(1) as f32;
        if self.best.is_none_or(|b| accuracy > b.accuracy) {
            self.memory.best_state[..self.state_len]
                .copy_from_slice(&self.memory.state[..self.state_len]);
            self.best = Some(self.info(accuracy));
        }
        let report = EpochReport {
            epoch: self.epoch,
            step: self.train.updates(),
            loss: pass.loss_sum / pass.trained.max(1) as f32,
            accuracy,
            best_accuracy: self.best.map_or(accuracy, |b| b.accuracy),
            samples: samples as u32,
        };
        log.epoch(&report);
        report
    }

    /// The mean training loss of the batches of the epoch in progress, if one is.
    pub fn epoch_loss(&self) -> Option<f32> {
        self.pass.filter(|p| p.trained > 0).map(|p| p.loss_sum / p.trained as f32)
    }

    /// Drops the epoch in progress (its updates stay): the next batch begins a new epoch.
    pub fn abandon_epoch(&mut self) {
        self.pass = None;
    }

    /// One update on the training batch that starts at position `first` of the order
    /// `order_seed` draws; returns its loss.
    fn train_batch(&mut self, first: usize, order_seed: u64) -> Result<f32, TrainerError> {
        let io = self.bundle.header.train_io;
        let (mut regions, train, _) = self.memory.regions(self.bundle.frozen, self.state_len);
        for slot in 0..self.bundle.head_batch() {
            let sample = shuffled(first + slot, train.len(), order_seed);
            write_row(&mut regions, &io.features, slot, train.row(sample))?;
            let label = train.label(sample);
            write_row(&mut regions, &io.labels, slot, bytemuck::bytes_of(&label))?;
        }
        self.train.train_step(&mut regions, self.learning_rate)?;
        Ok(regions.read::<f32>(&io.loss)?[0])
    }

    /// Accuracy of the current head on the held-out samples, dropout off.
    pub fn evaluate(&mut self) -> Result<f32, TrainerError> {
        let total = self.memory.held_out.len();
        let mut correct = 0usize;
        for first in (0..total).step_by(self.bundle.head_batch()) {
            correct += self.evaluate_batch(first)?;
        }
        Ok(correct as f32 / total.max(1) as f32)
    }

    /// How many held-out samples of the batch starting at `first` the current head gets
    /// right.
    fn evaluate_batch(&mut self, first: usize) -> Result<usize, TrainerError> {
        let batch = self.bundle.head_batch();
        let classes = self.bundle.classes();
        let total = self.memory.held_out.len();
        let io = self.bundle.header.eval_io;
        let (mut regions, _, held_out) = self.memory.regions(self.bundle.frozen, self.state_len);
        let real = batch.min(total - first);
        for slot in 0..batch {
            // A last partial batch is padded with its first sample; only real ones count.
            let sample = first + if slot < real { slot } else { 0 };
            write_row(&mut regions, &io.features, slot, held_out.row(sample))?;
        }
        self.eval.run(&mut regions)?;
        let logits = regions.read::<f32>(&io.logits)?;
        let mut correct = 0;
        for slot in 0..real {
            let row = &logits[slot * classes..(slot + 1) * classes];
            if argmax(row) as i32 == held_out.label(first + slot) {
                correct += 1;
            }
        }
        Ok(correct)
    }

    /// Epochs completed.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Optimizer updates so far.
    pub fn updates(&self) -> u32 {
        self.train.updates()
    }

    /// The learning rate of the next epochs (the bundle's until set).
    pub fn set_learning_rate(&mut self, learning_rate: f32) {
        self.learning_rate = learning_rate;
    }

    /// The learning rate the next epoch trains with.
    pub fn learning_rate(&self) -> f32 {
        self.learning_rate
    }

    /// Cached samples: (training, held out).
    pub fn samples(&self) -> (usize, usize) {
        (self.memory.train.len(), self.memory.held_out.len())
    }

    /// Cache capacities: (training, held out).
    pub fn capacity(&self) -> (usize, usize) {
        (self.memory.train.capacity(), self.memory.held_out.capacity())
    }

    /// Forgets every cached sample (weights and the best checkpoint stay).
    pub fn clear_samples(&mut self) {
        self.pass = None;
        self.memory.train.clear();
        self.memory.held_out.clear();
    }

    /// The bundle the trainer runs.
    pub fn bundle(&self) -> &'b Bundle<'b, 's> {
        self.bundle
    }

    /// The best checkpoint so far and its state bytes.
    pub fn best(&self) -> Option<(CheckpointInfo, &[u8])> {
        self.best.map(|info| (info, &self.memory.best_state[..self.state_len]))
    }

    /// Writes the best checkpoint (or, before any epoch, the current state) into `out`;
    /// returns the bytes used.
    pub fn encode_best(&self, out: &mut [u8]) -> Result<usize, TrainerError> {
        let (info, state) = match self.best() {
            Some(best) => best,
            None => (self.info(0.0), &self.memory.state[..self.state_len]),
        };
        checkpoint::encode(&info, state, out).map_err(TrainerError::Checkpoint)
    }

    /// Makes the current state, which scores `accuracy` on the held-out samples cached now,
    /// the best so far: a new run on other samples starts its own best from where it
    /// starts, instead of competing with a score measured on samples it never saw.
    pub fn reset_best(&mut self, accuracy: f32) {
        self.memory.best_state[..self.state_len]
            .copy_from_slice(&self.memory.state[..self.state_len]);
        self.best = Some(self.info(accuracy));
    }

    /// Continues from checkpoint bytes (from the store or the link): state, counters and
    /// epoch; the restored state also becomes the best so far.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<CheckpointInfo, TrainerError> {
        let hash = self.bundle.header.model_hash;
        let (info, state) =
            checkpoint::decode(bytes, hash, self.state_len).map_err(TrainerError::Checkpoint)?;
        self.train.resume_at(info.progress)?;
        self.memory.state[..self.state_len].copy_from_slice(state);
        self.memory.best_state[..self.state_len].copy_from_slice(state);
        self.epoch = info.epoch;
        self.best = Some(info);
        self.pass = None;
        Ok(info)
    }

    fn info(&self, accuracy: f32) -> CheckpointInfo {
        CheckpointInfo {
            model_hash: self.bundle.header.model_hash,
            epoch: self.epoch,
            progress: self.train.progress(),
            accuracy,
        }
    }
}

/// Writes `row` (the bytes of one batch row, e.g. one sample's features) as row `index`
/// of the batch operand `op` in the arena.
fn write_row(
    regions: &mut Regions<'_>,
    op: &Operand,
    index: usize,
    row: &[u8],
) -> Result<(), ExecError> {
    let bytes = op.len * op.dtype.size();
    let end = (index + 1) * row.len();
    if end > bytes {
        return Err(ExecError::ValueLength { expected: bytes, actual: end });
    }
    let at = op.offset + index * row.len();
    let target = regions
        .arena
        .get_mut(at..at + row.len())
        .ok_or(ExecError::ValueLength { expected: bytes, actual: end })?;
    target.copy_from_slice(row);
    Ok(())
}

/// The sample at position `i` of a random permutation of `0..n` chosen by `seed`: a
/// bijective hash walk (cycle-walking an affine map over the next power of two), so no
/// index array is needed.
fn shuffled(i: usize, n: usize, seed: u64) -> usize {
    let size = n.next_power_of_two() as u64;
    let mask = size - 1;
    // An odd multiplier and any offset make `x -> a * x + b` a permutation modulo 2^k.
    let a = (seed | 1) & mask.max(1);
    let b = (seed >> 32) & mask;
    let mut x = i as u64;
    loop {
        x = (a.wrapping_mul(x).wrapping_add(b)) & mask;
        if x < n as u64 {
            return x as usize;
        }
    }
}

/// The index of the largest value (the first on ties).
fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffled_is_a_permutation_that_depends_on_the_seed() {
        for n in [1, 2, 7, 8, 100] {
            for seed in [0, 1, 0xdead_beef_1234_5678] {
                let mut seen = std::vec![false; n];
                for i in 0..n {
                    seen[shuffled(i, n, seed)] = true;
                }
                assert!(seen.iter().all(|&s| s), "n {n} seed {seed}");
            }
        }
        let order = |seed| (0..100).map(|i| shuffled(i, 100, seed)).collect::<std::vec::Vec<_>>();
        assert_ne!(order(3), order(0x1234_5678_9abc_def0));
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, -1.0]), 1);
    }
}
