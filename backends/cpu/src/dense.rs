//! Dense layers as matrix products: `y = x·wᵀ + b`, `dx = dy·w` and `dw = dyᵀ·x`, each one
//! threaded GEMM over PyTorch's `nn.Linear` layout.

use crate::gemm::{gemm, Mat};
use crate::pool::Pool;
use sprout_core::geometry::LinearDims;

/// `y[n, m] = x[n, k] · w[m, k]ᵀ + b[m]`.
pub fn linear(pool: &Pool, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
    let beta = match b {
        Some(b) => {
            y.chunks_mut(d.m).for_each(|row| row.copy_from_slice(b));
            1.0
        }
        None => 0.0,
    };
    gemm(pool, Mat::new(x, d.n, d.k), Mat::new(w, d.m, d.k).t(), beta, y);
}

/// `dx[n, k] = dy[n, m] · w[m, k]`.
pub fn linear_grad_input(pool: &Pool, dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
    gemm(pool, Mat::new(dy, d.n, d.m), Mat::new(w, d.m, d.k), 0.0, dx);
}

/// `dw[m, k] = dy[n, m]ᵀ · x[n, k]`.
pub fn linear_grad_weight(pool: &Pool, dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
    gemm(pool, Mat::new(dy, d.n, d.m).t(), Mat::new(x, d.n, d.k), 0.0, dw);
}
