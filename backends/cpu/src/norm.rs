//! Batch normalisation over `[outer, channels, inner]` tensors as vector loops over each
//! (sample, channel) block: both per-channel sums of a pass in one read of the data, in
//! [`LANES`] partial sums each, the batch split over threads in parts of whole samples
//! (channels for a batch of one), then the element-wise pass split over samples, reading
//! its input and writing its output in one go (no copy first). The statistics are shifted
//! sums (`Σ(x − k)`, `Σ(x − k)²` with `k` a value of the channel), so they are one pass
//! without the cancellation of plain sums of squares; the element formulas are the
//! reference's.

use core::ops::Range;

use sprout_core::geometry::ChannelDims;
use sprout_core::hyperparams::BatchNormConfig;
use sprout_core::reference::Rectifier;

use half::f16;

use crate::cast;
use crate::parallel::{for_each_chunk, partials_len, sum_over_batch, workers, Scratch};
use crate::pool::Pool;

/// Partial sums of a channel's reduction: an AVX-512 register.
const LANES: usize = 16;

/// `acc[i % LANES] += f(a[i], b[i])` over the whole [`LANES`] of one row; returns the sum
/// over the rest.
#[inline(always)]
fn add_row(acc: &mut [f32; LANES], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let body = a.len() - a.len() % LANES;
    for (a, b) in a[..body].chunks_exact(LANES).zip(b[..body].chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += f(a[i], b[i]);
        }
    }
    a[body..].iter().zip(&b[body..]).map(|(&a, &b)| f(a, b)).sum()
}

/// `(Σ f(a[i], b[i]), Σ g(a[i], b[i]))` over channel `c`'s elements, each in [`LANES`]
/// partial sums, in one read of `a` and `b` from memory: each (sample, channel) row is
/// summed twice while it is in the first-level cache (in one loop the compiler pairs the
/// two sums in a vector instead of vectorising over elements).
#[inline(always)]
fn channel_sums_generic(
    a: &[f32],
    b: &[f32],
    d: ChannelDims,
    c: usize,
    f: impl Fn(f32, f32) -> f32,
    g: impl Fn(f32, f32) -> f32,
) -> (f32, f32) {
    let (mut first, mut second) = ([0.0f32; LANES], [0.0f32; LANES]);
    let mut tail = (0.0, 0.0);
    for o in 0..d.outer {
        let start = (o * d.channels + c) * d.inner;
        let (a, b) = (&a[start..][..d.inner], &b[start..][..d.inner]);
        tail.0 += add_row(&mut first, a, b, &f);
        tail.1 += add_row(&mut second, a, b, &g);
    }
    (first.iter().sum::<f32>() + tail.0, second.iter().sum::<f32>() + tail.1)
}

/// Per-channel values the element-wise passes read.
#[derive(Clone, Copy)]
pub struct Channels<'a> {
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub mean: &'a [f32],
    pub invstd: &'a [f32],
}

