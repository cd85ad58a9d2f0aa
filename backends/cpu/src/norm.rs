//! Batch normalisation over `[outer, channels, inner]` tensors as vector loops over each
//! (sample, channel) block: per-channel sums in [`LANES`] partial sums, channels split over
//! threads, then the element-wise pass split over samples. The element formulas are the
//! reference's, so only the order of the sums differs from it.

use sprout_core::geometry::ChannelDims;
use sprout_core::hyperparams::BatchNormConfig;

use crate::parallel::{for_each_chunk, workers};
use crate::pool::Pool;

/// Partial sums of a channel's reduction: an AVX-512 register.
const LANES: usize = 16;

/// `Σ f(a[i], b[i])` over channel `c`'s elements, in [`LANES`] partial sums.
#[inline(always)]
fn channel_sum_generic(
    a: &[f32],
    b: &[f32],
    d: ChannelDims,
    c: usize,
    f: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut tail = 0.0;
    for o in 0..d.outer {
        let start = (o * d.channels + c) * d.inner;
        let (a, b) = (&a[start..][..d.inner], &b[start..][..d.inner]);
        let body = d.inner - d.inner % LANES;
        for (a, b) in a[..body].chunks_exact(LANES).zip(b[..body].chunks_exact(LANES)) {
            for i in 0..LANES {
                acc[i] += f(a[i], b[i]);
            }
        }
        tail += a[body..].iter().zip(&b[body..]).map(|(&a, &b)| f(a, b)).sum::<f32>();
    }
    acc.iter().sum::<f32>() + tail
}

/// Per-channel values the element-wise passes read.
#[derive(Clone, Copy)]
pub struct Channels<'a> {
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub mean: &'a [f32],
    pub invstd: &'a [f32],
}

/// `x = gamma · (x − mean) · invstd + beta` per channel, over whole sample blocks (the
/// reference's formula).
#[inline(always)]
fn normalize_blocks_generic(x: &mut [f32], d: ChannelDims, p: Channels<'_>) {
    for block in x.chunks_mut(d.channels * d.inner) {
        for (c, row) in block.chunks_mut(d.inner).enumerate() {
            let (g, b, m, s) = (p.gamma[c], p.beta[c], p.mean[c], p.invstd[c]);
            for v in row.iter_mut() {
                *v = g * (*v - m) * s + b;
            }
        }
    }
}

/// The input gradient over whole sample blocks, the reference's formula: `dx = gamma ·
/// invstd / n · (n · dy − Σdy − x̂ · Σ(dy · x̂))` with `x̂ = (x − mean) · invstd`; `p.beta`
/// holds `Σdy` and `sums_xhat` `Σ(dy · x̂)`.
#[inline(always)]
fn grad_input_blocks_generic(
    dx: &mut [f32],
    dy: &[f32],
    x: &[f32],
    d: ChannelDims,
    p: Channels<'_>,
    sums_xhat: &[f32],
) {
    let count = d.per_channel() as f32;
    let block = d.channels * d.inner;
    for ((dx, dy), x) in dx.chunks_mut(block).zip(dy.chunks(block)).zip(x.chunks(block)) {
        let rows = dx.chunks_mut(d.inner).zip(dy.chunks(d.inner)).zip(x.chunks(d.inner));
        for (c, ((dx, dy), x)) in rows.enumerate() {
            let (m, s, sum_dy, sum_xhat) = (p.mean[c], p.invstd[c], p.beta[c], sums_xhat[c]);
            let factor = p.gamma[c] * s / count;
            for ((dx, &dy), &x) in dx.iter_mut().zip(dy).zip(x) {
                let xhat = (x - m) * s;
                *dx = factor * (count * dy - sum_dy - xhat * sum_xhat);
            }
        }
    }
}

