//! Optimiser updates (SGD with momentum, AdamW), gradient accumulation and global-norm
//! clipping. `grad_scale` multiplies the gradient first: it carries the clipping coefficient.

use crate::hyperparams::{AdamWConfig, SgdConfig};

/// PyTorch SGD without dampening, one step over `param`: `g = grad · grad_scale + wd · p`;
/// with momentum, `buf = momentum · buf + g` (buffer starts at zero) and
/// `g = nesterov ? g + momentum · buf : buf`; then `p −= lr · g`. Momentum is skipped when
/// `cfg.momentum == 0` or `momentum_buf` is `None`.
pub fn sgd_update(
    param: &mut [f32],
    grad: &[f32],
    momentum_buf: Option<&mut [f32]>,
    lr: f32,
    grad_scale: f32,
    cfg: SgdConfig,
) {
    debug_assert_eq!(param.len(), grad.len());
    let decayed_grad = |p: f32, g: f32| g * grad_scale + cfg.weight_decay * p;
    match momentum_buf.filter(|_| cfg.momentum != 0.0) {
        None => {
            for (p, &g) in param.iter_mut().zip(grad) {
                *p -= lr * decayed_grad(*p, g);
            }
        }
        Some(buf) => {
            debug_assert_eq!(buf.len(), param.len());
            for ((p, &g), b) in param.iter_mut().zip(grad).zip(buf) {
                let g = decayed_grad(*p, g);
                *b = cfg.momentum * *b + g;
                let step = if cfg.nesterov { g + cfg.momentum * *b } else { *b };
                *p -= lr * step;
            }
        }
    }
}

/// PyTorch AdamW, update number `step` (1-based) over `param` with moments `m` and `v`:
/// `p *= 1 − lr · wd`; `g = grad · grad_scale`; `m = β1 · m + (1 − β1) · g`;
/// `v = β2 · v + (1 − β2) · g²`; `p −= lr · m̂ / (sqrt(v̂) + eps)` with
/// `m̂ = m / (1 − β1^step)` and `v̂ = v / (1 − β2^step)`.
#[allow(clippy::too_many_arguments)]
pub fn adamw_update(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    lr: f32,
    grad_scale: f32,
    step: u32,
    cfg: AdamWConfig,
) {
    debug_assert_eq!(param.len(), grad.len());
    debug_assert_eq!(m.len(), param.len());
    debug_assert_eq!(v.len(), param.len());
    let update = AdamWStep::new(lr, grad_scale, step, cfg);
    for (((p, &g), m), v) in param.iter_mut().zip(grad).zip(m).zip(v) {
        update.apply(p, g, m, v, libm::sqrtf);
    }
}

/// What every parameter of one [`adamw_update`] shares, and the update of one parameter:
/// an optimised backend runs [`AdamWStep::apply`] in its own loop, so its results are the
/// reference's bit for bit.
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    lr: f32,
    grad_scale: f32,
    cfg: AdamWConfig,
    bias_correction1: f32,
    bias_correction2: f32,
    decay: f32,
}

impl AdamWStep {
    /// Update number `step` (1-based) at learning rate `lr`, gradients scaled by `grad_scale`.
    pub fn new(lr: f32, grad_scale: f32, step: u32, cfg: AdamWConfig) -> Self {
        Self {
            lr,
            grad_scale,
            cfg,
            bias_correction1: 1.0 - libm::powf(cfg.beta1, step as f32),
            bias_correction2: 1.0 - libm::powf(cfg.beta2, step as f32),
            decay: 1.0 - lr * cfg.weight_decay,
        }
    }

    /// Parameter `p` with gradient `g` and moments `m` and `v`; `sqrt` is a correctly
    /// rounded square root (`libm::sqrtf` here, a vector instruction in a vector loop).
    #[inline(always)]
    pub fn apply(&self, p: &mut f32, g: f32, m: &mut f32, v: &mut f32, sqrt: impl Fn(f32) -> f32) {
        let cfg = self.cfg;
        let g = g * self.grad_scale;
        *m = cfg.beta1 * *m + (1.0 - cfg.beta1) * g;
        *v = cfg.beta2 * *v + (1.0 - cfg.beta2) * g * g;
        let m_hat = *m / self.bias_correction1;
        let v_hat = *v / self.bias_correction2;
        *p = *p * self.decay - self.lr * m_hat / (sqrt(v_hat) + cfg.eps);
    }
}

/// `acc += scale · g`, elementwise.
pub fn accumulate(acc: &mut [f32], g: &[f32], scale: f32) {
    debug_assert_eq!(acc.len(), g.len());
    for (a, g) in acc.iter_mut().zip(g) {
        *a += scale * g;
    }
}

/// `acc[0] += Σ g²` (`acc` holds one element), so a global norm can be gathered tensor by
/// tensor.
pub fn sum_squares(g: &[f32], acc: &mut [f32]) {
    debug_assert_eq!(acc.len(), 1);
    acc[0] += g.iter().map(|g| g * g).sum::<f32>();
}

