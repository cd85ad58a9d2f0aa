//! Dense (fully connected) layers and their gradients, bias gradients, and the elementwise
//! vector helpers (add, copy, fill).

use super::layout::{channel_indices, row, row_mut};
use crate::geometry::{BroadcastDims, ChannelDims, ConcatDims, LinearDims, PermuteDims, SliceDims};

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// `y[n, m] = x[n, k] · w[m, k]ᵀ + b[m]` (PyTorch `nn.Linear` layout); no bias when `b` is
/// `None`.
pub fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
    debug_assert_eq!(x.len(), d.n * d.k);
    debug_assert_eq!(w.len(), d.m * d.k);
    debug_assert_eq!(y.len(), d.n * d.m);
    for i in 0..d.n {
        let x_row = row(x, i, d.k);
        for (j, out) in row_mut(y, i, d.m).iter_mut().enumerate() {
            let bias = b.map_or(0.0, |b| b[j]);
            *out = dot(x_row, row(w, j, d.k)) + bias;
        }
    }
}

/// `dx[n, k] = dy[n, m] · w[m, k]`; overwrites `dx`.
pub fn linear_grad_input(dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
    debug_assert_eq!(w.len(), d.m * d.k);
    linear_grad_input_by(dy, |i| w[i], dx, d)
}

/// [`linear_grad_input`] with weight `i` (of `w[m, k]`) read as `weight(i)`.
pub fn linear_grad_input_by(
    dy: &[f32],
    weight: impl Fn(usize) -> f32,
    dx: &mut [f32],
    d: LinearDims,
) {
    debug_assert_eq!(dy.len(), d.n * d.m);
    debug_assert_eq!(dx.len(), d.n * d.k);
    for i in 0..d.n {
        let dy_row = row(dy, i, d.m);
        for (kk, out) in row_mut(dx, i, d.k).iter_mut().enumerate() {
            *out = dy_row.iter().enumerate().map(|(j, g)| g * weight(j * d.k + kk)).sum();
        }
    }
}

/// `dw[m, k] = dy[n, m]ᵀ · x[n, k]`; overwrites `dw`.
pub fn linear_grad_weight(dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
    debug_assert_eq!(dy.len(), d.n * d.m);
    debug_assert_eq!(x.len(), d.n * d.k);
    debug_assert_eq!(dw.len(), d.m * d.k);
    for j in 0..d.m {
        for (kk, out) in row_mut(dw, j, d.k).iter_mut().enumerate() {
            *out = (0..d.n).map(|i| dy[i * d.m + j] * x[i * d.k + kk]).sum();
        }
    }
}

/// `db[c]` = sum of `dy` (viewed `[outer, channels, inner]`) over `outer` and `inner`;
/// overwrites `db`. Serves linear biases (`inner = 1`) and conv biases (`inner = H·W`).
pub fn bias_grad(dy: &[f32], db: &mut [f32], d: ChannelDims) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(db.len(), d.channels);
    for (c, out) in db.iter_mut().enumerate() {
        *out = channel_indices(d, c).map(|i| dy[i]).sum();
    }
}

/// Elementwise `y = a + b`.
pub fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    debug_assert_eq!(a.len(), y.len());
    debug_assert_eq!(b.len(), y.len());
    for ((out, a), b) in y.iter_mut().zip(a).zip(b) {
        *out = a + b;
    }
}

/// `y = x`.
pub fn copy(x: &[f32], y: &mut [f32]) {
    y.copy_from_slice(x);
}

/// Per outer index, `a`'s block then `b`'s (concatenation along one axis).
pub fn concat(a: &[f32], b: &[f32], y: &mut [f32], d: ConcatDims) {
    debug_assert_eq!((a.len(), b.len(), y.len()), (d.part_len(false), d.part_len(true), d.len()));
    let row = d.first + d.second;
    for ((y, a), b) in
        y.chunks_exact_mut(row).zip(a.chunks_exact(d.first)).zip(b.chunks_exact(d.second))
    {
        y[..d.first].copy_from_slice(a);
        y[d.first..].copy_from_slice(b);
    }
}

