//! Batch normalisation over `[outer = N, channels = C, inner = H·W]` tensors: training and
//! evaluation forward passes and the training-mode gradients.

use super::activation::Rectifier;
use super::layout::channel_indices;
use crate::geometry::ChannelDims;
use crate::hyperparams::BatchNormConfig;
use half::f16;

/// Batch statistics of one channel.
struct ChannelStats {
    mean: f32,
    /// Sum of squared deviations from the mean.
    squared_deviations: f32,
}

/// Mean and sum of squared deviations of channel `c`, two-pass (mean first).
fn channel_stats(x: &[f32], d: ChannelDims, c: usize) -> ChannelStats {
    let count = d.per_channel() as f32;
    let mean = channel_indices(d, c).map(|i| x[i]).sum::<f32>() / count;
    let squared_deviations = channel_indices(d, c).map(|i| (x[i] - mean) * (x[i] - mean)).sum();
    ChannelStats { mean, squared_deviations }
}

/// `1 / sqrt(var + eps)`.
fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / libm::sqrtf(var + eps)
}

/// The affine map applied to one channel: `y = gamma · (x − mean) · invstd + beta`.
#[derive(Clone, Copy)]
struct ChannelNorm {
    mean: f32,
    invstd: f32,
    gamma: f32,
    beta: f32,
}

impl ChannelNorm {
    fn apply(&self, x: f32) -> f32 {
        self.gamma * (x - self.mean) * self.invstd + self.beta
    }
}

fn normalize_channel_in_place(x: &mut [f32], d: ChannelDims, c: usize, norm: ChannelNorm) {
    for i in channel_indices(d, c) {
        x[i] = norm.apply(x[i]);
    }
}

/// Exponential moving average with PyTorch's momentum: the new value weighs `momentum`.
fn running_update(running: f32, batch: f32, momentum: f32) -> f32 {
    (1.0 - momentum) * running + momentum * batch
}

fn debug_assert_per_channel(slices: &[&[f32]], d: ChannelDims) {
    for s in slices {
        debug_assert_eq!(s.len(), d.channels);
    }
}

/// Training-mode batch norm of `x[outer, channels, inner]`: per channel, batch mean and
/// biased variance over `outer · inner` elements give `y = gamma · (x − mean) · invstd + beta`
/// with `invstd = 1 / sqrt(var + eps)`, saved to `saved_mean` / `saved_invstd` for the
/// backward pass. The running statistics move towards the batch mean and the unbiased
/// variance (biased when a channel has a single element) by `momentum`, as in PyTorch.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    y: &mut [f32],
    saved_mean: &mut [f32],
    saved_invstd: &mut [f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    debug_assert_eq!(y.len(), x.len());
    y.copy_from_slice(x);
    batch_norm_train_in_place(
        y,
        gamma,
        beta,
        running_mean,
        running_var,
        saved_mean,
        saved_invstd,
        d,
        cfg,
    )
}

/// [`batch_norm_train`] writing `y` over `x`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train_in_place(
    x: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    saved_mean: &mut [f32],
    saved_invstd: &mut [f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    debug_assert_eq!(x.len(), d.len());
    debug_assert_per_channel(&[gamma, beta, running_mean, running_var], d);
    debug_assert_per_channel(&[saved_mean, saved_invstd], d);
    let mut stats = BatchStats { running_mean, running_var, saved_mean, saved_invstd };
    for c in 0..d.channels {
        let norm = stats.observe(x, gamma[c], beta[c], d, cfg, c);
        normalize_channel_in_place(x, d, c, norm);
    }
}

/// The per-channel statistics training-mode batch norm reads and writes.
struct BatchStats<'a> {
    running_mean: &'a mut [f32],
    running_var: &'a mut [f32],
    saved_mean: &'a mut [f32],
    saved_invstd: &'a mut [f32],
}

