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
//!
//! The common case has a cheaper form ([`CheapForm`], which the DSP path runs in
//! assembly): with no left shift, a right shift of at least 1, a non-negative multiplier
//! and `|x| < 2^30`, the high product is the high word of `2x · m + 2^31` (`SMMULR`), lies
//! in `(−2^30, 2^30)`, and rounds half away from zero as
//! `(h + 2^(right − 1) + (h >> 31)) >> right` without overflow.

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

/// [`ChannelQuant`] in the cheap form (see the module docs).
#[cfg(any(test, dsp_simd))]
#[derive(Clone, Copy, Debug)]
pub struct CheapForm {
    pub multiplier: i32,
    pub right: u32,
    /// `2^(right − 1)`.
    pub half: i32,
    pub zero_point: i32,
    pub lo: i32,
    pub hi: i32,
}

/// [`CheapForm`] with the zero point folded into the rounding constant, for a start
/// `start` added to every accumulator `acc` with `|start + acc| < 2^30`:
/// `(SMMLAR(2·(start + acc), multiplier, constant) + sign(acc)) >> right`, clamped to
/// int8 and then to the bounds. `SMMLAR` yields `h + half + zp · 2^right` for the high
/// product `h`; adding the zero point before the shift moves the floor by exactly
/// `zp`. The sign correction takes the accumulator's sign, which is `h`'s wherever `h` is
/// not 0 (the multiplier is not negative) and changes nothing where `h` is 0 (`half − 1`
/// shifts to 0).
#[cfg(any(test, dsp_simd))]
#[derive(Clone, Copy, Debug)]
pub struct FoldedForm {
    /// `2 · start` (wrapping).
    pub start2: i32,
    pub multiplier: i32,
    /// `2^(right − 1) + zero_point · 2^right`, below `2^30` in magnitude so that no sum
    /// with the high product (also below `2^30`) overflows.
    pub constant: i32,
    pub right: u32,
    /// The activation bounds, or `None` for the full int8 range.
    pub bounds: Option<(i32, i32)>,
}

#[cfg(any(test, dsp_simd))]
impl FoldedForm {
    /// The folded form of `cheap`, where its constant stays below `2^30` in magnitude.
    pub fn new(cheap: &CheapForm, start: i32) -> Option<Self> {
        let constant = i64::from(cheap.half) + (i64::from(cheap.zero_point) << cheap.right);
        let bounds = match (cheap.lo, cheap.hi) {
            (-128, 127) => None,
            bounds => Some(bounds),
        };
        (constant.unsigned_abs() < 1 << 30).then(|| Self {
            start2: start.wrapping_mul(2),
            multiplier: cheap.multiplier,
            constant: constant as i32,
            right: cheap.right,
            bounds,
        })
    }
}

#[cfg(test)]
impl FoldedForm {
    /// The output for `acc` with `|start + acc| < 2^30`, as the DSP loop computes it.
    fn finish(&self, acc: i32) -> i8 {
        let doubled = self.start2.wrapping_add(acc.wrapping_mul(2));
        let product = i64::from(doubled) * i64::from(self.multiplier) + (1 << 31);
        let high = ((product >> 32) as i32).wrapping_add(self.constant);
        let value = high.wrapping_add(doubled >> 31) >> self.right;
        let value = value.clamp(-128, 127);
        let (lo, hi) = self.bounds.unwrap_or((-128, 127));
        value.max(lo).min(hi) as i8
    }
}

#[cfg(test)]
impl CheapForm {
    /// `finish(acc)` where `|acc| < 2^30`, as the DSP loop computes it; `None` for other
    /// accumulators.
    fn finish(&self, acc: i32) -> Option<i8> {
        let doubled = acc.checked_add(acc)?;
        let high = ((i64::from(doubled) * i64::from(self.multiplier) + (1 << 31)) >> 32) as i32;
        let scaled = (high + self.half + (high >> 31)) >> self.right;
        Some(scaled.saturating_add(self.zero_point).max(self.lo).min(self.hi) as i8)
    }
}

