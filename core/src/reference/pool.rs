//! 2-D max and average pooling over NCHW input, global average pooling, and their
//! gradients.

use super::layout::{input_coord, row, row_mut};
use crate::geometry::{ChannelDims, Pool2dGeometry};

/// One pooling window: the `(n, c)` plane it reads and its output position.
#[derive(Clone, Copy)]
struct Window {
    plane: usize,
    oy: usize,
    ox: usize,
}

/// Every window, in output memory order: the `i`-th window produces output element `i`.
fn windows(g: &Pool2dGeometry) -> impl Iterator<Item = Window> {
    let (planes, out_h, out_w) = (g.n * g.c, g.out_h, g.out_w);
    (0..planes).flat_map(move |plane| {
        (0..out_h).flat_map(move |oy| (0..out_w).map(move |ox| Window { plane, oy, ox }))
    })
}

/// Flat input indices of the in-bounds elements of `win`, in row-major window order.
/// Padding positions are skipped.
fn window_inputs(g: &Pool2dGeometry, win: Window) -> impl Iterator<Item = usize> {
    let g = *g;
    (0..g.kh).filter_map(move |ky| input_coord(win.oy, ky, g.stride.0, g.padding.0, g.h)).flat_map(
        move |iy| {
            (0..g.kw)
                .filter_map(move |kx| input_coord(win.ox, kx, g.stride.1, g.padding.1, g.w))
                .map(move |ix| (win.plane * g.h + iy) * g.w + ix)
        },
    )
}

/// Whether `candidate` replaces the running maximum `best`: strictly greater (so the first
/// maximum wins ties), or a NaN replacing a number (so NaN propagates like PyTorch).
fn beats(candidate: f32, best: f32) -> bool {
    candidate > best || (candidate.is_nan() && !best.is_nan())
}

/// Index of the maximum of `x` over `indices` (first one on ties); `None` if empty.
fn argmax(x: &[f32], indices: impl Iterator<Item = usize>) -> Option<usize> {
    indices.reduce(|best, i| if beats(x[i], x[best]) { i } else { best })
}

/// The divisor of an average window with `in_bounds` real elements.
fn avg_divisor(g: &Pool2dGeometry, in_bounds: usize) -> f32 {
    if g.count_include_pad {
        (g.kh * g.kw) as f32
    } else {
        in_bounds.max(1) as f32
    }
}

/// `y[n, c, out_h, out_w]` = maximum of each window of `x[n, c, h, w]`; padding never wins
/// (a window with no in-bounds element yields −∞).
pub fn max_pool2d(x: &[f32], y: &mut [f32], g: &Pool2dGeometry) {
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(y.len(), g.output_len());
    for (out, win) in y.iter_mut().zip(windows(g)) {
        *out = argmax(x, window_inputs(g, win)).map_or(f32::NEG_INFINITY, |i| x[i]);
    }
}

/// `dx[n, c, h, w]`: each `dy` element is routed to its window's argmax, recomputed from `x`
/// (first maximum in row-major window order wins ties); overlapping windows add. Overwrites
/// `dx` (zero where no window's maximum sits).
pub fn max_pool2d_grad(x: &[f32], dy: &[f32], dx: &mut [f32], g: &Pool2dGeometry) {
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(dy.len(), g.output_len());
    debug_assert_eq!(dx.len(), g.input_len());
    dx.fill(0.0);
    for (grad, win) in dy.iter().zip(windows(g)) {
        if let Some(i) = argmax(x, window_inputs(g, win)) {
            dx[i] += grad;
        }
    }
}

/// `y[n, c, out_h, out_w]` = sum of each window's in-bounds elements divided by `kh · kw`
/// when `count_include_pad`, else by the number of in-bounds elements (at least 1).
pub fn avg_pool2d(x: &[f32], y: &mut [f32], g: &Pool2dGeometry) {
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(y.len(), g.output_len());
    for (out, win) in y.iter_mut().zip(windows(g)) {
        let (sum, count) =
            window_inputs(g, win).fold((0.0, 0), |(sum, count), i| (sum + x[i], count + 1));
        *out = sum / avg_divisor(g, count);
    }
}

/// `dx[n, c, h, w]`: each `dy` element divided by its window's divisor (as in `avg_pool2d`)
/// is added to every in-bounds element of that window. Overwrites `dx`.
pub fn avg_pool2d_grad(dy: &[f32], dx: &mut [f32], g: &Pool2dGeometry) {
    debug_assert_eq!(dy.len(), g.output_len());
    debug_assert_eq!(dx.len(), g.input_len());
    dx.fill(0.0);
    for (grad, win) in dy.iter().zip(windows(g)) {
        let share = grad / avg_divisor(g, window_inputs(g, win).count());
        for i in window_inputs(g, win) {
            dx[i] += share;
        }
    }
}

/// `y[outer, channels]` = mean of `x[outer, channels, inner]` over `inner`.
pub fn global_avg_pool(x: &[f32], y: &mut [f32], d: ChannelDims) {
    debug_assert_eq!(x.len(), d.len());
    debug_assert_eq!(y.len(), d.outer * d.channels);
    for (plane, out) in y.iter_mut().enumerate() {
        *out = row(x, plane, d.inner).iter().sum::<f32>() / d.inner as f32;
    }
}

