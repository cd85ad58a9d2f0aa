//! im2col and col2im: one sample and group of an NCHW input laid out as the `[c_in/groups ·
//! kh · kw, out_h · out_w]` column matrix a convolution multiplies its weights with.

use crate::window::valid_outputs;
use sprout_core::geometry::Conv2dGeometry;

/// Rows of the column matrix: one per weight of an output channel.
pub fn col_rows(g: &Conv2dGeometry) -> usize {
    g.c_in_per_group() * g.kh * g.kw
}

/// Columns of the column matrix: one per output position.
pub fn col_cols(g: &Conv2dGeometry) -> usize {
    g.out_h * g.out_w
}

/// A 1x1, stride-1, unpadded convolution, whose column matrix is its input itself.
pub fn is_pointwise(g: &Conv2dGeometry) -> bool {
    (g.kh, g.kw, g.stride, g.padding) == (1, 1, (1, 1), (0, 0))
}

/// Calls `visit(col_start, x_start, count)` for every run of in-bounds taps along a row
/// of outputs: `col[col_start + i]` reads `x_group[x_start + i · stride_w]` for `i <
/// count`, where `x_group` holds one sample's `c_in / groups` planes of one group.
fn for_each_run(g: &Conv2dGeometry, mut visit: impl FnMut(usize, usize, usize)) {
    let cols = col_cols(g);
    for ic in 0..g.c_in_per_group() {
        for ky in 0..g.kh {
            let oys = valid_outputs(g.out_h, ky, g.stride.0, g.padding.0, g.h);
            for kx in 0..g.kw {
                let row = (ic * g.kh + ky) * g.kw + kx;
                let oxs = valid_outputs(g.out_w, kx, g.stride.1, g.padding.1, g.w);
                if oxs.is_empty() {
                    continue;
                }
                let first_ix = oxs.start * g.stride.1 + kx - g.padding.1;
                for oy in oys.clone() {
                    let iy = oy * g.stride.0 + ky - g.padding.0;
                    let col_start = row * cols + oy * g.out_w + oxs.start;
                    visit(col_start, (ic * g.h + iy) * g.w + first_ix, oxs.len());
                }
            }
        }
    }
}

/// Fills `col[col_rows, col_cols]` from `x_group` (one sample's planes of one group);
/// padding reads zero.
pub fn im2col(x_group: &[f32], col: &mut [f32], g: &Conv2dGeometry) {
    col.fill(0.0);
    let stride = g.stride.1;
    for_each_run(g, |c, x, count| {
        let out = &mut col[c..c + count];
        // The run's reads, checked once: `count >= 1` (empty runs are not visited).
        let src = &x_group[x..][..(count - 1) * stride + 1];
        if stride == 1 {
            out.copy_from_slice(src);
        } else {
            out.iter_mut().zip(src.iter().step_by(stride)).for_each(|(v, &s)| *v = s);
        }
    });
}

/// [`im2col`] of int8 codes shifted by their zero point, so padding reads real zero.
pub fn im2col_shifted(x_group: &[i8], zero_point: i32, col: &mut [i16], g: &Conv2dGeometry) {
    col.fill(0);
    let stride = g.stride.1;
    for_each_run(g, |c, x, count| {
        let src = x_group[x..][..(count - 1) * stride + 1].iter().step_by(stride);
        for (v, &s) in col[c..c + count].iter_mut().zip(src) {
            *v = (i32::from(s) - zero_point) as i16;
        }
    });
}

/// Adds every column entry back onto the input position it was read from (the adjoint of
/// [`im2col`]); `dx_group` must start zeroed.
pub fn col2im(col: &[f32], dx_group: &mut [f32], g: &Conv2dGeometry) {
    let stride = g.stride.1;
    for_each_run(g, |c, x, count| {
        let dest = dx_group[x..][..(count - 1) * stride + 1].iter_mut().step_by(stride);
        for (d, v) in dest.zip(&col[c..c + count]) {
            *d += v;
        }
    });
}