impl ChannelQuant {
    /// This channel in the cheap form, where its parameters allow it.
    #[cfg(any(test, dsp_simd))]
    pub fn cheap(&self) -> Option<CheapForm> {
        (self.left == 0 && self.right >= 1 && self.multiplier >= 0).then(|| CheapForm {
            multiplier: self.multiplier,
            right: self.right,
            half: 1 << (self.right - 1),
            zero_point: self.zero_point,
            lo: self.lo,
            hi: self.hi,
        })
    }

    /// `out[i] = finish(start + accs[i])` (wrapping), in portable Rust.
    pub fn finish_run(&self, start: i32, accs: &[i32], out: &mut [i8]) {
        for (value, &acc) in out.iter_mut().zip(accs) {
            *value = self.finish(start.wrapping_add(acc));
        }
    }

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

    /// All forms against the reference; returns whether the cheap form and the folded
    /// form applied.
    fn check(acc: i32, multiplier: i32, shift: i32, zero_point: i32, act: (i8, i8)) -> [bool; 2] {
        let multipliers = [Requantize { multiplier, shift }];
        let out = OutputQuant { multipliers: &multipliers, zero_point, act };
        let want = out.finish(0, acc);
        let what = format_args!(
            "acc {acc}, multiplier {multiplier}, shift {shift}, zp {zero_point}, {act:?}"
        );
        let quant = ChannelQuant::new(&out, 0);
        assert_eq!(quant.finish(acc), want, "{what}");
        let cheap = quant.cheap().and_then(|c| c.finish(acc));
        if let Some(got) = cheap {
            assert_eq!(got, want, "cheap form: {what}");
        }
        // The folded form, with the accumulator split between the start and the sum.
        let folded = quant.cheap().filter(|_| acc.unsigned_abs() < 1 << 30);
        let start = acc / 3;
        let folded = folded.and_then(|c| FoldedForm::new(&c, start));
        if let Some(folded) = folded {
            assert_eq!(folded.finish(acc - start), want, "folded form: {what}");
        }
        [cheap.is_some(), folded.is_some()]
    }

    #[test]
    fn matches_the_reference_at_the_corners() {
        let values = [
            i32::MIN,
            i32::MIN + 1,
            -(1 << 30) - 1,
            -(1 << 30),
            -(1 << 30) + 1,
            -3,
            -1,
            0,
            1,
            3,
            (1 << 30) - 1,
            1 << 30,
            i32::MAX,
        ];
        let mut applied = [0; 2];
        for acc in values {
            for multiplier in values {
                for shift in [i32::MIN, -40, -31, -30, -17, -1, 0, 1, 7, 29, 30, 31, i32::MAX] {
                    for zero_point in [i32::MIN, -128, 0, 127, i32::MAX] {
                        for act in [(-128, 127), (-20, 90)] {
                            let forms = check(acc, multiplier, shift, zero_point, act);
                            applied = [0, 1].map(|i| applied[i] + usize::from(forms[i]));
                        }
                    }
                }
            }
        }
        // The cheap and folded forms covered the corners they may take (not a vacuous
        // comparison).
        assert!(applied[0] > 1000 && applied[1] > 500, "{applied:?}");
    }

    #[test]
    fn matches_the_reference_on_random_inputs() {
        let mut rng = SplitMix::new(11);
        let mut applied = [0; 2];
        for _ in 0..300_000 {
            let acc = rng.next_u64() as i32 >> (rng.next_u64() % 32);
            let multiplier = match rng.next_u64() % 4 {
                0 => rng.next_u64() as i32,
                _ => (1 << 30) + (rng.next_u64() % (1 << 30)) as i32,
            };
            let shift = (rng.next_u64() % 64) as i32 - 32;
            let zero_point = (rng.next_u64() % 256) as i32 - 128;
            let (a, b) = (rng.next_u64() as i8, rng.next_u64() as i8);
            let forms = check(acc, multiplier, shift, zero_point, (a.min(b), a.max(b)));
            applied = [0, 1].map(|i| applied[i] + usize::from(forms[i]));
        }
        assert!(applied[0] > 100_000 && applied[1] > 50_000, "{applied:?}");
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