/// `y = gamma · (x − mean) · invstd + beta` per channel over whole sample blocks (the
/// reference's formula), `x` read from `src` or, without one, from `y` itself.
#[inline(always)]
fn normalize_blocks_generic(src: Option<&[f32]>, y: &mut [f32], d: ChannelDims, p: Channels<'_>) {
    for (row_index, row) in y.chunks_mut(d.inner).enumerate() {
        let c = row_index % d.channels;
        let (g, b, m, s) = (p.gamma[c], p.beta[c], p.mean[c], p.invstd[c]);
        let f = |x: f32| normalized(x, g, b, m, s);
        match src {
            Some(src) => {
                let x = &src[row_index * d.inner..][..row.len()];
                row.iter_mut().zip(x).for_each(|(y, &x)| *y = f(x));
            }
            None => row.iter_mut().for_each(|y| *y = f(*y)),
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

multiversion!(channel_sums = channel_sums_generic(a: &[f32], b: &[f32], d: ChannelDims, c: usize, f: impl Fn(f32, f32) -> f32, g: impl Fn(f32, f32) -> f32) -> (f32, f32));
multiversion!(normalize_blocks = normalize_blocks_generic(src: Option<&[f32]>, y: &mut [f32], d: ChannelDims, p: Channels<'_>));
multiversion!(grad_input_blocks = grad_input_blocks_generic(dx: &mut [f32], dy: &[f32], x: &[f32], d: ChannelDims, p: Channels<'_>, sums_xhat: &[f32]));

/// Values of scratch [`batch_stats`], [`grad_sums`] and [`grad_sums_rectified`] take: two
/// per channel, and two per channel for each part of a batch split over `pool`'s threads.
pub fn pairs_len(pool: &Pool, d: ChannelDims) -> usize {
    2 * d.channels + partials_len(pool.threads(), 2 * d.channels)
}

/// Two sums of every channel worth `work` values read in all, `sums(c, samples)` giving
/// channel `c`'s over the range `samples`, into `first` and `second`; `pairs` holds
/// [`pairs_len`] values. The batch is split over threads (see [`sum_over_batch`]).
fn reduce_channels(
    pool: &Pool,
    d: ChannelDims,
    work: usize,
    pairs: &mut [f32],
    [first, second]: [&mut [f32]; 2],
    sums: impl Fn(usize, Range<usize>) -> (f32, f32) + Sync,
) {
    let (out, partials) = pairs.split_at_mut(2 * d.channels);
    let scratch = Scratch { partials, pieces: &mut [], piece_len: 0 };
    sum_over_batch(pool, d.outer, work, out, 2, scratch, |first_c, samples, pairs, _| {
        for (i, pair) in pairs.chunks_exact_mut(2).enumerate() {
            (pair[0], pair[1]) = sums(first_c + i, samples.clone());
        }
    });
    for ((pair, u), v) in out.chunks_exact(2).zip(first).zip(second) {
        (*u, *v) = (pair[0], pair[1]);
    }
}

/// The samples `samples` of a `[outer, channels, inner]` tensor: where they lie in its
/// data, and their dimensions.
fn samples(d: ChannelDims, samples: Range<usize>) -> (Range<usize>, ChannelDims) {
    let block = d.channels * d.inner;
    let dims = ChannelDims { outer: samples.len(), ..d };
    (samples.start * block..samples.end * block, dims)
}

/// Both of [`channel_sums`]' sums of every channel `c`, of the pair of functions `f(c)`,
/// into `first` and `second` (see [`reduce_channels`]).
fn per_channel<F, G, H>(
    pool: &Pool,
    [a, b]: [&[f32]; 2],
    d: ChannelDims,
    pairs: &mut [f32],
    out: [&mut [f32]; 2],
    f: F,
) where
    F: Fn(usize) -> (G, H) + Sync,
    G: Fn(f32, f32) -> f32,
    H: Fn(f32, f32) -> f32,
{
    reduce_channels(pool, d, a.len() + b.len(), pairs, out, |c, at| {
        let (f, g) = f(c);
        let (at, part) = samples(d, at);
        channel_sums(&a[at.clone()], &b[at], part, c, f, g)
    });
}

/// Workers of an element-wise pass: whole samples each.
fn sample_workers(pool: &Pool, d: ChannelDims) -> usize {
    workers(pool, d.outer, d.len())
}

/// `y` normalised with per-channel `p` from `src` (or in place without one), samples split
/// over threads.
pub fn normalize(pool: &Pool, src: Option<&[f32]>, y: &mut [f32], d: ChannelDims, p: Channels<'_>) {
    if d.inner == 0 {
        return;
    }
    let block = d.channels * d.inner;
    for_each_chunk(pool, sample_workers(pool, d), y, block, &mut [], 0, |first, y, _| {
        let src = src.map(|x| &x[first * block..][..y.len()]);
        normalize_blocks(src, y, d, p)
    });
}

/// What training-mode batch norm writes besides its output.
pub struct Stats<'a> {
    pub running_mean: &'a mut [f32],
    pub running_var: &'a mut [f32],
    pub saved_mean: &'a mut [f32],
    pub saved_invstd: &'a mut [f32],
}

/// Training-mode batch statistics of `x` in one read of it: saves the batch mean and
/// inverse standard deviation (biased variance), updates the running statistics (unbiased
/// variance); `pairs` is scratch of [`pairs_len`] values.
pub fn batch_stats(
    pool: &Pool,
    x: &[f32],
    pairs: &mut [f32],
    s: Stats<'_>,
    d: ChannelDims,
    cfg: BatchNormConfig,
) {
    let count = d.per_channel();
    // Each channel's sums are shifted by its first value, near its mean.
    let shift = |c: usize| if count > 0 { x[c * d.inner] } else { 0.0 };
    let sums = [&mut *s.saved_mean, &mut *s.saved_invstd];
    per_channel(pool, [x, x], d, pairs, sums, |c| {
        let k = shift(c);
        (move |v: f32, _| v - k, move |v: f32, _| (v - k) * (v - k))
    });
    let n = count as f32;
    let unbiased_divisor = if count > 1 { count - 1 } else { count } as f32;
    for c in 0..d.channels {
        let (sum, squares) = (s.saved_mean[c], s.saved_invstd[c]);
        let mean = shift(c) + sum / n;
        let squared_deviations = (squares - sum * (sum / n)).max(0.0);
        s.saved_mean[c] = mean;
        s.saved_invstd[c] = 1.0 / (squared_deviations / n + cfg.eps).sqrt();
        let unbiased = squared_deviations / unbiased_divisor;
        s.running_mean[c] = (1.0 - cfg.momentum) * s.running_mean[c] + cfg.momentum * mean;
        s.running_var[c] = (1.0 - cfg.momentum) * s.running_var[c] + cfg.momentum * unbiased;
    }
}

/// The inverse standard deviations of evaluation: `invstd = 1 / √(var + eps)`.
pub fn eval_invstd(running_var: &[f32], invstd: &mut [f32], cfg: BatchNormConfig) {
    for (s, &var) in invstd.iter_mut().zip(running_var) {
        *s = inv_std(var, cfg.eps);
    }
}

/// The inverse standard deviation of evaluation mode, from a running variance.
pub fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / (var + eps).sqrt()
}

/// `gamma · (x − mean) · invstd + beta`: one value normalised, the reference's formula.
#[inline(always)]
pub fn normalized(x: f32, gamma: f32, beta: f32, mean: f32, invstd: f32) -> f32 {
    gamma * (x - mean) * invstd + beta
}

/// `Σdy` into `sum_dy` and `Σ(dy · x̂)` into `sum_xhat`, per channel, in one read of `dy`
/// and `x`; `pairs` is scratch of [`pairs_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn grad_sums(
    pool: &Pool,
    dy: &[f32],
    x: &[f32],
    mean: &[f32],
    invstd: &[f32],
    pairs: &mut [f32],
    sum_dy: &mut [f32],
    sum_xhat: &mut [f32],
    d: ChannelDims,
) {
    per_channel(pool, [dy, x], d, pairs, [sum_dy, sum_xhat], |c| {
        let (m, s) = (mean[c], invstd[c]);
        (|dy: f32, _| dy, move |dy: f32, x: f32| dy * (x - m) * s)
    });
}

/// The rows of a `[outer, channels, inner]` tensor that threads of one split write: each
/// (sample, channel) row to one thread, whether the split hands out channels or samples.
#[derive(Clone, Copy)]
struct ChannelRows {
    data: *mut f32,
    len: usize,
}

// SAFETY: threads share `ChannelRows` only within one split of `reduce_channels`, which
// hands every (sample, channel) pair to one thread, and `row` gives out only that row.
unsafe impl Sync for ChannelRows {}

impl ChannelRows {
    /// Row `o` of channel `c`.
    ///
    /// # Safety
    /// No other reference to that row lives while the result does: the caller holds
    /// sample `o` of channel `c` alone.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, o: usize, c: usize, d: ChannelDims) -> &mut [f32] {
        let start = (o * d.channels + c) * d.inner;
        assert!(start + d.inner <= self.len, "row {o} of channel {c} lies inside");
        // SAFETY: inside the slice (checked above), and the caller's promise makes the
        // borrow unique.
        unsafe { core::slice::from_raw_parts_mut(self.data.add(start), d.inner) }
    }

    /// The rows of the values at `at`.
    fn part(self, at: Range<usize>) -> Self {
        assert!(at.start <= at.end && at.end <= self.len, "{at:?} lies inside");
        Self { data: self.data.wrapping_add(at.start), len: at.len() }
    }
}

/// Gates `dy` in place where the rectifier (ReLU6 when `RELU6`) passes the pre-activation
/// `g · (x − m) · s + b` (computed as [`normalize`] computes it) and adds the gated values
/// and their products with `x̂ = (x − m) · s` to `sums` lane by lane, as [`add_row`] does;
/// returns the sums over the values past the last whole [`LANES`].
#[inline(always)]
fn add_gated_row<const RELU6: bool>(
    sums: &mut [[f32; LANES]; 2],
    dy: &mut [f32],
    x: &[f32],
    [g, b, m, s]: [f32; 4],
) -> (f32, f32) {
    let gate = |dy: f32, x: f32| {
        let passes = Rectifier { relu6: RELU6 }.passes(g * (x - m) * s + b);
        if passes {
            dy
        } else {
            0.0
        }
    };
    let body = dy.len() - dy.len() % LANES;
    let (dy_body, dy_rest) = dy.split_at_mut(body);
    for (dy, x) in
        dy_body.as_chunks_mut::<LANES>().0.iter_mut().zip(x[..body].as_chunks::<LANES>().0)
    {
        // Read through `black_box`, so the compiler does not see that the gate keeps what
        // `dy` holds and store only its zeros: masked stores run far slower on some CPUs
        // than storing every value.
        let old = core::hint::black_box(*dy);
        for i in 0..LANES {
            let v = gate(old[i], x[i]);
            dy[i] = v;
            sums[0][i] += v;
            sums[1][i] += v * (x[i] - m) * s;
        }
    }
    let mut rest = (0.0, 0.0);
    for (dy, &x) in dy_rest.iter_mut().zip(&x[body..]) {
        *dy = gate(*dy, x);
        rest.0 += *dy;
        rest.1 += *dy * (x - m) * s;
    }
    rest
}

/// `dy` of channel `c` gated in place where `rectifier` passes the pre-activation, and
/// [`grad_sums`]' two sums over the gated values, in one read of each row.
#[inline(always)]
fn rectified_channel_sums_generic(
    dy: ChannelRows,
    x: &[f32],
    d: ChannelDims,
    c: usize,
    p: Channels<'_>,
    rectifier: Rectifier,
) -> (f32, f32) {
    let affine = [p.gamma[c], p.beta[c], p.mean[c], p.invstd[c]];
    let mut sums = [[0.0f32; LANES]; 2];
    let mut tail = (0.0, 0.0);
    for o in 0..d.outer {
        // SAFETY: this thread holds channel `c` of these samples (see `reduce_channels`).
        let dy = unsafe { dy.row(o, c, d) };
        let x = &x[(o * d.channels + c) * d.inner..][..d.inner];
        let (a, b) = match rectifier.relu6 {
            true => add_gated_row::<true>(&mut sums, dy, x, affine),
            false => add_gated_row::<false>(&mut sums, dy, x, affine),
        };
        tail.0 += a;
        tail.1 += b;
    }
    (sums[0].iter().sum::<f32>() + tail.0, sums[1].iter().sum::<f32>() + tail.1)
}

multiversion!(rectified_channel_sums = rectified_channel_sums_generic(dy: ChannelRows, x: &[f32], d: ChannelDims, c: usize, p: Channels<'_>, rectifier: Rectifier) -> (f32, f32));

/// [`grad_sums`] of a batch norm whose output `rectifier` rectified, from the rectifier's
/// output gradient `dy`, which becomes the batch norm's (gated in place by the rectifier's
/// gradient, worked out from `x` and `p`); `pairs` is scratch of [`pairs_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn grad_sums_rectified(
    pool: &Pool,
    dy: &mut [f32],
    x: &[f32],
    p: Channels<'_>,
    rectifier: Rectifier,
    pairs: &mut [f32],
    sums: [&mut [f32]; 2],
    d: ChannelDims,
) {
    let sums_of = rectified_channel_sums;
    gated_grad_sums(pool, dy, x, p, rectifier, pairs, sums, d, sums_of)
}

/// What a gated gradient's channel sums take: the rows of `dy`, those of `x`, their
/// dimensions, the channel, its values and the rectifier.
type GatedSums<X> =
    fn(ChannelRows, &[X], ChannelDims, usize, Channels<'_>, Rectifier) -> (f32, f32);

/// [`grad_sums_rectified`] and its f16 variant: `sums_of` gates and sums each channel of
/// a part of the batch, split over threads as [`grad_sums`] splits (the same partial sums).
#[allow(clippy::too_many_arguments)]
fn gated_grad_sums<X: Sync>(
    pool: &Pool,
    dy: &mut [f32],
    x: &[X],
    p: Channels<'_>,
    rectifier: Rectifier,
    pairs: &mut [f32],
    sums: [&mut [f32]; 2],
    d: ChannelDims,
    sums_of: GatedSums<X>,
) {
    assert_eq!((dy.len(), x.len()), (d.len(), d.len()), "dy and x hold the batch");
    let rows = ChannelRows { data: dy.as_mut_ptr(), len: dy.len() };
    reduce_channels(pool, d, 2 * d.len(), pairs, sums, |c, at| {
        let (at, part) = samples(d, at);
        sums_of(rows.part(at.clone()), &x[at], part, c, p, rectifier)
    });
}

/// Values of a row that the f16 variant of [`grad_sums_rectified`] widens and gates at a
/// time, in the first-level cache: whole [`LANES`], so each lane sums the values it would
/// sum over the whole row.
const PIECE: usize = 16 * LANES;

/// `dy` zeroed where the rectifier (ReLU6 when `RELU6`) does not pass the pre-activation
/// `z` (a stored value of each element: written whole, see [`add_gated_row`]).
#[inline(always)]
fn gate_piece<const RELU6: bool>(dy: &mut [f32], z: &[f32]) {
    let rectifier = Rectifier { relu6: RELU6 };
    let gate = |dy: f32, z: f32| if rectifier.passes(z) { dy } else { 0.0 };
    let (dy_body, dy_rest) = dy.as_chunks_mut::<LANES>();
    let (z_body, z_rest) = z.as_chunks::<LANES>();
    for (dy, z) in dy_body.iter_mut().zip(z_body) {
        let old = core::hint::black_box(*dy);
        for i in 0..LANES {
            dy[i] = gate(old[i], z[i]);
        }
    }
    for (dy, &z) in dy_rest.iter_mut().zip(z_rest) {
        *dy = gate(*dy, z);
    }
}

/// [`rectified_channel_sums`] of a batch norm in f16 storage: `x` stored as f16, `dy`
/// rounded to f16 (the round trip of the gradient before it) and gated where the rectifier
/// passes the pre-activation rounded to f16, then the sums [`grad_sums`] takes of the gated
/// `dy`, lane by lane as [`add_row`] adds: F16C vector loops where the
/// CPU has them, else [`gated_row_pieces`].
fn rectified_channel_sums_f16(
    dy: ChannelRows,
    x: &[f16],
    d: ChannelDims,
    c: usize,
    p: Channels<'_>,
    rectifier: Rectifier,
) -> (f32, f32) {
    let affine = [p.gamma[c], p.beta[c], p.mean[c], p.invstd[c]];
    let mut sums = [[0.0f32; LANES]; 2];
    let mut tail = (0.0, 0.0);
    let f16c = cfg!(target_arch = "x86_64") && f16c_available();
    for o in 0..d.outer {
        // SAFETY: this thread holds channel `c` of these samples (see `reduce_channels`).
        let dy = unsafe { dy.row(o, c, d) };
        let x = &x[(o * d.channels + c) * d.inner..][..d.inner];
        let (a, b) = match f16c {
            true => gated_row_f16c(&mut sums, dy, x, affine, rectifier),
            false => gated_row_pieces(&mut sums, dy, x, affine, rectifier),
        };
        tail.0 += a;
        tail.1 += b;
    }
    (sums[0].iter().sum::<f32>() + tail.0, sums[1].iter().sum::<f32>() + tail.1)
}

/// Whether the CPU converts f16 with F16C.
fn f16c_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One row of [`rectified_channel_sums_f16`] by [`f16c::gated_row`]; only called where
/// [`f16c_available`].
fn gated_row_f16c(
    sums: &mut [[f32; LANES]; 2],
    dy: &mut [f32],
    x: &[f16],
    affine: [f32; 4],
    rectifier: Rectifier,
) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        assert!(f16c_available(), "the CPU converts f16 with F16C");
        // SAFETY: the CPU supports F16C (and so AVX), asserted just above.
        unsafe {
            match rectifier.relu6 {
                true => f16c::gated_row::<true>(sums, dy, x, affine),
                false => f16c::gated_row::<false>(sums, dy, x, affine),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (sums, dy, x, affine, rectifier);
        unreachable!("F16C is x86's")
    }
}

/// One row of [`rectified_channel_sums_f16`] without F16C: a [`PIECE`] at a time widened,
/// normalised and rounded through f16, `dy` rounded and gated, then summed by [`add_row`]; returns the sums
/// over the values past the last whole [`LANES`].
#[inline(always)]
fn gated_row_pieces_generic(
    sums: &mut [[f32; LANES]; 2],
    dy: &mut [f32],
    x: &[f16],
    [g, b, m, s]: [f32; 4],
    rectifier: Rectifier,
) -> (f32, f32) {
    let mut tail = (0.0, 0.0);
    let (mut wide, mut pre, mut half) = ([0.0f32; PIECE], [0.0f32; PIECE], [f16::ZERO; PIECE]);
    for (dy, x) in dy.chunks_mut(PIECE).zip(x.chunks(PIECE)) {
        let n = x.len();
        let (wide, pre, half) = (&mut wide[..n], &mut pre[..n], &mut half[..n]);
        cast::f16_to_f32(x, wide);
        for (z, &x) in pre.iter_mut().zip(&*wide) {
            *z = normalized(x, g, b, m, s);
        }
        cast::f32_to_f16(pre, half);
        cast::f16_to_f32(half, pre);
        cast::f32_to_f16(dy, half);
        cast::f16_to_f32(half, dy);
        match rectifier.relu6 {
            true => gate_piece::<true>(dy, pre),
            false => gate_piece::<false>(dy, pre),
        }
        let [first, second] = sums;
        tail.0 += add_row(first, dy, wide, |dy, _| dy);
        tail.1 += add_row(second, dy, wide, |dy, x| dy * (x - m) * s);
    }
    tail
}

multiversion!(gated_row_pieces = gated_row_pieces_generic(sums: &mut [[f32; LANES]; 2], dy: &mut [f32], x: &[f16], affine: [f32; 4], rectifier: Rectifier) -> (f32, f32));

/// [`gated_row_pieces`] as F16C vector loops, eight lanes of [`LANES`] at a time: the same
/// arithmetic (no fused multiply-adds), the same lanes.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use super::{grad_input_row_f16, normalized, Rectifier, LANES};
    use core::arch::x86_64::{
        __m128i, __m256, _mm256_add_ps, _mm256_and_ps, _mm256_cmp_ps, _mm256_cvtph_ps,
        _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_storeu_ps, _mm256_sub_ps, _mm_loadu_si128, _CMP_GT_OQ, _CMP_LT_OQ,
        _MM_FROUND_TO_NEAREST_INT,
    };
    use half::f16;

    /// One row: `dy` rounded to f16 and gated in place where the rectifier (ReLU6 when
    /// `RELU6`) passes the pre-activation of `x` rounded to f16, the gated values and their products with
    /// `x̂` added to `sums`; returns the sums over the values past the last whole [`LANES`].
    #[target_feature(enable = "avx,f16c")]
    pub(super) fn gated_row<const RELU6: bool>(
        sums: &mut [[f32; LANES]; 2],
        dy: &mut [f32],
        x: &[f16],
        [g, b, m, s]: [f32; 4],
    ) -> (f32, f32) {
        assert_eq!(dy.len(), x.len(), "dy and x hold the row");
        let body = dy.len() - dy.len() % LANES;
        let (dy_body, dy_rest) = dy.split_at_mut(body);
        let (x_body, x_rest) = x.split_at(body);
        let [gv, bv, mv, sv] = [g, b, m, s].map(|v| _mm256_set1_ps(v));
        let (zero, six) = (_mm256_setzero_ps(), _mm256_set1_ps(6.0));
        let load = |v: &[f32; LANES]| -> [__m256; 2] {
            // SAFETY: both halves of the 16 values lie inside `v`.
            unsafe { [_mm256_loadu_ps(v.as_ptr()), _mm256_loadu_ps(v.as_ptr().add(8))] }
        };
        let (mut first, mut second) = (load(&sums[0]), load(&sums[1]));
        let rows = dy_body.as_chunks_mut::<LANES>().0.iter_mut();
        for (dy, x) in rows.zip(x_body.as_chunks::<LANES>().0) {
            for h in 0..2 {
                // SAFETY: each half reads 8 f16 (16 bytes) of `x` and 8 f32 of `dy`, inside
                // their 16 values; the intrinsics take unaligned addresses.
                unsafe {
                    let half = _mm_loadu_si128(x.as_ptr().add(8 * h).cast::<__m128i>());
                    let xv = _mm256_cvtph_ps(half);
                    let centred = _mm256_sub_ps(xv, mv);
                    let z = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(gv, centred), sv), bv);
                    let z = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(z));
                    let mut passes = _mm256_cmp_ps::<_CMP_GT_OQ>(z, zero);
                    if RELU6 {
                        passes = _mm256_and_ps(passes, _mm256_cmp_ps::<_CMP_LT_OQ>(z, six));
                    }
                    let dyv = _mm256_loadu_ps(dy.as_ptr().add(8 * h));
                    let dyv = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(dyv));
                    let gated = _mm256_and_ps(dyv, passes);
                    _mm256_storeu_ps(dy.as_mut_ptr().add(8 * h), gated);
                    first[h] = _mm256_add_ps(first[h], gated);
                    let weighted = _mm256_mul_ps(_mm256_mul_ps(gated, centred), sv);
                    second[h] = _mm256_add_ps(second[h], weighted);
                }
            }
        }
        for (sums, lanes) in sums.iter_mut().zip([first, second]) {
            // SAFETY: both halves of the 16 values lie inside `sums`.
            unsafe {
                _mm256_storeu_ps(sums.as_mut_ptr(), lanes[0]);
                _mm256_storeu_ps(sums.as_mut_ptr().add(8), lanes[1]);
            }
        }
        let rectifier = Rectifier { relu6: RELU6 };
        for (dy, x) in dy_rest.iter_mut().zip(x_rest) {
            let z = f16::from_f32(normalized(x.to_f32(), g, b, m, s)).to_f32();
            *dy = if rectifier.passes(z) { f16::from_f32(*dy).to_f32() } else { 0.0 };
        }
        // As `add_row` sums its rest.
        let rest = dy_rest.iter().zip(x_rest);
        (dy_rest.iter().sum(), rest.map(|(&dy, x)| dy * (x.to_f32() - m) * s).sum())
    }

    /// [`grad_input_row_f16`] eight values at a time, the same arithmetic.
    #[target_feature(enable = "avx,f16c")]
    pub(super) fn grad_input_row(dx: &mut [f32], dy: &[f32], x: &[f16], k: [f32; 6]) {
        assert!(dy.len() == dx.len() && x.len() == dx.len(), "dx, dy and x hold the row");
        let body = dx.len() - dx.len() % 8;
        let [factor, count, sum_dy, sum_xhat, m, s] = k.map(|v| _mm256_set1_ps(v));
        let (dx_body, dx_rest) = dx.split_at_mut(body);
        let rows = dx_body.chunks_exact_mut(8).zip(dy.chunks_exact(8)).zip(x.chunks_exact(8));
        for ((dx, dy), x) in rows {
            // SAFETY: 8 f16 (16 bytes) of `x` and 8 f32 of `dy` and `dx` each; the
            // intrinsics take unaligned addresses.
            unsafe {
                let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().cast::<__m128i>()));
                let xhat = _mm256_mul_ps(_mm256_sub_ps(xv, m), s);
                let scaled =
                    _mm256_sub_ps(_mm256_mul_ps(count, _mm256_loadu_ps(dy.as_ptr())), sum_dy);
                let v = _mm256_mul_ps(factor, _mm256_sub_ps(scaled, _mm256_mul_ps(xhat, sum_xhat)));
                let rounded = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
                _mm256_storeu_ps(dx.as_mut_ptr(), rounded);
            }
        }
        grad_input_row_f16(dx_rest, &dy[body..], &x[body..], k);
    }
}

