//! Int8 depthwise convolution (one filter per channel) as direct loops: with 9 taps per
//! output, building columns costs more than the multiply-accumulates, so each output sums
//! its in-bounds taps straight from the input plane. Integer sums are exact in any order,
//! so results equal [`sprout_core::quant::conv2d_s8`] bit for bit.

use sprout_core::geometry::Conv2dGeometry;
use sprout_core::quant::OutputQuant;

/// Whether `g` is a depthwise convolution with one output channel per input channel.
pub fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.groups == g.c_in && g.groups == g.c_out
}

/// The kernel taps `lo..hi` of one axis that land inside `0..size` for the output at
/// `out`, and the input coordinate of tap 0 (possibly negative).
fn taps(
    out: usize,
    stride: usize,
    padding: usize,
    kernel: usize,
    size: usize,
) -> (isize, usize, usize) {
    let first = (out * stride) as isize - padding as isize;
    let lo = (-first).clamp(0, kernel as isize) as usize;
    let hi = (size as isize - first).clamp(lo as isize, kernel as isize) as usize;
    (first, lo, hi)
}

/// A 3x3 filter held in registers, for the interior of the plane.
struct Filter3x3([i32; 9]);

impl Filter3x3 {
    /// `acc + Σ x·w` over the 3x3 window whose rows start at `0`, `w` and `2w` of `window`.
    #[inline(always)]
    fn apply(&self, acc: i32, window: &[i8], w: usize) -> i32 {
        let t = &self.0;
        let row = |r: usize| {
            let x = &window[r * w..r * w + 3];
            i32::from(x[0]) * t[3 * r]
                + i32::from(x[1]) * t[3 * r + 1]
                + i32::from(x[2]) * t[3 * r + 2]
        };
        acc.wrapping_add(row(0)).wrapping_add(row(1)).wrapping_add(row(2))
    }
}

/// The filter as a [`Filter3x3`] when the kernel is 3x3.
fn filter_3x3(ws: &[i8], g: &Conv2dGeometry) -> Option<Filter3x3> {
    let taps: &[i8; 9] = ws.try_into().ok().filter(|_| (g.kh, g.kw) == (3, 3))?;
    Some(Filter3x3(taps.map(i32::from)))
}

/// [`sprout_core::quant::conv2d_s8`] for a depthwise `g` (see [`is_depthwise`]).
pub fn depthwise_s8(
    x: &[i8],
    x_zp: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    y: &mut [i8],
    out: &OutputQuant<'_>,
    g: &Conv2dGeometry,
) {
    let (plane_in, plane_out, taps_per_filter) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let planes = x.chunks_exact(plane_in).zip(y.chunks_exact_mut(plane_out));
    for (index, (xs, ys)) in planes.enumerate() {
        let c = index % g.c_out;
        let ws = &w[c * taps_per_filter..][..taps_per_filter];
        let start = bias.map_or(0, |b| b[c]);
        // Where every tap is in bounds, `Σ (x − zp)·w = Σ x·w − zp·Σ w`: the zero point
        // leaves the inner loop (wrapping arithmetic keeps this exact).
        let weight_sum = ws.iter().fold(0i32, |s, &v| s.wrapping_add(i32::from(v)));
        let interior_start = start.wrapping_sub(x_zp.wrapping_mul(weight_sum));
        let filter3x3 = filter_3x3(ws, g);
        for oy in 0..g.out_h {
            let (iy, ky_lo, ky_hi) = taps(oy, g.stride.0, g.padding.0, g.kh, g.h);
            let y_row = &mut ys[oy * g.out_w..][..g.out_w];
            for (ox, value) in y_row.iter_mut().enumerate() {
                let (ix, kx_lo, kx_hi) = taps(ox, g.stride.1, g.padding.1, g.kw, g.w);
                if (ky_hi - ky_lo, kx_hi - kx_lo) == (g.kh, g.kw) {
                    let origin = (iy as usize) * g.w + ix as usize;
                    if let Some(f) = &filter3x3 {
                        let window = &xs[origin..origin + 2 * g.w + 3];
                        *value = out.finish(c, f.apply(interior_start, window, g.w));
                        continue;
                    }
                    let mut acc = interior_start;
                    for (ky, ws_row) in ws.chunks_exact(g.kw).enumerate() {
                        let row = ((iy + ky as isize) as usize) * g.w + ix as usize;
                        for (&xv, &wv) in xs[row..row + g.kw].iter().zip(ws_row) {
                            acc = acc.wrapping_add(i32::from(xv) * i32::from(wv));
                        }
                    }
                    *value = out.finish(c, acc);
                    continue;
                }
                let mut acc = start;
                for ky in ky_lo..ky_hi {
                    let row = ((iy + ky as isize) as usize) * g.w;
                    let xs_row = &xs[row + (ix + kx_lo as isize) as usize..][..kx_hi - kx_lo];
                    let ws_row = &ws[ky * g.kw + kx_lo..ky * g.kw + kx_hi];
                    for (&xv, &wv) in xs_row.iter().zip(ws_row) {
                        acc = acc.wrapping_add((i32::from(xv) - x_zp) * i32::from(wv));
                    }
                }
                *value = out.finish(c, acc);
            }
        }
    }
}
