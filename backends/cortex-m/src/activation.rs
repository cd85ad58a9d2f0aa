//! The activation family on Cortex-M: ReLU and ReLU6 are the reference kernels; the other
//! pointwise activations run one loop per kind with the formula inlined (the reference
//! calls it per element to stay small), giving the reference's values bit for bit.

use crate::CortexM;
use sprout_core::backend::ActivationKernels;
use sprout_core::reference::{self as r, pointwise, Activation};

impl ActivationKernels for CortexM {
    fn relu(&mut self, x: &[f32], y: &mut [f32]) {
        r::relu(x, y)
    }
    fn relu6(&mut self, x: &[f32], y: &mut [f32]) {
        r::relu6(x, y)
    }
    fn relu_in_place(&mut self, x: &mut [f32]) {
        r::relu_in_place(x)
    }
    fn relu6_in_place(&mut self, x: &mut [f32]) {
        r::relu6_in_place(x)
    }
    fn relu_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        r::relu_grad(y, dy, dx)
    }
    fn relu6_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        r::relu6_grad(y, dy, dx)
    }
    fn relu_grad_in_place(&mut self, y: &[f32], dy: &mut [f32]) {
        r::relu_grad_in_place(y, dy)
    }
    fn relu6_grad_in_place(&mut self, y: &[f32], dy: &mut [f32]) {
        r::relu6_grad_in_place(y, dy)
    }
    fn activation(&mut self, f: Activation, x: &[f32], y: &mut [f32]) {
        pointwise::activation_by_kind(f, x, y)
    }
    fn activation_grad(&mut self, f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
        pointwise::activation_grad_by_kind(f, saved, dy, dx)
    }
}