impl BatchStats<'_> {
    /// Batch mean and biased variance of channel `c` give its normalisation, saved for the
    /// backward pass; the running statistics move towards the batch mean and the unbiased
    /// variance (biased when a channel has a single element) by `momentum`, as in PyTorch.
    fn observe(
        &mut self,
        x: &[f32],
        gamma: f32,
        beta: f32,
        d: ChannelDims,
        cfg: BatchNormConfig,
        c: usize,
    ) -> ChannelNorm {
        let count = d.per_channel();
        let unbiased_divisor = if count > 1 { count - 1 } else { count };
        let stats = channel_stats(x, d, c);
        let invstd = inv_std(stats.squared_deviations / count as f32, cfg.eps);
        self.saved_mean[c] = stats.mean;
        self.saved_invstd[c] = invstd;
        let unbiased_var = stats.squared_deviations / unbiased_divisor as f32;
        self.running_mean[c] = running_update(self.running_mean[c], stats.mean, cfg.momentum);
        self.running_var[c] = running_update(self.running_var[c], unbiased_var, cfg.momentum);
        ChannelNorm { mean: stats.mean, invstd, gamma, beta }
    }
}

/// Evaluation-mode batch norm of `x[outer, channels, inner]`: per channel,
/// `y = gamma · (x − running_mean) · invstd + beta` with `invstd = 1 / sqrt(running_var + eps)`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_eval(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    running_mean: &[f32],
    running_var: &[f32],
    y: &mut [f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    debug_assert_eq!(y.len(), x.len());
    y.copy_from_slice(x);
    batch_norm_eval_in_place(y, gamma, beta, running_mean, running_var, d, cfg)
}

