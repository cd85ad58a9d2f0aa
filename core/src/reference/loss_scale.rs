//! Dynamic loss scaling (PyTorch `GradScaler`): unscaling gradients while looking for
//! overflow, and moving the scale after each step.

use crate::hyperparams::LossScaleConfig;

/// `unscaled = g · (1 / scale)`; sets `found_inf[0]` to 1 when any value of `g` is NaN or
/// infinite (and leaves it alone otherwise, so one flag gathers every gradient).
pub fn unscale_gradient(g: &[f32], scale: f32, unscaled: &mut [f32], found_inf: &mut [f32]) {
    debug_assert_eq!(g.len(), unscaled.len());
    debug_assert_eq!(found_inf.len(), 1);
    let inverse = 1.0 / scale;
    let mut finite = true;
    for (u, &g) in unscaled.iter_mut().zip(g) {
        finite &= g.is_finite();
        *u = g * inverse;
    }
    if !finite {
        found_inf[0] = 1.0;
    }
}

/// `GradScaler.update`: after an overflow (`found_inf != 0`) the scale is multiplied by
/// `backoff` and the count of good steps restarts; otherwise the count grows, and when it
/// reaches `growth_interval` the scale is multiplied by `growth` (unless that overflows
/// f32) and the count restarts. Returns whether the optimizer step must be skipped.
pub fn update_loss_scale(
    found_inf: f32,
    scale: &mut f32,
    good_steps: &mut f32,
    cfg: LossScaleConfig,
) -> bool {
    if found_inf != 0.0 {
        *scale *= cfg.backoff;
        *good_steps = 0.0;
        return true;
    }
    let good = *good_steps + 1.0;
    if good >= cfg.growth_interval as f32 {
        let grown = *scale * cfg.growth;
        if grown.is_finite() {
            *scale = grown;
        }
        *good_steps = 0.0;
    } else {
        *good_steps = good;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: LossScaleConfig =
        LossScaleConfig { init_scale: 8.0, growth: 2.0, backoff: 0.5, growth_interval: 3 };

    #[test]
    fn unscaling_divides_and_flags_nan_and_infinity() {
        let mut out = [0.0; 3];
        let mut found = [0.0];
        unscale_gradient(&[8.0, -4.0, 1.0], 4.0, &mut out, &mut found);
        assert_eq!((out, found), ([2.0, -1.0, 0.25], [0.0]));
        unscale_gradient(&[1.0, f32::INFINITY, 2.0], 2.0, &mut out, &mut found);
        assert_eq!(found, [1.0]);
        // A later finite gradient does not clear the flag.
        unscale_gradient(&[1.0, 1.0, 1.0], 2.0, &mut out, &mut found);
        assert_eq!(found, [1.0]);
        let mut found = [0.0];
        unscale_gradient(&[f32::NAN, 0.0, 0.0], 2.0, &mut out, &mut found);
        assert_eq!(found, [1.0]);
    }

    #[test]
    fn the_scale_halves_on_overflow_and_doubles_after_the_interval() {
        let (mut scale, mut good) = (8.0, 0.0);
        assert!(!update_loss_scale(0.0, &mut scale, &mut good, CFG));
        assert!(!update_loss_scale(0.0, &mut scale, &mut good, CFG));
        assert_eq!((scale, good), (8.0, 2.0));
        assert!(update_loss_scale(1.0, &mut scale, &mut good, CFG));
        assert_eq!((scale, good), (4.0, 0.0));
        for _ in 0..2 {
            update_loss_scale(0.0, &mut scale, &mut good, CFG);
        }
        assert_eq!(scale, 4.0);
        update_loss_scale(0.0, &mut scale, &mut good, CFG);
        assert_eq!((scale, good), (8.0, 0.0));
    }

    #[test]
    fn growth_stops_short_of_infinity() {
        let (mut scale, mut good) = (f32::MAX, 2.0);
        update_loss_scale(0.0, &mut scale, &mut good, CFG);
        assert_eq!((scale, good), (f32::MAX, 0.0));
    }
}
