//! sprout-cpu: the desktop CPU backend. Dense layers and convolutions run as GEMMs
//! (`matrixmultiply`) over a persistent thread pool, int8 layers over column matrices, pointwise
//! activations as vectorized loops; every other kernel is the reference kernel,
//! by [`inherit_reference!`] or explicitly.
//!
//! Convolutions lower to GEMM through im2col (pointwise ones multiply their input
//! directly), except depthwise ones, which run direct loops per plane. The forward and
//! input-gradient passes split the batch over threads, the rest split output rows.
//!
//! ```
//! use sprout_core::geometry::LinearDims;
//! use sprout_core::backend::DenseKernels;
//! use sprout_cpu::Cpu;
//!
//! let mut cpu = Cpu::with_threads(2);
//! let mut y = [0.0; 2];
//! let d = LinearDims { n: 1, k: 2, m: 2 };
//! cpu.linear(&[1.0, 2.0], &[1.0, 0.0, 3.0, -1.0], Some(&[0.5, 0.5]), &mut y, d);
//! assert_eq!(y, [1.5, 1.5]);
//! ```

#[macro_use]
mod simd;

mod conv;
mod dense;
mod depthwise;
mod gemm;
mod im2col;
mod int8;
mod parallel;
mod pointwise;
mod pool;
mod window;

use std::sync::Arc;

use depthwise::is_depthwise;
use pool::Pool;
use sprout_core::backend::{
    Backend, ConvKernels, DenseKernels, Int8LayerKernels, PointwiseKernels,
};
use sprout_core::geometry::{ChannelDims, Conv2dGeometry, LinearDims};
use sprout_core::quant::{QConv2dArgs, QLinearArgs};
use sprout_core::reference::{self as r, Activation};
use sprout_core::{inherit_reference, Host};

/// The CPU backend: its thread pool, and the im2col scratch buffer.
///
/// Allocation: the first convolution of each new, larger size grows the scratch buffer
/// (to `threads` column matrices of the largest convolution); after one training step
/// every later step reuses it and allocates nothing. The pool's `threads - 1` worker
/// threads start with the backend, park between kernels and are woken only for kernels
/// big enough to repay them; clones share the pool, dropping the last one stops it.
#[derive(Clone, Debug)]
pub struct Cpu {
    pool: Arc<Pool>,
    scratch: Vec<f32>,
    int8: int8::Int8Scratch,
}

impl Cpu {
    /// A backend using every core `std::thread::available_parallelism` reports.
    pub fn new() -> Self {
        Self::with_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// A backend using at most `threads` threads (at least one).
    pub fn with_threads(threads: usize) -> Self {
        let pool = Arc::new(Pool::new(threads));
        Self { pool, scratch: Vec::new(), int8: Default::default() }
    }

    /// Threads a kernel may use.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }
}

/// The first `len` values of `scratch`, grown to hold them.
fn grow(scratch: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if scratch.len() < len {
        scratch.resize(len, 0.0);
    }
    &mut scratch[..len]
}

impl Default for Cpu {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for Cpu {
    type Memory = Host;
}

inherit_reference!(Cpu: Vector, Activation, Pool, Norm, Dropout, Loss, Optimizer, Half, Int8,
    Int8Training);

/// The pointwise activations are one vectorized loop each and the broadcast factor's
/// gradient a vectorized reduction (`pointwise`); `mul` is the reference's loop, which the
/// compiler already vectorizes.
impl PointwiseKernels for Cpu {
    fn activation(&mut self, f: Activation, x: &[f32], y: &mut [f32]) {
        pointwise::activation(f, x, y)
    }
    fn activation_grad(&mut self, f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
        pointwise::activation_grad(f, saved, dy, dx)
    }
    fn mul(&mut self, a: &[f32], b: &[f32], y: &mut [f32], d: ChannelDims, broadcast: bool) {
        r::mul(a, b, y, d, broadcast)
    }
    fn mul_grad_factor(&mut self, dy: &[f32], a: &[f32], db: &mut [f32], d: ChannelDims) {
        pointwise::mul_grad_factor(dy, a, db, d)
    }
}

impl DenseKernels for Cpu {
    fn linear(&mut self, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
        dense::linear(&self.pool, x, w, b, y, d)
    }
    fn linear_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
        dense::linear_grad_input(&self.pool, dy, w, dx, d)
    }
    fn linear_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
        dense::linear_grad_weight(&self.pool, dy, x, dw, d)
    }
}

impl ConvKernels for Cpu {
    fn conv2d(
        &mut self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        y: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        if is_depthwise(g) {
            return depthwise::conv2d(&self.pool, x, w, b, y, g);
        }
        let len = conv::batch_workers(&self.pool, g) * conv::scratch_per_worker(g);
        let scratch = grow(&mut self.scratch, len);
        conv::conv2d(&self.pool, scratch, x, w, b, y, g)
    }
    fn conv2d_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
        if is_depthwise(g) {
            return depthwise::conv2d_grad_input(&self.pool, dy, w, dx, g);
        }
        let len = conv::batch_workers(&self.pool, g) * conv::scratch_per_worker(g);
        let scratch = grow(&mut self.scratch, len);
        conv::conv2d_grad_input(&self.pool, scratch, dy, w, dx, g)
    }
    fn conv2d_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
        if is_depthwise(g) {
            let len = self.pool.threads() * depthwise::grad_weight_scratch(g);
            let scratch = grow(&mut self.scratch, len);
            return depthwise::conv2d_grad_weight(&self.pool, scratch, dy, x, dw, g);
        }
        let scratch = grow(&mut self.scratch, conv::scratch_per_worker(g));
        conv::conv2d_grad_weight(&self.pool, scratch, dy, x, dw, g)
    }
}

impl Int8LayerKernels for Cpu {
    fn conv2d_s8(&mut self, a: &QConv2dArgs<'_>, y: &mut [i8]) {
        int8::conv2d_s8(&mut self.int8, a, y)
    }
    fn linear_s8(&mut self, a: &QLinearArgs<'_>, y: &mut [i8]) {
        int8::linear_s8(&mut self.int8, a, y)
    }
}
