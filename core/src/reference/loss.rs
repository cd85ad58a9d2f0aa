//! Losses and their gradients: softmax cross-entropy over class-index labels and mean
//! squared error. Each loss is a single value written to a 1-element slice.

use super::activation::softmax_row;
use super::layout::{row, row_mut};
use crate::error::KernelError;
use crate::geometry::RowDims;

/// Fails on the first label outside `0..classes`.
pub fn check_labels(labels: &[i32], classes: usize) -> Result<(), KernelError> {
    let in_range = |label: i32| usize::try_from(label).is_ok_and(|l| l < classes);
    match labels.iter().position(|&label| !in_range(label)) {
        Some(index) => {
            Err(KernelError::LabelOutOfRange { row: index, label: labels[index], classes })
        }
        None => Ok(()),
    }
}

/// `ln Σ exp(x)`, stabilised by factoring out the maximum.
fn log_sum_exp(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = x.iter().map(|&v| libm::expf(v - max)).sum();
    max + libm::logf(sum)
}

/// `loss[0]` = mean over rows of `−ln softmax(logits[row])[labels[row]]` for
/// `logits[rows, cols]`, via log-sum-exp. A label outside `0..cols` fails with
/// `LabelOutOfRange` before anything is written.
pub fn cross_entropy(
    logits: &[f32],
    labels: &[i32],
    loss: &mut [f32],
    d: RowDims,
) -> Result<(), KernelError> {
    debug_assert_eq!(logits.len(), d.rows * d.cols);
    debug_assert_eq!(labels.len(), d.rows);
    debug_assert_eq!(loss.len(), 1);
    check_labels(labels, d.cols)?;
    let total: f32 = (0..d.rows)
        .map(|r| {
            let logits = row(logits, r, d.cols);
            // In range: checked above.
            log_sum_exp(logits) - logits[labels[r] as usize]
        })
        .sum();
    loss[0] = total / d.rows as f32;
    Ok(())
}

/// `dlogits[rows, cols] = dloss[0] · (softmax(logits) − onehot(labels)) / rows`; overwrites
/// `dlogits`. A label outside `0..cols` fails with `LabelOutOfRange` before anything is
/// written.
pub fn cross_entropy_grad(
    logits: &[f32],
    labels: &[i32],
    dloss: &[f32],
    dlogits: &mut [f32],
    d: RowDims,
) -> Result<(), KernelError> {
    debug_assert_eq!(logits.len(), d.rows * d.cols);
    debug_assert_eq!(labels.len(), d.rows);
    debug_assert_eq!(dloss.len(), 1);
    debug_assert_eq!(dlogits.len(), d.rows * d.cols);
    check_labels(labels, d.cols)?;
    let scale = dloss[0] / d.rows as f32;
    for r in 0..d.rows {
        let grad = row_mut(dlogits, r, d.cols);
        softmax_row(row(logits, r, d.cols), grad);
        // In range: checked above.
        grad[labels[r] as usize] -= 1.0;
        for g in grad.iter_mut() {
            *g *= scale;
        }
    }
    Ok(())
}

/// `loss[0]` = mean over all elements of `(pred − target)²`.
pub fn mse(pred: &[f32], target: &[f32], loss: &mut [f32]) {
    debug_assert_eq!(pred.len(), target.len());
    debug_assert_eq!(loss.len(), 1);
    let total: f32 = pred.iter().zip(target).map(|(p, t)| (p - t) * (p - t)).sum();
    loss[0] = total / pred.len() as f32;
}

/// `dpred = 2 · (pred − target) / len · dloss[0]`; overwrites `dpred`.
pub fn mse_grad(pred: &[f32], target: &[f32], dloss: &[f32], dpred: &mut [f32]) {
    debug_assert_eq!(pred.len(), target.len());
    debug_assert_eq!(dpred.len(), pred.len());
    debug_assert_eq!(dloss.len(), 1);
    let scale = 2.0 * dloss[0] / pred.len() as f32;
    for ((out, p), t) in dpred.iter_mut().zip(pred).zip(target) {
        *out = (p - t) * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    #[test]
    fn uniform_logits_cost_ln_classes() {
        let d = RowDims { rows: 2, cols: 4 };
        let mut loss = [f32::NAN];
        cross_entropy(&[0.5; 8], &[0, 3], &mut loss, d).unwrap();
        assert_close(&loss, &[libm::logf(4.0)], 1e-6);
    }

    #[test]
    fn cross_entropy_matches_hand_value_and_survives_big_logits() {
        let d = RowDims { rows: 2, cols: 2 };
        let mut loss = [f32::NAN];
        // Row 0: −ln(e / (e + 1)) = ln(1 + e⁻¹). Row 1: huge margin in favour of the label.
        cross_entropy(&[1.0, 0.0, 0.0, 1000.0], &[0, 1], &mut loss, d).unwrap();
        let row0 = libm::logf(1.0 + libm::expf(-1.0));
        assert_close(&loss, &[row0 / 2.0], 1e-6);
    }

    #[test]
    fn out_of_range_labels_fail_before_writing() {
        let d = RowDims { rows: 3, cols: 2 };
        let logits = [0.0; 6];
        for (labels, row, label) in [([0, 2, 1], 1, 2), ([-1, 0, 0], 0, -1)] {
            let expected = Err(KernelError::LabelOutOfRange { row, label, classes: 2 });
            let mut loss = [7.0];
            assert_eq!(cross_entropy(&logits, &labels, &mut loss, d), expected);
            assert_close(&loss, &[7.0], 0.0);
            let mut dlogits = [7.0; 6];
            assert_eq!(cross_entropy_grad(&logits, &labels, &[1.0], &mut dlogits, d), expected);
            assert_close(&dlogits, &[7.0; 6], 0.0);
        }
    }

    #[test]
    fn cross_entropy_grad_is_scaled_softmax_minus_onehot() {
        let d = RowDims { rows: 2, cols: 4 };
        let mut dlogits = [f32::NAN; 8];
        cross_entropy_grad(&[0.0; 8], &[1, 3], &[2.0], &mut dlogits, d).unwrap();
        // 2 · (0.25 − onehot) / 2.
        let expected = [0.25, -0.75, 0.25, 0.25, 0.25, 0.25, 0.25, -0.75];
        assert_close(&dlogits, &expected, 1e-6);
    }

    #[test]
    fn mse_and_grad_match_hand_values() {
        let (pred, target) = ([1.0, 2.0, 4.0, 0.0], [1.0, 0.0, 1.0, 1.0]);
        let mut loss = [f32::NAN];
        mse(&pred, &target, &mut loss);
        assert_close(&loss, &[(0.0 + 4.0 + 9.0 + 1.0) / 4.0], 1e-6);
        let mut dpred = [f32::NAN; 4];
        mse_grad(&pred, &target, &[3.0], &mut dpred);
        assert_close(&dpred, &[0.0, 3.0, 4.5, -1.5], 1e-6);
    }
}
