//! Quantization parameters in TensorFlow Lite's int8 scheme: per-tensor asymmetric
//! activations, per-channel symmetric weights and the fixed-point requantization multiplier.

use core::fmt;

/// Clamp bounds that leave every int8 value alone (no fused activation).
pub const FULL_RANGE: (i8, i8) = (i8::MIN, i8::MAX);

/// The range of symmetric weights: −128 is never used, so `−q` is always representable.
const WEIGHT_RANGE: (i8, i8) = (-i8::MAX, i8::MAX);

/// Why quantization parameters cannot be built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantError {
    /// A range bound (`what` is `"min"` or `"max"`) is NaN or infinite.
    NonFinite { what: &'static str, value: f32 },
    /// The range's minimum exceeds its maximum.
    InvertedRange { min: f32, max: f32 },
    /// A scale is not a positive, finite, normal-sized number.
    InvalidScale(f32),
    /// A zero point lies outside `-128..=127`.
    ZeroPointOutOfRange(i32),
    /// A real multiplier is negative, not finite, or at least 2^30 (shift above 30).
    InvalidMultiplier(f64),
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NonFinite { what, value } => {
                write!(f, "quantization range {what} must be finite, got {value}")
            }
            Self::InvertedRange { min, max } => {
                write!(f, "quantization range is inverted: min {min} > max {max}")
            }
            Self::InvalidScale(s) => write!(f, "scale must be positive and finite, got {s}"),
            Self::ZeroPointOutOfRange(z) => {
                write!(f, "int8 zero point must lie in -128..=127, got {z}")
            }
            Self::InvalidMultiplier(m) => {
                write!(f, "requantization multiplier must lie in [0, 2^30), got {m}")
            }
        }
    }
}

impl core::error::Error for QuantError {}

/// `x` rounded half away from zero (C's `round`, TFLite's `TfLiteRound`); saturates at the
/// `i32` limits, NaN becomes 0.
fn round_to_i32(x: f32) -> i32 {
    libm::roundf(x) as i32
}

/// `value` clamped to `[lo, hi]`.
pub(super) fn clamp_to(value: i32, (lo, hi): (i8, i8)) -> i8 {
    value.clamp(i32::from(lo), i32::from(hi)) as i8
}

/// Per-tensor asymmetric int8 parameters: `real = scale · (q − zero_point)`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QuantParams {
    pub scale: f32,
    pub zero_point: i32,
}

impl QuantParams {
    /// Checks that `scale` is positive and finite and `zero_point` fits int8.
    pub fn new(scale: f32, zero_point: i32) -> Result<Self, QuantError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(QuantError::InvalidScale(scale));
        }
        if !(-128..=127).contains(&zero_point) {
            return Err(QuantError::ZeroPointOutOfRange(zero_point));
        }
        Ok(Self { scale, zero_point })
    }

    /// Parameters covering `[min, max]`, first widened to include 0 so that zero is exact:
    /// `scale = (max − min) / 255`, `zero_point = round(−128 − min / scale)` (clamped).
    /// The point range `[0, 0]` gets scale 1 and zero point 0.
    pub fn from_min_max(min: f32, max: f32) -> Result<Self, QuantError> {
        for (what, value) in [("min", min), ("max", max)] {
            if !value.is_finite() {
                return Err(QuantError::NonFinite { what, value });
            }
        }
        if min > max {
            return Err(QuantError::InvertedRange { min, max });
        }
        let (min, max) = (min.min(0.0), max.max(0.0));
        if min == max {
            return Ok(Self { scale: 1.0, zero_point: 0 });
        }
        let scale = (max - min) / 255.0;
        Self::new(scale, round_to_i32(-128.0 - min / scale).clamp(-128, 127))
    }

    /// `round(x / scale) + zero_point` (half away from zero), saturated to int8; NaN maps
    /// to the zero point.
    pub fn quantize(&self, x: f32) -> i8 {
        clamp_to(round_to_i32(x / self.scale).saturating_add(self.zero_point), FULL_RANGE)
    }

    /// `scale · (q − zero_point)`.
    pub fn dequantize(&self, q: i8) -> f32 {
        self.scale * (i32::from(q) - self.zero_point) as f32
    }

    /// Fused-ReLU clamp bounds: `[quantize(0), 127]`.
    pub fn relu_bounds(&self) -> (i8, i8) {
        (self.quantize(0.0), i8::MAX)
    }

    /// Fused-ReLU6 clamp bounds: `[quantize(0), quantize(6)]`.
    pub fn relu6_bounds(&self) -> (i8, i8) {
        (self.quantize(0.0), self.quantize(6.0))
    }
}

