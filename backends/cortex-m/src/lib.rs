//! sprout's Cortex-M backend (`no_std`): [`CortexM`] implements the kernel families with f32 kernels
//! shaped for the Cortex-M4F/M7 FPU, and [`int8`] holds the int8 convolution and dense
//! kernels: a DSP-SIMD path (`SXTB16` + `SMLAD`, inline assembly) on cores with the DSP
//! extension (`thumbv7em`) and a scalar path everywhere else (`thumbv6m`, the host).
//!
//! Every kernel gives the reference kernel's result: the int8 ones bit for bit, the f32 ones
//! within the conformance suite's reduction tolerance (they add in another order).
#![no_std]

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod float;
pub mod int8;
mod pointwise;

use sprout_core::backend::{
    Backend, ConvKernels, DenseKernels, Int8GradInputKernels, Int8LayerKernels, NormAct,
};
use sprout_core::geometry::{Conv2dGeometry, LinearDims};
use sprout_core::quant::{backward, QConv2dArgs, QLinearArgs};
use sprout_core::{inherit_reference, Host};

/// The Cortex-M backend: FPU-friendly dense layers and convolutions (forward and
/// gradients), the int8 convolution and dense kernels of [`int8`], and inlined pointwise
/// activations; every other kernel family is the reference kernels, by
/// [`inherit_reference!`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CortexM;

impl Backend for CortexM {
    type Memory = Host;
}

inherit_reference!(CortexM: Vector, Activation, Pool, Norm, LayerNorm, Dropout, Loss, Optimizer, Half, LossScale, Int8, Int8Training);

/// The input gradients through int8 weights run [`float`]'s row loops, reading each weight
/// as its scale times its code; the rest of quantization-aware training (rounding, clamp
/// masks, the fused depthwise chains, which gather, so their sums are short and bit-exact)
/// is the reference's.
impl Int8GradInputKernels for CortexM {
    fn conv2d_grad_input_s8(
        &mut self,
        dy: &[f32],
        w: &[i8],
        w_scale: &[f32],
        dx: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        float::conv2d_grad_input_by(dy, backward::dequantized(w, w_scale), dx, g)
    }
    fn linear_grad_input_s8(
        &mut self,
        dy: &[f32],
        w: &[i8],
        w_scale: &[f32],
        dx: &mut [f32],
        d: LinearDims,
    ) {
        float::linear_grad_input_by(dy, backward::dequantized(w, w_scale), dx, d)
    }
}

impl Int8LayerKernels for CortexM {
    fn conv2d_s8(&mut self, a: &QConv2dArgs<'_>, y: &mut [i8]) {
        int8::conv2d_s8(a, y)
    }
    fn linear_s8(&mut self, a: &QLinearArgs<'_>, y: &mut [i8]) {
        int8::linear_s8(a, y)
    }
}

impl DenseKernels for CortexM {
    fn linear(&mut self, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
        float::linear(x, w, b, y, d)
    }
    fn linear_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
        float::linear_grad_input(dy, w, dx, d)
    }
    fn linear_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
        float::linear_grad_weight(dy, x, dw, d)
    }
}

impl ConvKernels for CortexM {
    fn conv2d(
        &mut self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        y: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        float::conv2d(x, w, b, y, g)
    }
    fn conv2d_norm_act(
        &mut self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        then: NormAct<'_, Host>,
        y: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        float::conv2d(x, w, b, y, g);
        sprout_core::reference::norm_act_in_place(y, then.frozen_norm(), then.rectifier, g)
    }
    fn conv2d_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
        float::conv2d_grad_input(dy, w, dx, g)
    }
    fn conv2d_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
        float::conv2d_grad_weight(dy, x, dw, g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::backend::{ConvKernels, DenseKernels};
    use sprout_core::geometry::ChannelDims;

    extern crate std;
    use std::vec::Vec;

    /// The input gradients through int8 weights are the f32 kernels' over the dequantized
    /// weights, bit for bit: the same products in the same order.
    #[test]
    fn int8_weight_input_gradients_match_the_dequantized_f32_kernels() {
        let g = Conv2dGeometry {
            n: 1,
            c_in: 4,
            h: 6,
            w: 5,
            c_out: 4,
            kh: 3,
            kw: 3,
            stride: (2, 2),
            padding: (1, 1),
            groups: 4,
            out_h: 3,
            out_w: 3,
        };
        let w: Vec<i8> = (0..g.weight_len()).map(|i| (i as i32 * 53 % 255 - 127) as i8).collect();
        let scale = [0.011, 0.25, 0.0031, 1.5];
        let dy: Vec<f32> = (0..g.output_len()).map(|i| (i as f32 * 0.61).cos()).collect();
        let per = ChannelDims { outer: 1, channels: 4, inner: g.weight_len() / 4 };
        let mut real = std::vec![0f32; w.len()];
        backward::dequantize_weights(&w, &scale, &mut real, per);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (mut want, mut got) = (std::vec![0f32; g.input_len()], std::vec![0f32; g.input_len()]);
        CortexM.conv2d_grad_input(&dy, &real, &mut want, &g);
        CortexM.conv2d_grad_input_s8(&dy, &w, &scale, &mut got, &g);
        assert_eq!(bits(&got), bits(&want));
        assert!(got.iter().any(|&v| v != 0.0));
        let d = LinearDims { n: 2, k: 9, m: 4 };
        let (w, dy) = (&w[..d.m * d.k], &dy[..d.n * d.m]);
        let mut real = std::vec![0f32; w.len()];
        let per = ChannelDims { outer: 1, channels: 4, inner: d.k };
        backward::dequantize_weights(w, &scale, &mut real, per);
        let (mut want, mut got) = (std::vec![0f32; d.n * d.k], std::vec![0f32; d.n * d.k]);
        CortexM.linear_grad_input(dy, &real, &mut want, d);
        CortexM.linear_grad_input_s8(dy, w, &scale, &mut got, d);
        assert_eq!(bits(&got), bits(&want));
    }
}
