//! f32 dense layers and convolutions for the Cortex-M FPU: contiguous multiply-add loops
//! with no per-element index arithmetic or bounds decisions, which the reference kernels
//! spend most of their instructions on.
//!
//! Convolutions walk *row taps*: one weight against one run of an input row and the
//! matching run of an output row, with the padding already cut off both ends, so the inner
//! loop is a plain `y[i] += w · x[i · stride]`.

use sprout_core::geometry::{Conv2dGeometry, LinearDims};

/// `Σ a[i] · b[i]` over four running sums (four independent FPU chains, then their sum).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f32 = a4.remainder().iter().zip(b4.remainder()).map(|(a, b)| a * b).sum();
    for (a, b) in a4.zip(b4) {
        for lane in 0..4 {
            sums[lane] += a[lane] * b[lane];
        }
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3]) + tail
}

/// `y[i] += scale · x[i]`.
fn axpy(y: &mut [f32], scale: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += scale * x;
    }
}

pub fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
    for (x_row, y_row) in x.chunks_exact(d.k).zip(y.chunks_exact_mut(d.m)) {
        for (j, (out, w_row)) in y_row.iter_mut().zip(w.chunks_exact(d.k)).enumerate() {
            *out = dot(x_row, w_row) + b.map_or(0.0, |b| b[j]);
        }
    }
}

pub fn linear_grad_input(dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
    dx.fill(0.0);
    for (dy_row, dx_row) in dy.chunks_exact(d.m).zip(dx.chunks_exact_mut(d.k)) {
        for (&g, w_row) in dy_row.iter().zip(w.chunks_exact(d.k)) {
            axpy(dx_row, g, w_row);
        }
    }
}

/// [`linear_grad_input`] with weight `i` (of `w[m, k]`) read as `weight(i)`: the same sums
/// in the same order.
pub fn linear_grad_input_by(
    dy: &[f32],
    weight: impl Fn(usize) -> f32,
    dx: &mut [f32],
    d: LinearDims,
) {
    dx.fill(0.0);
    for (dy_row, dx_row) in dy.chunks_exact(d.m).zip(dx.chunks_exact_mut(d.k)) {
        for (j, &g) in dy_row.iter().enumerate() {
            for (kk, out) in dx_row.iter_mut().enumerate() {
                *out += g * weight(j * d.k + kk);
            }
        }
    }
}

pub fn linear_grad_weight(dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
    dw.fill(0.0);
    for (dy_row, x_row) in dy.chunks_exact(d.m).zip(x.chunks_exact(d.k)) {
        for (&g, dw_row) in dy_row.iter().zip(dw.chunks_exact_mut(d.k)) {
            axpy(dw_row, g, x_row);
        }
    }
}

/// One weight applied along one output row: `y[y + i]` meets `x[x + i · stride]` for
/// `i < len` through `w[w]`.
#[derive(Clone, Copy)]
struct RowTap {
    y: usize,
    x: usize,
    w: usize,
    len: usize,
    stride: usize,
}

/// The output positions `o` in `0..out` whose input `o · stride + k − padding` lies in
/// `0..size`, as `(first output, first input, count)`.
fn valid_run(
    k: usize,
    stride: usize,
    padding: usize,
    size: usize,
    out: usize,
) -> (usize, usize, usize) {
    // First o with o·stride + k ≥ padding, and one past the last with o·stride + k < size + padding.
    let first = padding.saturating_sub(k).div_ceil(stride);
    let end = (size + padding).saturating_sub(k).div_ceil(stride).min(out);
    match end > first {
        true => (first, first * stride + k - padding, end - first),
        false => (0, 0, 0),
    }
}

