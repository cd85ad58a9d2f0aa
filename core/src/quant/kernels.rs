//! Int8 reference kernels: convolution, dense, add, product, concatenation, pooling, clamps
//! and look-up tables over quantized tensors, with `i32` accumulation and TFLite's
//! fixed-point requantization.
//!
//! Accumulators wrap like the `int32` registers they model; for int8 data that cannot happen
//! below 2^16 multiply-accumulates per output. Pooling and clamps keep the input's
//! quantization parameters, as TFLite requires of them.

use super::params::{clamp_to, QuantError, QuantParams, Requantize, FULL_RANGE};
use crate::geometry::{ChannelDims, ConcatDims, Conv2dGeometry, LinearDims, Pool2dGeometry};
use crate::memory::{Host, Memory};
use crate::reference::layout::input_coord;

/// How accumulators of a convolution or dense layer become int8 outputs: per output channel
/// `clamp(multipliers[c].apply(acc) + zero_point, act.0, act.1)`. Generic over where the
/// multipliers live ([`OutputQuant`] on the host).
#[derive(Clone, Copy, Debug)]
pub struct Requantization<'a, M: Memory> {
    /// One multiplier per output channel (`input_scale · weight_scale[c] / output_scale`).
    pub multipliers: M::Slice<'a, Requantize>,
    /// The output's zero point.
    pub zero_point: i32,
    /// Fused activation bounds: [`FULL_RANGE`](super::FULL_RANGE),
    /// [`QuantParams::relu_bounds`] or [`QuantParams::relu6_bounds`].
    pub act: (i8, i8),
}

/// [`Requantization`] with its multipliers in host memory.
pub type OutputQuant<'a> = Requantization<'a, Host>;

/// Everything an int8 convolution or dense layer reads: the input with its zero point,
/// the weights, the bias (in units of `input_scale · weight_scale[c]`), the output's
/// requantization, and the layer's shape ([`Conv2dGeometry`] or [`LinearDims`]).
#[derive(Clone, Copy)]
pub struct QLayerArgs<'a, S, M: Memory> {
    pub x: M::Slice<'a, i8>,
    pub x_zero_point: i32,
    pub weights: M::Slice<'a, i8>,
    pub bias: Option<M::Slice<'a, i32>>,
    pub out: Requantization<'a, M>,
    pub shape: S,
}

/// An int8 convolution's arguments in host memory.
pub type QConv2dArgs<'a> = QLayerArgs<'a, Conv2dGeometry, Host>;
/// An int8 dense layer's arguments in host memory.
pub type QLinearArgs<'a> = QLayerArgs<'a, LinearDims, Host>;

impl OutputQuant<'_> {
    /// The int8 output of output channel `channel` for accumulator `acc`. Public so that
    /// optimized kernels finish their accumulators exactly as the reference does.
    pub fn finish(&self, channel: usize, acc: i32) -> i8 {
        clamp_to(self.multipliers[channel].apply(acc).saturating_add(self.zero_point), self.act)
    }
}

/// One multiply-accumulate with the input's zero point removed: `acc + (x − x_zp) · w`.
fn mac(acc: i32, x: i8, x_zp: i32, w: i8) -> i32 {
    acc.wrapping_add((i32::from(x) - x_zp) * i32::from(w))
}

/// A sliding window over one `h × w` plane.
#[derive(Clone, Copy)]
struct Window {
    kh: usize,
    kw: usize,
    stride: (usize, usize),
    padding: (usize, usize),
    h: usize,
    w: usize,
}

impl Window {
    /// `(kernel offset, plane offset)` of every in-bounds tap of output `(oy, ox)`, in
    /// row-major kernel order.
    fn taps(self, oy: usize, ox: usize) -> impl Iterator<Item = (usize, usize)> {
        (0..self.kh)
            .filter_map(move |ky| {
                input_coord(oy, ky, self.stride.0, self.padding.0, self.h).map(|iy| (ky, iy))
            })
            .flat_map(move |(ky, iy)| {
                (0..self.kw).filter_map(move |kx| {
                    input_coord(ox, kx, self.stride.1, self.padding.1, self.w)
                        .map(|ix| (ky * self.kw + kx, iy * self.w + ix))
                })
            })
    }
}

/// Every output position `(oy, ox)` of an `out_h × out_w` plane, in memory order.
fn positions(out_h: usize, out_w: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..out_h).flat_map(move |oy| (0..out_w).map(move |ox| (oy, ox)))
}

