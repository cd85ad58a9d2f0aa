//! Activations (ReLU, ReLU6, row-wise softmax) and their gradients.

use super::layout::{row, row_mut};
use crate::geometry::RowDims;

fn relu_value(x: f32) -> f32 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}

fn relu6_value(x: f32) -> f32 {
    x.clamp(0.0, 6.0)
}

/// Whether ReLU passes the gradient, from its output.
fn relu_passes(y: f32) -> bool {
    y > 0.0
}

/// Whether ReLU6 passes the gradient, from its output.
fn relu6_passes(y: f32) -> bool {
    y > 0.0 && y < 6.0
}

/// A rectifier after a batch norm (ReLU, or ReLU6 clamped at 6), whose gradient the batch
/// norm's parameter gradient applies itself ([`crate::reference::norm::batch_norm_grad_params_rectified`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Rectifier {
    /// ReLU6 rather than ReLU.
    pub relu6: bool,
}

impl Rectifier {
    /// `y = relu(y)` or `relu6(y)`, in place.
    pub fn rectify_in_place(self, y: &mut [f32]) {
        match self.relu6 {
            true => relu6_in_place(y),
            false => relu_in_place(y),
        }
    }

    /// Whether the rectifier passes the gradient at its input `z`: exactly where its own
    /// gradient does from its output (`relu(z)` or `relu6(z)`, NaN included).
    #[inline]
    pub fn passes(self, z: f32) -> bool {
        match self.relu6 {
            true => relu6_passes(z),
            false => relu_passes(z),
        }
    }
}

fn map(x: &[f32], y: &mut [f32], f: fn(f32) -> f32) {
    debug_assert_eq!(x.len(), y.len());
    for (out, &x) in y.iter_mut().zip(x) {
        *out = f(x);
    }
}

fn gate(y: &[f32], dy: &[f32], dx: &mut [f32], passes: fn(f32) -> bool) {
    debug_assert_eq!(y.len(), dx.len());
    debug_assert_eq!(dy.len(), dx.len());
    for ((out, &y), &dy) in dx.iter_mut().zip(y).zip(dy) {
        *out = if passes(y) { dy } else { 0.0 };
    }
}

fn gate_in_place(y: &[f32], dy: &mut [f32], passes: fn(f32) -> bool) {
    debug_assert_eq!(y.len(), dy.len());
    for (dy, &y) in dy.iter_mut().zip(y) {
        if !passes(y) {
            *dy = 0.0;
        }
    }
}

/// Elementwise `y = max(x, 0)`; NaN propagates.
pub fn relu(x: &[f32], y: &mut [f32]) {
    map(x, y, relu_value)
}

/// `x = max(x, 0)` in place.
pub fn relu_in_place(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = relu_value(*v));
}

/// Elementwise `y = clamp(x, 0, 6)`; NaN propagates.
pub fn relu6(x: &[f32], y: &mut [f32]) {
    map(x, y, relu6_value)
}

/// `x = clamp(x, 0, 6)` in place.
pub fn relu6_in_place(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = relu6_value(*v));
}

/// `dx = dy` where the forward output `y > 0`, else 0; overwrites `dx`.
pub fn relu_grad(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    gate(y, dy, dx, relu_passes)
}

/// [`relu_grad`] written over `dy`.
pub fn relu_grad_in_place(y: &[f32], dy: &mut [f32]) {
    gate_in_place(y, dy, relu_passes)
}

/// `dx = dy` where the forward output satisfies `0 < y < 6`, else 0; overwrites `dx`.
pub fn relu6_grad(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    gate(y, dy, dx, relu6_passes)
}

/// [`relu6_grad`] written over `dy`.
pub fn relu6_grad_in_place(y: &[f32], dy: &mut [f32]) {
    gate_in_place(y, dy, relu6_passes)
}

/// Softmax of one row, stabilised by subtracting the row maximum before `exp`.
pub(super) fn softmax_row(x: &[f32], y: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for (out, &x) in y.iter_mut().zip(x) {
        *out = libm::expf(x - max);
    }
    let sum: f32 = y.iter().sum();
    for out in y.iter_mut() {
        *out /= sum;
    }
}

/// Row-wise softmax of `x[rows, cols]` into `y[rows, cols]` (numerically stable).
pub fn softmax(x: &[f32], y: &mut [f32], d: RowDims) {
    debug_assert_eq!(x.len(), d.rows * d.cols);
    debug_assert_eq!(y.len(), d.rows * d.cols);
    for r in 0..d.rows {
        softmax_row(row(x, r, d.cols), row_mut(y, r, d.cols));
    }
}