/// The scale of one channel of symmetric int8 weights whose largest magnitude is `max_abs`:
/// `max_abs / 127`, never below `f32::MIN_POSITIVE` (an all-zero channel stays usable).
pub fn symmetric_scale(max_abs: f32) -> f32 {
    (max_abs / 127.0).max(f32::MIN_POSITIVE)
}

/// A symmetric weight: `round(x / scale)` (half away from zero) saturated to `-127..=127`.
pub fn quantize_weight(x: f32, scale: f32) -> i8 {
    clamp_to(round_to_i32(x / scale), WEIGHT_RANGE)
}

/// Quantizes one channel of weights symmetrically into `out` and returns its scale.
pub fn quantize_symmetric(w: &[f32], out: &mut [i8]) -> f32 {
    debug_assert_eq!(w.len(), out.len());
    let scale = symmetric_scale(w.iter().fold(0.0, |m, &x| libm::fabsf(x).max(m)));
    for (q, &x) in out.iter_mut().zip(w) {
        *q = quantize_weight(x, scale);
    }
    scale
}

/// A real multiplier `m ≈ multiplier · 2^(shift − 31)` in TFLite's fixed-point form:
/// `multiplier` in `[2^30, 2^31)` (or 0 for `m = 0`) and `shift` in `-31..=30`.
///
/// Plans store one per output channel in an `i32` tensor of `[multiplier, shift]` pairs,
/// which is this type's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(C)]
pub struct Requantize {
    pub multiplier: i32,
    pub shift: i32,
}

impl Requantize {
    /// TFLite's `QuantizeMultiplier`: `m = q · 2^shift` with `q` in `[0.5, 1)` (frexp),
    /// `multiplier = round(q · 2^31)` (moving to `2^30` and `shift + 1` when it rounds up to
    /// 2^31). Multipliers below about 2^-32 flush to zero; negative, non-finite or
    /// `m ≥ 2^30` values are rejected.
    pub fn new(m: f64) -> Result<Self, QuantError> {
        if !(m.is_finite() && m >= 0.0) {
            return Err(QuantError::InvalidMultiplier(m));
        }
        let zero = Self { multiplier: 0, shift: 0 };
        if m == 0.0 {
            return Ok(zero);
        }
        let (q, mut shift) = libm::frexp(m);
        let mut q_fixed = libm::round(q * (1u64 << 31) as f64) as i64;
        if q_fixed == 1 << 31 {
            q_fixed /= 2;
            shift += 1;
        }
        match shift {
            ..-31 => Ok(zero),
            31.. => Err(QuantError::InvalidMultiplier(m)),
            _ => Ok(Self { multiplier: q_fixed as i32, shift }),
        }
    }

    /// The multiplier of a convolution or dense output channel, computed in `f64` as TFLite
    /// does: `input_scale · weight_scale / output_scale`.
    pub fn from_scales(
        input_scale: f32,
        weight_scale: f32,
        output_scale: f32,
    ) -> Result<Self, QuantError> {
        Self::new(f64::from(input_scale) * f64::from(weight_scale) / f64::from(output_scale))
    }

    /// The real multiplier this represents: `multiplier · 2^(shift − 31)`.
    pub fn real(&self) -> f64 {
        f64::from(self.multiplier) * libm::exp2(f64::from(self.shift - 31))
    }

