//! What training through and inside int8 layers needs beyond the forward kernels: rounding
//! trainable integer-unit weights, dequantizing weights per channel, the straight-through
//! gradient of a clamp (from the clamp's output or from a bit mask of it), and the
//! per-channel gradient scaling of quantization-aware scaling.

use super::params::quantize_weight;
use crate::geometry::{ChannelDims, Conv2dGeometry, LinearDims};
use crate::reference::{conv, dense};

/// The channel of element `i` of a `[outer, channels, inner]` tensor.
fn channel_of(i: usize, d: ChannelDims) -> usize {
    (i / d.inner.max(1)) % d.channels.max(1)
}

/// `w[i] = clamp(round(w̄[i]), −127, 127)`: a trainable weight kept in integer units
/// (`real = scale · w̄`) rounded for the int8 forward pass. NaN rounds to 0.
pub fn round_weights(w_bar: &[f32], w: &mut [i8]) {
    for (q, &v) in w.iter_mut().zip(w_bar) {
        *q = quantize_weight(v, 1.0);
    }
}

/// `b[i] = round(b̄[i])`, saturated to `i32`; NaN rounds to 0.
pub fn round_bias(b_bar: &[f32], b: &mut [i32]) {
    for (q, &v) in b.iter_mut().zip(b_bar) {
        *q = libm::roundf(v) as i32;
    }
}

/// `w_real[i] = scale[channel(i)] · w[i]`.
pub fn dequantize_weights(w: &[i8], scale: &[f32], w_real: &mut [f32], d: ChannelDims) {
    for (i, (out, &q)) in w_real.iter_mut().zip(w).enumerate() {
        *out = scale[channel_of(i, d)] * f32::from(q);
    }
}

/// `dx = dy` where `act.0 < y < act.1`, else 0: a clamp (fused ReLU, ReLU6 or int8
/// saturation) passes no gradient where its output sits at a bound.
pub fn clamp_grad(y: &[i8], dy: &[f32], dx: &mut [f32], act: (i8, i8)) {
    for ((out, &q), &g) in dx.iter_mut().zip(y).zip(dy) {
        *out = if q > act.0 && q < act.1 { g } else { 0.0 };
    }
}

/// Weight `i` of an int8 weight tensor `[O, ...]` in real units, `scale[o] · w[i]`: what
/// [`dequantize_weights`] writes, read one weight at a time by the kernels below.
pub fn dequantized<'a>(w: &'a [i8], scale: &'a [f32]) -> impl Fn(usize) -> f32 + 'a {
    let per_channel = w.len() / scale.len().max(1);
    move |i| scale[i / per_channel.max(1)] * f32::from(w[i])
}

/// [`conv::conv2d_grad_input`] of the weights `w_scale[o] · w`, bit for bit as over
/// [`dequantize_weights`]' output, without that f32 copy.
pub fn conv2d_grad_input_s8(
    dy: &[f32],
    w: &[i8],
    w_scale: &[f32],
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    conv::conv2d_grad_input_by(dy, dequantized(w, w_scale), dx, g)
}

/// [`dense::linear_grad_input`] of the weights `w_scale[m] · w`, as
/// [`conv2d_grad_input_s8`].
pub fn linear_grad_input_s8(dy: &[f32], w: &[i8], w_scale: &[f32], dx: &mut [f32], d: LinearDims) {
    dense::linear_grad_input_by(dy, dequantized(w, w_scale), dx, d)
}

/// [`clamp_grad`] written over `dy`.
pub fn clamp_grad_in_place(y: &[i8], dy: &mut [f32], act: (i8, i8)) {
    for (g, &q) in dy.iter_mut().zip(y) {
        if q <= act.0 || q >= act.1 {
            *g = 0.0;
        }
    }
}

/// Bytes of the bit mask [`clamp_mask`] writes for `len` clamp outputs.
pub const fn mask_bytes(len: usize) -> usize {
    len.div_ceil(8)
}

