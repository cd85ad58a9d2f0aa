//! Int8 depthwise convolution (one filter per channel) as direct loops: with 9 taps per
//! output, building columns costs more than the multiply-accumulates, so each output sums
//! its taps straight from the input plane. Integer sums are exact in any order, so results
//! equal [`sprout_core::quant::conv2d_s8`] bit for bit.
//!
//! Each plane is first copied into a stack buffer with its padding filled with the input
//! zero point, so every output sees a full window: `Σ (x − zp)·w = Σ x·w − zp·Σ w` lets
//! the zero point leave the inner loop, and the padding contributes `(zp − zp)·w = 0`.
//! Sums of several output rows are requantized in one run straight into the output. Planes
//! too large for the buffer (or zero points outside int8) take a per-output path that
//! sums only the in-bounds taps.

use core::ops::Range;

use sprout_core::geometry::Conv2dGeometry;
use sprout_core::quant::{QConv2dArgs, QLayerArgs};

use super::product::Engine;
use super::requantize::ChannelQuant;

/// Bytes of the padded plane (a 32x32 plane with padding 1 fits), one more than the
/// plane so that a kernel may read a whole word at the last window's last column.
const PADDED_CAPACITY: usize = 1280;
/// Outputs summed before they are requantized.
const SUMS: usize = 128;

/// Whether `g` is a depthwise convolution with one output channel per input channel.
pub fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.groups == g.c_in && g.groups == g.c_out
}

/// One axis of the window: output `o` reads inputs `o · stride − padding + 0..kernel`.
#[derive(Clone, Copy)]
struct Axis {
    stride: usize,
    padding: usize,
    kernel: usize,
    size: usize,
}

impl Axis {
    /// The input coordinate of tap 0 of output `out` (possibly negative) and the taps
    /// `lo..hi` that land inside `0..size`.
    fn taps(self, out: usize) -> (isize, Range<usize>) {
        let first = (out * self.stride) as isize - self.padding as isize;
        let lo = (-first).clamp(0, self.kernel as isize) as usize;
        let hi = (self.size as isize - first).clamp(lo as isize, self.kernel as isize) as usize;
        (first, lo..hi)
    }

    /// Input positions `−padding..` that `outputs` outputs read.
    fn span(self, outputs: usize) -> usize {
        outputs.saturating_sub(1) * self.stride + self.kernel
    }
}

/// One channel's filter, accumulator starts and requantization.
struct Channel<'a> {
    ws: &'a [i8],
    /// The bias: where taps may fall in the padding, each tap subtracts the zero point.
    start: i32,
    /// `bias − zp · Σ w` (wrapping): the start of a sum over raw inputs.
    raw_start: i32,
    /// A bound on `|raw_start + Σ x · w|` over raw int8 inputs (at most 128 in magnitude).
    most: u64,
    x_zp: i32,
    quant: ChannelQuant,
}

impl Channel<'_> {
    /// Output `(oy, ox)` from the unpadded plane: only its in-bounds taps, zero point per
    /// tap.
    fn clipped(
        &self,
        xs: &[i8],
        g: &Conv2dGeometry,
        axes: (Axis, Axis),
        (oy, ox): (usize, usize),
    ) -> i8 {
        let ((iy, ky), (ix, kx)) = (axes.0.taps(oy), axes.1.taps(ox));
        let mut acc = self.start;
        for ky in ky {
            let row = (iy + ky as isize) as usize * g.w;
            let xs_row = &xs[(row as isize + ix + kx.start as isize) as usize..][..kx.len()];
            let ws_row = &self.ws[ky * g.kw + kx.start..][..kx.len()];
            for (&xv, &wv) in xs_row.iter().zip(ws_row) {
                acc = acc.wrapping_add((i32::from(xv) - self.x_zp) * i32::from(wv));
            }
        }
        self.quant.finish(acc)
    }

    /// All outputs from a padded plane (`rows`, whose rows lie `pitch` apart), up to
    /// [`SUMS`] at a time: each output row's (or part of a row's) sums go to a run of
    /// `sums` in one engine call, and the run is requantized straight into `ys`.
    fn plane<E: Engine>(
        &self,
        (rows, pitch): (&[i8], usize),
        g: &Conv2dGeometry,
        ys: &mut [i8],
        sums: &mut [i32; SUMS],
    ) {
        let taps = <&[i8; 9]>::try_from(self.ws).ok().filter(|_| (g.kh, g.kw) == (3, 3));
        // A run of whole output rows is one engine call.
        let (stride, row_step) = (g.stride.1, g.stride.0 * pitch);
        let rows_per_run = SUMS / g.out_w.max(1);
        if let (Some(taps), 1..) = (taps, rows_per_run) {
            for (run, ys) in ys.chunks_mut(rows_per_run * g.out_w).enumerate() {
                let (window, sums) =
                    (&rows[run * rows_per_run * row_step..], &mut sums[..ys.len()]);
                E::sums_3x3_rows(window, (pitch, row_step), taps, (stride, g.out_w), sums);
                E::finish_run(&self.quant, self.raw_start, sums, ys, self.most);
            }
            return;
        }
        let (mut oy, mut ox) = (0, 0);
        for ys in ys.chunks_mut(SUMS) {
            let mut done = 0;
            while done < ys.len() {
                let n = (g.out_w - ox).min(ys.len() - done);
                let window = &rows[oy * row_step + ox * stride..];
                let run = &mut sums[done..done + n];
                match taps {
                    Some(taps) => E::sums_3x3(window, pitch, taps, stride, run),
                    None => sums_any(window, pitch, self.ws, g.kw, stride, run),
                }
                done += n;
                ox += n;
                if ox == g.out_w {
                    (oy, ox) = (oy + 1, 0);
                }
            }
            E::finish_run(&self.quant, self.raw_start, &sums[..ys.len()], ys, self.most);
        }
    }
}

