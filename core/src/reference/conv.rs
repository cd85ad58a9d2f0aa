//! 2-D convolution over NCHW input with OIHW weights (stride, zero padding, groups including
//! depthwise) and its input and weight gradients.

use super::activation::Rectifier;
use super::layout::{input_coord, row_mut};
use super::norm::batch_norm_eval_in_place;
use crate::geometry::Conv2dGeometry;
use crate::hyperparams::BatchNormConfig;

/// One multiply-accumulate of the convolution, as flat indices: `y[y] += x[x] · w[w]`.
#[derive(Clone, Copy)]
struct Tap {
    x: usize,
    w: usize,
    y: usize,
}

/// One output element: batch index, output channel and spatial position.
#[derive(Clone, Copy)]
struct OutputPos {
    n: usize,
    oc: usize,
    oy: usize,
    ox: usize,
}

/// Visits every tap that reads an in-bounds input (padding reads zero, so contributes
/// nothing), output element by output element in memory order.
fn for_each_tap(g: &Conv2dGeometry, mut visit: impl FnMut(Tap)) {
    for n in 0..g.n {
        for oc in 0..g.c_out {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for_each_tap_of_output(g, OutputPos { n, oc, oy, ox }, &mut visit);
                }
            }
        }
    }
}

/// Visits the in-bounds taps of one output element: the input channels of its group times
/// the kernel window, in weight memory order.
fn for_each_tap_of_output(g: &Conv2dGeometry, out: OutputPos, visit: &mut impl FnMut(Tap)) {
    let c_in_per_group = g.c_in_per_group();
    let first_input_channel = out.oc / g.c_out_per_group() * c_in_per_group;
    let y = ((out.n * g.c_out + out.oc) * g.out_h + out.oy) * g.out_w + out.ox;
    for icg in 0..c_in_per_group {
        let x_plane = out.n * g.c_in + first_input_channel + icg;
        let w_plane = out.oc * c_in_per_group + icg;
        for ky in 0..g.kh {
            let Some(iy) = input_coord(out.oy, ky, g.stride.0, g.padding.0, g.h) else {
                continue;
            };
            for kx in 0..g.kw {
                let Some(ix) = input_coord(out.ox, kx, g.stride.1, g.padding.1, g.w) else {
                    continue;
                };
                let x = (x_plane * g.h + iy) * g.w + ix;
                let w = (w_plane * g.kh + ky) * g.kw + kx;
                visit(Tap { x, w, y });
            }
        }
    }
}

/// An evaluation-mode batch norm over a convolution's output channels: its scale and
/// shift, running statistics and settings.
#[derive(Clone, Copy)]
pub struct FrozenNorm<'a> {
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub mean: &'a [f32],
    pub var: &'a [f32],
    pub cfg: BatchNormConfig,
}

/// [`conv2d`], then [`norm_act_in_place`]: a frozen batch norm's chain as one kernel.
pub fn conv2d_norm_act(
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    norm: FrozenNorm<'_>,
    rectifier: Option<Rectifier>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    conv2d(x, w, b, y, g);
    norm_act_in_place(y, norm, rectifier, g);
}

/// `norm` over the output `y` of a convolution of geometry `g`
/// ([`batch_norm_eval_in_place`]), then the `rectifier` if any.
pub fn norm_act_in_place(
    y: &mut [f32],
    norm: FrozenNorm<'_>,
    rectifier: Option<Rectifier>,
    g: &Conv2dGeometry,
) {
    let FrozenNorm { gamma, beta, mean, var, cfg } = norm;
    batch_norm_eval_in_place(y, gamma, beta, mean, var, g.output_channels(), cfg);
    if let Some(rectifier) = rectifier {
        rectifier.rectify_in_place(y);
    }
}

fn debug_assert_lengths(x_len: usize, w_len: usize, y_len: usize, g: &Conv2dGeometry) {
    debug_assert_eq!(x_len, g.input_len());
    debug_assert_eq!(w_len, g.weight_len());
    debug_assert_eq!(y_len, g.output_len());
}

/// `y[n, c_out, out_h, out_w]` = convolution of `x[n, c_in, h, w]` with
/// `w[c_out, c_in / groups, kh, kw]` plus optional `b[c_out]`; padding reads zero.
pub fn conv2d(x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], g: &Conv2dGeometry) {
    debug_assert_lengths(x.len(), w.len(), y.len(), g);
    let plane_len = g.out_h * g.out_w;
    for plane in 0..g.n * g.c_out {
        let bias = b.map_or(0.0, |b| b[plane % g.c_out]);
        row_mut(y, plane, plane_len).fill(bias);
    }
    for_each_tap(g, |t| y[t.y] += x[t.x] * w[t.w]);
}

/// `dx[n, c_in, h, w]` = gradient of `conv2d` with respect to its input, given
/// `dy[n, c_out, out_h, out_w]`; overwrites `dx`.
pub fn conv2d_grad_input(dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
    debug_assert_eq!(w.len(), g.weight_len());
    conv2d_grad_input_by(dy, |i| w[i], dx, g)
}

/// [`conv2d_grad_input`] with weight `i` read as `weight(i)`.
pub fn conv2d_grad_input_by(
    dy: &[f32],
    weight: impl Fn(usize) -> f32,
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    debug_assert_lengths(dx.len(), g.weight_len(), dy.len(), g);
    dx.fill(0.0);
    for_each_tap(g, |t| dx[t.x] += dy[t.y] * weight(t.w));
}

