//! Depthwise convolution (one input and one output channel per group) as direct vector
//! loops over each plane, compiled for the widest vector extension the CPU has
//! (`multiversion!`): im2col would build a `kh·kw`-row matrix per channel for a tiny
//! product. Every run of in-bounds taps is one strided multiply-add (forward, input
//! gradient) or a multiply-accumulate into [`LANES`] partial sums (weight gradient), with
//! strides 1 and 2 specialised so that they vectorize.

use crate::parallel::{for_each_chunk, workers};
use crate::pool::Pool;
use crate::window::valid_outputs;
use sprout_core::geometry::Conv2dGeometry;

/// Partial sums per weight of the weight gradient: an AVX2 register.
pub const LANES: usize = 8;

/// Whether `g` is depthwise: every group holds one input and one output channel.
pub fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.c_in_per_group() == 1 && g.c_out_per_group() == 1
}

/// Scratch values one weight-gradient worker needs: [`LANES`] partial sums per weight.
pub fn grad_weight_scratch(g: &Conv2dGeometry) -> usize {
    g.kh * g.kw * LANES
}

/// Calls `visit(weight, out_start, in_start, count)` for every run of in-bounds taps of one
/// plane: outputs `out_start + i` read inputs `in_start + i · stride_w` through kernel
/// weight `weight` (`ky · kw + kx`), for `i < count` (at least one).
#[inline(always)]
fn for_each_run(g: &Conv2dGeometry, mut visit: impl FnMut(usize, usize, usize, usize)) {
    for ky in 0..g.kh {
        for kx in 0..g.kw {
            let oxs = valid_outputs(g.out_w, kx, g.stride.1, g.padding.1, g.w);
            if oxs.is_empty() {
                continue;
            }
            let first_ix = oxs.start * g.stride.1 + kx - g.padding.1;
            for oy in valid_outputs(g.out_h, ky, g.stride.0, g.padding.0, g.h) {
                let iy = oy * g.stride.0 + ky - g.padding.0;
                visit(ky * g.kw + kx, oy * g.out_w + oxs.start, iy * g.w + first_ix, oxs.len());
            }
        }
    }
}

/// The `count` inputs of a run, `x[start + i·stride]`, as the slice from the first to the
/// last.
#[inline(always)]
fn strided(x: &[f32], start: usize, count: usize, stride: usize) -> &[f32] {
    &x[start..start + (count - 1) * stride + 1]
}

/// The same, mutable.
#[inline(always)]
fn strided_mut(x: &mut [f32], start: usize, count: usize, stride: usize) -> &mut [f32] {
    &mut x[start..start + (count - 1) * stride + 1]
}

/// `y[i] += w · x[i·S]` for every `i < y.len()`; `x` is [`strided`].
#[inline(always)]
fn axpy_by<const S: usize>(y: &mut [f32], w: f32, x: &[f32]) {
    let Some((last, body)) = y.split_last_mut() else { return };
    for (v, x) in body.iter_mut().zip(x.chunks_exact(S)) {
        *v += w * x[0];
    }
    *last += w * x[body.len() * S];
}

/// `y[i] += w · x[i·stride]`, strides 1 and 2 specialised.
#[inline(always)]
fn axpy(y: &mut [f32], w: f32, x: &[f32], stride: usize) {
    match stride {
        1 => axpy_by::<1>(y, w, x),
        2 => axpy_by::<2>(y, w, x),
        _ => y.iter_mut().zip(x.iter().step_by(stride)).for_each(|(v, x)| *v += w * x),
    }
}

/// `dx[i·stride] += w · dy[i]` for every `i < dy.len()`; `dx` is [`strided_mut`].
#[inline(always)]
fn scatter(dx: &mut [f32], w: f32, dy: &[f32], stride: usize) {
    match stride {
        1 => dx.iter_mut().zip(dy).for_each(|(d, v)| *d += w * v),
        _ => dx.iter_mut().step_by(stride).zip(dy).for_each(|(d, v)| *d += w * v),
    }
}