    /// TFLite's `MultiplyByQuantizedMultiplier` (gemmlowp semantics):
    /// `RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc · 2^left, multiplier),
    /// right)` with `left = max(shift, 0)`, `right = max(−shift, 0)`. `acc · 2^left` wraps
    /// in two's complement, as the `int32` product does on every target TFLite runs on.
    /// A shift outside `-31..=30` (only a corrupt plan holds one) is clamped into it.
    pub fn apply(&self, acc: i32) -> i32 {
        let shift = self.shift.clamp(-31, 30);
        let left = shift.max(0) as u32;
        let right = shift.min(0).unsigned_abs();
        let high =
            saturating_rounding_doubling_high_mul(acc.wrapping_mul(1 << left), self.multiplier);
        rounding_divide_by_pot(high, right)
    }
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: the high 32 bits of `2 · a · b`, rounded
/// by a nudge of ±2^30 and truncating division; `i32::MIN · i32::MIN` saturates to `i32::MAX`.
fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    ((ab + nudge) / (1 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded half away from zero, for
/// `exponent` in `0..=31`.
fn rounding_divide_by_pot(x: i32, exponent: u32) -> i32 {
    // `2^exponent − 1` in 32 bits (exponent ≤ 31), without a 64-bit shift.
    let mask = (1u32 << exponent).wrapping_sub(1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> exponent) + i32::from(remainder > threshold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::testing::exact_requantize;
    use crate::rng::SplitMix;

    #[test]
    fn requantize_matches_exact_reference_on_random_triples() {
        let mut rng = SplitMix::new(1);
        for _ in 0..200_000 {
            let acc = rng.next_u64() as i32 >> (rng.next_u64() % 32);
            let multiplier = rng.next_u64() as i32;
            let shift = (rng.next_u64() % 62) as i32 - 31;
            let r = Requantize { multiplier, shift };
            assert_eq!(r.apply(acc), exact_requantize(acc, r), "acc {acc}, {r:?}");
        }
    }

    #[test]
    fn requantize_matches_exact_reference_at_the_corners() {
        let values = [i32::MIN, i32::MIN + 1, -(1 << 30), -3, -1, 0, 1, 3, 1 << 30, i32::MAX];
        for acc in values {
            for multiplier in values {
                for shift in -31..=30 {
                    let r = Requantize { multiplier, shift };
                    assert_eq!(r.apply(acc), exact_requantize(acc, r), "acc {acc}, {r:?}");
                }
            }
        }
        // The one product that does not fit: (−1) · (−1) in Q31 saturates.
        assert_eq!(Requantize { multiplier: i32::MIN, shift: 0 }.apply(i32::MIN), i32::MAX);
    }

    #[test]
    fn requantize_rounds_ties_away_from_zero() {
        // 0.5 · 2^-1 = 0.25: 6 → 1.5 → 2 and −6 → −1.5 → −2.
        let quarter = Requantize { multiplier: 1 << 30, shift: -1 };
        assert_eq!([6, -6, 2, -2, 10].map(|a| quarter.apply(a)), [2, -2, 1, -1, 3]);
    }

    #[test]
    fn quantize_multiplier_round_trips() {
        let mut rng = SplitMix::new(2);
        for _ in 0..10_000 {
            let m = libm::exp2(f64::from(rng.uniform(-30.0, 29.9)));
            let r = Requantize::new(m).unwrap();
            assert!((1 << 30..=i32::MAX).contains(&r.multiplier), "{m}: {r:?}");
            assert!(libm::fabs(r.real() - m) <= m * libm::exp2(-31.0), "{m}: {r:?}");
        }
        assert_eq!(Requantize::new(1.0), Ok(Requantize { multiplier: 1 << 30, shift: 1 }));
        assert_eq!(Requantize::new(0.0), Ok(Requantize { multiplier: 0, shift: 0 }));
        assert_eq!(Requantize::new(1e-12), Ok(Requantize { multiplier: 0, shift: 0 }));
        // q · 2^31 rounds up to 2^31: the multiplier moves to 2^30 with one more shift.
        let almost_one = 1.0 - libm::exp2(-40.0);
        assert_eq!(Requantize::new(almost_one), Ok(Requantize { multiplier: 1 << 30, shift: 1 }));
        for bad in [-0.5, f64::NAN, f64::INFINITY, libm::exp2(30.0)] {
            assert!(matches!(Requantize::new(bad), Err(QuantError::InvalidMultiplier(_))));
        }
    }

    #[test]
    fn quantize_dequantize_round_trip_within_half_a_step() {
        let p = QuantParams::from_min_max(-1.5, 4.0).unwrap();
        let mut rng = SplitMix::new(3);
        for _ in 0..10_000 {
            let x = rng.uniform(-1.5, 4.0);
            let error = libm::fabsf(p.dequantize(p.quantize(x)) - x);
            assert!(error <= p.scale * (0.5 + 1e-4), "{x}: error {error}");
        }
    }

    #[test]
    fn quantize_rounds_ties_away_from_zero_and_saturates() {
        let p = QuantParams::new(0.5, 10).unwrap();
        assert_eq!([1.25, -1.25, 0.25, -0.25].map(|x| p.quantize(x)), [13, 7, 11, 9]);
        assert_eq!(
            [1e9, -1e9, f32::INFINITY, f32::NAN].map(|x| p.quantize(x)),
            [127, -128, 127, 10]
        );
        assert_eq!([58.5, -69.0].map(|x| p.quantize(x)), [127, -128]);
        assert_eq!(p.dequantize(-128), -69.0);
    }

    #[test]
    fn from_min_max_nudges_the_range_to_include_zero() {
        let p = QuantParams::from_min_max(-1.0, 1.0).unwrap();
        assert_eq!((p.scale, p.zero_point), (2.0 / 255.0, -1)); // −128 + 127.5 rounds away
        assert_eq!(p.quantize(0.0), -1);
        assert_eq!(QuantParams::from_min_max(0.5, 2.55).unwrap().zero_point, -128);
        assert_eq!(QuantParams::from_min_max(-3.0, -1.0).unwrap().zero_point, 127);
        assert_eq!(
            QuantParams::from_min_max(0.0, 0.0),
            Ok(QuantParams { scale: 1.0, zero_point: 0 })
        );
        let p = QuantParams::from_min_max(-2.0, 6.0).unwrap();
        assert_eq!((p.relu_bounds(), p.relu6_bounds()), ((-64, 127), (-64, 127)));
        // zero point round(−128 + 42.5) = −86; 6 is 127.5 steps above zero, rounded to 128.
        assert_eq!(QuantParams::from_min_max(-2.0, 10.0).unwrap().relu6_bounds(), (-86, 42));
    }

    fn message(err: QuantError) -> heapless::String<96> {
        let mut s = heapless::String::new();
        core::fmt::Write::write_fmt(&mut s, format_args!("{err}")).unwrap();
        s
    }

    #[test]
    fn bad_parameters_name_the_offending_value() {
        let err = QuantParams::from_min_max(f32::NAN, 1.0).unwrap_err();
        assert_eq!(message(err), "quantization range min must be finite, got NaN");
        let err = QuantParams::from_min_max(2.0, 1.0).unwrap_err();
        assert_eq!(err, QuantError::InvertedRange { min: 2.0, max: 1.0 });
        assert_eq!(QuantParams::new(0.0, 0), Err(QuantError::InvalidScale(0.0)));
        let err = QuantParams::new(1.0, 128).unwrap_err();
        assert!(message(err).contains("128"), "{err}");
    }

    #[test]
    fn symmetric_weights_use_127_steps_per_side() {
        let mut q = [0i8; 4];
        let scale = quantize_symmetric(&[-2.54, 1.27, 0.01, 0.03], &mut q);
        assert_eq!((scale, q), (0.02, [-127, 64, 1, 2]));
        assert_eq!(quantize_weight(-1e9, 1.0), -127);
        assert!(symmetric_scale(0.0) > 0.0);
        assert_eq!(quantize_symmetric(&[0.0; 4], &mut q), f32::MIN_POSITIVE);
        assert_eq!(q, [0; 4]);
    }
}
