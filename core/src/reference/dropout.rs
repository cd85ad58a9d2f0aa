//! Inverted dropout with a counter-based mask: a pure function of `(seed, step, index)`, so
//! the backward pass recomputes the mask instead of storing it.

use crate::hyperparams::DropoutConfig;
use crate::rng::{splitmix64, unit_f32};

/// Whether element `index` survives dropout at training step `step`: a uniform `u` in
/// `[0, 1)` hashed from `(seed, step, index)` is kept iff `u >= p`. `p == 0` keeps every
/// element, `p >= 1` none.
pub fn dropout_keeps(cfg: DropoutConfig, step: u64, index: usize) -> bool {
    let hash = splitmix64(cfg.seed ^ splitmix64(step ^ splitmix64(index as u64)));
    unit_f32(hash) >= cfg.p
}

/// Element `index` of `x` after the mask of `(cfg, step)`: kept elements are scaled by
/// `1 / (1 − p)`, dropped ones become 0.
fn masked(x: f32, cfg: DropoutConfig, step: u64, index: usize) -> f32 {
    if dropout_keeps(cfg, step, index) {
        x * (1.0 / (1.0 - cfg.p))
    } else {
        0.0
    }
}

fn apply_mask(x: &[f32], y: &mut [f32], cfg: DropoutConfig, step: u64) {
    debug_assert_eq!(x.len(), y.len());
    for (index, (out, &x)) in y.iter_mut().zip(x).enumerate() {
        *out = masked(x, cfg, step, index);
    }
}

/// Inverted dropout: `y = x / (1 − p)` where `dropout_keeps(cfg, step, index)`, else 0 (all
/// zero when `p >= 1`).
pub fn dropout(x: &[f32], y: &mut [f32], cfg: DropoutConfig, step: u64) {
    apply_mask(x, y, cfg, step);
}

/// The dropout mask of `(cfg, step)` applied to `x` in place: the forward pass and the
/// gradient alike, when the output may overwrite the input.
pub fn dropout_in_place(x: &mut [f32], cfg: DropoutConfig, step: u64) {
    for (index, x) in x.iter_mut().enumerate() {
        *x = masked(*x, cfg, step, index);
    }
}

/// Dropout gradient: the same mask and scale as the forward pass of `(cfg, step)`, applied
/// to `dy`; overwrites `dx`.
pub fn dropout_grad(dy: &[f32], dx: &mut [f32], cfg: DropoutConfig, step: u64) {
    apply_mask(dy, dx, cfg, step);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    const CFG: DropoutConfig = DropoutConfig { p: 0.3, seed: 42 };

    fn kept_count(cfg: DropoutConfig, step: u64, len: usize) -> usize {
        (0..len).filter(|&i| dropout_keeps(cfg, step, i)).count()
    }

    #[test]
    fn keeps_about_one_minus_p() {
        for step in 0..3 {
            let kept = kept_count(CFG, step, 10_000) as f32 / 10_000.0;
            assert!(libm::fabsf(kept - 0.7) < 0.03, "kept fraction {kept} at step {step}");
        }
    }

    #[test]
    fn mask_is_deterministic_and_varies_with_step_and_seed() {
        let mask = |cfg: DropoutConfig, step: u64| -> [bool; 64] {
            core::array::from_fn(|i| dropout_keeps(cfg, step, i))
        };
        assert_eq!(mask(CFG, 5), mask(CFG, 5));
        assert_ne!(mask(CFG, 5), mask(CFG, 6));
        assert_ne!(mask(CFG, 5), mask(DropoutConfig { seed: 43, ..CFG }, 5));
    }

    #[test]
    fn p_zero_keeps_all_and_p_one_keeps_none() {
        assert_eq!(kept_count(DropoutConfig { p: 0.0, ..CFG }, 1, 1000), 1000);
        assert_eq!(kept_count(DropoutConfig { p: 1.0, ..CFG }, 1, 1000), 0);
        let mut y = [f32::NAN; 8];
        dropout(&[1.0; 8], &mut y, DropoutConfig { p: 1.0, ..CFG }, 1);
        assert_close(&y, &[0.0; 8], 0.0);
    }

    #[test]
    fn forward_and_grad_share_mask_and_scale() {
        let x: [f32; 32] = core::array::from_fn(|i| 1.0 + i as f32);
        let (mut y, mut dx) = ([f32::NAN; 32], [f32::NAN; 32]);
        dropout(&x, &mut y, CFG, 9);
        dropout_grad(&x, &mut dx, CFG, 9);
        assert_close(&dx, &y, 0.0);
        for (i, (&y, &x)) in y.iter().zip(&x).enumerate() {
            let expected = if dropout_keeps(CFG, 9, i) { x / 0.7 } else { 0.0 };
            assert_close(&[y], &[expected], 1e-5);
        }
        assert!(y.contains(&0.0) && y.iter().any(|&v| v != 0.0));
    }
}