/// `acc[i % LANES] += a[i] · x[i·S]` for every `i < a.len()`; `x` is [`strided`].
#[inline(always)]
fn dot_lanes_by<const S: usize>(acc: &mut [f32; LANES], a: &[f32], x: &[f32]) {
    let body = a.len() - a.len() % LANES;
    for (block, a) in a[..body].chunks_exact(LANES).enumerate() {
        let x = &x[block * LANES * S..][..(LANES - 1) * S + 1];
        for i in 0..LANES {
            acc[i] += a[i] * x[i * S];
        }
    }
    for (i, a) in a[body..].iter().enumerate() {
        acc[i] += a * x[(body + i) * S];
    }
}

/// `acc[i % LANES] += a[i] · x[i·stride]`, strides 1 and 2 specialised.
#[inline(always)]
fn dot_lanes(acc: &mut [f32; LANES], a: &[f32], x: &[f32], stride: usize) {
    match stride {
        1 => dot_lanes_by::<1>(acc, a, x),
        2 => dot_lanes_by::<2>(acc, a, x),
        _ => a.iter().zip(x.iter().step_by(stride)).enumerate().for_each(|(i, (a, x))| {
            acc[i % LANES] += a * x;
        }),
    }
}

/// One output plane: `y = bias + Σ_k w[k] · (x shifted by tap k)`.
#[inline(always)]
fn forward_plane_generic(g: &Conv2dGeometry, x: &[f32], w: &[f32], bias: f32, y: &mut [f32]) {
    let stride = g.stride.1;
    y.fill(bias);
    for_each_run(g, |k, out, inp, count| {
        axpy(&mut y[out..out + count], w[k], strided(x, inp, count, stride), stride);
    });
}

/// One input plane's gradient: every output gradient scattered back through its taps.
#[inline(always)]
fn grad_input_plane_generic(g: &Conv2dGeometry, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let stride = g.stride.1;
    dx.fill(0.0);
    for_each_run(g, |k, out, inp, count| {
        scatter(strided_mut(dx, inp, count, stride), w[k], &dy[out..out + count], stride);
    });
}

/// Adds one plane's contribution to the partial sums `acc[k·LANES..][..LANES]` of every
/// weight `k`.
#[inline(always)]
fn grad_weight_plane_generic(g: &Conv2dGeometry, dy: &[f32], x: &[f32], acc: &mut [f32]) {
    let stride = g.stride.1;
    for_each_run(g, |k, out, inp, count| {
        let lanes: &mut [f32; LANES] =
            (&mut acc[k * LANES..][..LANES]).try_into().expect("LANES values");
        dot_lanes(lanes, &dy[out..out + count], strided(x, inp, count, stride), stride);
    });
}

multiversion!(forward_plane = forward_plane_generic(g: &Conv2dGeometry, x: &[f32], w: &[f32], bias: f32, y: &mut [f32]));
multiversion!(grad_input_plane = grad_input_plane_generic(g: &Conv2dGeometry, dy: &[f32], w: &[f32], dx: &mut [f32]));
multiversion!(grad_weight_plane = grad_weight_plane_generic(g: &Conv2dGeometry, dy: &[f32], x: &[f32], acc: &mut [f32]));

/// Forward pass, one output plane per (sample, channel), planes split over threads.
pub fn conv2d(
    pool: &Pool,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(pool.threads(), g.n * g.c_out, g.macs());
    for_each_chunk(pool, workers, y, out_len, &mut [], 0, |first, planes, _| {
        for (i, y_plane) in planes.chunks_mut(out_len).enumerate() {
            let plane = first + i;
            let c = plane % g.c_out;
            let (x_plane, w_c) = (&x[plane * in_len..][..in_len], &w[c * taps..][..taps]);
            forward_plane(g, x_plane, w_c, b.map_or(0.0, |b| b[c]), y_plane);
        }
    });
}