/// [`batch_norm_eval`] writing `y` over `x`.
pub fn batch_norm_eval_in_place(
    x: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running_mean: &[f32],
    running_var: &[f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    debug_assert_eq!(x.len(), d.len());
    for c in 0..d.channels {
        let norm = running_norm(gamma, beta, running_mean, running_var, d, cfg, c);
        normalize_channel_in_place(x, d, c, norm);
    }
}

/// The evaluation-mode normalisation of channel `c`, from the running statistics.
fn running_norm(
    gamma: &[f32],
    beta: &[f32],
    running_mean: &[f32],
    running_var: &[f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
    c: usize,
) -> ChannelNorm {
    debug_assert_per_channel(&[gamma, beta, running_mean, running_var], d);
    ChannelNorm {
        mean: running_mean[c],
        invstd: inv_std(running_var[c], cfg.eps),
        gamma: gamma[c],
        beta: beta[c],
    }
}

/// Training-mode normalisation with statistics a forward pass saved:
/// `y = gamma · (x − saved_mean) · saved_invstd + beta`, the same arithmetic as
/// [`batch_norm_train`], so a recomputed activation is bit-identical to the original.
pub fn batch_norm_apply(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    y: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!(x.len(), d.len());
    debug_assert_eq!(y.len(), d.len());
    debug_assert_per_channel(&[gamma, beta, saved_mean, saved_invstd], d);
    y.copy_from_slice(x);
    for c in 0..d.channels {
        let (mean, invstd, gamma, beta) = (saved_mean[c], saved_invstd[c], gamma[c], beta[c]);
        normalize_channel_in_place(y, d, c, ChannelNorm { mean, invstd, gamma, beta });
    }
}

/// Per-channel sums the backward pass needs.
struct GradSums {
    dy: f32,
    dy_xhat: f32,
}

/// `Σ dy` and `Σ dy · xhat` over channel `c`, with `xhat = (x − mean) · invstd` (`x` f32,
/// or f16 widened).
fn grad_sums<X: Copy + Into<f32>>(
    dy: &[f32],
    x: &[X],
    d: ChannelDims,
    c: usize,
    mean: f32,
    invstd: f32,
) -> GradSums {
    channel_indices(d, c).fold(GradSums { dy: 0.0, dy_xhat: 0.0 }, |sums, i| GradSums {
        dy: sums.dy + dy[i],
        dy_xhat: sums.dy_xhat + dy[i] * (x[i].into() - mean) * invstd,
    })
}

/// Training-mode input gradient: with `xhat = (x − mean) · invstd` and `m = outer · inner`,
/// `dx = gamma · invstd / m · (m · dy − Σ dy − xhat · Σ (dy · xhat))` per channel, using the
/// batch statistics saved by `batch_norm_train`; overwrites `dx`.
pub fn batch_norm_grad_input(
    dy: &[f32],
    x: &[f32],
    gamma: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dx: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(x.len(), d.len());
    debug_assert_eq!(dx.len(), d.len());
    debug_assert_per_channel(&[gamma, saved_mean, saved_invstd], d);
    for c in 0..d.channels {
        let (mean, invstd) = (saved_mean[c], saved_invstd[c]);
        let sums = grad_sums(dy, x, d, c, mean, invstd);
        grad_input_channel(dy, x, dx, d, c, [gamma[c], mean, invstd], sums);
    }
}

/// [`batch_norm_grad_input`] from the sums [`batch_norm_grad_params`] made: `dgamma = Σ dy ·
/// xhat`, `dbeta = Σ dy`; overwrites `dx`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_grad_input_from_sums(
    dy: &[f32],
    x: &[f32],
    gamma: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dgamma: &[f32],
    dbeta: &[f32],
    dx: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(x.len(), d.len());
    debug_assert_eq!(dx.len(), d.len());
    debug_assert_per_channel(&[gamma, saved_mean, saved_invstd, dgamma, dbeta], d);
    for c in 0..d.channels {
        let sums = GradSums { dy: dbeta[c], dy_xhat: dgamma[c] };
        grad_input_channel(dy, x, dx, d, c, [gamma[c], saved_mean[c], saved_invstd[c]], sums);
    }
}

/// [`batch_norm_grad_input_from_sums`] of a batch norm in f16 storage: `x` stored as f16,
/// and each `dx` rounded to f16 (held as f32), as the f16 round trip of the gradient after
/// it would.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_grad_input_from_sums_f16(
    dy: &[f32],
    x: &[f16],
    gamma: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dgamma: &[f32],
    dbeta: &[f32],
    dx: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!((dy.len(), x.len(), dx.len()), (d.len(), d.len(), d.len()));
    debug_assert_per_channel(&[gamma, saved_mean, saved_invstd, dgamma, dbeta], d);
    for c in 0..d.channels {
        let sums = GradSums { dy: dbeta[c], dy_xhat: dgamma[c] };
        grad_input_channel(dy, x, dx, d, c, [gamma[c], saved_mean[c], saved_invstd[c]], sums);
        for i in channel_indices(d, c) {
            dx[i] = f16::from_f32(dx[i]).to_f32();
        }
    }
}

/// Channel `c` of the input gradient, its `[gamma, mean, invstd]` and `sums` given.
fn grad_input_channel<X: Copy + Into<f32>>(
    dy: &[f32],
    x: &[X],
    dx: &mut [f32],
    d: ChannelDims,
    c: usize,
    [gamma, mean, invstd]: [f32; 3],
    sums: GradSums,
) {
    let count = d.per_channel() as f32;
    let factor = gamma * invstd / count;
    for i in channel_indices(d, c) {
        let xhat = (x[i].into() - mean) * invstd;
        dx[i] = factor * (count * dy[i] - sums.dy - xhat * sums.dy_xhat);
    }
}

/// Parameter gradients: `dgamma[c] = Σ dy · xhat`, `dbeta[c] = Σ dy` over each channel,
/// using the saved batch statistics; overwrites both.
pub fn batch_norm_grad_params(
    dy: &[f32],
    x: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(x.len(), d.len());
    debug_assert_per_channel(&[saved_mean, saved_invstd, dgamma, dbeta], d);
    for c in 0..d.channels {
        let sums = grad_sums(dy, x, d, c, saved_mean[c], saved_invstd[c]);
        dgamma[c] = sums.dy_xhat;
        dbeta[c] = sums.dy;
    }
}