/// The first or, `second`, the second part's blocks of `dy`: the gradient of one operand
/// of [`concat`].
pub fn concat_grad(dy: &[f32], part: &mut [f32], d: ConcatDims, second: bool) {
    debug_assert_eq!((dy.len(), part.len()), (d.len(), d.part_len(second)));
    let (start, len) = if second { (d.first, d.second) } else { (0, d.first) };
    for (part, dy) in part.chunks_exact_mut(len).zip(dy.chunks_exact(d.first + d.second)) {
        part.copy_from_slice(&dy[start..start + len]);
    }
}

/// Per outer index, the `len` elements of `x` from `start` (a slice of one axis).
pub fn slice<T: Copy>(x: &[T], y: &mut [T], d: SliceDims) {
    debug_assert_eq!((x.len(), y.len()), (d.whole_len(), d.part_len()));
    for (y, x) in y.chunks_exact_mut(d.len.max(1)).zip(x.chunks_exact(d.whole.max(1))) {
        y.copy_from_slice(&x[d.start..d.start + d.len]);
    }
}

/// Per outer index, zeros with `x` in the run (the converse of [`slice`], and its gradient).
pub fn pad(x: &[f32], y: &mut [f32], d: SliceDims) {
    debug_assert_eq!((x.len(), y.len()), (d.part_len(), d.whole_len()));
    for (y, x) in y.chunks_exact_mut(d.whole.max(1)).zip(x.chunks_exact(d.len.max(1))) {
        y.fill(0.0);
        y[d.start..d.start + d.len].copy_from_slice(x);
    }
}

/// `y` = `x` with its axes reordered (a transpose); its own inverse permutation undoes it.
pub fn transpose(x: &[f32], y: &mut [f32], d: PermuteDims) {
    debug_assert_eq!((x.len(), y.len()), (d.len(), d.len()));
    let mut stride = [0; 4];
    let mut s = 1;
    for a in (0..4).rev() {
        stride[a] = s;
        s *= d.dims[a];
    }
    let step: [usize; 4] = core::array::from_fn(|i| stride[d.perm[i] % 4]);
    let out = d.output_dims();
    let mut rows = y.chunks_exact_mut(out[3].max(1));
    for i in 0..out[0] {
        for j in 0..out[1] {
            for k in 0..out[2] {
                let base = i * step[0] + j * step[1] + k * step[2];
                let Some(row) = rows.next() else { return };
                for (l, v) in row.iter_mut().enumerate() {
                    *v = x[base + l * step[3]];
                }
            }
        }
    }
}

/// Calls `f(i, j)` for each element `i` of the broadcast result (in order) and the element
/// `j` of the broadcast tensor it repeats.
fn broadcast_pairs(d: BroadcastDims, mut f: impl FnMut(usize, usize)) {
    let step = d.strides();
    let mut i = 0;
    for a in 0..d.to[0] {
        for b in 0..d.to[1] {
            for c in 0..d.to[2] {
                let base = a * step[0] + b * step[1] + c * step[2];
                for e in 0..d.to[3] {
                    f(i, base + e * step[3]);
                    i += 1;
                }
            }
        }
    }
}

/// `y` = `x` broadcast to `y`'s shape: each element repeated along the axes where `x` has 1.
pub fn broadcast(x: &[f32], y: &mut [f32], d: BroadcastDims) {
    debug_assert_eq!((x.len(), y.len()), (d.from_len(), d.to_len()));
    broadcast_pairs(d, |i, j| {
        if let (Some(v), Some(&u)) = (y.get_mut(i), x.get(j)) {
            *v = u;
        }
    });
}

/// `dx` = `dy` summed over the axes a broadcast repeated along (its gradient).
pub fn broadcast_grad(dy: &[f32], dx: &mut [f32], d: BroadcastDims) {
    debug_assert_eq!((dy.len(), dx.len()), (d.to_len(), d.from_len()));
    dx.fill(0.0);
    broadcast_pairs(d, |i, j| {
        if let (Some(v), Some(&g)) = (dx.get_mut(j), dy.get(i)) {
            *v += g;
        }
    });
}