/// [`grad_sums_rectified`] of a batch norm in f16 storage: `x` stored as f16, `dy` rounded
/// to f16 (a no-op where it holds f16 values already) and the gate worked out from each
/// pre-activation rounded to f16 (what the rectifier read). The same split over threads
/// and the same sums as [`grad_sums`] of the gated `dy`.
#[allow(clippy::too_many_arguments)]
pub fn grad_sums_rectified_f16(
    pool: &Pool,
    dy: &mut [f32],
    x: &[f16],
    p: Channels<'_>,
    rectifier: Rectifier,
    pairs: &mut [f32],
    sums: [&mut [f32]; 2],
    d: ChannelDims,
) {
    let sums_of = rectified_channel_sums_f16;
    gated_grad_sums(pool, dy, x, p, rectifier, pairs, sums, d, sums_of)
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

/// [`grad_input`] of a batch norm in f16 storage: `x` stored as f16, and `dx` rounded to
/// f16 (held as f32), samples split over threads; F16C vector loops where the CPU has them.
#[allow(clippy::too_many_arguments)]
pub fn grad_input_f16(
    pool: &Pool,
    dy: &[f32],
    x: &[f16],
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
    let (block, count) = (d.channels * d.inner, d.per_channel() as f32);
    let f16c = f16c_available();
    for_each_chunk(pool, sample_workers(pool, d), dx, block, &mut [], 0, |first, dx, _| {
        let at = first * block;
        let (dy, x) = (&dy[at..][..dx.len()], &x[at..][..dx.len()]);
        let rows = dx.chunks_mut(d.inner).zip(dy.chunks(d.inner)).zip(x.chunks(d.inner));
        for (row, ((dx, dy), x)) in rows.enumerate() {
            let c = row % d.channels;
            let factor = gamma[c] * invstd[c] / count;
            let k = [factor, count, sum_dy[c], sum_xhat[c], mean[c], invstd[c]];
            match f16c {
                true => grad_input_row_f16c(dx, dy, x, k),
                false => grad_input_row_f16(dx, dy, x, k),
            }
        }
    });
}

/// One row of [`grad_input_f16`]: `dx = f16(factor · (count · dy − Σdy − x̂ · Σ(dy · x̂)))`
/// with `x̂ = (x − mean) · invstd`, [`grad_input_blocks`]' formula; `k` holds `[factor,
/// count, Σdy, Σ(dy · x̂), mean, invstd]`.
fn grad_input_row_f16(dx: &mut [f32], dy: &[f32], x: &[f16], k: [f32; 6]) {
    let [factor, count, sum_dy, sum_xhat, m, s] = k;
    for ((dx, &dy), x) in dx.iter_mut().zip(dy).zip(x) {
        let xhat = (x.to_f32() - m) * s;
        *dx = f16::from_f32(factor * (count * dy - sum_dy - xhat * sum_xhat)).to_f32();
    }
}

/// [`grad_input_row_f16`] by [`f16c::grad_input_row`]; only called where
/// [`f16c_available`].
fn grad_input_row_f16c(dx: &mut [f32], dy: &[f32], x: &[f16], k: [f32; 6]) {
    #[cfg(target_arch = "x86_64")]
    {
        assert!(f16c_available(), "the CPU converts f16 with F16C");
        // SAFETY: the CPU supports F16C (and so AVX), asserted just above.
        unsafe { f16c::grad_input_row(dx, dy, x, k) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dx, dy, x, k);
        unreachable!("F16C is x86's")
    }
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

    /// Channels long enough for vector bodies and tails, on one thread and split over two,
    /// against the reference's loops.
    #[test]
    fn training_forward_and_gradients_match_the_reference() {
        let mut rng = SplitMix::new(11);
        let cfg = BatchNormConfig { eps: 1e-5, momentum: 0.1 };
        for (d, offset) in [
            (ChannelDims { outer: 4, channels: 4, inner: 8203 }, 0.0),
            (ChannelDims { outer: 3, channels: 2, inner: 5 }, 0.0),
            (ChannelDims { outer: 2, channels: 3, inner: 999 }, 30.0),
            // One sample: the sums split over channels.
            (ChannelDims { outer: 1, channels: 5, inner: 77 }, 0.0),
        ] {
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-2.0, 3.0)).collect() };
            let x: Vec<f32> = random(d.len()).iter().map(|v| v + offset).collect();
            let dy = random(d.len());
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
            for threads in [1, 2] {
                let pool = Pool::eager(threads);
                let mut got = (x.clone(), vec![0.5; d.channels], vec![2.0; d.channels]);
                let (mut mean, mut invstd) = (vec![f32::NAN; d.channels], vec![0.0; d.channels]);
                let stats = Stats {
                    running_mean: &mut got.1,
                    running_var: &mut got.2,
                    saved_mean: &mut mean,
                    saved_invstd: &mut invstd,
                };
                let mut pairs = vec![f32::NAN; pairs_len(&pool, d)];
                batch_stats(&pool, &x, &mut pairs, stats, d, cfg);
                let p = Channels { gamma: &gamma, beta: &beta, mean: &mean, invstd: &invstd };
                let mut y = vec![f32::NAN; d.len()];
                normalize(&pool, Some(&x), &mut y, d, p);
                assert_close(&y, &want.0, "y from x");
                normalize(&pool, None, &mut got.0, d, p);
                assert_close(&got.0, &want.0, "y in place");
                assert_close(&got.1, &want.1, "running mean");
                assert_close(&got.2, &want.2, "running var");
                assert_close(&mean, &want_mean, "saved mean");
                assert_close(&invstd, &want_invstd, "saved invstd");
                // The gradients against the reference's from the same statistics.
                let mut want_dx = vec![0.0; d.len()];
                r::batch_norm_grad_input(&dy, &x, &gamma, &mean, &invstd, &mut want_dx, d);
                let (mut want_dgamma, mut want_dbeta) =
                    (vec![0.0; d.channels], vec![0.0; d.channels]);
                let (dgamma, dbeta) = (&mut want_dgamma[..], &mut want_dbeta[..]);
                r::batch_norm_grad_params(&dy, &x, &mean, &invstd, dgamma, dbeta, d);
                let (mut sum_dy, mut sum_xhat) =
                    (vec![f32::NAN; d.channels], vec![0.0; d.channels]);
                let sums = (&mut sum_dy[..], &mut sum_xhat[..]);
                grad_sums(&pool, &dy, &x, &mean, &invstd, &mut pairs, sums.0, sums.1, d);
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

    /// The rectified sums gate `dy` where the rectifier passes the normalised `x` and sum
    /// what passes as [`grad_sums`] does, over parts of the batch and over channels (small
    /// enough for Miri, which checks the rows the threads write through raw pointers).
    #[test]
    fn rectified_sums_gate_dy_and_sum_what_passes() {
        let mut rng = SplitMix::new(5);
        let cfg = BatchNormConfig { eps: 1e-5, momentum: 0.1 };
        let dims = [
            ChannelDims { outer: 3, channels: 2, inner: LANES + 3 },
            ChannelDims { outer: 1, channels: 3, inner: 5 },
        ];
        for (d, threads) in dims.into_iter().flat_map(|d| [(d, 1), (d, 2)]) {
            let pool = Pool::eager(threads);
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-2.0, 3.0)).collect() };
            let (x, dy, gamma, beta) =
                (random(d.len()), random(d.len()), random(d.channels), random(d.channels));
            let (mut mean, mut invstd) = (vec![0.0; d.channels], vec![0.0; d.channels]);
            let (mut running_mean, mut running_var) =
                (vec![0.0; d.channels], vec![1.0; d.channels]);
            let stats = Stats {
                running_mean: &mut running_mean,
                running_var: &mut running_var,
                saved_mean: &mut mean,
                saved_invstd: &mut invstd,
            };
            let mut pairs = vec![f32::NAN; pairs_len(&pool, d)];
            batch_stats(&pool, &x, &mut pairs, stats, d, cfg);
            // ReLU6 with gamma scaled by 6, which takes many pre-activations past 6.
            for relu6 in [false, true] {
                let rectifier = Rectifier { relu6 };
                let gamma: Vec<f32> =
                    gamma.iter().map(|g| if relu6 { 6.0 * g } else { *g }).collect();
                let p = Channels { gamma: &gamma, beta: &beta, mean: &mean, invstd: &invstd };
                let mut y = vec![f32::NAN; d.len()];
                normalize(&pool, Some(&x), &mut y, d, p);
                assert!(y.iter().any(|&y| !rectifier.passes(y)), "some values are cut off");
                let gate = |(&dy, &y): (&f32, &f32)| if rectifier.passes(y) { dy } else { 0.0 };
                let want_dy: Vec<f32> = dy.iter().zip(&y).map(gate).collect();
                let mut want = (vec![0.0; d.channels], vec![0.0; d.channels]);
                let (one, sums) = (Pool::new(1), (&mut want.0[..], &mut want.1[..]));
                grad_sums(&one, &want_dy, &x, &mean, &invstd, &mut pairs, sums.0, sums.1, d);
                let mut got = (dy.clone(), vec![f32::NAN; d.channels], vec![f32::NAN; d.channels]);
                let sums = [&mut got.1[..], &mut got.2[..]];
                grad_sums_rectified(&pool, &mut got.0, &x, p, rectifier, &mut pairs, sums, d);
                assert_eq!(got.0, want_dy, "{rectifier:?} gates dy, {d:?}, {threads} threads");
                assert_close(&got.1, &want.0, "rectified dbeta");
                assert_close(&got.2, &want.1, "rectified dgamma");
            }
        }
    }

    /// The f16 variant gates exactly where the rectifier passes the pre-activation rounded
    /// to f16 (the reference's gate, rounding onto the kinks included) and sums the gated
    /// values bit for bit as [`grad_sums`] does, over rows of several pieces and a tail.
    #[test]
    fn f16_rectified_sums_are_the_gate_then_grad_sums() {
        let mut rng = SplitMix::new(9);
        let dims = [
            ChannelDims { outer: 3, channels: 2, inner: 2 * PIECE + LANES + 3 },
            ChannelDims { outer: 1, channels: 3, inner: 5 },
        ];
        for (d, threads) in dims.into_iter().flat_map(|d| [(d, 1), (d, 2)]) {
            let pool = Pool::eager(threads);
            let mut x: Vec<f16> =
                (0..d.len()).map(|_| f16::from_f32(rng.uniform(-2.0, 3.0))).collect();
            // Onto 6 (ReLU6, gamma 3) in channel 0 and onto 0 in channel 1.
            (x[0], x[d.inner]) = (f16::from_f32(2.0), f16::ZERO);
            let wide: Vec<f32> = x.iter().map(|h| h.to_f32()).collect();
            let dy: Vec<f32> = (0..d.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let (mean, invstd) = (vec![0.0; d.channels], vec![1.0; d.channels]);
            // Pre-activations `x + beta`: past 6 by a little, which rounds back onto 6, and
            // just above 0, which rounds to 0.
            let beta: Vec<f32> = (0..d.channels).map(|c| [-0.0005, 1e-8][c % 2]).collect();
            for relu6 in [false, true] {
                let rectifier = Rectifier { relu6 };
                let gamma = vec![if relu6 { 3.0 } else { 1.0 }; d.channels];
                let p = Channels { gamma: &gamma, beta: &beta, mean: &mean, invstd: &invstd };
                let mut want_dy = dy.clone();
                let (mut dgamma, mut dbeta) = (vec![0.0; d.channels], vec![0.0; d.channels]);
                r::batch_norm_grad_params_rectified_f16(
                    &mut want_dy,
                    &x,
                    &gamma,
                    &beta,
                    &mean,
                    &invstd,
                    &mut dgamma,
                    &mut dbeta,
                    d,
                    rectifier,
                );
                let mut want = (vec![0.0; d.channels], vec![0.0; d.channels]);
                let mut pairs = vec![f32::NAN; pairs_len(&pool, d)];
                let sums = (&mut want.0[..], &mut want.1[..]);
                grad_sums(&pool, &want_dy, &wide, &mean, &invstd, &mut pairs, sums.0, sums.1, d);
                let mut got = (dy.clone(), vec![f32::NAN; d.channels], vec![f32::NAN; d.channels]);
                let sums = [&mut got.1[..], &mut got.2[..]];
                grad_sums_rectified_f16(&pool, &mut got.0, &x, p, rectifier, &mut pairs, sums, d);
                assert_eq!(got.0, want_dy, "{rectifier:?} gates dy, {d:?}, {threads} threads");
                assert_eq!((&got.1, &got.2), (&want.0, &want.1), "{rectifier:?}, {d:?}");
                assert_close(&got.1, &dbeta, "dbeta against the reference");
                assert_close(&got.2, &dgamma, "dgamma against the reference");
                let unrounded = |i: usize| gamma[0] * wide[i] + beta[(i / d.inner) % d.channels];
                let flipped = (0..d.len())
                    .filter(|&i| rectifier.passes(unrounded(i)) && got.0[i] == 0.0 && dy[i] != 0.0);
                assert!(flipped.count() > 0, "{rectifier:?}: some gate depends on the rounding");
            }
        }
    }

    /// Both ways of gating and summing a row in f16 storage agree bit for bit: the F16C
    /// loops (where the CPU has F16C) and the pieces other CPUs run.
    #[test]
    fn f16_rectified_rows_agree_with_and_without_f16c() {
        if !f16c_available() {
            return;
        }
        let mut rng = SplitMix::new(13);
        for (len, relu6) in
            [(2 * PIECE + LANES + 3, true), (2 * PIECE + LANES + 3, false), (5, true)]
        {
            let x: Vec<f16> = (0..len).map(|_| f16::from_f32(rng.uniform(-2.0, 3.0))).collect();
            let dy: Vec<f32> = (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let (affine, rectifier) = ([3.0, -0.0005, 0.25, 1.5], Rectifier { relu6 });
            let mut want = (dy.clone(), [[0.5f32; LANES]; 2]);
            let want_rest = gated_row_pieces(&mut want.1, &mut want.0, &x, affine, rectifier);
            let mut got = (dy.clone(), [[0.5f32; LANES]; 2]);
            let got_rest = gated_row_f16c(&mut got.1, &mut got.0, &x, affine, rectifier);
            assert_eq!((got, got_rest), (want, want_rest), "{len} values, {rectifier:?}");
        }
    }

    /// The input gradient in f16 storage is the reference's bit for bit, on one thread and
    /// two, with F16C and without, over rows with a tail.
    #[test]
    fn f16_grad_input_matches_the_reference() {
        let mut rng = SplitMix::new(17);
        let d = ChannelDims { outer: 3, channels: 2, inner: 8 * 5 + 3 };
        let mut random = |len: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..len).map(|_| rng.uniform(lo, hi)).collect()
        };
        let x: Vec<f16> = random(d.len(), -2.0, 3.0).into_iter().map(f16::from_f32).collect();
        let dy = random(d.len(), -1.0, 1.0);
        let (gamma, mean, invstd) = (
            random(d.channels, 0.5, 2.0),
            random(d.channels, -0.5, 0.5),
            random(d.channels, 0.5, 2.0),
        );
        let (dgamma, dbeta) = (random(d.channels, -3.0, 3.0), random(d.channels, -3.0, 3.0));
        let mut want = vec![f32::NAN; d.len()];
        r::batch_norm_grad_input_from_sums_f16(
            &dy, &x, &gamma, &mean, &invstd, &dgamma, &dbeta, &mut want, d,
        );
        assert!(want.iter().all(|&v| f16::from_f32(v).to_f32() == v), "rounded to f16");
        for threads in [1, 2] {
            let mut got = vec![f32::NAN; d.len()];
            let sums = [&dbeta[..], &dgamma[..]];
            grad_input_f16(
                &Pool::eager(threads),
                &dy,
                &x,
                &gamma,
                &mean,
                &invstd,
                sums,
                &mut got,
                d,
            );
            assert_eq!(got, want, "{threads} threads");
        }
        let k = [0.75, 40.0, 0.5, -1.25, 0.125, 1.5];
        let (mut generic, mut f16c) = (vec![f32::NAN; d.inner], vec![f32::NAN; d.inner]);
        grad_input_row_f16(&mut generic, &dy[..d.inner], &x[..d.inner], k);
        if f16c_available() {
            grad_input_row_f16c(&mut f16c, &dy[..d.inner], &x[..d.inner], k);
            assert_eq!(f16c, generic, "with F16C and without");
        }
    }

    /// A mean ten thousand times the spread: plain one-pass sums of squares would lose the
    /// variance (10001² is not an f32), shifted ones keep it exactly.
    #[test]
    fn statistics_of_a_large_mean_keep_the_variance() {
        let d = ChannelDims { outer: 2, channels: 1, inner: 2048 };
        let x: Vec<f32> = (0..d.len()).map(|i| if i % 2 == 0 { 9999.0 } else { 10001.0 }).collect();
        let cfg = BatchNormConfig { eps: 1e-5, momentum: 1.0 };
        let ([mut rm, mut rv], [mut mean, mut invstd]) = ([[0.0]; 2], [[0.0]; 2]);
        let stats = Stats {
            running_mean: &mut rm,
            running_var: &mut rv,
            saved_mean: &mut mean,
            saved_invstd: &mut invstd,
        };
        batch_stats(&Pool::new(1), &x, &mut [0.0; 2], stats, d, cfg);
        assert_eq!((mean[0], rm[0]), (10000.0, 10000.0));
        assert!((invstd[0] - 1.0 / (1.0f32 + 1e-5).sqrt()).abs() < 1e-6, "{}", invstd[0]);
        assert!((rv[0] - 4096.0 / 4095.0).abs() < 1e-6, "{}", rv[0]);
    }
}