/// Input gradient, one input plane per (sample, channel), planes split over threads.
pub fn conv2d_grad_input(pool: &Pool, dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(pool.threads(), g.n * g.c_in, g.macs());
    for_each_chunk(pool, workers, dx, in_len, &mut [], 0, |first, planes, _| {
        for (i, dx_plane) in planes.chunks_mut(in_len).enumerate() {
            let plane = first + i;
            let c = plane % g.c_in;
            let (dy_plane, w_c) = (&dy[plane * out_len..][..out_len], &w[c * taps..][..taps]);
            grad_input_plane(g, dy_plane, w_c, dx_plane);
        }
    });
}

/// Weight gradient, one `kh·kw` filter per channel summed over the batch into [`LANES`]
/// partial sums per weight (in `scratch`, [`grad_weight_scratch`] values per worker),
/// channels split over threads.
pub fn conv2d_grad_weight(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    x: &[f32],
    dw: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(pool.threads(), g.c_out, g.macs());
    let per_worker = grad_weight_scratch(g);
    for_each_chunk(pool, workers, dw, taps, scratch, per_worker, |first, filters, acc| {
        for (i, dw_c) in filters.chunks_mut(taps).enumerate() {
            let c = first + i;
            acc.fill(0.0);
            for n in 0..g.n {
                let plane = n * g.c_in + c;
                let (x_plane, dy_plane) =
                    (&x[plane * in_len..][..in_len], &dy[plane * out_len..][..out_len]);
                grad_weight_plane(g, dy_plane, x_plane, acc);
            }
            for (dw, lanes) in dw_c.iter_mut().zip(acc.chunks_exact(LANES)) {
                *dw = lanes.iter().sum();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    fn random(len: usize, rng: &mut SplitMix) -> Vec<f32> {
        (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
        }
    }

    /// Rows wide enough for whole vectors and a tail at strides 1, 2 and 3, against the
    /// reference's loops, on one thread and two.
    #[test]
    fn wide_rows_at_every_stride_match_the_reference() {
        let mut rng = SplitMix::new(7);
        for (stride, padding, w) in [(1, 1, 37), (2, 1, 37), (2, 0, 40), (3, 2, 29)] {
            let (c, h, k) = (3, 5, 3);
            let out = |size: usize| (size + 2 * padding - k) / stride + 1;
            let g = Conv2dGeometry {
                n: 2,
                c_in: c,
                h,
                w,
                c_out: c,
                kh: k,
                kw: k,
                stride: (stride, stride),
                padding: (padding, padding),
                groups: c,
                out_h: out(h),
                out_w: out(w),
            };
            let (x, wt) = (random(g.n * c * h * w, &mut rng), random(c * k * k, &mut rng));
            let (b, dy) = (random(c, &mut rng), random(g.n * c * g.out_h * g.out_w, &mut rng));
            let mut want_y = vec![0.0; dy.len()];
            r::conv2d(&x, &wt, Some(&b), &mut want_y, &g);
            let mut want_dx = vec![0.0; x.len()];
            r::conv2d_grad_input(&dy, &wt, &mut want_dx, &g);
            let mut want_dw = vec![0.0; wt.len()];
            r::conv2d_grad_weight(&dy, &x, &mut want_dw, &g);
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                let mut y = vec![f32::NAN; dy.len()];
                conv2d(&pool, &x, &wt, Some(&b), &mut y, &g);
                assert_close(&y, &want_y, &format!("y, stride {stride}"));
                let mut dx = vec![f32::NAN; x.len()];
                conv2d_grad_input(&pool, &dy, &wt, &mut dx, &g);
                assert_close(&dx, &want_dx, &format!("dx, stride {stride}"));
                let mut scratch = vec![f32::NAN; threads * grad_weight_scratch(&g)];
                let mut dw = vec![f32::NAN; wt.len()];
                conv2d_grad_weight(&pool, &mut scratch, &dy, &x, &mut dw, &g);
                assert_close(&dw, &want_dw, &format!("dw, stride {stride}"));
            }
        }
    }
}