/// The gradient scale of PyTorch's `clip_grad_norm_`:
/// `min(1, max_norm / (sqrt(sum_squares) + 1e-6))`; a NaN norm yields NaN.
pub fn clip_coefficient(sum_squares: f32, max_norm: f32) -> f32 {
    let coefficient = max_norm / (libm::sqrtf(sum_squares) + 1e-6);
    if coefficient > 1.0 {
        1.0
    } else {
        coefficient
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    const MOMENTUM: SgdConfig = SgdConfig { momentum: 0.9, weight_decay: 0.0, nesterov: false };

    /// Two SGD steps from `p = 1` with a constant gradient of 1 and `lr = 0.1`.
    fn two_sgd_steps(cfg: SgdConfig) -> ([f32; 1], [f32; 1]) {
        let (mut p, mut buf) = ([1.0], [0.0]);
        sgd_update(&mut p, &[1.0], Some(&mut buf), 0.1, 1.0, cfg);
        let first = p;
        sgd_update(&mut p, &[1.0], Some(&mut buf), 0.1, 1.0, cfg);
        (first, p)
    }

    #[test]
    fn sgd_momentum_two_steps() {
        // buf: 1, then 0.9 + 1 = 1.9; p: 1 − 0.1 = 0.9, then 0.9 − 0.19 = 0.71.
        let (first, second) = two_sgd_steps(MOMENTUM);
        assert_close(&first, &[0.9], 1e-6);
        assert_close(&second, &[0.71], 1e-6);
    }

    #[test]
    fn sgd_nesterov_two_steps() {
        // Step 1: buf = 1, g = 1 + 0.9 = 1.9, p = 0.81.
        // Step 2: buf = 1.9, g = 1 + 0.9 · 1.9 = 2.71, p = 0.81 − 0.271 = 0.539.
        let (first, second) = two_sgd_steps(SgdConfig { nesterov: true, ..MOMENTUM });
        assert_close(&first, &[0.81], 1e-6);
        assert_close(&second, &[0.539], 1e-6);
    }

    #[test]
    fn sgd_plain_with_weight_decay_and_grad_scale() {
        let cfg = SgdConfig { momentum: 0.0, weight_decay: 0.1, nesterov: false };
        let mut p = [1.0, 2.0];
        // g = [4 · 0.25 + 0.1, 0 + 0.2] = [1.1, 0.2].
        sgd_update(&mut p, &[4.0, 0.0], None, 0.1, 0.25, cfg);
        assert_close(&p, &[0.89, 1.98], 1e-6);
        // A buffer without momentum is left alone.
        let mut buf = [5.0, 5.0];
        sgd_update(&mut p, &[0.0, 0.0], Some(&mut buf), 0.1, 1.0, cfg);
        assert_close(&buf, &[5.0, 5.0], 0.0);
    }

    #[test]
    fn adamw_first_step_moves_by_lr_times_sign() {
        let cfg = AdamWConfig { weight_decay: 0.0, ..AdamWConfig::default() };
        let (mut p, mut m, mut v) = ([1.0, 1.0, 1.0], [0.0; 3], [0.0; 3]);
        adamw_update(&mut p, &[0.5, -3.0, 1e-3], &mut m, &mut v, 0.01, 1.0, 1, cfg);
        assert_close(&p, &[0.99, 1.01, 0.99], 1e-5);
        assert_close(&m, &[0.05, -0.3, 1e-4], 1e-7);
        let one_minus_beta2 = 1.0 - cfg.beta2;
        assert_close(&v, &[0.25, 9.0, 1e-6].map(|g2| one_minus_beta2 * g2), 1e-10);
    }

    #[test]
    fn adamw_decay_is_decoupled_and_grad_scale_applies_first() {
        let cfg = AdamWConfig { weight_decay: 0.1, ..AdamWConfig::default() };
        let (mut p, mut m, mut v) = ([2.0], [0.0], [0.0]);
        adamw_update(&mut p, &[4.0], &mut m, &mut v, 0.01, 0.5, 1, cfg);
        // p · (1 − 0.001) − 0.01 · sign(g); m sees the scaled gradient 2.
        assert_close(&p, &[2.0 * 0.999 - 0.01], 1e-5);
        assert_close(&m, &[0.2], 1e-6);
    }

    #[test]
    fn adamw_second_step_matches_hand_value() {
        let cfg = AdamWConfig { weight_decay: 0.0, ..AdamWConfig::default() };
        let (mut p, mut m, mut v) = ([0.0], [0.0], [0.0]);
        adamw_update(&mut p, &[1.0], &mut m, &mut v, 0.1, 1.0, 1, cfg);
        adamw_update(&mut p, &[-1.0], &mut m, &mut v, 0.1, 1.0, 2, cfg);
        // m = 0.09 − 0.1 = −0.01, m̂ = −0.01 / 0.19; v = 0.001999, v̂ = 0.001999 / 0.001999 = 1.
        let second = 0.1 * (0.01 / 0.19) / (1.0 + 1e-8);
        assert_close(&p, &[-0.1 + second], 1e-5);
    }

    #[test]
    fn accumulate_and_sum_squares() {
        let mut acc = [1.0, 2.0];
        accumulate(&mut acc, &[3.0, -4.0], 0.5);
        assert_close(&acc, &[2.5, 0.0], 0.0);
        let mut total = [1.0];
        sum_squares(&[3.0, -4.0], &mut total);
        assert_close(&total, &[26.0], 0.0);
    }

    #[test]
    fn clip_coefficient_caps_at_one() {
        assert_close(&[clip_coefficient(25.0, 1.0)], &[0.2], 1e-6);
        assert_eq!(clip_coefficient(25.0, 10.0), 1.0);
        assert!(clip_coefficient(f32::NAN, 1.0).is_nan());
    }
}
