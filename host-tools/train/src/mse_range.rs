//! The int8 range of a tensor that minimises its expected quantization error: the observed
//! range shrunk towards zero by the factor whose rounding and clipping error, summed over a
//! histogram of the values seen, is least. Clipping rare large values buys a finer step for
//! the many small ones.

use sprout_core::quant::QuantParams;

/// Candidate shrink factors: `1`, then steps of this size down to [`SMALLEST`].
const STEP: f64 = 0.01;
/// The smallest fraction of the observed range tried.
const SMALLEST: f64 = 0.2;

/// Of the ranges `(f · min, f · max)` for `f` from 1 down to [`SMALLEST`], the one whose
/// int8 quantization has the least squared error over the values counted in `histogram`
/// (equal-width bins spanning `[min, max]`, each value taken at its bin's centre). Values
/// inside a range err by a uniform rounding error (step² / 12); values outside it, by their
/// distance to its nearest end.
pub fn mse_range(min: f32, max: f32, histogram: &[u64]) -> (f32, f32) {
    let width = (f64::from(max) - f64::from(min)) / histogram.len().max(1) as f64;
    let centres = (0..histogram.len()).map(|i| f64::from(min) + (i as f64 + 0.5) * width);
    let counted: Vec<(f64, f64)> =
        centres.zip(histogram).filter(|(_, &n)| n > 0).map(|(c, &n)| (c, n as f64)).collect();
    let error = |lo: f32, hi: f32| -> f64 {
        let Ok(params) = QuantParams::from_min_max(lo, hi) else { return f64::INFINITY };
        let step = f64::from(params.scale);
        let (lo, hi) = (f64::from(lo.min(0.0)), f64::from(hi.max(0.0)));
        let each = |&(c, n): &(f64, f64)| n * (c.clamp(lo, hi) - c).powi(2).max(step * step / 12.0);
        counted.iter().map(each).sum()
    };
    let steps = ((1.0 - SMALLEST) / STEP).round() as usize;
    let candidates = (0..=steps).map(|k| 1.0 - k as f64 * STEP);
    let shrunk = |f: f64| ((f64::from(min) * f) as f32, (f64::from(max) * f) as f32);
    candidates
        .map(shrunk)
        .map(|(lo, hi)| (error(lo, hi), (lo, hi)))
        .fold((f64::INFINITY, (min, max)), |best, c| if c.0 < best.0 { c } else { best })
        .1
}

#[cfg(test)]
mod tests {
    use super::mse_range;

    /// A histogram of `bins` over `[min, max]` with `bulk` values spread evenly over
    /// `[min, max · share]` and one outlier at `max`.
    fn bulk_and_outlier(bins: usize, share: f64, bulk: u64) -> Vec<u64> {
        let mut h = vec![0u64; bins];
        let covered = (bins as f64 * share) as usize;
        h[..covered].iter_mut().for_each(|n| *n = bulk);
        h[bins - 1] = 1;
        h
    }

    #[test]
    fn a_rare_outlier_is_clipped_for_a_finer_step() {
        let h = bulk_and_outlier(2048, 0.25, 100_000);
        let (lo, hi) = mse_range(0.0, 8.0, &h);
        assert_eq!(lo, 0.0);
        assert!(hi > 1.9 && hi < 3.0, "the range ends near the bulk's end (2), not 8: {hi}");
    }

    #[test]
    fn values_spread_over_the_whole_range_keep_it() {
        let h = vec![1000u64; 2048];
        assert_eq!(mse_range(-3.0, 5.0, &h), (-3.0, 5.0));
    }

    #[test]
    fn a_heavy_tail_is_kept() {
        // Half the values at the far end: clipping them would cost more than rounding.
        let mut h = bulk_and_outlier(2048, 0.25, 100_000);
        h[2047] = 50_000_000;
        assert_eq!(mse_range(0.0, 8.0, &h), (0.0, 8.0));
    }
}