/// `y[n, c_out, out_h, out_w]` = int8 convolution of `x[n, c_in, h, w]` (zero point `x_zp`)
/// with symmetric `w[c_out, c_in / groups, kh, kw]` plus `bias[c_out]`, requantized per output channel. Padding holds `x_zp`,
/// i.e. real zero, so it contributes nothing.
pub fn conv2d_s8(a: &QConv2dArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref g } = *a;
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(w.len(), g.weight_len());
    debug_assert_eq!(y.len(), g.output_len());
    debug_assert_eq!(out.multipliers.len(), g.c_out);
    let window =
        Window { kh: g.kh, kw: g.kw, stride: g.stride, padding: g.padding, h: g.h, w: g.w };
    let (c_in_per_group, x_plane, w_plane) = (g.c_in_per_group(), g.h * g.w, g.kh * g.kw);
    for (plane, y_plane) in y.chunks_exact_mut(g.out_h * g.out_w).enumerate() {
        let (n, oc) = (plane / g.c_out, plane % g.c_out);
        let first_input = n * g.c_in + oc / g.c_out_per_group() * c_in_per_group;
        for (out_value, (oy, ox)) in y_plane.iter_mut().zip(positions(g.out_h, g.out_w)) {
            let mut acc = bias.map_or(0, |b| b[oc]);
            for icg in 0..c_in_per_group {
                let xs = &x[(first_input + icg) * x_plane..][..x_plane];
                let ws = &w[(oc * c_in_per_group + icg) * w_plane..][..w_plane];
                acc = window.taps(oy, ox).fold(acc, |acc, (k, i)| mac(acc, xs[i], x_zp, ws[k]));
            }
            *out_value = out.finish(oc, acc);
        }
    }
}

/// `y[n, m]` = int8 `x[n, k] · w[m, k]ᵀ + bias[m]` with `x`'s zero point removed,
/// requantized per output feature.
pub fn linear_s8(a: &QLinearArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref d } = *a;
    debug_assert_eq!(x.len(), d.n * d.k);
    debug_assert_eq!(w.len(), d.m * d.k);
    debug_assert_eq!(y.len(), d.n * d.m);
    debug_assert_eq!(out.multipliers.len(), d.m);
    for (x_row, y_row) in x.chunks_exact(d.k).zip(y.chunks_exact_mut(d.m)) {
        for (m, (out_value, w_row)) in y_row.iter_mut().zip(w.chunks_exact(d.k)).enumerate() {
            let acc = bias.map_or(0, |b| b[m]);
            let acc = x_row.iter().zip(w_row).fold(acc, |acc, (&x, &w)| mac(acc, x, x_zp, w));
            *out_value = out.finish(m, acc);
        }
    }
}

/// The left shift TFLite gives int8 add operands before rescaling them.
const ADD_LEFT_SHIFT: u32 = 20;

/// TFLite's int8 add rescaling, computed once per tensor triple (TFLite's `Prepare`).
///
/// With `s = 2 · max(a.scale, b.scale)`, each operand becomes
/// `Requantize(a.scale / s).apply((q − a_zp) · 2^20)` (so both share the scale `s / 2^20`),
/// their sum becomes `Requantize(s / (2^20 · y.scale)).apply(sum) + y_zp`, clamped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AddRescale {
    a: Requantize,
    b: Requantize,
    out: Requantize,
    a_zp: i32,
    b_zp: i32,
    y_zp: i32,
}

impl AddRescale {
    /// The rescaling for `y = a + b`; every parameter set must pass [`QuantParams::new`].
    pub fn new(a: QuantParams, b: QuantParams, y: QuantParams) -> Result<Self, QuantError> {
        for p in [a, b, y] {
            QuantParams::new(p.scale, p.zero_point)?;
        }
        let twice_max = 2.0 * f64::from(a.scale.max(b.scale));
        let out_scale = f64::from(1u32 << ADD_LEFT_SHIFT) * f64::from(y.scale);
        Ok(Self {
            a: Requantize::new(f64::from(a.scale) / twice_max)?,
            b: Requantize::new(f64::from(b.scale) / twice_max)?,
            out: Requantize::new(twice_max / out_scale)?,
            a_zp: a.zero_point,
            b_zp: b.zero_point,
            y_zp: y.zero_point,
        })
    }

    fn add(&self, a: i8, b: i8, act: (i8, i8)) -> i8 {
        let a = self.a.apply((i32::from(a) - self.a_zp) << ADD_LEFT_SHIFT);
        let b = self.b.apply((i32::from(b) - self.b_zp) << ADD_LEFT_SHIFT);
        clamp_to(self.out.apply(a + b).saturating_add(self.y_zp), act)
    }
}

/// `y = a + b` element-wise in the real domain, computed as TFLite does (see
/// [`AddRescale`]), clamped to `act`.
pub fn add_s8(a: &[i8], b: &[i8], y: &mut [i8], rescale: &AddRescale, act: (i8, i8)) {
    debug_assert_eq!(a.len(), y.len());
    debug_assert_eq!(b.len(), y.len());
    for ((out, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *out = rescale.add(a, b, act);
    }
}

/// TFLite's int8 multiplication rescaling: `y = Requantize(a.scale · b.scale / y.scale)
/// .apply((a − a_zp) · (b − b_zp)) + y_zp`, saturated to int8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MulRescale {
    out: Requantize,
    a_zp: i32,
    b_zp: i32,
    y_zp: i32,
}