multiversion!(channel_sum = channel_sum_generic(a: &[f32], b: &[f32], d: ChannelDims, c: usize, f: impl Fn(f32, f32) -> f32) -> f32);
multiversion!(normalize_blocks = normalize_blocks_generic(x: &mut [f32], d: ChannelDims, p: Channels<'_>));
multiversion!(grad_input_blocks = grad_input_blocks_generic(dx: &mut [f32], dy: &[f32], x: &[f32], d: ChannelDims, p: Channels<'_>, sums_xhat: &[f32]));

/// `out[c] = f(c)` for every channel, channels split over threads (`work`: the values each
/// channel reads).
fn per_channel(pool: &Pool, out: &mut [f32], work: usize, f: impl Fn(usize) -> f32 + Sync) {
    let workers = workers(pool, out.len(), out.len() * work);
    for_each_chunk(pool, workers, out, 1, &mut [], 0, |first, out, _| {
        for (i, v) in out.iter_mut().enumerate() {
            *v = f(first + i);
        }
    });
}

/// Workers of an element-wise pass: whole samples each.
fn sample_workers(pool: &Pool, d: ChannelDims) -> usize {
    workers(pool, d.outer, d.len())
}

/// Normalises `x` in place with per-channel `p`, samples split over threads.
pub fn normalize(pool: &Pool, x: &mut [f32], d: ChannelDims, p: Channels<'_>) {
    if d.inner == 0 {
        return;
    }
    let block = d.channels * d.inner;
    for_each_chunk(pool, sample_workers(pool, d), x, block, &mut [], 0, |_, x, _| {
        normalize_blocks(x, d, p)
    });
}

/// Training-mode batch norm over `x` in place: saves the batch mean and inverse standard
/// deviation (biased variance), updates the running statistics (unbiased variance),
/// normalises.
#[allow(clippy::too_many_arguments)]
pub fn train_in_place(
    pool: &Pool,
    x: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running: [&mut [f32]; 2],
    saved_mean: &mut [f32],
    saved_invstd: &mut [f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    let count = d.per_channel();
    let x_read = &*x;
    per_channel(pool, saved_mean, 2 * count, |c| {
        channel_sum(x_read, x_read, d, c, |v, _| v) / count as f32
    });
    let mean = &*saved_mean;
    // The sums of squared deviations, turned into inverse standard deviations below.
    per_channel(pool, saved_invstd, 2 * count, |c| {
        let m = mean[c];
        channel_sum(x_read, x_read, d, c, |v, _| (v - m) * (v - m))
    });
    let [running_mean, running_var] = running;
    let unbiased_divisor = if count > 1 { count - 1 } else { count } as f32;
    for c in 0..d.channels {
        let squared_deviations = saved_invstd[c];
        saved_invstd[c] = 1.0 / (squared_deviations / count as f32 + cfg.eps).sqrt();
        let unbiased = squared_deviations / unbiased_divisor;
        running_mean[c] = (1.0 - cfg.momentum) * running_mean[c] + cfg.momentum * mean[c];
        running_var[c] = (1.0 - cfg.momentum) * running_var[c] + cfg.momentum * unbiased;
    }
    normalize(pool, x, d, Channels { gamma, beta, mean, invstd: saved_invstd });
}

/// The normalisation of evaluation: running statistics, `invstd = 1 / √(var + eps)`.
pub fn eval_in_place(
    pool: &Pool,
    x: &mut [f32],
    p: Channels<'_>,
    running_var: &[f32],
    invstd: &mut [f32],
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    for (s, &var) in invstd.iter_mut().zip(running_var) {
        *s = 1.0 / (var + cfg.eps).sqrt();
    }
    normalize(pool, x, d, Channels { invstd, ..p });
}

/// `Σdy` into `sum_dy` and `Σ(dy · x̂)` into `sum_xhat`, per channel.
#[allow(clippy::too_many_arguments)]
pub fn grad_sums(
    pool: &Pool,
    dy: &[f32],
    x: &[f32],
    mean: &[f32],
    invstd: &[f32],
    sum_dy: &mut [f32],
    sum_xhat: &mut [f32],
    d: ChannelDims,
) {
    let count = d.per_channel();
    per_channel(pool, sum_dy, count, |c| channel_sum(dy, dy, d, c, |v, _| v));
    per_channel(pool, sum_xhat, 2 * count, |c| {
        let (m, s) = (mean[c], invstd[c]);
        channel_sum(dy, x, d, c, |dy, x| dy * (x - m) * s)
    });
}

/// The input gradient from [`grad_sums`]' sums, samples split over threads.
#[allow(clippy::too_many_arguments)]
pub fn grad_input(
    pool: &Pool,
    dy: &[f32],
    x: &[f32],
    gamma: &[f32],
    mean: &[f32],
    invstd: &[f32],
    sums: [&[f32]; 2],
    dx: &mut [f32],
    d: ChannelDims,
) {
    if d.inner == 0 {
        return;
    }
    let [sum_dy, sum_xhat] = sums;
    let block = d.channels * d.inner;
    let p = Channels { gamma, beta: sum_dy, mean, invstd };
    for_each_chunk(pool, sample_workers(pool, d), dx, block, &mut [], 0, |first, dx, _| {
        let at = first * block;
        let (dy, x) = (&dy[at..][..dx.len()], &x[at..][..dx.len()]);
        grad_input_blocks(dx, dy, x, d, p, sum_xhat)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
        }
    }

    /// Channels long enough for vector bodies and tails and big enough to be split over two
    /// threads, against the reference's loops.
    #[test]
    fn training_forward_and_gradients_match_the_reference() {
        let mut rng = SplitMix::new(11);
        let cfg = BatchNormConfig { eps: 1e-5, momentum: 0.1 };
        for d in [
            ChannelDims { outer: 4, channels: 4, inner: 8203 },
            ChannelDims { outer: 3, channels: 2, inner: 5 },
        ] {
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-2.0, 3.0)).collect() };
            let (x, dy) = (random(d.len()), random(d.len()));
            let (gamma, beta) = (random(d.channels), random(d.channels));
            let mut want = (x.clone(), vec![0.5; d.channels], vec![2.0; d.channels]);
            let (mut want_mean, mut want_invstd) = (vec![0.0; d.channels], vec![0.0; d.channels]);
            r::batch_norm_train_in_place(
                &mut want.0,
                &gamma,
                &beta,
                &mut want.1,
                &mut want.2,
                &mut want_mean,
                &mut want_invstd,
                d,
                cfg,
            );
            let mut want_dx = vec![0.0; d.len()];
            r::batch_norm_grad_input(&dy, &x, &gamma, &want_mean, &want_invstd, &mut want_dx, d);
            let (mut want_dgamma, mut want_dbeta) = (vec![0.0; d.channels], vec![0.0; d.channels]);
            r::batch_norm_grad_params(
                &dy,
                &x,
                &want_mean,
                &want_invstd,
                &mut want_dgamma,
                &mut want_dbeta,
                d,
            );
            for threads in [1, 2] {
                let pool = Pool::eager(threads);
                let mut got = (x.clone(), vec![0.5; d.channels], vec![2.0; d.channels]);
                let (mut mean, mut invstd) = (vec![f32::NAN; d.channels], vec![0.0; d.channels]);
                let running = [&mut got.1[..], &mut got.2[..]];
                train_in_place(
                    &pool,
                    &mut got.0,
                    &gamma,
                    &beta,
                    running,
                    &mut mean,
                    &mut invstd,
                    d,
                    cfg,
                );
                assert_close(&got.0, &want.0, "y");
                assert_close(&got.1, &want.1, "running mean");
                assert_close(&got.2, &want.2, "running var");
                assert_close(&mean, &want_mean, "saved mean");
                assert_close(&invstd, &want_invstd, "saved invstd");
                let (mut sum_dy, mut sum_xhat) =
                    (vec![f32::NAN; d.channels], vec![0.0; d.channels]);
                grad_sums(&pool, &dy, &x, &mean, &invstd, &mut sum_dy, &mut sum_xhat, d);
                // Sums of many terms in another order: within a millionth of the sum of their
                // magnitudes.
                for c in 0..d.channels {
                    let (m, s) = (mean[c], invstd[c]);
                    let (mut magnitude_dy, mut magnitude_xhat) = (0.0, 0.0);
                    for i in (0..d.len()).filter(|i| i / d.inner % d.channels == c) {
                        magnitude_dy += dy[i].abs();
                        magnitude_xhat += (dy[i] * (x[i] - m) * s).abs();
                    }
                    let close = |a: f32, b: f32, magnitude: f32| (a - b).abs() <= 1e-6 * magnitude;
                    assert!(close(sum_dy[c], want_dbeta[c], magnitude_dy), "dbeta[{c}]");
                    assert!(close(sum_xhat[c], want_dgamma[c], magnitude_xhat), "dgamma[{c}]");
                }
                let mut dx = vec![f32::NAN; d.len()];
                let sums = [&sum_dy[..], &sum_xhat[..]];
                grad_input(&pool, &dy, &x, &gamma, &mean, &invstd, sums, &mut dx, d);
                assert_close(&dx, &want_dx, "dx");
            }
        }
    }
}