/// Sets every element of `y` to `value`.
pub fn fill(y: &mut [f32], value: f32) {
    y.fill(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    // x[2, 3], w[2, 3]: two rows, three inputs, two outputs.
    const DIMS: LinearDims = LinearDims { n: 2, k: 3, m: 2 };
    const X: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    const W: [f32; 6] = [1.0, 0.0, -1.0, 0.5, 0.5, 0.5];

    #[test]
    fn linear_matches_hand_values() {
        let mut y = [0.0; 4];
        linear(&X, &W, Some(&[10.0, -1.0]), &mut y, DIMS);
        // Row 0: [1 - 3, 0.5·6] + b; row 1: [4 - 6, 0.5·15] + b.
        assert_close(&y, &[8.0, 2.0, 8.0, 6.5], 1e-6);
        linear(&X, &W, None, &mut y, DIMS);
        assert_close(&y, &[-2.0, 3.0, -2.0, 7.5], 1e-6);
    }

    #[test]
    fn linear_grad_input_is_dy_times_w() {
        let dy = [1.0, 2.0, -1.0, 0.0];
        let mut dx = [f32::NAN; 6];
        linear_grad_input(&dy, &W, &mut dx, DIMS);
        assert_close(&dx, &[2.0, 1.0, 0.0, -1.0, 0.0, 1.0], 1e-6);
    }

    #[test]
    fn linear_grad_weight_is_dy_transposed_times_x() {
        let dy = [1.0, 2.0, -1.0, 0.0];
        let mut dw = [f32::NAN; 6];
        linear_grad_weight(&dy, &X, &mut dw, DIMS);
        assert_close(&dw, &[-3.0, -3.0, -3.0, 2.0, 4.0, 6.0], 1e-6);
    }

    #[test]
    fn bias_grad_sums_outer_and_inner_per_channel() {
        let d = ChannelDims { outer: 2, channels: 2, inner: 3 };
        let dy = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 4.0, 5.0, 6.0, 40.0, 50.0, 60.0];
        let mut db = [f32::NAN; 2];
        bias_grad(&dy, &mut db, d);
        assert_close(&db, &[21.0, 210.0], 1e-6);
    }

    #[test]
    fn elementwise_helpers() {
        let mut y = [0.0; 3];
        add(&[1.0, 2.0, 3.0], &[0.5, -2.0, 1.0], &mut y);
        assert_close(&y, &[1.5, 0.0, 4.0], 0.0);
        copy(&[7.0, 8.0, 9.0], &mut y);
        assert_close(&y, &[7.0, 8.0, 9.0], 0.0);
        fill(&mut y, -1.5);
        assert_close(&y, &[-1.5, -1.5, -1.5], 0.0);
    }

    #[test]
    fn broadcast_repeats_size_one_axes_and_its_gradient_sums_over_them() {
        // [2, 1, 3] → [2, 2, 3] and [1, 2, 1] → [3, 2, 2] (a lower rank padded in front).
        let d = BroadcastDims { from: [1, 2, 1, 3], to: [1, 2, 2, 3] };
        assert_eq!(d.check(), Ok(()));
        let mut y = [0.0; 12];
        broadcast(&X, &mut y, d);
        assert_eq!(y, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 4.0, 5.0, 6.0]);
        let dy: [f32; 12] = core::array::from_fn(|i| i as f32);
        let mut dx = [9.0; 6];
        broadcast_grad(&dy, &mut dx, d);
        assert_eq!(dx, [3.0, 5.0, 7.0, 15.0, 17.0, 19.0]);
        let d = BroadcastDims { from: [1, 1, 2, 1], to: [1, 3, 2, 2] };
        let mut y = [0.0; 12];
        broadcast(&[1.0, -1.0], &mut y, d);
        assert_eq!(y, [1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0]);
        let mut dx = [0.0; 2];
        broadcast_grad(&[1.0; 12], &mut dx, d);
        assert_eq!(dx, [6.0, 6.0]);
        let bad = BroadcastDims { from: [1, 1, 2, 3], to: [1, 1, 4, 3] };
        assert_eq!(bad.check(), Err("each axis must be the target's or 1"));
    }
}
