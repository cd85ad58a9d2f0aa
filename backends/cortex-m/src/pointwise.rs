//! The pointwise family on Cortex-M: the activations run one loop per kind with the formula
//! inlined (the reference calls it per element to stay small), giving the reference's
//! values bit for bit; the product and its factor gradient are the reference's loops.

use crate::CortexM;
use sprout_core::backend::PointwiseKernels;
use sprout_core::geometry::ChannelDims;
use sprout_core::reference::{self as r, pointwise, Activation};

impl PointwiseKernels for CortexM {
    fn activation(&mut self, f: Activation, x: &[f32], y: &mut [f32]) {
        pointwise::activation_by_kind(f, x, y)
    }
    fn activation_grad(&mut self, f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
        pointwise::activation_grad_by_kind(f, saved, dy, dx)
    }
    fn mul(&mut self, a: &[f32], b: &[f32], y: &mut [f32], d: ChannelDims, broadcast: bool) {
        r::mul(a, b, y, d, broadcast)
    }
    fn mul_grad_factor(&mut self, dy: &[f32], a: &[f32], db: &mut [f32], d: ChannelDims) {
        r::mul_grad_factor(dy, a, db, d)
    }
}
