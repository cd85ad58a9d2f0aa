//! Convolutions as GEMMs over im2col column matrices, per sample and group: forward and
//! input gradient split the batch over threads, the weight gradient is one batch-summed
//! product per group (see [`sum_of_products_nt`]).

use crate::epilogue::{with_row_map, Epilogue};
use crate::gemm::{
    gemm, gemm_mapped, sum_of_products_nt, sum_of_products_scratch, Batch, Mat, RowMap, RowsFrom,
};
use crate::im2col::{col2im, col_cols, col_rows, im2col, is_pointwise};
use crate::parallel::{for_each_chunk, workers};
use crate::pool::Pool;
use sprout_core::geometry::Conv2dGeometry;

/// Scratch values one worker needs: a column matrix (none for pointwise convolutions).
pub fn scratch_per_worker(g: &Conv2dGeometry) -> usize {
    if is_pointwise(g) {
        0
    } else {
        col_rows(g) * col_cols(g)
    }
}

/// Workers for the batch split of the forward and input-gradient passes.
pub fn batch_workers(pool: &Pool, g: &Conv2dGeometry) -> usize {
    workers(pool, g.n, g.macs())
}

/// The `[c_in/groups, h·w]` planes of sample `n`, group `group`.
fn input_group<'a>(x: &'a [f32], n: usize, group: usize, g: &Conv2dGeometry) -> &'a [f32] {
    let len = g.c_in_per_group() * g.h * g.w;
    &x[(n * g.groups + group) * len..][..len]
}

/// The column matrix of one sample's group: its input itself when pointwise, else built
/// in `col`.
fn columns<'a>(x_group: &'a [f32], col: &'a mut [f32], g: &Conv2dGeometry) -> &'a [f32] {
    if is_pointwise(g) {
        x_group
    } else {
        im2col(x_group, col, g);
        col
    }
}

/// `[c_out/groups, col_rows]` weights of one group.
fn weight_group<'a>(w: &'a [f32], group: usize, g: &Conv2dGeometry) -> Mat<'a> {
    let len = g.c_out_per_group() * col_rows(g);
    Mat::new(&w[group * len..][..len], g.c_out_per_group(), col_rows(g))
}

/// `y = conv(x, w) + b`, each value then put through `then`, if any, as the product stores
/// it; `scratch` holds `batch_workers · scratch_per_worker` values.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    pool: &Pool,
    scratch: &mut [f32],
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    then: Option<&Epilogue<'_>>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    let args = (pool, scratch, x, w, b);
    with_row_map!(then, |rows| conv2d_mapped(args, rows, y, g))
}

/// [`conv2d`] with output channel `o`'s values put through `rows.row(o)`.
#[allow(clippy::type_complexity)]
fn conv2d_mapped(
    (pool, scratch, x, w, b): (&Pool, &mut [f32], &[f32], &[f32], Option<&[f32]>),
    rows: &impl RowMap,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    let workers = batch_workers(pool, g);
    let (cols, sample_len) = (col_cols(g), g.c_out * col_cols(g));
    let group_len = g.c_out_per_group() * cols;
    for_each_chunk(
        pool,
        workers,
        y,
        sample_len,
        scratch,
        scratch_per_worker(g),
        |first, ys, col| {
            for (i, y_n) in ys.chunks_mut(sample_len).enumerate() {
                for (group, y_g) in y_n.chunks_mut(group_len).enumerate() {
                    let beta = match b {
                        Some(b) => {
                            let b_g = &b[group * g.c_out_per_group()..];
                            y_g.chunks_mut(cols).zip(b_g).for_each(|(plane, &v)| plane.fill(v));
                            1.0
                        }
                        None => 0.0,
                    };
                    let x_cols = columns(input_group(x, first + i, group, g), col, g);
                    let x_cols = Mat::new(x_cols, col_rows(g), cols);
                    let rows = RowsFrom { map: rows, first: group * g.c_out_per_group() };
                    gemm_mapped(pool, weight_group(w, group, g), x_cols, beta, y_g, &rows);
                }
            }
        },
    );
}