/// `dx[outer, channels, inner] = dy[outer, channels] / inner`; overwrites `dx`.
pub fn global_avg_pool_grad(dy: &[f32], dx: &mut [f32], d: ChannelDims) {
    debug_assert_eq!(dy.len(), d.outer * d.channels);
    debug_assert_eq!(dx.len(), d.len());
    for (plane, grad) in dy.iter().enumerate() {
        row_mut(dx, plane, d.inner).fill(grad / d.inner as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    fn single_plane(h: usize, w: usize, k: usize, stride: usize, padding: usize) -> Pool2dGeometry {
        Pool2dGeometry {
            n: 1,
            c: 1,
            h,
            w,
            kh: k,
            kw: k,
            stride: (stride, stride),
            padding: (padding, padding),
            count_include_pad: true,
            out_h: (h + 2 * padding - k) / stride + 1,
            out_w: (w + 2 * padding - k) / stride + 1,
        }
    }

    #[test]
    fn max_pool_picks_window_maxima() {
        let g = single_plane(4, 4, 2, 2, 0);
        #[rustfmt::skip]
        let x = [
            1.0, 5.0, 2.0, 0.0,
            3.0, 4.0, 9.0, 9.0,
            -1.0, -2.0, 6.0, 8.0,
            -3.0, -5.0, 7.0, 1.0,
        ];
        let mut y = [f32::NAN; 4];
        max_pool2d(&x, &mut y, &g);
        assert_close(&y, &[5.0, 9.0, -1.0, 8.0], 0.0);
    }

    #[test]
    fn max_pool_padding_never_wins() {
        let g = single_plane(2, 2, 2, 2, 1);
        let x = [-4.0, -3.0, -2.0, -1.0];
        let mut y = [f32::NAN; 4];
        max_pool2d(&x, &mut y, &g);
        assert_close(&y, &x, 0.0);
    }

    #[test]
    fn max_pool_grad_routes_to_first_maximum() {
        let g = single_plane(2, 2, 2, 1, 0);
        let x = [1.0, 3.0, 3.0, 2.0];
        let mut dx = [f32::NAN; 4];
        max_pool2d_grad(&x, &[5.0], &mut dx, &g);
        assert_close(&dx, &[0.0, 5.0, 0.0, 0.0], 0.0);
    }

    #[test]
    fn max_pool_grad_overlapping_windows_add() {
        let mut g = single_plane(1, 3, 1, 1, 0);
        g.kw = 2;
        g.out_w = 2;
        let mut dx = [f32::NAN; 3];
        max_pool2d_grad(&[1.0, 5.0, 2.0], &[0.25, 2.0], &mut dx, &g);
        assert_close(&dx, &[0.0, 2.25, 0.0], 0.0);
    }

    #[test]
    fn max_pool_propagates_nan() {
        let g = single_plane(1, 2, 1, 1, 0);
        let g = Pool2dGeometry { kw: 2, out_w: 1, ..g };
        let mut y = [0.0];
        max_pool2d(&[1.0, f32::NAN], &mut y, &g);
        assert!(y[0].is_nan());
    }

    /// A 3x3 window with stride 1 and padding 1 over a 3x3 input: corner windows hold 4
    /// real elements, edge windows 6, the centre window 9.
    fn padded_avg(count_include_pad: bool) -> Pool2dGeometry {
        Pool2dGeometry { count_include_pad, ..single_plane(3, 3, 3, 1, 1) }
    }

    const RAMP: [f32; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];

    #[test]
    fn avg_pool_counting_padding_divides_by_window_size() {
        let mut y = [f32::NAN; 9];
        avg_pool2d(&RAMP, &mut y, &padded_avg(true));
        let sums = [12.0, 21.0, 16.0, 27.0, 45.0, 33.0, 24.0, 39.0, 28.0];
        assert_close(&y, &sums.map(|s| s / 9.0), 1e-5);
    }

    #[test]
    fn avg_pool_excluding_padding_divides_by_real_elements() {
        let mut y = [f32::NAN; 9];
        avg_pool2d(&RAMP, &mut y, &padded_avg(false));
        let expected = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0];
        assert_close(&y, &expected, 1e-5);
    }

    #[test]
    fn avg_pool_grad_spreads_by_the_same_divisor() {
        let mut dx = [f32::NAN; 9];
        avg_pool2d_grad(&[1.0; 9], &mut dx, &padded_avg(true));
        // Each input lies in as many windows as it has in-bounds 3x3 neighbourhoods.
        let windows_covering = [4.0, 6.0, 4.0, 6.0, 9.0, 6.0, 4.0, 6.0, 4.0];
        assert_close(&dx, &windows_covering.map(|n| n / 9.0), 1e-6);

        avg_pool2d_grad(&[1.0; 9], &mut dx, &padded_avg(false));
        // Corner input (0, 0) sits in the windows of outputs (0,0), (0,1), (1,0), (1,1)
        // holding 4, 6, 6 and 9 real elements.
        let corner = 1.0 / 4.0 + 2.0 / 6.0 + 1.0 / 9.0;
        assert_close(&dx[..1], &[corner], 1e-6);
        let centre = 4.0 / 4.0 + 4.0 / 6.0 + 1.0 / 9.0;
        assert_close(&dx[4..5], &[centre], 1e-6);
    }

    #[test]
    fn global_avg_pool_and_grad() {
        let d = ChannelDims { outer: 2, channels: 2, inner: 2 };
        let x = [1.0, 3.0, 10.0, 20.0, -1.0, -2.0, 0.0, 4.0];
        let mut y = [f32::NAN; 4];
        global_avg_pool(&x, &mut y, d);
        assert_close(&y, &[2.0, 15.0, -1.5, 2.0], 0.0);
        let mut dx = [f32::NAN; 8];
        global_avg_pool_grad(&[2.0, 4.0, -1.0, 0.0], &mut dx, d);
        assert_close(&dx, &[1.0, 1.0, 2.0, 2.0, -0.5, -0.5, 0.0, 0.0], 0.0);
    }
}