/// [`batch_norm_grad_params`] of a batch norm whose output `rectifier` rectified, from the
/// rectifier's output gradient `dy`, which it gates in place into the batch norm's own (what
/// the rectifier's gradient writes): each pre-activation `gamma · (x − mean) · invstd + beta`
/// is recomputed with the arithmetic of [`batch_norm_train`] and [`batch_norm_apply`], so the
/// gate passes exactly where the rectifier's gradient would, without reading its output.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_grad_params_rectified(
    dy: &mut [f32],
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    d: ChannelDims,
    rectifier: Rectifier,
) {
    let p = [gamma, beta, saved_mean, saved_invstd];
    gated_grad_params(dy, x, p, [dgamma, dbeta], d, |z| rectifier.passes(z), |dy| dy)
}

/// [`batch_norm_grad_params_rectified`] of a batch norm in f16 storage: `x` stored as f16,
/// the rectifier applied to the pre-activation rounded to f16 (the widened f16 copy of the
/// batch norm's output), so the gate passes where it passes that rounded value, and `dy`
/// rounded to f16 as it passes (the round trip of the gradient before it; a no-op on values
/// that are f16 already).
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_grad_params_rectified_f16(
    dy: &mut [f32],
    x: &[f16],
    gamma: &[f32],
    beta: &[f32],
    saved_mean: &[f32],
    saved_invstd: &[f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    d: ChannelDims,
    rectifier: Rectifier,
) {
    let p = [gamma, beta, saved_mean, saved_invstd];
    let round = |v: f32| f16::from_f32(v).to_f32();
    gated_grad_params(dy, x, p, [dgamma, dbeta], d, |z| rectifier.passes(round(z)), round)
}

/// `dy` zeroed where `passes` rejects the pre-activation `gamma · (x − mean) · invstd + beta`
/// (the arithmetic of [`batch_norm_train`] and [`batch_norm_apply`]) and `round`ed where it
/// passes, then [`batch_norm_grad_params`] of the gated `dy`.
fn gated_grad_params<X: Copy + Into<f32>>(
    dy: &mut [f32],
    x: &[X],
    [gamma, beta, saved_mean, saved_invstd]: [&[f32]; 4],
    [dgamma, dbeta]: [&mut [f32]; 2],
    d: ChannelDims,
    passes: impl Fn(f32) -> bool,
    round: impl Fn(f32) -> f32,
) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(x.len(), d.len());
    debug_assert_per_channel(&[gamma, beta, saved_mean, saved_invstd, dgamma, dbeta], d);
    for c in 0..d.channels {
        let (mean, invstd, gamma, beta) = (saved_mean[c], saved_invstd[c], gamma[c], beta[c]);
        let norm = ChannelNorm { mean, invstd, gamma, beta };
        for i in channel_indices(d, c) {
            dy[i] = match passes(norm.apply(x[i].into())) {
                true => round(dy[i]),
                false => 0.0,
            };
        }
        let sums = grad_sums(dy, x, d, c, mean, invstd);
        dgamma[c] = sums.dy_xhat;
        dbeta[c] = sums.dy;
    }
}

/// The running statistics in the form a training pass saves a batch's: `saved_mean` the
/// running mean, `saved_invstd = 1 / sqrt(running_var + eps)`. With them,
/// [`batch_norm_apply`] normalises exactly as [`batch_norm_eval`] does.
pub fn save_running_statistics(
    running_mean: &[f32],
    running_var: &[f32],
    saved_mean: &mut [f32],
    saved_invstd: &mut [f32],
    cfg: BatchNormConfig,
) {
    saved_mean.copy_from_slice(running_mean);
    for (invstd, &var) in saved_invstd.iter_mut().zip(running_var) {
        *invstd = inv_std(var, cfg.eps);
    }
}

