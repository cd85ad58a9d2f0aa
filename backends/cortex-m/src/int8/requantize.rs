//! Requantization of one output channel with its parameters decoded once: the exact
//! result of [`OutputQuant::finish`] in about 20 instructions per output instead of 55,
//! which matters where an output has few multiply-accumulates (pointwise, depthwise).
//!
//! The reference's steps, rewritten without 64-bit division or per-output parameter
//! decoding: gemmlowp's `SaturatingRoundingDoublingHighMul` is `(x · m + 2^30) >> 31`
//! (floor) for every product — adding the nudge `1 − 2^30` to a negative product and
//! truncating towards zero lands on the same integer — and saturates only for
//! `i32::MIN · i32::MIN`; `RoundingDivideByPOT` keeps its mask-and-threshold form with the
//! mask precomputed.

use sprout_core::quant::OutputQuant;

/// The requantization of one output channel, ready to apply.
#[derive(Clone, Copy, Debug)]
pub struct ChannelQuant {
    multiplier: i32,
    /// `max(shift, 0)`: the accumulator is multiplied by `2^left` (wrapping).
    left: u32,
    /// `max(−shift, 0)`: the rounded division's exponent.
    right: u32,
    /// `2^right − 1`.
    mask: i32,
    zero_point: i32,
    lo: i32,
    hi: i32,
}

impl ChannelQuant {
    /// Channel `channel` of `out`.
    pub fn new(out: &OutputQuant<'_>, channel: usize) -> Self {
        let r = out.multipliers[channel];
        let shift = r.shift.clamp(-31, 30);
        let right = shift.min(0).unsigned_abs();
        Self {
            multiplier: r.multiplier,
            left: shift.max(0) as u32,
            right,
            mask: (1u32 << right).wrapping_sub(1) as i32,
            zero_point: out.zero_point,
            lo: i32::from(out.act.0),
            hi: i32::from(out.act.1),
        }
    }

    /// `out.finish(channel, acc)`, bit for bit (where the reference's bounds are ordered;
    /// inverted bounds, which make the reference panic, yield the upper bound here).
    #[inline(always)]
    pub fn finish(&self, acc: i32) -> i8 {
        let x = acc.wrapping_shl(self.left);
        let high = match x == i32::MIN && self.multiplier == i32::MIN {
            true => i32::MAX,
            false => ((i64::from(x) * i64::from(self.multiplier) + (1 << 30)) >> 31) as i32,
        };
        let remainder = high & self.mask;
        let threshold = (self.mask >> 1) + (high >> 31 & 1);
        let scaled = (high >> self.right) + i32::from(remainder > threshold);
        scaled.saturating_add(self.zero_point).max(self.lo).min(self.hi) as i8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::quant::Requantize;
    use sprout_core::rng::SplitMix;

    fn check(acc: i32, multiplier: i32, shift: i32, zero_point: i32, act: (i8, i8)) {
        let multipliers = [Requantize { multiplier, shift }];
        let out = OutputQuant { multipliers: &multipliers, zero_point, act };
        assert_eq!(
            ChannelQuant::new(&out, 0).finish(acc),
            out.finish(0, acc),
            "acc {acc}, multiplier {multiplier}, shift {shift}, zero point {zero_point}, {act:?}"
        );
    }

    #[test]
    fn matches_the_reference_at_the_corners() {
        let values = [i32::MIN, i32::MIN + 1, -(1 << 30), -3, -1, 0, 1, 3, 1 << 30, i32::MAX];
        for acc in values {
            for multiplier in values {
                for shift in [i32::MIN, -40, -31, -30, -17, -1, 0, 1, 7, 29, 30, 31, i32::MAX] {
                    for zero_point in [i32::MIN, -128, 0, 127, i32::MAX] {
                        check(acc, multiplier, shift, zero_point, (-128, 127));
                        check(acc, multiplier, shift, zero_point, (-20, 90));
                    }
                }
            }
        }
    }

    #[test]
    fn matches_the_reference_on_random_inputs() {
        let mut rng = SplitMix::new(11);
        for _ in 0..300_000 {
            let acc = rng.next_u64() as i32 >> (rng.next_u64() % 32);
            let multiplier = match rng.next_u64() % 4 {
                0 => rng.next_u64() as i32,
                _ => (1 << 30) + (rng.next_u64() % (1 << 30)) as i32,
            };
            let shift = (rng.next_u64() % 64) as i32 - 32;
            let zero_point = (rng.next_u64() % 256) as i32 - 128;
            let (a, b) = (rng.next_u64() as i8, rng.next_u64() as i8);
            check(acc, multiplier, shift, zero_point, (a.min(b), a.max(b)));
        }
    }

    #[test]
    fn rounds_ties_away_from_zero() {
        // 0.5 · 2^-1 = 0.25: 6 → 1.5 → 2 and −6 → −1.5 → −2.
        let multipliers = [Requantize { multiplier: 1 << 30, shift: -1 }];
        let out = OutputQuant { multipliers: &multipliers, zero_point: 0, act: (-128, 127) };
        let q = ChannelQuant::new(&out, 0);
        assert_eq!([6, -6, 2, -2, 10].map(|a| q.finish(a)), [2, -2, 1, -1, 3]);
    }
}