impl MulRescale {
    /// The rescaling for `y = a · b`; every parameter set must pass [`QuantParams::new`].
    pub fn new(a: QuantParams, b: QuantParams, y: QuantParams) -> Result<Self, QuantError> {
        for p in [a, b, y] {
            QuantParams::new(p.scale, p.zero_point)?;
        }
        let m = f64::from(a.scale) * f64::from(b.scale) / f64::from(y.scale);
        Ok(Self {
            out: Requantize::new(m)?,
            a_zp: a.zero_point,
            b_zp: b.zero_point,
            y_zp: y.zero_point,
        })
    }

    fn mul(&self, a: i8, b: i8) -> i8 {
        let product = (i32::from(a) - self.a_zp) * (i32::from(b) - self.b_zp);
        clamp_to(self.out.apply(product).saturating_add(self.y_zp), FULL_RANGE)
    }
}

/// `y = a · b` element-wise in the real domain (see [`MulRescale`]); with `broadcast`, `b`
/// holds one factor per `[outer, channels]` that scales `inner` values of `a`
/// (squeeze-excitation), else `b` has `a`'s length.
pub fn mul_s8(
    a: &[i8],
    b: &[i8],
    y: &mut [i8],
    rescale: &MulRescale,
    d: ChannelDims,
    broadcast: bool,
) {
    debug_assert_eq!((a.len(), y.len()), (d.len(), d.len()));
    if !broadcast {
        for ((out, &a), &b) in y.iter_mut().zip(a).zip(b) {
            *out = rescale.mul(a, b);
        }
        return;
    }
    debug_assert_eq!(b.len(), d.outer * d.channels);
    if d.inner == 0 {
        return;
    }
    for ((ys, xs), &factor) in y.chunks_exact_mut(d.inner).zip(a.chunks_exact(d.inner)).zip(b) {
        for (out, &a) in ys.iter_mut().zip(xs) {
            *out = rescale.mul(a, factor);
        }
    }
}

/// One operand of an int8 concatenation moved to the output's quantization:
/// `Requantize(x.scale / y.scale).apply(q − x_zp) + y_zp`, saturated to int8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Rescale {
    multiplier: Requantize,
    x_zp: i32,
    y_zp: i32,
}

impl Rescale {
    /// The rescaling from `x`'s quantization to `y`'s; both must pass [`QuantParams::new`].
    pub fn new(x: QuantParams, y: QuantParams) -> Result<Self, QuantError> {
        for p in [x, y] {
            QuantParams::new(p.scale, p.zero_point)?;
        }
        let multiplier = Requantize::new(f64::from(x.scale) / f64::from(y.scale))?;
        Ok(Self { multiplier, x_zp: x.zero_point, y_zp: y.zero_point })
    }

    fn apply(&self, xs: &[i8], ys: &mut [i8]) {
        for (out, &q) in ys.iter_mut().zip(xs) {
            let moved = self.multiplier.apply(i32::from(q) - self.x_zp);
            *out = clamp_to(moved.saturating_add(self.y_zp), FULL_RANGE);
        }
    }
}

/// Both operands' rescalings to the output's quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConcatRescale {
    pub a: Rescale,
    pub b: Rescale,
}

/// `y` = per outer index, `a`'s block then `b`'s, each moved to the output's quantization
/// (TFLite's int8 concatenation).
pub fn concat_s8(a: &[i8], b: &[i8], y: &mut [i8], d: ConcatDims, rescale: &ConcatRescale) {
    debug_assert_eq!((a.len(), b.len(), y.len()), (d.part_len(false), d.part_len(true), d.len()));
    let row = d.first + d.second;
    if row == 0 {
        return;
    }
    let (mut a, mut b) = (a, b);
    for ys in y.chunks_exact_mut(row) {
        let (ya, yb) = ys.split_at_mut(d.first);
        let (head, rest) = a.split_at(d.first.min(a.len()));
        rescale.a.apply(head, ya);
        a = rest;
        let (head, rest) = b.split_at(d.second.min(b.len()));
        rescale.b.apply(head, yb);
        b = rest;
    }
}

/// The look-up table of an element-wise function `f` from `input`'s quantization to
/// `output`'s: entry `q + 128` holds `output.quantize(f(input.dequantize(q)))`.
pub fn lut_table(f: impl Fn(f32) -> f32, input: QuantParams, output: QuantParams) -> [i8; 256] {
    core::array::from_fn(|i| output.quantize(f(input.dequantize((i as i32 - 128) as i8))))
}

