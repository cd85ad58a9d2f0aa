//! Depthwise convolution (one input and one output channel per group) by direct loops over
//! each plane: im2col would build a `kh·kw`-row matrix per channel for a tiny product.

use crate::parallel::{for_each_chunk, workers};
use crate::window::valid_outputs;
use sprout_core::geometry::Conv2dGeometry;

/// Whether `g` is depthwise: every group holds one input and one output channel.
pub fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.c_in_per_group() == 1 && g.c_out_per_group() == 1
}

/// Calls `visit(weight, out_start, in_start, count)` for every run of in-bounds taps of one
/// plane: outputs `out_start + i` read inputs `in_start + i · stride_w` through kernel
/// weight `weight` (`ky · kw + kx`), for `i < count`.
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

/// Forward pass, one output plane per (sample, channel), planes split over threads.
pub fn conv2d(
    threads: usize,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(threads, g.n * g.c_out, g.macs());
    for_each_chunk(workers, y, out_len, &mut [], 0, |first, planes, _| {
        for (i, y_plane) in planes.chunks_mut(out_len).enumerate() {
            let plane = first + i;
            let c = plane % g.c_out;
            let (x_plane, w_c) = (&x[plane * in_len..][..in_len], &w[c * taps..][..taps]);
            y_plane.fill(b.map_or(0.0, |b| b[c]));
            for_each_run(g, |k, out, inp, count| {
                for (j, v) in y_plane[out..out + count].iter_mut().enumerate() {
                    *v += w_c[k] * x_plane[inp + j * g.stride.1];
                }
            });
        }
    });
}

/// Input gradient, one input plane per (sample, channel), planes split over threads.
pub fn conv2d_grad_input(
    threads: usize,
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(threads, g.n * g.c_in, g.macs());
    for_each_chunk(workers, dx, in_len, &mut [], 0, |first, planes, _| {
        for (i, dx_plane) in planes.chunks_mut(in_len).enumerate() {
            let plane = first + i;
            let c = plane % g.c_in;
            let (dy_plane, w_c) = (&dy[plane * out_len..][..out_len], &w[c * taps..][..taps]);
            dx_plane.fill(0.0);
            for_each_run(g, |k, out, inp, count| {
                for (j, d) in dy_plane[out..out + count].iter().enumerate() {
                    dx_plane[inp + j * g.stride.1] += w_c[k] * d;
                }
            });
        }
    });
}

/// Weight gradient, one `kh·kw` filter per channel summed over the batch, channels split
/// over threads.
pub fn conv2d_grad_weight(
    threads: usize,
    dy: &[f32],
    x: &[f32],
    dw: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let workers = workers(threads, g.c_out, g.macs());
    for_each_chunk(workers, dw, taps, &mut [], 0, |first, filters, _| {
        for (i, dw_c) in filters.chunks_mut(taps).enumerate() {
            let c = first + i;
            dw_c.fill(0.0);
            for n in 0..g.n {
                let plane = n * g.c_in + c;
                let (x_plane, dy_plane) =
                    (&x[plane * in_len..][..in_len], &dy[plane * out_len..][..out_len]);
                for_each_run(g, |k, out, inp, count| {
                    let sum: f32 = dy_plane[out..out + count]
                        .iter()
                        .enumerate()
                        .map(|(j, d)| d * x_plane[inp + j * g.stride.1])
                        .sum();
                    dw_c[k] += sum;
                });
            }
        }
    });
}
