//! Layer normalisation over rows (`[rows, cols]`, a row being the trailing axes it
//! normalises): the forward pass and its gradients, which recompute each row's statistics.

use crate::geometry::RowDims;

/// One row's mean and `1 / sqrt(var + eps)` (two-pass: the mean first).
fn row_stats(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / libm::sqrtf(var + eps))
}

/// `y = gamma · (x − mean) · invstd + beta` per row, `gamma` and `beta` of `cols` values.
pub fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], y: &mut [f32], d: RowDims, eps: f32) {
    debug_assert_eq!(x.len(), d.rows * d.cols);
    debug_assert_eq!(y.len(), x.len());
    for (x, y) in x.chunks_exact(d.cols).zip(y.chunks_exact_mut(d.cols)) {
        let (mean, invstd) = row_stats(x, eps);
        for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
            *y = g * ((x - mean) * invstd) + b;
        }
    }
}

/// `dx = invstd · (g − mean(g) − x̂ · mean(g · x̂))` per row, with `g = dy · gamma` and
/// `x̂ = (x − mean) · invstd`.
pub fn layer_norm_grad_input(
    dy: &[f32],
    x: &[f32],
    gamma: &[f32],
    dx: &mut [f32],
    d: RowDims,
    eps: f32,
) {
    debug_assert_eq!(dy.len(), d.rows * d.cols);
    debug_assert_eq!(x.len(), dy.len());
    debug_assert_eq!(dx.len(), dy.len());
    let n = d.cols as f32;
    let rows = dy.chunks_exact(d.cols).zip(x.chunks_exact(d.cols));
    for ((dy, x), dx) in rows.zip(dx.chunks_exact_mut(d.cols)) {
        let (mean, invstd) = row_stats(x, eps);
        let (mut sum_g, mut sum_gx) = (0.0f32, 0.0f32);
        for ((&dy, &x), &w) in dy.iter().zip(x).zip(gamma) {
            let g = dy * w;
            sum_g += g;
            sum_gx += g * (x - mean) * invstd;
        }
        let (mean_g, mean_gx) = (sum_g / n, sum_gx / n);
        for (((dx, &dy), &x), &w) in dx.iter_mut().zip(dy).zip(x).zip(gamma) {
            let xhat = (x - mean) * invstd;
            *dx = invstd * (dy * w - mean_g - xhat * mean_gx);
        }
    }
}

/// `dgamma = Σ_rows dy · x̂`, `dbeta = Σ_rows dy` (overwritten).
pub fn layer_norm_grad_params(
    dy: &[f32],
    x: &[f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    d: RowDims,
    eps: f32,
) {
    debug_assert_eq!(dy.len(), d.rows * d.cols);
    debug_assert_eq!(x.len(), dy.len());
    dgamma.fill(0.0);
    dbeta.fill(0.0);
    for (dy, x) in dy.chunks_exact(d.cols).zip(x.chunks_exact(d.cols)) {
        let (mean, invstd) = row_stats(x, eps);
        for (((dg, db), &dy), &x) in dgamma.iter_mut().zip(dbeta.iter_mut()).zip(dy).zip(x) {
            *dg += dy * (x - mean) * invstd;
            *db += dy;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    #[test]
    fn each_row_is_normalised_then_scaled_and_shifted() {
        let x = [1.0, 2.0, 3.0, 4.0, -2.0, 0.0, 2.0, 8.0];
        let (gamma, beta) = ([1.0, 2.0, 0.5, 1.0], [0.0, 1.0, 0.0, -1.0]);
        let mut y = [0.0; 8];
        layer_norm(&x, &gamma, &beta, &mut y, RowDims { rows: 2, cols: 4 }, 0.0);
        // Row 0: mean 2.5, var 1.25; row 1: mean 2, var 14.
        let (s0, s1) = (1.25f32.sqrt(), 14f32.sqrt());
        let want = [
            -1.5 / s0,
            1.0 - 1.0 / s0,
            0.25 / s0,
            1.5 / s0 - 1.0,
            -4.0 / s1,
            1.0 - 4.0 / s1,
            0.0,
            6.0 / s1 - 1.0,
        ];
        assert_close(&y, &want, 1e-6);
    }

    #[test]
    fn gradients_match_central_differences() {
        let d = RowDims { rows: 2, cols: 3 };
        let x = [0.3f32, -1.2, 0.8, 2.0, 0.5, -0.4];
        let gamma = [1.5f32, -0.5, 0.7];
        let beta = [0.1f32, 0.2, -0.3];
        let dy = [0.4f32, -0.9, 0.25, 1.1, -0.2, 0.6];
        let eps = 1e-3;
        let loss = |x: &[f32], gamma: &[f32], beta: &[f32]| -> f64 {
            let mut y = [0.0; 6];
            layer_norm(x, gamma, beta, &mut y, d, eps);
            y.iter().zip(&dy).map(|(&y, &g)| (y * g) as f64).sum()
        };
        let numeric = |v: &[f32], i: usize, f: &dyn Fn(&[f32]) -> f64| {
            let h = 1e-2f32;
            let (mut up, mut down) = (v.to_vec(), v.to_vec());
            up[i] += h;
            down[i] -= h;
            (f(&up) - f(&down)) / (2.0 * h as f64)
        };
        let mut dx = [0.0; 6];
        layer_norm_grad_input(&dy, &x, &gamma, &mut dx, d, eps);
        let (mut dgamma, mut dbeta) = ([0.0; 3], [0.0; 3]);
        layer_norm_grad_params(&dy, &x, &mut dgamma, &mut dbeta, d, eps);
        for (i, &got) in dx.iter().enumerate() {
            let want = numeric(&x, i, &|x| loss(x, &gamma, &beta));
            assert!((got as f64 - want).abs() < 2e-3, "dx[{i}]: {got} vs {want}");
        }
        for i in 0..3 {
            let want = numeric(&gamma, i, &|g| loss(&x, g, &beta));
            assert!((dgamma[i] as f64 - want).abs() < 2e-3, "dgamma[{i}]");
            let want = numeric(&beta, i, &|b| loss(&x, &gamma, b));
            assert!((dbeta[i] as f64 - want).abs() < 2e-3, "dbeta[{i}]");
        }
    }
}
