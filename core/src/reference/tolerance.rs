//! How far an optimised backend's f32 output may stray from the reference kernels': the
//! rule the shared conformance suite (`sprout-tests`) and the backends' own no_std checks
//! (such as the Cortex-M one, which runs on the device) both apply.

/// `|got − want| <= abs + rel · |want|`, or equal bits (which also accepts matching NaNs
/// and infinities).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub abs: f32,
    pub rel: f32,
}

/// Bit-for-bit equality.
pub const EXACT: Tolerance = Tolerance { abs: 0.0, rel: 0.0 };

/// Kernels that sum in a backend-chosen order: f32 addition in another order errs by about
/// `terms · 2⁻²⁴` relative to the sum of magnitudes, under 1e-5 for a few hundred terms,
/// and the absolute part covers sums that cancel to near zero.
pub const REDUCTION: Tolerance = Tolerance { abs: 1e-5, rel: 1e-4 };

impl Tolerance {
    /// Whether `got` is close enough to the reference's `want`.
    pub fn accepts(self, got: f32, want: f32) -> bool {
        got.to_bits() == want.to_bits() || (got - want).abs() <= self.abs + self.rel * want.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_may_stray_by_the_stated_amount_and_exact_by_nothing() {
        assert!(REDUCTION.accepts(100.0 + 0.009, 100.0));
        assert!(!REDUCTION.accepts(100.0 + 0.02, 100.0));
        assert!(REDUCTION.accepts(5e-6, 0.0) && !REDUCTION.accepts(2e-5, 0.0));
        assert!(EXACT.accepts(f32::NAN, f32::NAN) && EXACT.accepts(1.5, 1.5));
        assert!(!EXACT.accepts(1.0 + f32::EPSILON, 1.0));
    }
}