/// `y[i] = table[x[i] + 128]`: an element-wise function of int8 values through its
/// 256-entry table (see [`lut_table`]); a table of another length leaves `y` alone.
pub fn lut_s8(x: &[i8], table: &[i8], y: &mut [i8]) {
    debug_assert_eq!(x.len(), y.len());
    let Ok(table) = <&[i8; 256]>::try_from(table) else { return };
    for (out, &q) in y.iter_mut().zip(x) {
        *out = table[usize::from(q as u8 ^ 0x80)];
    }
}

/// `num / den` rounded half away from zero (TFLite's pooling rounding), for `den > 0`.
fn div_round_away(num: i32, den: i32) -> i32 {
    let half = den / 2;
    if num > 0 {
        (num + half) / den
    } else {
        (num - half) / den
    }
}

fn pool_window(g: &Pool2dGeometry) -> Window {
    Window { kh: g.kh, kw: g.kw, stride: g.stride, padding: g.padding, h: g.h, w: g.w }
}

/// `y[n, c, out_h, out_w]` = maximum of each window of `x[n, c, h, w]`, clamped to `act`;
/// padding never wins.
pub fn max_pool2d_s8(x: &[i8], y: &mut [i8], act: (i8, i8), g: &Pool2dGeometry) {
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(y.len(), g.output_len());
    let window = pool_window(g);
    let planes = x.chunks_exact(g.h * g.w).zip(y.chunks_exact_mut(g.out_h * g.out_w));
    for (xs, ys) in planes {
        for (out, (oy, ox)) in ys.iter_mut().zip(positions(g.out_h, g.out_w)) {
            let max = window.taps(oy, ox).map(|(_, i)| xs[i]).max().unwrap_or(i8::MIN);
            *out = clamp_to(i32::from(max), act);
        }
    }
}

/// `y[n, c, out_h, out_w]` = average of each window of `x[n, c, h, w]`, rounded half away
/// from zero and clamped to `act`. With `count_include_pad` the padding holds the zero
/// point `x_zp` (real zero) and the divisor is `kh · kw`; without, the divisor is the number
/// of in-bounds elements (TFLite's behaviour).
pub fn avg_pool2d_s8(x: &[i8], x_zp: i32, y: &mut [i8], act: (i8, i8), g: &Pool2dGeometry) {
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(y.len(), g.output_len());
    let window = pool_window(g);
    let full = (g.kh * g.kw) as i32;
    let planes = x.chunks_exact(g.h * g.w).zip(y.chunks_exact_mut(g.out_h * g.out_w));
    for (xs, ys) in planes {
        for (out, (oy, ox)) in ys.iter_mut().zip(positions(g.out_h, g.out_w)) {
            let (sum, count) = window
                .taps(oy, ox)
                .fold((0i32, 0i32), |(sum, count), (_, i)| (sum + i32::from(xs[i]), count + 1));
            let (sum, divisor) = match g.count_include_pad {
                true => (sum + (full - count) * x_zp, full),
                false => (sum, count.max(1)),
            };
            *out = clamp_to(div_round_away(sum, divisor), act);
        }
    }
}

/// `y[outer, channels]` = mean of `x[outer, channels, inner]` over `inner`, rounded half
/// away from zero and clamped to `act`.
pub fn global_avg_pool_s8(x: &[i8], y: &mut [i8], act: (i8, i8), d: ChannelDims) {
    debug_assert_eq!(x.len(), d.len());
    debug_assert_eq!(y.len(), d.outer * d.channels);
    for (out, xs) in y.iter_mut().zip(x.chunks_exact(d.inner)) {
        let sum = xs.iter().map(|&q| i32::from(q)).sum();
        *out = clamp_to(div_round_away(sum, d.inner as i32), act);
    }
}

/// Clamps every element of `x` to `act` in place.
pub fn clamp_s8(x: &mut [i8], act: (i8, i8)) {
    for q in x {
        *q = clamp_to(i32::from(*q), act);
    }
}

/// ReLU in the quantized domain, in place: `max(q, quantize(0))`.
pub fn relu_s8(x: &mut [i8], p: QuantParams) {
    clamp_s8(x, p.relu_bounds());
}

/// ReLU6 in the quantized domain, in place: `clamp(q, quantize(0), quantize(6))`.
pub fn relu6_s8(x: &mut [i8], p: QuantParams) {
    clamp_s8(x, p.relu6_bounds());
}

/// `out[i] = p.quantize(x[i])`.
pub fn quantize_slice(x: &[f32], p: QuantParams, out: &mut [i8]) {
    debug_assert_eq!(x.len(), out.len());
    for (q, &v) in out.iter_mut().zip(x) {
        *q = p.quantize(v);
    }
}