/// Visits every row tap of the convolution, output plane by output plane.
fn for_each_row_tap(g: &Conv2dGeometry, mut visit: impl FnMut(RowTap)) {
    let (cig, cog) = (g.c_in_per_group(), g.c_out_per_group());
    for n in 0..g.n {
        for oc in 0..g.c_out {
            let y_plane = (n * g.c_out + oc) * g.out_h * g.out_w;
            let first_input = n * g.c_in + oc / cog * cig;
            for icg in 0..cig {
                let x_plane = (first_input + icg) * g.h * g.w;
                for ky in 0..g.kh {
                    let (oy0, iy0, rows) = valid_run(ky, g.stride.0, g.padding.0, g.h, g.out_h);
                    for kx in 0..g.kw {
                        let (ox0, ix0, len) = valid_run(kx, g.stride.1, g.padding.1, g.w, g.out_w);
                        if len == 0 {
                            continue;
                        }
                        let w = ((oc * cig + icg) * g.kh + ky) * g.kw + kx;
                        for r in 0..rows {
                            let (oy, iy) = (oy0 + r, iy0 + r * g.stride.0);
                            visit(RowTap {
                                y: y_plane + oy * g.out_w + ox0,
                                x: x_plane + iy * g.w + ix0,
                                w,
                                len,
                                stride: g.stride.1,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// The `len` inputs of a row tap: `x[t.x + i · t.stride]`.
fn strided(x: &[f32], t: RowTap) -> impl Iterator<Item = &f32> {
    x[t.x..].iter().step_by(t.stride).take(t.len)
}

pub fn conv2d(x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], g: &Conv2dGeometry) {
    for (plane, y_plane) in y.chunks_exact_mut(g.out_h * g.out_w).enumerate() {
        y_plane.fill(b.map_or(0.0, |b| b[plane % g.c_out]));
    }
    for_each_row_tap(g, |t| {
        let (y_run, weight) = (&mut y[t.y..t.y + t.len], w[t.w]);
        match t.stride {
            1 => axpy(y_run, weight, &x[t.x..t.x + t.len]),
            _ => y_run.iter_mut().zip(strided(x, t)).for_each(|(y, x)| *y += weight * x),
        }
    });
}

pub fn conv2d_grad_input(dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
    conv2d_grad_input_by(dy, |i| w[i], dx, g)
}

/// [`conv2d_grad_input`] with weight `i` read as `weight(i)` (once per row tap).
pub fn conv2d_grad_input_by(
    dy: &[f32],
    weight: impl Fn(usize) -> f32,
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    dx.fill(0.0);
    for_each_row_tap(g, |t| {
        let (dy_run, weight) = (&dy[t.y..t.y + t.len], weight(t.w));
        match t.stride {
            1 => axpy(&mut dx[t.x..t.x + t.len], weight, dy_run),
            _ => {
                for (i, g) in dy_run.iter().enumerate() {
                    dx[t.x + i * t.stride] += g * weight;
                }
            }
        }
    });
}

pub fn conv2d_grad_weight(dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
    dw.fill(0.0);
    for_each_row_tap(g, |t| {
        let dy_run = &dy[t.y..t.y + t.len];
        dw[t.w] += match t.stride {
            1 => dot(dy_run, &x[t.x..t.x + t.len]),
            _ => dy_run.iter().zip(strided(x, t)).map(|(g, x)| g * x).sum(),
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_runs_cut_the_padding_off_both_ends() {
        // 5 wide, kernel 3, padding 1, stride 1: kx 0 skips output 0, kx 2 skips output 4.
        assert_eq!(valid_run(0, 1, 1, 5, 5), (1, 0, 4));
        assert_eq!(valid_run(1, 1, 1, 5, 5), (0, 0, 5));
        assert_eq!(valid_run(2, 1, 1, 5, 5), (0, 1, 4));
        // Stride 2 over 6 with padding 1 → 3 outputs; kx 0 reads −1, 1, 3.
        assert_eq!(valid_run(0, 2, 1, 6, 3), (1, 1, 2));
        // Padding wider than the kernel: no output of kx 0 reaches the input.
        assert_eq!(valid_run(0, 1, 3, 2, 6), (3, 0, 2));
        assert_eq!(valid_run(0, 1, 5, 2, 8), (5, 0, 2));
        assert_eq!(valid_run(0, 1, 9, 2, 3), (0, 0, 0));
    }
}