/// `dw[c_out, c_in / groups, kh, kw]` = gradient of `conv2d` with respect to its weights,
/// given `dy[n, c_out, out_h, out_w]` and the forward input `x`; overwrites `dw`.
pub fn conv2d_grad_weight(dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
    debug_assert_lengths(x.len(), dw.len(), dy.len(), g);
    dw.fill(0.0);
    for_each_tap(g, |t| dw[t.w] += dy[t.y] * x[t.x]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    /// Two 3x3 input channels, two output channels, 3x3 kernel, stride 2, padding 1,
    /// groups 2: each output channel sees exactly one input channel; output is 2x2.
    const GROUPED: Conv2dGeometry = Conv2dGeometry {
        n: 1,
        c_in: 2,
        h: 3,
        w: 3,
        c_out: 2,
        kh: 3,
        kw: 3,
        stride: (2, 2),
        padding: (1, 1),
        groups: 2,
        out_h: 2,
        out_w: 2,
    };

    fn ramp<const N: usize>(start: f32) -> [f32; N] {
        core::array::from_fn(|i| start + i as f32)
    }

    fn grouped_weights() -> [f32; 18] {
        // Output channel 0: all ones (window sum). Output channel 1: 2 at the centre only.
        let mut w = [0.0; 18];
        w[..9].fill(1.0);
        w[9 + 4] = 2.0;
        w
    }

    fn inner_product(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(a, b)| a * b).sum()
    }

    #[test]
    fn grouped_strided_padded_forward_matches_hand_values() {
        let x: [f32; 18] = ramp(1.0); // channel 0 = 1..=9, channel 1 = 10..=18
        let mut y = [f32::NAN; 8];
        conv2d(&x, &grouped_weights(), Some(&[0.5, -1.0]), &mut y, &GROUPED);
        // Channel 0: in-bounds 2x2 corner sums of 1..=9 (1+2+4+5, 2+3+5+6, ...) + 0.5.
        // Channel 1: 2 · x1[2·oy, 2·ox] − 1 = 2·{10, 12, 16, 18} − 1.
        assert_close(&y, &[12.5, 16.5, 24.5, 28.5, 19.0, 23.0, 31.0, 35.0], 1e-5);
    }

    #[test]
    fn depthwise_forward_matches_hand_values() {
        // Three channels, one 2x2 filter each over a 2x2 input: y[c] = Σ x[c] · w[c].
        let g = Conv2dGeometry {
            n: 1,
            c_in: 3,
            h: 2,
            w: 2,
            c_out: 3,
            kh: 2,
            kw: 2,
            stride: (1, 1),
            padding: (0, 0),
            groups: 3,
            out_h: 1,
            out_w: 1,
        };
        let x: [f32; 12] = ramp(1.0);
        let w = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, -1.0, -1.0, -1.0, -1.0];
        let mut y = [f32::NAN; 3];
        conv2d(&x, &w, None, &mut y, &g);
        assert_close(&y, &[1.0, 6.0 + 7.0, -(9.0 + 10.0 + 11.0 + 12.0)], 1e-5);
    }

    /// Both gradients are adjoints of the forward map: for a bias-free convolution
    /// `⟨conv(x, w), dy⟩ = ⟨x, grad_input(dy, w)⟩ = ⟨w, grad_weight(dy, x)⟩`.
    #[test]
    fn gradients_are_adjoint_to_the_forward_pass() {
        let x: [f32; 18] = core::array::from_fn(|i| libm::sinf(i as f32));
        let w: [f32; 18] = core::array::from_fn(|i| libm::cosf(0.7 * i as f32));
        let dy: [f32; 8] = core::array::from_fn(|i| 1.0 - 0.3 * i as f32);
        let mut y = [0.0; 8];
        conv2d(&x, &w, None, &mut y, &GROUPED);
        let mut dx = [f32::NAN; 18];
        conv2d_grad_input(&dy, &w, &mut dx, &GROUPED);
        let mut dw = [f32::NAN; 18];
        conv2d_grad_weight(&dy, &x, &mut dw, &GROUPED);
        let forward = inner_product(&y, &dy);
        assert_close(&[inner_product(&x, &dx)], &[forward], 1e-4);
        assert_close(&[inner_product(&w, &dw)], &[forward], 1e-4);
    }

    #[test]
    fn grad_weight_of_grouped_conv_matches_hand_values() {
        // dy = 1 everywhere: dw[oc, 0, ky, kx] sums the inputs that tap reads over the
        // four outputs. The centre tap reads x[{0,2}, {0,2}] of its group's channel.
        let x: [f32; 18] = ramp(1.0);
        let mut dw = [f32::NAN; 18];
        conv2d_grad_weight(&[1.0; 8], &x, &mut dw, &GROUPED);
        assert_close(&dw[4..5], &[1.0 + 3.0 + 7.0 + 9.0], 1e-5);
        assert_close(&dw[13..14], &[10.0 + 12.0 + 16.0 + 18.0], 1e-5);
        // Top-left tap reads x[1, 1] only (output (1, 1)); the others hit padding.
        assert_close(&dw[0..1], &[5.0], 1e-5);
        assert_close(&dw[9..10], &[14.0], 1e-5);
    }
}
