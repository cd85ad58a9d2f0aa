//! Conversions between f32 and IEEE 754 half precision (f16), the storage format of f16
//! weights and activations: round to nearest (ties to even), ±inf beyond ±65504, NaN kept.

use super::activation::Rectifier;
use half::f16;

/// `y[i] = f16(x[i])`, rounded to nearest, ties to even. Magnitudes that round above 65504
/// (from 65520 on) become infinities of their sign; values below the smallest subnormal
/// (2^-24) round to zero or to it; NaN stays NaN.
pub fn cast_f32_to_f16(x: &[f32], y: &mut [f16]) {
    debug_assert_eq!(x.len(), y.len());
    for (y, &x) in y.iter_mut().zip(x) {
        *y = f16::from_f32(x);
    }
}

/// `y[i] = f32(x[i])`: exact (every f16, subnormals included, is an f32).
pub fn cast_f16_to_f32(x: &[f16], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x.to_f32();
    }
}

/// [`cast_f32_to_f16`] of `x` into `h`, then [`cast_f16_to_f32`] of `h` into `y`.
pub fn round_through_f16(x: &[f32], h: &mut [f16], y: &mut [f32]) {
    cast_f32_to_f16(x, h);
    cast_f16_to_f32(h, y);
}

/// [`round_through_f16`] with `y` written over `x`.
pub fn round_through_f16_in_place(x: &mut [f32], h: &mut [f16]) {
    cast_f32_to_f16(x, h);
    cast_f16_to_f32(h, x);
}

/// `y = rectifier(f32(f16(x)))` and its f16 copy `h = f16(y)` (exact: a rectifier of f16
/// values is one): a round trip through f16, the rectifier and the cast of its output.
pub fn rectify_through_f16(x: &[f32], y: &mut [f32], h: &mut [f16], rectifier: Rectifier) {
    round_through_f16(x, h, y);
    rectifier.rectify_in_place(y);
    cast_f32_to_f16(y, h);
}

/// [`rectify_through_f16`] with `y` written over `x`.
pub fn rectify_through_f16_in_place(x: &mut [f32], h: &mut [f16], rectifier: Rectifier) {
    round_through_f16_in_place(x, h);
    rectifier.rectify_in_place(x);
    cast_f32_to_f16(x, h);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_f16(x: f32) -> f16 {
        let mut y = [f16::ZERO];
        cast_f32_to_f16(&[x], &mut y);
        y[0]
    }

    fn round_trip(x: f32) -> f32 {
        let mut y = [0.0];
        cast_f16_to_f32(&[to_f16(x)], &mut y);
        y[0]
    }

    #[test]
    fn the_largest_half_survives_and_overflow_becomes_infinity() {
        assert_eq!(round_trip(65504.0), 65504.0);
        assert_eq!(round_trip(-65504.0), -65504.0);
        // 65519.99 is below the midpoint to the next (unrepresentable) step: it rounds down.
        assert_eq!(round_trip(65519.99), 65504.0);
        // 65520 is the midpoint: ties to even rounds to 2^16, which overflows.
        assert_eq!(round_trip(65520.0), f32::INFINITY);
        assert_eq!(round_trip(-65520.0), f32::NEG_INFINITY);
        assert_eq!(round_trip(1e9), f32::INFINITY);
        assert_eq!(round_trip(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn rounding_is_to_nearest_with_ties_to_even() {
        // Around 1, halves are 2^-10 apart: 1 + 2^-11 is a tie between 1 (even) and 1 + 2^-10.
        assert_eq!(round_trip(1.0 + 2f32.powi(-11)), 1.0);
        // 1 + 3·2^-11 ties between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
        assert_eq!(round_trip(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(round_trip(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 1.0 + 2f32.powi(-10));
        assert_eq!(to_f16(1.0).to_bits(), 0x3c00);
        assert_eq!(to_f16(-2.0).to_bits(), 0xc000);
    }

    #[test]
    fn subnormals_are_kept_and_tiny_values_flush_to_signed_zero() {
        let smallest = 2f32.powi(-24);
        assert_eq!(to_f16(smallest).to_bits(), 0x0001);
        assert_eq!(round_trip(smallest), smallest);
        assert_eq!(round_trip(3.0 * smallest), 3.0 * smallest);
        // The largest subnormal and the smallest normal.
        assert_eq!(to_f16(1023.0 * smallest).to_bits(), 0x03ff);
        assert_eq!(to_f16(2f32.powi(-14)).to_bits(), 0x0400);
        // Half the smallest subnormal is a tie with zero: it rounds to (even) zero.
        assert_eq!(round_trip(smallest / 2.0), 0.0);
        assert_eq!(to_f16(-smallest / 4.0).to_bits(), 0x8000);
        // Just above the tie rounds up to the smallest subnormal.
        assert_eq!(round_trip(smallest * 0.51), smallest);
    }

    #[test]
    fn nan_stays_nan() {
        assert!(to_f16(f32::NAN).is_nan());
        assert!(round_trip(f32::NAN).is_nan());
        assert!(round_trip(-f32::NAN).is_nan());
    }

    #[test]
    fn every_half_converts_to_f32_and_back_unchanged() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let mut wide = [0.0];
            cast_f16_to_f32(&[h], &mut wide);
            let mut back = [f16::ZERO];
            cast_f32_to_f16(&wide, &mut back);
            if h.is_nan() {
                assert!(back[0].is_nan());
            } else {
                assert_eq!(back[0].to_bits(), bits, "{bits:#06x}");
            }
        }
    }
}