/// Whether [`conv2d_grad_input`] multiplies by a transposed copy of the weights rather than
/// by a transposed view of them. A view's product goes to `matrixmultiply`, which packs
/// `dy`'s `c_out` rows for every sample: a cost of `1 / col_rows` of the product's. The
/// copy's rows are contiguous, so the register-blocked product reads `dy` in place, at a
/// cost per block of outputs that its `c_out` steps repay. An expansion layer's gradient
/// (few rows out, many in) takes the copy.
fn transposes_weights(g: &Conv2dGeometry) -> bool {
    g.c_out_per_group() >= 2 * col_rows(g)
}

/// Scratch values of [`conv2d_grad_input`]: a column matrix per worker and, when
/// [`transposes_weights`], the transposed weights.
pub fn grad_input_scratch(pool: &Pool, g: &Conv2dGeometry) -> usize {
    let weights = if transposes_weights(g) { g.weight_len() } else { 0 };
    batch_workers(pool, g) * scratch_per_worker(g) + weights
}

/// `dx = convᵀ(dy, w)`: per group, columns `wᵀ·dy` scattered back by col2im; `scratch`
/// holds [`grad_input_scratch`] values.
pub fn conv2d_grad_input(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    let workers = batch_workers(pool, g);
    let cols = col_cols(g);
    let (sample_len, group_len) = (g.c_in * g.h * g.w, g.c_in_per_group() * g.h * g.w);
    let dy_group_len = g.c_out_per_group() * cols;
    let (scratch, transposed) = match transposes_weights(g) {
        true => {
            let (scratch, transposed) = scratch.split_at_mut(scratch.len() - w.len());
            transpose_groups(w, transposed, g);
            (scratch, Some(&*transposed))
        }
        false => (scratch, None),
    };
    for_each_chunk(
        pool,
        workers,
        dx,
        sample_len,
        scratch,
        scratch_per_worker(g),
        |first, dxs, col| {
            for (i, dx_n) in dxs.chunks_mut(sample_len).enumerate() {
                for (group, dx_g) in dx_n.chunks_mut(group_len).enumerate() {
                    let at = ((first + i) * g.groups + group) * dy_group_len;
                    let dy_g = Mat::new(&dy[at..][..dy_group_len], g.c_out_per_group(), cols);
                    let w_t = match transposed {
                        Some(t) => {
                            let len = g.c_out_per_group() * col_rows(g);
                            Mat::new(&t[group * len..][..len], col_rows(g), g.c_out_per_group())
                        }
                        None => weight_group(w, group, g).t(),
                    };
                    if is_pointwise(g) {
                        gemm(pool, w_t, dy_g, 0.0, dx_g);
                    } else {
                        gemm(pool, w_t, dy_g, 0.0, col);
                        dx_g.fill(0.0);
                        col2im(col, dx_g, g);
                    }
                }
            }
        },
    );
}

/// Each group's `[c_out/groups, col_rows]` weights of `w` into `transposed` as
/// `[col_rows, c_out/groups]`.
fn transpose_groups(w: &[f32], transposed: &mut [f32], g: &Conv2dGeometry) {
    let (outs, rows) = (g.c_out_per_group(), col_rows(g));
    for (src, dest) in w.chunks_exact(outs * rows).zip(transposed.chunks_exact_mut(outs * rows)) {
        for (o, weights) in src.chunks_exact(rows).enumerate() {
            for (r, &v) in weights.iter().enumerate() {
                dest[r * outs + o] = v;
            }
        }
    }
}

/// The batch of `rows x h·w` matrices at the start of `data`, one every `per_sample` values.
fn plane_rows<'a>(
    data: &'a [f32],
    rows: usize,
    per_sample: usize,
    g: &Conv2dGeometry,
) -> Batch<'a> {
    Batch { data, rows, len: col_cols(g), stride: per_sample, count: g.n }
}