/// `out[i] = p.dequantize(q[i])`.
pub fn dequantize_slice(q: &[i8], p: QuantParams, out: &mut [f32]) {
    debug_assert_eq!(q.len(), out.len());
    for (v, &q) in out.iter_mut().zip(q) {
        *v = p.dequantize(q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::params::{quantize_symmetric, FULL_RANGE};
    use crate::quant::testing::{exact_requantize, round_half_away};
    use crate::rng::SplitMix;

    fn random_i8s<const N: usize>(rng: &mut SplitMix) -> [i8; N] {
        core::array::from_fn(|_| rng.next_u64() as i8)
    }

    /// `clamp(exact_requantize(acc) + zp)` over the exact `i64` accumulator.
    fn expected_output(acc: i64, r: Requantize, out: &OutputQuant<'_>) -> i8 {
        let acc = i32::try_from(acc).expect("test accumulators fit i32");
        let v = exact_requantize(acc, r) + out.zero_point;
        v.clamp(i32::from(out.act.0), i32::from(out.act.1)) as i8
    }

    /// Random per-channel multipliers around 2^-8 and a ReLU-clamped output.
    fn random_multipliers<const C: usize>(rng: &mut SplitMix) -> [Requantize; C] {
        core::array::from_fn(|_| Requantize::new(f64::from(rng.uniform(1e-3, 8e-3))).unwrap())
    }

    /// Conv geometry with the output size derived from the window.
    fn conv_geometry(
        c: (usize, usize),
        hw: usize,
        k: usize,
        stride: usize,
        pad: usize,
        groups: usize,
    ) -> Conv2dGeometry {
        let o = (hw + 2 * pad - k) / stride + 1;
        Conv2dGeometry {
            n: 2,
            c_in: c.0,
            h: hw,
            w: hw,
            c_out: c.1,
            kh: k,
            kw: k,
            stride: (stride, stride),
            padding: (pad, pad),
            groups,
            out_h: o,
            out_w: o,
        }
    }

    #[test]
    fn conv2d_s8_matches_direct_i64_computation() {
        let mut rng = SplitMix::new(10);
        let cases = [
            conv_geometry((3, 4), 5, 3, 2, 1, 1),
            conv_geometry((4, 6), 5, 3, 1, 1, 2),
            conv_geometry((4, 4), 6, 3, 2, 1, 4),
            conv_geometry((2, 4), 4, 2, 1, 0, 2),
        ];
        for g in cases {
            g.check().unwrap();
            let x: [i8; 512] = random_i8s(&mut rng);
            let w: [i8; 512] = random_i8s(&mut rng).map(|q: i8| q.max(-127));
            let bias: [i32; 6] =
                core::array::from_fn(|_| (rng.next_u64() % 20_001) as i32 - 10_000);
            let multipliers: [Requantize; 6] = random_multipliers(&mut rng);
            let out = OutputQuant {
                multipliers: &multipliers[..g.c_out],
                zero_point: -7,
                act: (-7, 127),
            };
            let (x, w, x_zp) = (&x[..g.input_len()], &w[..g.weight_len()], 5);
            let mut y = [0i8; 512];
            let y = &mut y[..g.output_len()];
            let some_bias = Some(&bias[..g.c_out]);
            let a =
                QConv2dArgs { x, x_zero_point: x_zp, weights: w, bias: some_bias, out, shape: g };
            conv2d_s8(&a, y);
            let (cig, cog) = (g.c_in / g.groups, g.c_out / g.groups);
            let mut expected = y.iter().copied();
            for n in 0..g.n {
                for oc in 0..g.c_out {
                    for oy in 0..g.out_h {
                        for ox in 0..g.out_w {
                            let mut acc = i64::from(bias[oc]);
                            for icg in 0..cig {
                                let ic = oc / cog * cig + icg;
                                for ky in 0..g.kh {
                                    for kx in 0..g.kw {
                                        let iy = (oy * g.stride.0 + ky) as i64 - g.padding.0 as i64;
                                        let ix = (ox * g.stride.1 + kx) as i64 - g.padding.1 as i64;
                                        let inside = (0..g.h as i64).contains(&iy)
                                            && (0..g.w as i64).contains(&ix);
                                        let xv = match inside {
                                            true => i64::from(
                                                x[((n * g.c_in + ic) * g.h + iy as usize) * g.w
                                                    + ix as usize],
                                            ),
                                            false => i64::from(x_zp),
                                        };
                                        acc += (xv - i64::from(x_zp))
                                            * i64::from(
                                                w[((oc * cig + icg) * g.kh + ky) * g.kw + kx],
                                            );
                                    }
                                }
                            }
                            assert_eq!(
                                expected.next(),
                                Some(expected_output(acc, multipliers[oc], &out)),
                                "{g:?} at {n},{oc},{oy},{ox}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn linear_s8_matches_direct_i64_computation() {
        let mut rng = SplitMix::new(11);
        let d = LinearDims { n: 3, k: 17, m: 5 };
        let x: [i8; 51] = random_i8s(&mut rng);
        let w: [i8; 85] = random_i8s(&mut rng).map(|q: i8| q.max(-127));
        let bias = [300, -20_000, 0, 7, 12_345];
        let multipliers: [Requantize; 5] = random_multipliers(&mut rng);
        let out = OutputQuant { multipliers: &multipliers, zero_point: 3, act: FULL_RANGE };
        let mut y = [0i8; 15];
        let a =
            QLinearArgs { x: &x, x_zero_point: -4, weights: &w, bias: Some(&bias), out, shape: d };
        linear_s8(&a, &mut y);
        for (i, &got) in y.iter().enumerate() {
            let (n, m) = (i / d.m, i % d.m);
            let acc = (0..d.k).fold(i64::from(bias[m]), |acc, k| {
                acc + (i64::from(x[n * d.k + k]) + 4) * i64::from(w[m * d.k + k])
            });
            assert_eq!(got, expected_output(acc, multipliers[m], &out), "output {n},{m}");
        }
    }

    /// A conv on quantized data stays within half an output step of the f32 conv of the
    /// dequantized data, and within two steps of the f32 conv of the original data.
    #[test]
    fn conv2d_s8_approximates_the_f32_convolution() {
        let g = conv_geometry((4, 4), 5, 3, 1, 1, 2);
        let mut rng = SplitMix::new(12);
        let x: [f32; 200] = core::array::from_fn(|_| rng.uniform(-1.0, 2.0));
        let w: [f32; 72] = core::array::from_fn(|_| rng.uniform(-0.5, 0.5));
        let b = [0.3, -0.2, 0.0, 0.1];
        let xp = QuantParams::from_min_max(-1.0, 2.0).unwrap();
        let mut xq = [0i8; 200];
        quantize_slice(&x, xp, &mut xq);
        let mut wq = [0i8; 72];
        let mut w_scales = [0.0; 4];
        for (c, scale) in w_scales.iter_mut().enumerate() {
            *scale = quantize_symmetric(&w[c * 18..][..18], &mut wq[c * 18..][..18]);
        }
        let mut y = [0.0; 200];
        crate::reference::conv2d(&x, &w, Some(&b), &mut y, &g);
        let (lo, hi) = y.iter().fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let yp = QuantParams::from_min_max(lo, hi).unwrap();
        let bq: [i32; 4] =
            core::array::from_fn(|c| libm::roundf(b[c] / (xp.scale * w_scales[c])) as i32);
        let multipliers: [Requantize; 4] = core::array::from_fn(|c| {
            Requantize::from_scales(xp.scale, w_scales[c], yp.scale).unwrap()
        });
        let out =
            OutputQuant { multipliers: &multipliers, zero_point: yp.zero_point, act: FULL_RANGE };
        let mut yq = [0i8; 200];
        let (x_zero_point, bias) = (xp.zero_point, Some(&bq[..]));
        conv2d_s8(
            &QConv2dArgs { x: &xq, x_zero_point, weights: &wq, bias, out, shape: g },
            &mut yq,
        );

        let mut x_deq = [0.0; 200];
        dequantize_slice(&xq, xp, &mut x_deq);
        let w_deq: [f32; 72] = core::array::from_fn(|i| f32::from(wq[i]) * w_scales[i / 18]);
        let b_deq: [f32; 4] = core::array::from_fn(|c| bq[c] as f32 * xp.scale * w_scales[c]);
        let mut y_deq = [0.0; 200];
        crate::reference::conv2d(&x_deq, &w_deq, Some(&b_deq), &mut y_deq, &g);
        for i in 0..200 {
            let got = yp.dequantize(yq[i]);
            assert!(libm::fabsf(got - y_deq[i]) <= 0.51 * yp.scale, "{i}: {got} vs {}", y_deq[i]);
            assert!(libm::fabsf(got - y[i]) <= 2.0 * yp.scale, "{i}: {got} vs {}", y[i]);
        }
    }

    #[test]
    fn add_s8_matches_the_rescaling_scheme_and_saturates() {
        let (ap, bp) = (QuantParams::new(0.05, -3).unwrap(), QuantParams::new(0.02, 10).unwrap());
        let yp = QuantParams::new(0.06, 2).unwrap();
        let r = AddRescale::new(ap, bp, yp).unwrap();
        let mut rng = SplitMix::new(13);
        let (a, b): ([i8; 256], [i8; 256]) = (random_i8s(&mut rng), random_i8s(&mut rng));
        let mut y = [0i8; 256];
        add_s8(&a, &b, &mut y, &r, FULL_RANGE);
        // Exact scheme: s = 0.1; a·0.05/0.1 and b·0.02/0.1 at 2^20, sum · 0.1 / (2^20 · 0.06).
        let ma = Requantize::new(0.5).unwrap();
        let mb = Requantize::new(0.2).unwrap();
        let mo = Requantize::new(0.1 / (0.06 * f64::from(1u32 << 20))).unwrap();
        for i in 0..256 {
            let sa = exact_requantize((i32::from(a[i]) + 3) * (1 << 20), ma);
            let sb = exact_requantize((i32::from(b[i]) - 10) * (1 << 20), mb);
            let want = (exact_requantize(sa + sb, mo) + 2).clamp(-128, 127) as i8;
            assert_eq!(y[i], want, "{} + {}", a[i], b[i]);
            let real = ap.dequantize(a[i]) + bp.dequantize(b[i]);
            if (-7.7..7.5).contains(&real) {
                assert!(libm::fabsf(yp.dequantize(y[i]) - real) <= 0.51 * yp.scale, "{i}");
            }
        }
        let mut y = [0i8; 3];
        add_s8(&[127, -128, 127], &[127, -128, -128], &mut y, &r, FULL_RANGE);
        assert_eq!(y, [127, -128, 2 + 62]); // 6.5 − 2.76 = 3.74 = 62.3 steps of 0.06
    }

    fn pool(count_include_pad: bool) -> Pool2dGeometry {
        // 3x3 window, stride 1, padding 1 over a 2x4 plane (two planes).
        Pool2dGeometry {
            n: 1,
            c: 2,
            h: 2,
            w: 4,
            kh: 3,
            kw: 3,
            stride: (1, 1),
            padding: (1, 1),
            count_include_pad,
            out_h: 2,
            out_w: 4,
        }
    }

    #[test]
    fn avg_pool_rounds_ties_away_from_zero() {
        let x = [1, 2, 0, 0, 0, 0, 0, 0, -1, -2, 0, 0, 0, 0, 0, 0];
        let mut y = [0i8; 16];
        avg_pool2d_s8(&x, 0, &mut y, FULL_RANGE, &pool(false));
        // Corner (0, 0) averages 4 elements: 3/4 → 1; (0, 2) averages 6: 2/6 → 0.
        assert_eq!(y[..3], [1, 1, 0]);
        assert_eq!(y[8..11], [-1, -1, 0]);
        let x = [3, 3, 0, 0, 0, 0, 0, 0, -3, -3, 0, 0, 0, 0, 0, 0];
        avg_pool2d_s8(&x, 0, &mut y, FULL_RANGE, &pool(false));
        // (0, 0): 6/4 → 2; (0, 2) and (1, 2): 3/6 → 1; mirrored in the negative plane.
        assert_eq!([y[0], y[2], y[6], y[8], y[10], y[14]], [2, 1, 1, -2, -1, -1]);
    }

    #[test]
    fn avg_pool_matches_exact_rounding_with_padding_at_the_zero_point() {
        let mut rng = SplitMix::new(14);
        let x: [i8; 16] = random_i8s(&mut rng);
        for count_include_pad in [false, true] {
            let g = pool(count_include_pad);
            let mut y = [0i8; 16];
            avg_pool2d_s8(&x, -20, &mut y, (-100, 100), &g);
            for (i, &got) in y.iter().enumerate() {
                let (plane, oy, ox) = (i / 8, i / 4 % 2, i % 4);
                let (mut sum, mut count) = (0i128, 0i128);
                for iy in oy.saturating_sub(1)..(oy + 2).min(2) {
                    for ix in ox.saturating_sub(1)..(ox + 2).min(4) {
                        sum += i128::from(x[plane * 8 + iy * 4 + ix]);
                        count += 1;
                    }
                }
                let (sum, den) =
                    if count_include_pad { (sum - 20 * (9 - count), 9) } else { (sum, count) };
                assert_eq!(i128::from(got), round_half_away(sum, den).clamp(-100, 100), "{i}");
            }
        }
    }

    #[test]
    fn max_pool_ignores_padding_and_clamps() {
        let x = [-128, -100, -90, -50, -70, -60, -128, -128, 5, 1, 1, 1, 1, 1, 1, 127];
        let mut y = [0i8; 16];
        max_pool2d_s8(&x, &mut y, (-55, 100), &pool(true));
        assert_eq!(y, [-55, -55, -50, -50, -55, -55, -50, -50, 5, 5, 100, 100, 5, 5, 100, 100]);
    }

    #[test]
    fn global_avg_pool_rounds_half_away() {
        let d = ChannelDims { outer: 1, channels: 3, inner: 4 };
        let mut y = [0i8; 3];
        global_avg_pool_s8(&[1, 1, 0, 0, -1, -1, 0, 0, 127, 127, 127, 126], &mut y, FULL_RANGE, d);
        assert_eq!(y, [1, -1, 127]);
    }

    #[test]
    fn relu_and_relu6_clamp_in_the_quantized_domain() {
        let p = QuantParams::from_min_max(-2.0, 10.0).unwrap(); // zp −86, 6.0 → 42
        let mut x = [-128, -87, -86, 0, 42, 43, 127];
        relu_s8(&mut x, p);
        assert_eq!(x, [-86, -86, -86, 0, 42, 43, 127]);
        relu6_s8(&mut x, p);
        assert_eq!(x, [-86, -86, -86, 0, 42, 42, 42]);
    }

    #[test]
    fn slices_quantize_and_dequantize() {
        let p = QuantParams::new(0.5, -1).unwrap();
        let mut q = [0i8; 4];
        quantize_slice(&[0.0, 0.25, -0.75, 100.0], p, &mut q);
        assert_eq!(q, [-1, 0, -3, 127]);
        let mut x = [0.0; 4];
        dequantize_slice(&q, p, &mut x);
        assert_eq!(x, [0.0, 0.5, -1.0, 64.0]);
    }

    #[test]
    fn a_table_maps_every_int8_value_and_a_table_of_another_length_does_nothing() {
        let (input, output) =
            (QuantParams::new(0.05, -10).unwrap(), QuantParams::new(0.01, 3).unwrap());
        let table = lut_table(|x| 0.5 * x, input, output);
        let x: [i8; 256] = core::array::from_fn(|i| (i as i32 - 128) as i8);
        let mut y = [0i8; 256];
        lut_s8(&x, &table, &mut y);
        for (&q, &got) in x.iter().zip(&y) {
            assert_eq!(got, output.quantize(0.5 * input.dequantize(q)), "x {q}");
        }
        assert_eq!((y[0], y[255]), (-128, 127), "the ends saturate");
        let mut untouched = [7i8; 4];
        lut_s8(&[1, 2, 3, 4], &table[..255], &mut untouched);
        assert_eq!(untouched, [7; 4]);
    }

    #[test]
    fn products_round_the_real_product_to_the_nearest_step() {
        let (a, b) =
            (QuantParams::new(0.04, 5).unwrap(), QuantParams::new(1.0 / 255.0, -128).unwrap());
        let y = QuantParams::new(0.03, -2).unwrap();
        let rescale = MulRescale::new(a, b, y).unwrap();
        let mut rng = SplitMix::new(4);
        let (xs, factors) = (random_i8s::<24>(&mut rng), random_i8s::<6>(&mut rng));
        let d = ChannelDims { outer: 2, channels: 3, inner: 4 };
        let mut got = [0i8; 24];
        mul_s8(&xs, &factors, &mut got, &rescale, d, true);
        for (i, &q) in got.iter().enumerate() {
            let real = a.dequantize(xs[i]) * b.dequantize(factors[i / 4]);
            let expected = y.quantize(real);
            assert!((i32::from(q) - i32::from(expected)).abs() <= 1, "{i}: {q} vs {expected}");
        }
        let mut same = [0i8; 24];
        let ys = random_i8s::<24>(&mut rng);
        mul_s8(&xs, &ys, &mut same, &rescale, d, false);
        for ((&q, &x), &f) in same.iter().zip(&xs).zip(&ys) {
            let expected = y.quantize(a.dequantize(x) * b.dequantize(f));
            assert!((i32::from(q) - i32::from(expected)).abs() <= 1, "{q} vs {expected}");
        }
    }

    #[test]
    fn a_join_copies_operands_of_the_output_quantization_and_rescales_the_others() {
        let y = QuantParams::new(0.05, 4).unwrap();
        let other = QuantParams::new(0.02, -30).unwrap();
        let rescale =
            ConcatRescale { a: Rescale::new(y, y).unwrap(), b: Rescale::new(other, y).unwrap() };
        let mut rng = SplitMix::new(5);
        let (a, b) = (random_i8s::<12>(&mut rng), random_i8s::<8>(&mut rng));
        let d = ConcatDims { outer: 2, first: 6, second: 4 };
        let mut joined = [0i8; 20];
        concat_s8(&a, &b, &mut joined, d, &rescale);
        for o in 0..2 {
            assert_eq!(joined[o * 10..][..6], a[o * 6..][..6], "the same quantization copies");
            // Fixed-point rescaling rounds twice (TFLite's too): within one step.
            for (i, &q) in joined[o * 10 + 6..][..4].iter().enumerate() {
                let expected = y.quantize(other.dequantize(b[o * 4 + i]));
                assert!((i32::from(q) - i32::from(expected)).abs() <= 1, "outer {o}, {i}");
            }
        }
    }
}
