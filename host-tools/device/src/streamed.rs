//! A streamed run, from the host: for a device that trains from its input
//! (`DeviceInfo::streams`, it stores no sample), every epoch sends each training sample in
//! a new random order, which the device trains one step on as it arrives, then the held-out
//! samples, which it scores, and ends the epoch; the held-out samples go first once more
//! to score the start (pass 0).

use sprout_core::link::{Split, TrainingConfig, TrainingProgress, TrainingState};
use sprout_core::rng::SplitMix;

use crate::device::Device;
use crate::error::LinkError;
use crate::samples::SampleSet;

/// What a streamed run tells its caller as it goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamEvent<'a> {
    /// One sample went to the device (and was trained on or scored there).
    Sample,
    /// A pass ended (epoch 0: the start's evaluation), with the run's progress after it.
    Pass(&'a TrainingProgress),
}

impl Device {
    /// Runs `config.epochs` streamed epochs over `samples` (see the module documentation),
    /// the training order drawn from `seed`; returns the last pass's progress. A run the
    /// device stops or fails ends early (a failure as [`LinkError::TrainingFailed`]); when
    /// the host gives up (a deadline, a stall) it asks the device to stop.
    pub fn train_streamed(
        &mut self,
        samples: &SampleSet,
        config: TrainingConfig,
        seed: u64,
        mut told: impl FnMut(StreamEvent<'_>),
    ) -> Result<TrainingProgress, LinkError> {
        self.stop_if_given_up(|device| device.stream_epochs(samples, config, seed, &mut told))
    }

    fn stream_epochs(
        &mut self,
        samples: &SampleSet,
        config: TrainingConfig,
        seed: u64,
        told: &mut impl FnMut(StreamEvent<'_>),
    ) -> Result<TrainingProgress, LinkError> {
        let of = |split| (0..samples.len()).filter(move |&i| samples.split(i) == split);
        let mut train: Vec<usize> = of(Split::Train).collect();
        let held_out: Vec<usize> = of(Split::Validation).collect();
        self.retrying(|c| c.start_stream(config))?;
        let mut progress = self.retrying(|c| c.progress())?;
        if config.epochs == 0 {
            return Ok(progress);
        }
        let mut rng = SplitMix::new(seed);
        let mut id = 0u32;
        for epoch in 0..=config.epochs {
            if epoch > 0 {
                shuffle(&mut train, &mut rng);
            }
            let training = train.iter().filter(|_| epoch > 0);
            for &index in training.chain(&held_out) {
                let (label, split, pixels) =
                    (samples.label(index), samples.split(index), samples.pixels(index)?);
                self.retrying(|c| c.stream_sample(id, label, split, &pixels))?;
                id = id.wrapping_add(1);
                told(StreamEvent::Sample);
            }
            progress = self.retrying(|c| c.end_epoch(epoch))?;
            told(StreamEvent::Pass(&progress));
            match progress.state {
                TrainingState::Running => {}
                TrainingState::Failed => {
                    return Err(LinkError::TrainingFailed { epoch: progress.epoch })
                }
                _ => return Ok(progress),
            }
        }
        Ok(progress)
    }
}

/// Fisher-Yates over `items` with `rng`.
fn shuffle(items: &mut [usize], rng: &mut SplitMix) {
    for i in (1..items.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_permutes_and_depends_on_the_seed() {
        let order = |seed| {
            let mut items: Vec<usize> = (0..50).collect();
            shuffle(&mut items, &mut SplitMix::new(seed));
            items
        };
        let mut sorted = order(1);
        assert_ne!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(order(1), order(2));
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }
}