/// `sums[i] = Σ x·w` over the window at column `i · stride` of a padded plane's rows
/// (`pitch` apart), for a `kw`-wide filter `ws` (wrapping).
fn sums_any(rows: &[i8], pitch: usize, ws: &[i8], kw: usize, stride: usize, sums: &mut [i32]) {
    for (i, sum) in sums.iter_mut().enumerate() {
        *sum = ws.chunks_exact(kw).enumerate().fold(0i32, |acc, (ky, ws_row)| {
            let row = &rows[ky * pitch + i * stride..][..kw];
            row.iter()
                .zip(ws_row)
                .fold(acc, |acc, (&x, &w)| acc.wrapping_add(i32::from(x) * i32::from(w)))
        });
    }
}

/// [`sums_any`] for a 3x3 filter, in portable Rust: at stride 1 three columns of the
/// window stay in registers and each output loads the three inputs of its new column.
pub fn sums_3x3(rows: &[i8], pitch: usize, taps: &[i8; 9], stride: usize, sums: &mut [i32]) {
    if stride != 1 {
        return sums_any(rows, pitch, taps, 3, stride, sums);
    }
    let t = taps.map(i32::from);
    let span = sums.len() + 2;
    let rows = [0, 1, 2].map(|r| &rows[r * pitch..][..span]);
    let column = |i: usize| [0, 1, 2].map(|r| i32::from(rows[r][i]));
    let dot = |c: [i32; 3], k: usize| c[0] * t[k] + c[1] * t[3 + k] + c[2] * t[6 + k];
    let (mut a, mut b) = (column(0), column(1));
    let news = rows[0][2..].iter().zip(&rows[1][2..]).zip(&rows[2][2..]);
    for (sum, ((&x0, &x1), &x2)) in sums.iter_mut().zip(news) {
        let c = [x0, x1, x2].map(i32::from);
        *sum = dot(a, 0) + dot(b, 1) + dot(c, 2);
        (a, b) = (b, c);
    }
}

/// Copies plane `xs` (`g.h × g.w`) into `padded` (rows of `pitch`, the plane at row and
/// column `padding`); the rest of `padded` keeps the zero point it was filled with once.
fn pad<E: Engine>(xs: &[i8], g: &Conv2dGeometry, pitch: usize, padded: &mut [i8]) {
    let (top, left) = g.padding;
    let width = g.w.min(pitch.saturating_sub(left));
    let rows = padded.chunks_exact_mut(pitch).skip(top);
    for (dst, src) in rows.zip(xs.chunks_exact(g.w)) {
        E::copy_row(&mut dst[left..left + width], &src[..width]);
    }
}

/// [`sprout_core::quant::conv2d_s8`] for a depthwise `g` (see [`is_depthwise`]).
pub fn depthwise_s8<E: Engine>(a: &QConv2dArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref g } = *a;
    let (plane_in, plane_out, taps_per_filter) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let rows = Axis { stride: g.stride.0, padding: g.padding.0, kernel: g.kh, size: g.h };
    let cols = Axis { stride: g.stride.1, padding: g.padding.1, kernel: g.kw, size: g.w };
    let (height, pitch) = (rows.span(g.out_h), cols.span(g.out_w));
    let padded_zero = i8::try_from(x_zp).ok().filter(|_| height * pitch < PADDED_CAPACITY);
    let mut padded = [padded_zero.unwrap_or(0); PADDED_CAPACITY];
    let padded = &mut padded[..(height * pitch + 1).min(PADDED_CAPACITY)];
    let mut sums = [0i32; SUMS];
    let planes = x.chunks_exact(plane_in).zip(y.chunks_exact_mut(plane_out));
    for (index, (xs, ys)) in planes.enumerate() {
        let c = index % g.c_out;
        let ws = &w[c * taps_per_filter..][..taps_per_filter];
        let start = bias.map_or(0, |b| b[c]);
        let weight_sum = ws.iter().fold(0i32, |s, &v| s.wrapping_add(i32::from(v)));
        let raw_start = start.wrapping_sub(x_zp.wrapping_mul(weight_sum));
        let magnitudes = ws.iter().map(|&v| u64::from(v.unsigned_abs())).sum::<u64>();
        let channel = Channel {
            ws,
            start,
            raw_start,
            most: u64::from(raw_start.unsigned_abs()) + 128 * magnitudes,
            x_zp,
            quant: ChannelQuant::new(out, c),
        };
        match padded_zero {
            Some(_) => {
                pad::<E>(xs, g, pitch, padded);
                channel.plane::<E>((padded, pitch), g, ys, &mut sums);
            }
            None => {
                for (oy, y_row) in ys.chunks_exact_mut(g.out_w).enumerate() {
                    for (ox, value) in y_row.iter_mut().enumerate() {
                        *value = channel.clipped(xs, g, (rows, cols), (oy, ox));
                    }
                }
            }
        }
    }
}
