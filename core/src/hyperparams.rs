//! Hyper-parameters of the ops that have them: batch norm, dropout, the SGD and AdamW
//! updates and dynamic loss scaling. Plain `Copy` data, available without `alloc`.

/// Batch-norm hyper-parameters (PyTorch's meaning of `momentum`: weight of the new batch).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BatchNormConfig {
    pub eps: f32,
    pub momentum: f32,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        Self { eps: 1e-5, momentum: 0.1 }
    }
}

impl BatchNormConfig {
    /// Whether `eps` is finite and above 0 and `momentum` in `[0, 1]`: the settings the
    /// builder accepts and a decoded graph must have.
    pub fn is_sane(&self) -> bool {
        self.eps.is_finite() && self.eps > 0.0 && (0.0..=1.0).contains(&self.momentum)
    }
}

/// What a training step's batch norms normalise with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchNormStats {
    /// Each batch's own statistics, updating the running ones (PyTorch's `train()`).
    #[default]
    Batch,
    /// The running statistics, left as they are; scale and shift still train (PyTorch: the
    /// batch norms of a training model in `eval()` mode). Training then normalises as
    /// evaluation will, whatever each batch holds: small or one-sided batches, or a data
    /// set unlike the one the statistics describe.
    Running,
}

/// Inverted dropout: kept elements are scaled by `1 / (1 - p)`. The mask is a pure function
/// of `(seed, step, element index)`, so the backward pass recomputes it instead of storing it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DropoutConfig {
    pub p: f32,
    pub seed: u64,
}

impl DropoutConfig {
    /// Whether `p` is in `[0, 1)` (NaN is not).
    pub fn is_sane(&self) -> bool {
        (0.0..1.0).contains(&self.p)
    }
}

/// SGD with PyTorch's semantics (no dampening): `g += wd·p; b = μ·b + g;
/// g = nesterov ? g + μ·b : b; p -= lr·g`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SgdConfig {
    pub momentum: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
}

/// AdamW with decoupled weight decay (Loshchilov & Hutter), PyTorch's semantics.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AdamWConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

/// Dynamic loss scaling with PyTorch `GradScaler`'s semantics: after an overflow the scale
/// is multiplied by `backoff` (and the optimizer step skipped); after `growth_interval`
/// overflow-free steps in a row it is multiplied by `growth`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LossScaleConfig {
    /// The scale of the first step.
    pub init_scale: f32,
    pub growth: f32,
    pub backoff: f32,
    pub growth_interval: u32,
}

impl LossScaleConfig {
    /// The longest growth interval: the count of good steps is kept in an f32 state tensor,
    /// exact up to 2^24.
    pub const MAX_GROWTH_INTERVAL: u32 = 1 << 24;
}

impl Default for LossScaleConfig {
    /// `GradScaler()`'s defaults: scale 65536, growth 2, backoff 0.5, interval 2000.
    fn default() -> Self {
        Self { init_scale: 65536.0, growth: 2.0, backoff: 0.5, growth_interval: 2000 }
    }
}