/// Bit `i % 8` of `mask[i / 8]` = whether a clamp's output `y[i]` lies strictly inside
/// `act`, where [`clamp_grad`] passes the gradient: what the backward pass needs of `y`, in
/// an eighth of its bytes. Bits past `y.len()` are 0.
pub fn clamp_mask(y: &[i8], mask: &mut [i8], act: (i8, i8)) {
    for (byte, ys) in mask.iter_mut().zip(y.chunks(8)) {
        let bits = ys.iter().enumerate().filter(|(_, &q)| q > act.0 && q < act.1);
        *byte = bits.fold(0u8, |b, (i, _)| b | 1 << i) as i8;
    }
}

/// Whether bit `i` of a [`clamp_mask`] is set.
pub(crate) fn passes(mask: &[i8], i: usize) -> bool {
    (mask[i / 8] as u8) >> (i % 8) & 1 != 0
}

/// [`clamp_grad`] from the clamp's [`clamp_mask`] instead of its output, bit for bit.
pub fn mask_grad(mask: &[i8], dy: &[f32], dx: &mut [f32]) {
    for (i, (out, &g)) in dx.iter_mut().zip(dy).enumerate() {
        *out = if passes(mask, i) { g } else { 0.0 };
    }
}

/// [`mask_grad`] written over `dy`.
pub fn mask_grad_in_place(mask: &[i8], dy: &mut [f32]) {
    for (i, g) in dy.iter_mut().enumerate() {
        if !passes(mask, i) {
            *g = 0.0;
        }
    }
}

