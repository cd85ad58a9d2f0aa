//! Int8 convolution and dense layers: the zero-point-shifted input as an `i16` column
//! matrix, then rows of `i32` multiply-accumulates that the compiler vectorizes. Integer
//! sums are exact, so results equal `sprout_core::quant`'s reference kernels bit for bit.

use crate::im2col::{col_cols, col_rows, im2col_shifted};
use sprout_core::quant::{QConv2dArgs, QLayerArgs, QLinearArgs};

/// Working memory of the int8 kernels, grown on first use and reused after.
#[derive(Clone, Debug, Default)]
pub struct Int8Scratch {
    columns: Vec<i16>,
    accumulators: Vec<i32>,
}

impl Int8Scratch {
    fn take(&mut self, columns: usize, accumulators: usize) -> (&mut [i16], &mut [i32]) {
        if self.columns.len() < columns {
            self.columns.resize(columns, 0);
        }
        if self.accumulators.len() < accumulators {
            self.accumulators.resize(accumulators, 0);
        }
        (&mut self.columns[..columns], &mut self.accumulators[..accumulators])
    }
}

/// `sprout_core::quant::conv2d_s8`, computed per sample and group over a column matrix.
pub fn conv2d_s8(scratch: &mut Int8Scratch, a: &QConv2dArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref g } = *a;
    let (rows, cols) = (col_rows(g), col_cols(g));
    let (col, acc) = scratch.take(rows * cols, cols);
    let (groups, per_group) = (g.groups, g.c_out_per_group());
    let x_group_len = g.c_in_per_group() * g.h * g.w;
    for n in 0..g.n {
        for group in 0..groups {
            let x_group = &x[(n * g.c_in) * g.h * g.w + group * x_group_len..][..x_group_len];
            im2col_shifted(x_group, x_zp, col, g);
            for oc in group * per_group..(group + 1) * per_group {
                acc.fill(bias.map_or(0, |b| b[oc]));
                for (&wv, row) in w[oc * rows..][..rows].iter().zip(col.chunks_exact(cols)) {
                    let wv = i32::from(wv);
                    if wv == 0 {
                        continue;
                    }
                    for (a, &c) in acc.iter_mut().zip(row) {
                        *a = a.wrapping_add(wv * i32::from(c));
                    }
                }
                let y_plane = &mut y[(n * g.c_out + oc) * cols..][..cols];
                for (q, &a) in y_plane.iter_mut().zip(acc.iter()) {
                    *q = out.finish(oc, a);
                }
            }
        }
    }
}

/// `sprout_core::quant::linear_s8`: one shifted input row at a time against every weight row.
pub fn linear_s8(scratch: &mut Int8Scratch, a: &QLinearArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref d } = *a;
    let (shifted, _) = scratch.take(d.k, 0);
    for (x_row, y_row) in x.chunks_exact(d.k).zip(y.chunks_exact_mut(d.m)) {
        for (s, &v) in shifted.iter_mut().zip(x_row) {
            *s = (i32::from(v) - x_zp) as i16;
        }
        for (m, (q, w_row)) in y_row.iter_mut().zip(w.chunks_exact(d.k)).enumerate() {
            let acc = shifted.iter().zip(w_row).fold(bias.map_or(0, |b| b[m]), |a, (&s, &wv)| {
                a.wrapping_add(i32::from(s) * i32::from(wv))
            });
            *q = out.finish(m, acc);
        }
    }
}