/// Input gradient of a batch norm that normalised with fixed (running) statistics:
/// `dx = gamma · invstd · dy` per channel; overwrites `dx`.
pub fn batch_norm_grad_input_running(
    dy: &[f32],
    gamma: &[f32],
    saved_invstd: &[f32],
    dx: &mut [f32],
    d: ChannelDims,
) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(dx.len(), d.len());
    debug_assert_per_channel(&[gamma, saved_invstd], d);
    for c in 0..d.channels {
        let scale = gamma[c] * saved_invstd[c];
        for i in channel_indices(d, c) {
            dx[i] = scale * dy[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    const CFG: BatchNormConfig = BatchNormConfig { eps: 1e-5, momentum: 0.1 };

    /// Everything `batch_norm_train` writes.
    struct TrainOutputs<const N: usize, const C: usize> {
        y: [f32; N],
        running_mean: [f32; C],
        running_var: [f32; C],
        saved_mean: [f32; C],
        saved_invstd: [f32; C],
    }

    fn train<const N: usize, const C: usize>(
        x: &[f32; N],
        gamma: &[f32; C],
        beta: &[f32; C],
        d: ChannelDims,
    ) -> TrainOutputs<N, C> {
        let mut out = TrainOutputs {
            y: [f32::NAN; N],
            running_mean: [0.0; C],
            running_var: [1.0; C],
            saved_mean: [f32::NAN; C],
            saved_invstd: [f32::NAN; C],
        };
        batch_norm_train(
            x,
            gamma,
            beta,
            &mut out.running_mean,
            &mut out.running_var,
            &mut out.y,
            &mut out.saved_mean,
            &mut out.saved_invstd,
            d,
            CFG,
        );
        out
    }

    #[test]
    fn train_statistics_and_running_update_on_2x1x2() {
        // N = 2, C = 1, H·W = 2: values 1, 2 | 3, 4 → mean 2.5, biased var 1.25,
        // unbiased var 5/3.
        let d = ChannelDims { outer: 2, channels: 1, inner: 2 };
        let out = train(&[1.0, 2.0, 3.0, 4.0], &[2.0], &[1.0], d);
        let invstd = 1.0 / libm::sqrtf(1.25 + 1e-5);
        assert_close(&out.saved_mean, &[2.5], 1e-6);
        assert_close(&out.saved_invstd, &[invstd], 1e-6);
        assert_close(&out.running_mean, &[0.25], 1e-6);
        assert_close(&out.running_var, &[0.9 + 0.1 * 5.0 / 3.0], 1e-6);
        let y = [-1.5, -0.5, 0.5, 1.5].map(|dev| 2.0 * dev * invstd + 1.0);
        assert_close(&out.y, &y, 1e-5);
    }

    #[test]
    fn train_keeps_channels_apart() {
        // N = 2, C = 2, H·W = 1: channel 0 sees {0, 2}, channel 1 sees {10, 30}.
        let d = ChannelDims { outer: 2, channels: 2, inner: 1 };
        let out = train(&[0.0, 10.0, 2.0, 30.0], &[1.0, 1.0], &[0.0, 0.0], d);
        assert_close(&out.saved_mean, &[1.0, 20.0], 1e-6);
        assert_close(&out.running_var, &[0.9 + 0.1 * 2.0, 0.9 + 0.1 * 200.0], 1e-4);
        assert_close(&out.y, &[-1.0, -1.0, 1.0, 1.0], 1e-4);
    }

    #[test]
    fn single_element_channel_uses_biased_variance_for_running_var() {
        let d = ChannelDims { outer: 1, channels: 1, inner: 1 };
        let out = train(&[3.0], &[1.0], &[0.0], d);
        assert_close(&out.running_var, &[0.9], 1e-6);
        assert_close(&out.y, &[0.0], 0.0);
    }

    #[test]
    fn eval_uses_running_statistics() {
        let d = ChannelDims { outer: 1, channels: 2, inner: 2 };
        let cfg = BatchNormConfig { eps: 0.0, momentum: 0.1 };
        let mut y = [f32::NAN; 4];
        batch_norm_eval(
            &[1.0, 3.0, 5.0, 9.0],
            &[2.0, 1.0],
            &[0.0, -1.0],
            &[1.0, 5.0],
            &[4.0, 16.0],
            &mut y,
            d,
            cfg,
        );
        assert_close(&y, &[0.0, 2.0, -1.0, 0.0], 1e-6);
    }

    #[test]
    fn saved_running_statistics_normalise_as_evaluation_does_bit_for_bit() {
        let d = ChannelDims { outer: 2, channels: 2, inner: 3 };
        let x: [f32; 12] = core::array::from_fn(|i| 0.37 * i as f32 - 1.9);
        let (gamma, beta, mean, var) = ([1.3, 0.7], [0.1, -0.4], [0.25, -0.6], [0.8, 2.3]);
        let (mut eval, mut applied) = ([f32::NAN; 12], [f32::NAN; 12]);
        batch_norm_eval(&x, &gamma, &beta, &mean, &var, &mut eval, d, CFG);
        let (mut saved_mean, mut saved_invstd) = ([f32::NAN; 2], [f32::NAN; 2]);
        save_running_statistics(&mean, &var, &mut saved_mean, &mut saved_invstd, CFG);
        batch_norm_apply(&x, &gamma, &beta, &saved_mean, &saved_invstd, &mut applied, d);
        assert_eq!(eval.map(f32::to_bits), applied.map(f32::to_bits));
        // Its input gradient is the per-channel slope of that map.
        let mut dx = [f32::NAN; 12];
        batch_norm_grad_input_running(&[1.0; 12], &gamma, &saved_invstd, &mut dx, d);
        for (i, dx) in dx.iter().enumerate() {
            let c = (i / d.inner) % d.channels;
            assert_close(&[*dx], &[gamma[c] / (var[c] + CFG.eps).sqrt()], 1e-6);
        }
    }

    /// `Σ dy · y(x)` for a training-mode forward pass with fixed gamma and beta.
    fn weighted_output(x: &[f32; 6], dy: &[f32; 6], d: ChannelDims) -> f32 {
        let out = train(x, &[1.5, -0.5], &[0.3, 0.1], d);
        out.y.iter().zip(dy).map(|(y, dy)| y * dy).sum()
    }

    #[test]
    fn grad_input_matches_finite_differences() {
        let d = ChannelDims { outer: 3, channels: 2, inner: 1 };
        let gamma = [1.5, -0.5];
        let x = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5];
        let dy = [1.0, -2.0, 0.5, 0.3, -1.0, 0.7];
        let out = train(&x, &gamma, &[0.3, 0.1], d);
        let mut dx = [f32::NAN; 6];
        batch_norm_grad_input(&dy, &x, &gamma, &out.saved_mean, &out.saved_invstd, &mut dx, d);
        let h = 1e-2;
        let numeric: [f32; 6] = core::array::from_fn(|i| {
            let (mut up, mut down) = (x, x);
            up[i] += h;
            down[i] -= h;
            (weighted_output(&up, &dy, d) - weighted_output(&down, &dy, d)) / (2.0 * h)
        });
        assert_close(&dx, &numeric, 2e-2);
        // From the parameter gradients' sums, the same bits.
        let (mut dgamma, mut dbeta, mut from_sums) = ([0.0; 2], [0.0; 2], [f32::NAN; 6]);
        let (mean, invstd) = (&out.saved_mean, &out.saved_invstd);
        batch_norm_grad_params(&dy, &x, mean, invstd, &mut dgamma, &mut dbeta, d);
        let sums = (&dgamma, &dbeta);
        batch_norm_grad_input_from_sums(
            &dy,
            &x,
            &gamma,
            mean,
            invstd,
            sums.0,
            sums.1,
            &mut from_sums,
            d,
        );
        assert_eq!(from_sums.map(f32::to_bits), dx.map(f32::to_bits));
    }

    #[test]
    fn grad_params_are_weighted_sums_of_dy() {
        let d = ChannelDims { outer: 2, channels: 1, inner: 2 };
        let x = [1.0, 2.0, 3.0, 4.0];
        let out = train(&x, &[1.0], &[0.0], d);
        let dy = [1.0, 0.0, 0.0, 2.0];
        let (mut dgamma, mut dbeta) = ([f32::NAN], [f32::NAN]);
        let (mean, invstd) = (&out.saved_mean, &out.saved_invstd);
        batch_norm_grad_params(&dy, &x, mean, invstd, &mut dgamma, &mut dbeta, d);
        assert_close(&dbeta, &[3.0], 0.0);
        // xhat = ±1.5 · invstd at the two non-zero dy: −1.5 · 1 + 1.5 · 2.
        assert_close(&dgamma, &[1.5 * out.saved_invstd[0]], 1e-6);
    }
}

#[cfg(test)]
mod rectified_tests {
    use super::*;
    use crate::reference::{
        relu6_grad_in_place, relu6_in_place, relu_grad_in_place, relu_in_place,
    };
    use crate::rng::SplitMix;
    use alloc::vec;
    use alloc::vec::Vec;

    const CFG: BatchNormConfig = BatchNormConfig { eps: 1e-5, momentum: 0.1 };

    /// The rectifier (ReLU6 when `relu6`) of `y` in place, then its gradient of `dy`.
    fn rectifier_gradient(y: &mut [f32], dy: &mut [f32], relu6: bool) {
        match relu6 {
            true => relu6_in_place(y),
            false => relu_in_place(y),
        }
        match relu6 {
            true => relu6_grad_in_place(y, dy),
            false => relu_grad_in_place(y, dy),
        }
    }

    /// The rectified parameter gradient is the rectifier's gradient from its output and then
    /// the parameter gradient, bit for bit: the same gate where the batch norm's output sits
    /// exactly on a rectifier's kink (0, and 6 for ReLU6) and at NaN.
    #[test]
    fn rectified_parameter_gradients_are_the_rectifier_gradient_then_the_parameters() {
        let d = ChannelDims { outer: 3, channels: 2, inner: 5 };
        let mut rng = SplitMix::new(4);
        let mut x: Vec<f32> = (0..d.len()).map(|_| rng.uniform(-3.0, 3.0)).collect();
        let dy: Vec<f32> = (0..d.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let (gamma, beta) = ([4.0, -2.5], [0.0, 1.0]);
        let (mut running_mean, mut running_var) = ([0.0; 2], [1.0; 2]);
        let (mut mean, mut invstd) = ([0.0; 2], [0.0; 2]);
        let mut z = vec![0.0; d.len()];
        let stats = (&mut running_mean[..], &mut running_var[..], &mut mean[..], &mut invstd[..]);
        batch_norm_train(&x, &gamma, &beta, stats.0, stats.1, &mut z, stats.2, stats.3, d, CFG);
        // Channel 0's mean gives z = beta = 0 exactly; x = NaN gives z = NaN.
        x[0] = mean[0];
        x[1] = f32::NAN;
        for relu6 in [false, true] {
            let mut y = vec![0.0; d.len()];
            batch_norm_apply(&x, &gamma, &beta, &mean, &invstd, &mut y, d);
            let mut want_dy = dy.clone();
            rectifier_gradient(&mut y, &mut want_dy, relu6);
            let (mut want_dgamma, mut want_dbeta) = ([0.0; 2], [0.0; 2]);
            let (wg, wb) = (&mut want_dgamma, &mut want_dbeta);
            batch_norm_grad_params(&want_dy, &x, &mean, &invstd, wg, wb, d);
            let (mut got_dy, mut dgamma, mut dbeta) = (dy.clone(), [0.0; 2], [0.0; 2]);
            let r = Rectifier { relu6 };
            let (g, b) = (&gamma, &beta);
            let (dg, db) = (&mut dgamma, &mut dbeta);
            batch_norm_grad_params_rectified(&mut got_dy, &x, g, b, &mean, &invstd, dg, db, d, r);
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got_dy), bits(&want_dy), "{r:?}");
            assert_eq!((bits(&dgamma), bits(&dbeta)), (bits(&want_dgamma), bits(&want_dbeta)));
            let gated = got_dy.iter().filter(|&&v| v == 0.0).count();
            assert!(gated > 0 && gated < d.len(), "{r:?} gates some of dy, not all: {gated}");
        }
    }

    /// In f16 storage, the rectified parameter gradient is the chain a mixed-precision step
    /// runs, bit for bit: the f16 input widened, normalised, rounded through f16, rectified,
    /// the rectifier's gradient of the gradient rounded through f16, the parameter gradient.
    /// Pre-activations just below 6 and just above 0 round onto the kinks, where the gate
    /// of the unrounded values would pass.
    #[test]
    fn f16_rectified_gradients_gate_on_pre_activations_rounded_to_f16() {
        let d = ChannelDims { outer: 2, channels: 2, inner: 4 };
        let values =
            [6.0, 0.0, 3.0, -1.0, 2.5, 0.0, 1.0, 7.0, 6.0, 0.5, 0.0, -2.0, 1.5, 4.0, 5.0, 0.25];
        let x: Vec<f16> = values.into_iter().map(f16::from_f32).collect();
        let wide: Vec<f32> = x.iter().map(|&h| h.to_f32()).collect();
        // Off f16's grid: the chain rounds the gradient through f16 before the rectifier.
        let dy: Vec<f32> = (0..d.len()).map(|i| 0.1 + 1.37 * i as f32).collect();
        // Channel 0 shifts 6 to 5.9995 (rounds to 6), channel 1 shifts 0 to 1e-8 (rounds to 0).
        let (gamma, beta, mean, invstd) = ([1.0, 1.0], [-0.0005, 1e-8], [0.0, 0.0], [1.0, 1.0]);
        for relu6 in [false, true] {
            let mut y = vec![0.0; d.len()];
            batch_norm_apply(&wide, &gamma, &beta, &mean, &invstd, &mut y, d);
            let unrounded = y.clone();
            y.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
            let mut want_dy: Vec<f32> = dy.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
            rectifier_gradient(&mut y, &mut want_dy, relu6);
            let (mut want_dgamma, mut want_dbeta) = ([0.0; 2], [0.0; 2]);
            let (wg, wb) = (&mut want_dgamma, &mut want_dbeta);
            batch_norm_grad_params(&want_dy, &wide, &mean, &invstd, wg, wb, d);
            let (mut got_dy, mut dgamma, mut dbeta) = (dy.clone(), [0.0; 2], [0.0; 2]);
            let r = Rectifier { relu6 };
            let (g, b, dg, db) = (&gamma, &beta, &mut dgamma, &mut dbeta);
            batch_norm_grad_params_rectified_f16(
                &mut got_dy,
                &x,
                g,
                b,
                &mean,
                &invstd,
                dg,
                db,
                d,
                r,
            );
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got_dy), bits(&want_dy), "{r:?}");
            assert_eq!((bits(&dgamma), bits(&dbeta)), (bits(&want_dgamma), bits(&want_dbeta)));
            // Where the rounding moved the pre-activation onto a kink, the gate differs from
            // the gate of the unrounded value.
            let flipped = (0..d.len()).filter(|&i| {
                (got_dy[i] == 0.0) == r.passes(unrounded[i]) && r.passes(unrounded[i])
            });
            assert!(flipped.count() > 0, "{r:?}: some gate depends on the rounding");
        }
    }
}