/// Scratch values of [`conv2d_grad_weight`]: every sample's column matrix of one group
/// (none for pointwise convolutions), then what the batch-summed product of one group takes.
pub fn grad_weight_scratch(pool: &Pool, g: &Conv2dGeometry) -> usize {
    g.n * scratch_per_worker(g) + sum_of_products_scratch(pool, g.c_out_per_group() * col_rows(g))
}

/// `dw = Σₙ dy·colsᵀ`, per group one batch-summed product whose rows are split over
/// threads once: a pointwise convolution's input is its column matrix, other convolutions
/// first build every sample's in `scratch` (samples split over threads), which holds
/// [`grad_weight_scratch`] values.
pub fn conv2d_grad_weight(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    x: &[f32],
    dw: &mut [f32],
    g: &Conv2dGeometry,
) {
    let cols = col_cols(g);
    let dy_group_len = g.c_out_per_group() * cols;
    let dw_group_len = g.c_out_per_group() * col_rows(g);
    let col_len = scratch_per_worker(g);
    let (all_cols, partials) = scratch.split_at_mut(g.n * col_len);
    for (group, dw_g) in dw.chunks_mut(dw_group_len).enumerate() {
        let dy_g = plane_rows(&dy[group * dy_group_len..], g.c_out_per_group(), g.c_out * cols, g);
        let x_g = if is_pointwise(g) {
            let x_len = g.c_in_per_group() * cols;
            plane_rows(&x[group * x_len..], g.c_in_per_group(), g.c_in * cols, g)
        } else {
            let all = &mut *all_cols;
            let workers = workers(pool, g.n, all.len());
            for_each_chunk(pool, workers, all, col_len, &mut [], 0, |first, cols_n, _| {
                for (i, col) in cols_n.chunks_mut(col_len).enumerate() {
                    im2col(input_group(x, first + i, group, g), col, g);
                }
            });
            plane_rows(all, col_rows(g), col_len, g)
        };
        sum_of_products_nt(pool, dy_g, x_g, dw_g, partials);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::depthwise::tests::{assert_close, random};
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    /// An expansion (few inputs, many outputs: the transposed copy), a projection (the
    /// view), each as one group and as two, and a 3x3 convolution, against the reference.
    #[test]
    fn input_gradients_match_the_reference_through_either_weight_layout() {
        let mut rng = SplitMix::new(5);
        for (c_in, c_out, k, groups) in
            [(3, 12, 1, 1), (12, 3, 1, 1), (4, 16, 1, 2), (16, 4, 1, 2), (3, 8, 3, 1)]
        {
            let pad = k / 2;
            let g = Conv2dGeometry {
                n: 3,
                c_in,
                h: 5,
                w: 6,
                c_out,
                kh: k,
                kw: k,
                stride: (1, 1),
                padding: (pad, pad),
                groups,
                out_h: 5,
                out_w: 6,
            };
            let (w, dy) = (random(g.weight_len(), &mut rng), random(g.output_len(), &mut rng));
            let pool = Pool::eager(2);
            let mut scratch = vec![f32::NAN; grad_input_scratch(&pool, &g)];
            let (mut want, mut got) = (vec![0.0; g.input_len()], vec![f32::NAN; g.input_len()]);
            r::conv2d_grad_input(&dy, &w, &mut want, &g);
            conv2d_grad_input(&pool, &mut scratch, &dy, &w, &mut got, &g);
            let what = format!("dx of {c_in} -> {c_out}, {k}x{k}, {groups} groups");
            // The expansions take the transposed copy, the others the view.
            assert_eq!(transposes_weights(&g), c_out > c_in && k == 1, "{what}");
            assert_close(&got, &want, &what);
        }
    }
}
