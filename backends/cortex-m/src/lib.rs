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

use sprout_core::backend::{Backend, ConvKernels, DenseKernels, Int8LayerKernels, NormAct};
use sprout_core::geometry::{Conv2dGeometry, LinearDims};
use sprout_core::quant::{QConv2dArgs, QLinearArgs};
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

inherit_reference!(CortexM: Vector, Activation, Pool, Norm, LayerNorm, Dropout, Loss, Optimizer, Half, Int8,
    Int8Training);

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