/// `g'[i] = g[i] · (unit · scale[channel(i)])^power` for `power` in `-2..=2`.
///
/// Power 1 turns a real-valued gradient into one in integer units (`∂L/∂w̄ = s · ∂L/∂w`);
/// power −2 is quantization-aware scaling, which brings an integer-unit gradient back to
/// the step size a float weight would take (Lin et al., 2022).
pub fn channel_scale(
    g: &[f32],
    scale: &[f32],
    out: &mut [f32],
    unit: f32,
    power: i8,
    d: ChannelDims,
) {
    for (i, (o, &v)) in out.iter_mut().zip(g).enumerate() {
        let s = unit * scale[channel_of(i, d)];
        let factor = match power {
            2 => s * s,
            1 => s,
            -1 => 1.0 / s,
            -2 => 1.0 / (s * s),
            _ => 1.0,
        };
        *o = v * factor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: ChannelDims = ChannelDims { outer: 1, channels: 2, inner: 3 };

    #[test]
    fn weights_round_half_away_from_zero_and_saturate_symmetrically() {
        let mut w = [0i8; 6];
        round_weights(&[0.5, -0.5, 1.49, 126.6, -300.0, f32::NAN], &mut w);
        assert_eq!(w, [1, -1, 1, 127, -127, 0]);
    }

    #[test]
    fn biases_round_and_saturate() {
        let mut b = [0i32; 4];
        round_bias(&[2.5, -2.5, 1e12, -1e12], &mut b);
        assert_eq!(b, [3, -3, i32::MAX, i32::MIN]);
    }

    #[test]
    fn weights_dequantize_with_their_channel_scale() {
        let mut real = [0f32; 6];
        dequantize_weights(&[1, 2, 3, -1, -2, 127], &[0.5, 0.25], &mut real, ROWS);
        assert_eq!(real, [0.5, 1.0, 1.5, -0.25, -0.5, 31.75]);
    }

    #[test]
    fn clamp_gradient_stops_at_both_bounds() {
        let mut dx = [9f32; 5];
        clamp_grad(&[-128, -127, 0, 126, 127], &[1.0; 5], &mut dx, (-128, 127));
        assert_eq!(dx, [0.0, 1.0, 1.0, 1.0, 0.0]);
        // A fused ReLU whose zero point is −5: outputs at −5 are real zeros.
        clamp_grad(&[-5, -4, 100, -5, 127], &[2.0; 5], &mut dx, (-5, 127));
        assert_eq!(dx, [0.0, 2.0, 2.0, 0.0, 0.0]);
    }

    #[test]
    fn input_gradients_through_int8_weights_match_the_dequantized_copy_bit_for_bit() {
        use alloc::vec;
        use alloc::vec::Vec;
        let g = Conv2dGeometry {
            n: 2,
            c_in: 3,
            h: 5,
            w: 4,
            c_out: 2,
            kh: 3,
            kw: 3,
            stride: (2, 1),
            padding: (1, 1),
            groups: 1,
            out_h: 3,
            out_w: 4,
        };
        let w: Vec<i8> = (0..g.weight_len()).map(|i| (i as i32 * 37 % 255 - 127) as i8).collect();
        let scale = [0.013, 0.4];
        let dy: Vec<f32> = (0..g.output_len()).map(|i| (i as f32 * 0.37).sin()).collect();
        let per = ChannelDims { outer: 1, channels: 2, inner: g.weight_len() / 2 };
        let mut real = vec![0f32; w.len()];
        dequantize_weights(&w, &scale, &mut real, per);
        let (mut want, mut got) = (vec![0f32; g.input_len()], vec![f32::NAN; g.input_len()]);
        conv::conv2d_grad_input(&dy, &real, &mut want, &g);
        conv2d_grad_input_s8(&dy, &w, &scale, &mut got, &g);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert!(got.iter().any(|&v| v != 0.0));
        let d = LinearDims { n: 3, k: 9, m: 2 };
        let w = &w[..d.m * d.k];
        let dy = &dy[..d.n * d.m];
        let per = ChannelDims { outer: 1, channels: 2, inner: d.k };
        let mut real = vec![0f32; w.len()];
        dequantize_weights(w, &scale, &mut real, per);
        let (mut want, mut got) = (vec![0f32; d.n * d.k], vec![f32::NAN; d.n * d.k]);
        dense::linear_grad_input(dy, &real, &mut want, d);
        linear_grad_input_s8(dy, w, &scale, &mut got, d);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn clamp_gradient_in_place_matches_the_copy() {
        let y = [-5, -4, 100, -5, 127, 126];
        let dy = [2.0, -1.5, 0.25, f32::NAN, 3.0, -7.0];
        let mut copy = [9f32; 6];
        clamp_grad(&y, &dy, &mut copy, (-5, 127));
        let mut in_place = dy;
        clamp_grad_in_place(&y, &mut in_place, (-5, 127));
        assert_eq!(in_place.map(f32::to_bits), copy.map(f32::to_bits));
    }

    #[test]
    fn the_mask_gradient_matches_the_clamp_gradient_bit_for_bit() {
        // 19 outputs: two full mask bytes and a partial one, both bounds and the inside.
        let y: [i8; 19] = core::array::from_fn(|i| [-5, -4, 100, -5, 127, 126, 0][i % 7]);
        let dy: [f32; 19] = core::array::from_fn(|i| (i as f32 - 9.5) * 0.75);
        let mut mask = [0x55i8; mask_bytes(19)];
        clamp_mask(&y, &mut mask, (-5, 127));
        assert_eq!(mask.map(|b| b as u8), [0b0110_0110, 0b1011_0011, 0b0000_0001]);
        let mut want = [9f32; 19];
        clamp_grad(&y, &dy, &mut want, (-5, 127));
        let mut got = [9f32; 19];
        mask_grad(&mask, &dy, &mut got);
        assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits));
        let mut in_place = dy;
        mask_grad_in_place(&mask, &mut in_place);
        assert_eq!(in_place.map(f32::to_bits), want.map(f32::to_bits));
    }

    #[test]
    fn channel_scale_applies_each_power_per_channel() {
        let g = [1.0, 2.0, 4.0, 1.0, 2.0, 4.0];
        let mut out = [0f32; 6];
        channel_scale(&g, &[0.5, 2.0], &mut out, 1.0, 1, ROWS);
        assert_eq!(out, [0.5, 1.0, 2.0, 2.0, 4.0, 8.0]);
        channel_scale(&g, &[0.5, 2.0], &mut out, 2.0, -2, ROWS);
        assert_eq!(out, [1.0, 2.0, 4.0, 0.0625, 0.125, 0.25]);
        channel_scale(&g, &[0.5, 2.0], &mut out, 1.0, -1, ROWS);
        assert_eq!(out, [2.0, 4.0, 8.0, 0.5, 1.0, 2.0]);
    }
}