/// Row-wise log-softmax of `x[rows, cols]`: `x − max − ln Σ exp(x − max)` per row, finite
/// for any finite logits.
pub fn log_softmax(x: &[f32], y: &mut [f32], d: RowDims) {
    debug_assert_eq!((x.len(), y.len()), (d.rows * d.cols, d.rows * d.cols));
    for r in 0..d.rows {
        let (x, y) = (row(x, r, d.cols), row_mut(y, r, d.cols));
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = x.iter().map(|&v| libm::expf(v - max)).sum();
        let shift = max + libm::logf(sum);
        for (out, &x) in y.iter_mut().zip(x) {
            *out = x - shift;
        }
    }
}

/// Log-softmax gradient from the forward output `y[rows, cols]`: per row,
/// `dx = dy − exp(y) · Σ_j dy_j`; overwrites `dx`.
pub fn log_softmax_grad(y: &[f32], dy: &[f32], dx: &mut [f32], d: RowDims) {
    debug_assert_eq!(
        (y.len(), dy.len(), dx.len()),
        (d.rows * d.cols, d.rows * d.cols, d.rows * d.cols)
    );
    for r in 0..d.rows {
        let (y, dy) = (row(y, r, d.cols), row(dy, r, d.cols));
        let total: f32 = dy.iter().sum();
        for ((out, y), dy) in row_mut(dx, r, d.cols).iter_mut().zip(y).zip(dy) {
            *out = dy - libm::expf(*y) * total;
        }
    }
}

/// Softmax gradient from the forward output `y[rows, cols]`: per row,
/// `dx = y · (dy − Σ_j dy_j · y_j)`; overwrites `dx`.
pub fn softmax_grad(y: &[f32], dy: &[f32], dx: &mut [f32], d: RowDims) {
    debug_assert_eq!(y.len(), d.rows * d.cols);
    debug_assert_eq!(dy.len(), d.rows * d.cols);
    debug_assert_eq!(dx.len(), d.rows * d.cols);
    for r in 0..d.rows {
        let (y, dy) = (row(y, r, d.cols), row(dy, r, d.cols));
        let weighted: f32 = y.iter().zip(dy).map(|(y, dy)| y * dy).sum();
        for ((out, y), dy) in row_mut(dx, r, d.cols).iter_mut().zip(y).zip(dy) {
            *out = y * (dy - weighted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    #[test]
    fn relu_and_relu6_clamp() {
        let x = [-2.0, 0.0, 3.0, 7.5];
        let mut y = [f32::NAN; 4];
        relu(&x, &mut y);
        assert_close(&y, &[0.0, 0.0, 3.0, 7.5], 0.0);
        relu6(&x, &mut y);
        assert_close(&y, &[0.0, 0.0, 3.0, 6.0], 0.0);
    }

    #[test]
    fn relu_family_propagates_nan() {
        let mut y = [0.0];
        relu(&[f32::NAN], &mut y);
        assert!(y[0].is_nan());
        relu6(&[f32::NAN], &mut y);
        assert!(y[0].is_nan());
    }

    #[test]
    fn relu_grads_mask_by_forward_output() {
        let y = [0.0, 0.5, 6.0, 3.0];
        let dy = [1.0, 2.0, 3.0, 4.0];
        let mut dx = [f32::NAN; 4];
        relu_grad(&y, &dy, &mut dx);
        assert_close(&dx, &[0.0, 2.0, 3.0, 4.0], 0.0);
        relu6_grad(&y, &dy, &mut dx);
        assert_close(&dx, &[0.0, 2.0, 0.0, 4.0], 0.0);
    }

    #[test]
    fn softmax_rows_sum_to_one_and_big_logits_stay_finite() {
        let d = RowDims { rows: 2, cols: 3 };
        let x = [1.0, 2.0, 3.0, 1000.0, 1000.0, -1000.0];
        let mut y = [f32::NAN; 6];
        softmax(&x, &mut y, d);
        assert!(y.iter().all(|v| v.is_finite()));
        assert_close(&[y[0] + y[1] + y[2], y[3] + y[4] + y[5]], &[1.0, 1.0], 1e-6);
        let e = [libm::expf(-2.0), libm::expf(-1.0), 1.0];
        let total = e[0] + e[1] + e[2];
        assert_close(&y[..3], &e.map(|v| v / total), 1e-6);
        assert_close(&y[3..], &[0.5, 0.5, 0.0], 1e-6);
    }

    #[test]
    fn softmax_grad_matches_hand_values() {
        let d = RowDims { rows: 1, cols: 2 };
        let y = [0.25, 0.75];
        let mut dx = [f32::NAN; 2];
        // Σ dy·y = 0.75, so dx = [0.25 · (0 − 0.75), 0.75 · (1 − 0.75)].
        softmax_grad(&y, &[0.0, 1.0], &mut dx, d);
        assert_close(&dx, &[-0.1875, 0.1875], 1e-7);
        // A constant upstream gradient does not change a softmax output.
        softmax_grad(&y, &[3.0, 3.0], &mut dx, d);
        assert_close(&dx, &[0.0, 0.0], 1e-7);
    }
}
