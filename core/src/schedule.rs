//! Learning-rate schedules: pure functions of the update count (step decay, cosine with
//! warmup) and reduce-on-plateau, which follows a validation metric. No heap, no `std`.

use core::f32::consts::PI;

/// A learning rate that depends only on how many updates have been made.
pub trait Schedule {
    fn learning_rate(&self, update: u32) -> f32;
}

/// The same rate throughout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Constant(pub f32);

impl Schedule for Constant {
    fn learning_rate(&self, _update: u32) -> f32 {
        self.0
    }
}

/// `base · gamma^(update / step_size)` (PyTorch's `StepLR`, counted in updates).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepDecay {
    pub base: f32,
    pub gamma: f32,
    pub step_size: u32,
}

impl Schedule for StepDecay {
    fn learning_rate(&self, update: u32) -> f32 {
        let decays = update / self.step_size.max(1);
        self.base * libm::powf(self.gamma, decays as f32)
    }
}

/// Linear warmup from 0 to `base` over `warmup` updates, then a half cosine down to `min`
/// at `total` updates, and `min` after that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineWithWarmup {
    pub base: f32,
    pub min: f32,
    pub warmup: u32,
    pub total: u32,
}

impl Schedule for CosineWithWarmup {
    fn learning_rate(&self, update: u32) -> f32 {
        if update < self.warmup {
            return self.base * (update + 1) as f32 / self.warmup as f32;
        }
        let span = self.total.saturating_sub(self.warmup).max(1);
        let progress = ((update - self.warmup) as f32 / span as f32).min(1.0);
        self.min + 0.5 * (self.base - self.min) * (1.0 + half_turn_cos(progress))
    }
}

/// `cos(π · progress)` for `progress` in `[0, 1]`. On microcontrollers, micromath's
/// parabolic approximation (absolute error under 0.002, exact at 0, ½ and 1): libm's
/// `cosf` costs 7.9 KiB of flash for precision a learning rate does not need. Elsewhere,
/// libm's, so the host's schedule stays PyTorch's to float precision.
fn half_turn_cos(progress: f32) -> f32 {
    #[cfg(target_os = "none")]
    let cos = micromath::F32Ext::cos(PI * progress);
    #[cfg(not(target_os = "none"))]
    let cos = libm::cosf(PI * progress);
    cos
}

/// Whether a larger or a smaller metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Minimize,
    Maximize,
}

/// Multiplies the rate by `factor` when the metric has not improved by more than
/// `threshold` (relative) for `patience` consecutive observations (PyTorch's
/// `ReduceLROnPlateau` in `rel` threshold mode, without cooldown).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReduceOnPlateau {
    pub factor: f32,
    pub patience: u32,
    pub threshold: f32,
    pub min_lr: f32,
    pub goal: Goal,
    lr: f32,
    best: Option<f32>,
    bad: u32,
}

impl ReduceOnPlateau {
    pub fn new(initial_lr: f32, goal: Goal) -> Self {
        Self {
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            min_lr: 0.0,
            goal,
            lr: initial_lr,
            best: None,
            bad: 0,
        }
    }

    pub fn learning_rate(&self) -> f32 {
        self.lr
    }

    /// Records one metric (typically per epoch) and returns the rate to use next.
    pub fn observe(&mut self, metric: f32) -> f32 {
        let improved = match (self.best, self.goal) {
            (None, _) => true,
            (Some(best), Goal::Minimize) => metric < best * (1.0 - self.threshold),
            (Some(best), Goal::Maximize) => metric > best * (1.0 + self.threshold),
        };
        if improved {
            self.best = Some(metric);
            self.bad = 0;
        } else {
            self.bad += 1;
            if self.bad > self.patience {
                self.lr = (self.lr * self.factor).max(self.min_lr);
                self.bad = 0;
            }
        }
        self.lr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_decay_halves_every_ten_updates() {
        let s = StepDecay { base: 0.1, gamma: 0.5, step_size: 10 };
        assert_eq!(s.learning_rate(9), 0.1);
        assert!((s.learning_rate(10) - 0.05).abs() < 1e-7);
        assert!((s.learning_rate(25) - 0.025).abs() < 1e-7);
    }

    #[test]
    fn the_devices_cosine_stays_within_its_bound_and_exact_at_the_ends() {
        for i in 0..=1000 {
            let x = PI * i as f32 / 1000.0;
            let error = (micromath::F32Ext::cos(x) - libm::cosf(x)).abs();
            assert!(error < 0.002, "cos({x}) off by {error}");
        }
        for (x, cos) in [(0.0, 1.0), (PI / 2.0, 0.0), (PI, -1.0)] {
            assert!((micromath::F32Ext::cos(x) - cos).abs() < 1e-6, "cos({x})");
        }
    }

    #[test]
    fn cosine_warms_up_then_reaches_min() {
        let s = CosineWithWarmup { base: 1.0, min: 0.1, warmup: 4, total: 14 };
        assert!((s.learning_rate(0) - 0.25).abs() < 1e-6);
        assert!((s.learning_rate(3) - 1.0).abs() < 1e-6);
        assert!((s.learning_rate(4) - 1.0).abs() < 1e-6);
        assert!((s.learning_rate(9) - 0.55).abs() < 1e-5);
        assert!((s.learning_rate(14) - 0.1).abs() < 1e-6);
        assert!((s.learning_rate(100) - 0.1).abs() < 1e-6);
    }

    #[test]
    fn plateau_reduces_after_patience_runs_out() {
        let mut s = ReduceOnPlateau::new(1.0, Goal::Minimize);
        s.patience = 2;
        s.factor = 0.5;
        assert_eq!(s.observe(1.0), 1.0);
        assert_eq!(s.observe(0.5), 1.0); // improved
        assert_eq!(s.observe(0.6), 1.0); // bad 1
        assert_eq!(s.observe(0.6), 1.0); // bad 2
        assert_eq!(s.observe(0.6), 0.5); // bad 3 > patience: reduce
        assert_eq!(s.observe(0.4), 0.5); // improved again
    }
}
