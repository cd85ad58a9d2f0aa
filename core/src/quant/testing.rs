//! Exact integer references for the quantization tests, derived from gemmlowp's definitions
//! with `i128` rational arithmetic rather than from the kernels' own helpers.

use super::params::Requantize;

/// `num / den` rounded half away from zero, exactly, for `den > 0`.
pub(super) fn round_half_away(num: i128, den: i128) -> i128 {
    num.signum() * ((2 * num.abs() + den) / (2 * den))
}

/// `MultiplyByQuantizedMultiplier` as exact arithmetic: `x = acc · 2^left` wrapped to 32
/// bits; `h = floor((x · m + 2^30) / 2^31)` (the doubling high product rounded half
/// towards +∞), saturated to `i32`; result `h / 2^right` rounded half away from zero.
pub(super) fn exact_requantize(acc: i32, r: Requantize) -> i32 {
    let (left, right) = (r.shift.max(0), (-r.shift).max(0));
    let x = i128::from((i128::from(acc) << left) as i32);
    let high = (x * i128::from(r.multiplier) + (1 << 30)).div_euclid(1 << 31);
    let high = high.clamp(i128::from(i32::MIN), i128::from(i32::MAX));
    round_half_away(high, 1 << right) as i32
}
