//! AdamW as one vector loop: the reference's per-parameter update
//! ([`AdamWStep::apply`], inlined) with the hardware's square root, which is correctly
//! rounded like the reference's `libm::sqrtf`, so the results are the reference's bit for bit;
//! the reference calls `sqrtf` once per parameter and does not vectorize.

use sprout_core::reference::AdamWStep;

#[inline(always)]
fn adamw_generic(param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32], k: AdamWStep) {
    assert!(grad.len() == param.len() && m.len() == param.len() && v.len() == param.len());
    for (((p, &g), m), v) in param.iter_mut().zip(grad).zip(m).zip(v) {
        k.apply(p, g, m, v, f32::sqrt);
    }
}

multiversion!(pub adamw = adamw_generic(param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32], k: AdamWStep));

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::hyperparams::AdamWConfig;
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    #[test]
    fn updates_match_the_reference_bit_for_bit() {
        let mut rng = SplitMix::new(3);
        let mut random = |len: usize, scale: f32| -> Vec<f32> {
            (0..len).map(|_| scale * rng.uniform(-1.0, 1.0)).collect()
        };
        let cfg = AdamWConfig { weight_decay: 0.01, ..AdamWConfig::default() };
        // A length with a vector tail, gradients from tiny to large, several steps.
        let len = 1000 + 13;
        let (mut p, mut m, mut v) = (random(len, 1.0), vec![0.0; len], vec![0.0; len]);
        let (mut p_ref, mut m_ref, mut v_ref) = (p.clone(), m.clone(), v.clone());
        for step in 1..=4 {
            let g = random(len, 10f32.powi(step - 3));
            let (lr, scale) = (0.001 * step as f32, 0.5 + 0.25 * step as f32);
            adamw(&mut p, &g, &mut m, &mut v, AdamWStep::new(lr, scale, step as u32, cfg));
            r::adamw_update(&mut p_ref, &g, &mut m_ref, &mut v_ref, lr, scale, step as u32, cfg);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&p), bits(&p_ref), "parameters after step {step}");
            assert_eq!(bits(&m), bits(&m_ref), "first moments after step {step}");
            assert_eq!(bits(&v), bits(&v_ref), "second moments after step {step}");
        }
    }
}
