//! sprout-cpu: the desktop CPU backend. Dense layers and convolutions run as GEMMs over a
//! persistent thread pool (register-blocked kernels where both operands' rows are
//! contiguous and for convolutions' weight gradients, `matrixmultiply` otherwise), int8 layers
//! over column matrices; the activations (ReLU, ReLU6 and the pointwise family) and batch norm are vector loops
//! compiled for AVX-512F / AVX2 / the baseline (NEON on aarch64), chosen at run time; every
//! other kernel is the reference kernel, by [`inherit_reference!`] or explicitly.
//!
//! Convolutions lower to GEMM through im2col (pointwise ones multiply their input
//! directly), except depthwise ones, which run direct vector loops over whole planes. The forward
//! and input-gradient passes split the batch over threads, the rest split output rows or
//! channels (a weight gradient once for the whole batch).
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

mod cast;
mod conv;
mod dense;
mod depthwise;
mod epilogue;
mod gemm;
mod huge_pages;
mod im2col;
mod int8;
mod norm;
mod optim;
mod parallel;
mod pointwise;
mod pool;
mod profile;
mod same_depthwise;
#[cfg(target_arch = "x86_64")]
mod strided_depthwise;
mod window;

use std::sync::Arc;

use depthwise::runs_direct;
use half::f16;
use huge_pages::grow;
use parallel::{for_each_span, for_each_span_pair};
use pool::Pool;
use sprout_core::backend::{
    ActivationKernels, Affine, Backend, ConvKernels, DenseKernels, GradSums, GradsMut, HalfKernels,
    Int8LayerKernels, NormAct, NormKernels, OptimizerKernels, ParamUpdate, PointwiseKernels,
    Running, Saved, SavedMut, TrainStats,
};
use sprout_core::geometry::{ChannelDims, Conv2dGeometry, LinearDims};
use sprout_core::hyperparams::{AdamWConfig, BatchNormConfig, SgdConfig};
use sprout_core::quant::{QConv2dArgs, QLinearArgs};
use sprout_core::reference::{self as r, Activation, Rectifier};
use sprout_core::{inherit_reference, Host};

pub use huge_pages::advise_memory as advise_huge_pages;
pub use profile::{KernelProfile, KernelTime};

/// The CPU backend: its thread pool, and the im2col scratch buffer.
///
/// Allocation: the first convolution of each new, larger size grows the scratch buffer
/// (to `threads` column matrices of the largest convolution, or the batch's for its weight
/// gradient), asking Linux for huge pages under it; after one training step
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

    /// The pool, and scratch for a depthwise convolution's workers (one piece per thread).
    fn depthwise_scratch(&mut self, g: &Conv2dGeometry) -> (&Pool, &mut [f32]) {
        let len = depthwise::scratch_len(g, self.pool.threads());
        (&self.pool, grow(&mut self.scratch, len))
    }

    /// A convolution, each output then put through `then`, if any: direct for depthwise
    /// ones, GEMMs otherwise.
    fn conv2d_then(
        &mut self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        then: Option<&epilogue::Epilogue<'_>>,
        y: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        if runs_direct(g) {
            let (pool, scratch) = self.depthwise_scratch(g);
            return depthwise::conv2d(pool, scratch, x, w, b, then, y, g);
        }
        let len = conv::batch_workers(&self.pool, g) * conv::scratch_per_worker(g);
        let scratch = grow(&mut self.scratch, len);
        conv::conv2d(&self.pool, scratch, x, w, b, then, y, g)
    }

    /// Training-mode batch norm of `src` into `y` (of `y` in place without `src`): the
    /// batch statistics in one read (`norm::batch_stats`), saved and folded into the
    /// running ones, then `y` normalised with them.
    fn batch_norm_train_from(
        &mut self,
        src: Option<&[f32]>,
        y: &mut [f32],
        p: Affine<'_, Host>,
        s: TrainStats<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        let pairs = grow(&mut self.scratch, norm::pairs_len(&self.pool, d));
        let (mean, invstd) = (s.saved_mean, s.saved_invstd);
        let stats = norm::Stats {
            running_mean: s.running_mean,
            running_var: s.running_var,
            saved_mean: &mut *mean,
            saved_invstd: &mut *invstd,
        };
        norm::batch_stats(&self.pool, src.unwrap_or(y), pairs, stats, d, cfg);
        let channels = norm::Channels { gamma: p.gamma, beta: p.beta, mean, invstd };
        norm::normalize(&self.pool, src, y, d, channels)
    }

    /// Evaluation-mode batch norm of `src` into `y` (of `y` in place without `src`), with
    /// the running statistics.
    fn batch_norm_eval_from(
        &mut self,
        src: Option<&[f32]>,
        y: &mut [f32],
        p: Affine<'_, Host>,
        running: Running<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        let invstd = grow(&mut self.scratch, d.channels);
        norm::eval_invstd(running.var, invstd, cfg);
        let channels = norm::Channels { gamma: p.gamma, beta: p.beta, mean: running.mean, invstd };
        norm::normalize(&self.pool, src, y, d, channels)
    }
}

impl Default for Cpu {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for Cpu {
    type Memory = Host;
}

inherit_reference!(Cpu: Vector, Pool, LayerNorm, Dropout, Loss, LossScale, Int8, Int8GradInput,
    Int8Training);

/// SGD and the clipping coefficient are the reference's; AdamW is its update in one vector
/// loop (`optim`), bit for bit the same.
impl OptimizerKernels for Cpu {
    fn sgd_update(
        &mut self,
        u: ParamUpdate<'_, Host>,
        momentum: Option<&mut [f32]>,
        cfg: SgdConfig,
    ) {
        let scale = u.grad_scale();
        r::sgd_update(u.param, u.grad, momentum, u.learning_rate, scale, cfg)
    }
    fn adamw_update(
        &mut self,
        u: ParamUpdate<'_, Host>,
        m: &mut [f32],
        v: &mut [f32],
        step: u32,
        cfg: AdamWConfig,
    ) {
        let scale = u.grad_scale();
        let update = r::AdamWStep::new(u.learning_rate, scale, step, cfg);
        optim::adamw(u.param, u.grad, m, v, update)
    }
    fn clip_coefficient(&mut self, sum: &[f32], y: &mut [f32], max_norm: f32) {
        r::fill(y, r::clip_coefficient(sum[0], max_norm))
    }
}

/// Batch norm as per-channel vector sums split over channels, both sums of a pass in one
/// read, then one element-wise pass from input to output split over samples (`norm`).
impl NormKernels for Cpu {
    fn batch_norm_train(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        s: TrainStats<'_, Host>,
        y: &mut [f32],
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        self.batch_norm_train_from(Some(x), y, p, s, d, cfg)
    }
    fn batch_norm_eval(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        running: Running<'_, Host>,
        y: &mut [f32],
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        self.batch_norm_eval_from(Some(x), y, p, running, d, cfg)
    }
    fn batch_norm_train_in_place(
        &mut self,
        x: &mut [f32],
        p: Affine<'_, Host>,
        s: TrainStats<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        self.batch_norm_train_from(None, x, p, s, d, cfg)
    }
    fn batch_norm_eval_in_place(
        &mut self,
        x: &mut [f32],
        p: Affine<'_, Host>,
        running: Running<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        self.batch_norm_eval_from(None, x, p, running, d, cfg)
    }
    fn batch_norm_apply(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        saved: Saved<'_, Host>,
        y: &mut [f32],
        d: ChannelDims,
    ) {
        let (gamma, beta, mean, invstd) = (p.gamma, p.beta, saved.mean, saved.invstd);
        norm::normalize(&self.pool, Some(x), y, d, norm::Channels { gamma, beta, mean, invstd })
    }
    fn batch_norm_grad_input(
        &mut self,
        dy: &[f32],
        x: &[f32],
        gamma: &[f32],
        saved: Saved<'_, Host>,
        dx: &mut [f32],
        d: ChannelDims,
    ) {
        let len = 2 * d.channels + norm::pairs_len(&self.pool, d);
        let (sums, pairs) = grow(&mut self.scratch, len).split_at_mut(2 * d.channels);
        let (sum_dy, sum_xhat) = sums.split_at_mut(d.channels);
        let (mean, invstd) = (saved.mean, saved.invstd);
        norm::grad_sums(&self.pool, dy, x, mean, invstd, pairs, sum_dy, sum_xhat, d);
        let sums = [&*sum_dy, &*sum_xhat];
        norm::grad_input(&self.pool, dy, x, gamma, mean, invstd, sums, dx, d)
    }
    fn batch_norm_grad_input_from_sums(
        &mut self,
        dy: &[f32],
        x: &[f32],
        gamma: &[f32],
        saved: Saved<'_, Host>,
        sums: GradSums<'_, Host>,
        dx: &mut [f32],
        d: ChannelDims,
    ) {
        let (mean, invstd, sums) = (saved.mean, saved.invstd, [sums.dbeta, sums.dgamma]);
        norm::grad_input(&self.pool, dy, x, gamma, mean, invstd, sums, dx, d)
    }
    fn batch_norm_grad_input_from_sums_f16(
        &mut self,
        dy: &[f32],
        x: &[f16],
        gamma: &[f32],
        saved: Saved<'_, Host>,
        sums: GradSums<'_, Host>,
        dx: &mut [f32],
        d: ChannelDims,
    ) {
        let (mean, invstd, sums) = (saved.mean, saved.invstd, [sums.dbeta, sums.dgamma]);
        norm::grad_input_f16(&self.pool, dy, x, gamma, mean, invstd, sums, dx, d)
    }
    fn batch_norm_grad_params(
        &mut self,
        dy: &[f32],
        x: &[f32],
        saved: Saved<'_, Host>,
        dgamma: &mut [f32],
        dbeta: &mut [f32],
        d: ChannelDims,
    ) {
        let pairs = grow(&mut self.scratch, norm::pairs_len(&self.pool, d));
        let (mean, invstd) = (saved.mean, saved.invstd);
        norm::grad_sums(&self.pool, dy, x, mean, invstd, pairs, dbeta, dgamma, d)
    }
    fn batch_norm_grad_params_rectified(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        saved: Saved<'_, Host>,
        dy: &mut [f32],
        grads: GradsMut<'_, Host>,
        d: ChannelDims,
        rectifier: Rectifier,
    ) {
        let pairs = grow(&mut self.scratch, norm::pairs_len(&self.pool, d));
        let (gamma, beta, mean, invstd) = (p.gamma, p.beta, saved.mean, saved.invstd);
        let channels = norm::Channels { gamma, beta, mean, invstd };
        let sums = [grads.dbeta, grads.dgamma];
        norm::grad_sums_rectified(&self.pool, dy, x, channels, rectifier, pairs, sums, d)
    }
    fn batch_norm_grad_params_rectified_f16(
        &mut self,
        x: &[f16],
        p: Affine<'_, Host>,
        saved: Saved<'_, Host>,
        dy: &mut [f32],
        grads: GradsMut<'_, Host>,
        d: ChannelDims,
        rectifier: Rectifier,
    ) {
        let pairs = grow(&mut self.scratch, norm::pairs_len(&self.pool, d));
        let (gamma, beta, mean, invstd) = (p.gamma, p.beta, saved.mean, saved.invstd);
        let channels = norm::Channels { gamma, beta, mean, invstd };
        let sums = [grads.dbeta, grads.dgamma];
        norm::grad_sums_rectified_f16(&self.pool, dy, x, channels, rectifier, pairs, sums, d)
    }
    fn batch_norm_running(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        running: Running<'_, Host>,
        y: &mut [f32],
        saved: SavedMut<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        r::save_running_statistics(running.mean, running.var, saved.mean, saved.invstd, cfg);
        let (gamma, beta, mean, invstd) = (p.gamma, p.beta, &*saved.mean, &*saved.invstd);
        norm::normalize(&self.pool, Some(x), y, d, norm::Channels { gamma, beta, mean, invstd })
    }
    fn batch_norm_grad_input_running(
        &mut self,
        dy: &[f32],
        gamma: &[f32],
        saved: Saved<'_, Host>,
        dx: &mut [f32],
        d: ChannelDims,
    ) {
        r::batch_norm_grad_input_running(dy, gamma, saved.invstd, dx, d)
    }
}

/// ReLU and ReLU6 are branch-free vectorized loops (`pointwise`), bit-identical to the
/// reference's, whose conditional store per element mispredicts on real activations; long
/// tensors are cut into spans over threads.
impl ActivationKernels for Cpu {
    fn relu(&mut self, x: &[f32], y: &mut [f32]) {
        for_each_span(&self.pool, y, |at, y| pointwise::relu(&x[at..][..y.len()], y))
    }
    fn relu6(&mut self, x: &[f32], y: &mut [f32]) {
        for_each_span(&self.pool, y, |at, y| pointwise::relu6(&x[at..][..y.len()], y))
    }
    fn relu_in_place(&mut self, x: &mut [f32]) {
        for_each_span(&self.pool, x, |_, x| pointwise::relu_in_place(x))
    }
    fn relu6_in_place(&mut self, x: &mut [f32]) {
        for_each_span(&self.pool, x, |_, x| pointwise::relu6_in_place(x))
    }
    fn relu_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        for_each_span(&self.pool, dx, |at, dx| {
            pointwise::relu_grad(&y[at..][..dx.len()], &dy[at..][..dx.len()], dx)
        })
    }
    fn relu6_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        for_each_span(&self.pool, dx, |at, dx| {
            pointwise::relu6_grad(&y[at..][..dx.len()], &dy[at..][..dx.len()], dx)
        })
    }
    fn relu_grad_in_place(&mut self, y: &[f32], dy: &mut [f32]) {
        for_each_span(&self.pool, dy, |at, dy| {
            pointwise::relu_grad_in_place(&y[at..][..dy.len()], dy)
        })
    }
    fn relu6_grad_in_place(&mut self, y: &[f32], dy: &mut [f32]) {
        for_each_span(&self.pool, dy, |at, dy| {
            pointwise::relu6_grad_in_place(&y[at..][..dy.len()], dy)
        })
    }
}

/// The pointwise activations are one vectorized loop each, cut into spans over threads
/// like ReLU's, and the broadcast factor's gradient a vectorized reduction (`pointwise`);
/// `mul` is the reference's loop, which the compiler already vectorizes.
impl PointwiseKernels for Cpu {
    fn activation(&mut self, f: Activation, x: &[f32], y: &mut [f32]) {
        for_each_span(&self.pool, y, |at, y| pointwise::activation(f, &x[at..][..y.len()], y))
    }
    fn activation_grad(&mut self, f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
        for_each_span(&self.pool, dx, |at, dx| {
            let (saved, dy) = (&saved[at..][..dx.len()], &dy[at..][..dx.len()]);
            pointwise::activation_grad(f, saved, dy, dx)
        })
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
        self.conv2d_then(x, w, b, None, y, g)
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
        let then = epilogue::Epilogue { norm: then.frozen_norm(), rectifier: then.rectifier };
        self.conv2d_then(x, w, b, Some(&then), y, g)
    }
    fn conv2d_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
        if runs_direct(g) {
            let (pool, scratch) = self.depthwise_scratch(g);
            return depthwise::conv2d_grad_input(pool, scratch, dy, w, dx, g);
        }
        let scratch = grow(&mut self.scratch, conv::grad_input_scratch(&self.pool, g));
        conv::conv2d_grad_input(&self.pool, scratch, dy, w, dx, g)
    }
    fn conv2d_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
        if runs_direct(g) {
            let len = depthwise::grad_weight_scratch_len(g, self.pool.threads());
            let scratch = grow(&mut self.scratch, len);
            return depthwise::conv2d_grad_weight(&self.pool, scratch, dy, x, dw, g);
        }
        let scratch = grow(&mut self.scratch, conv::grad_weight_scratch(&self.pool, g));
        conv::conv2d_grad_weight(&self.pool, scratch, dy, x, dw, g)
    }
}

/// f16 casts as F16C vector loops where the CPU has them (`cast`; the same rounding as the
/// reference's scalar casts), split over the pool like any element-wise pass.
impl HalfKernels for Cpu {
    fn cast_f32_to_f16(&mut self, x: &[f32], y: &mut [f16]) {
        for_each_span(&self.pool, y, |at, y| cast::f32_to_f16(&x[at..][..y.len()], y))
    }
    fn cast_f16_to_f32(&mut self, x: &[f16], y: &mut [f32]) {
        for_each_span(&self.pool, y, |at, y| cast::f16_to_f32(&x[at..][..y.len()], y))
    }
    /// Both casts of a span while it is in cache.
    fn round_through_f16(&mut self, x: &[f32], h: &mut [f16], y: &mut [f32]) {
        for_each_span_pair(&self.pool, y, h, |at, y, h| {
            cast::f32_to_f16(&x[at..][..y.len()], h);
            cast::f16_to_f32(h, y)
        })
    }
    fn round_through_f16_in_place(&mut self, x: &mut [f32], h: &mut [f16]) {
        for_each_span_pair(&self.pool, x, h, |_, x, h| {
            cast::f32_to_f16(x, h);
            cast::f16_to_f32(h, x)
        })
    }
    /// The round trip, the rectifier and the cast of a span while it is in cache.
    fn rectify_through_f16(&mut self, x: &[f32], y: &mut [f32], h: &mut [f16], r: Rectifier) {
        for_each_span_pair(&self.pool, y, h, |at, y, h| {
            y.copy_from_slice(&x[at..][..y.len()]);
            rectify_through_span(y, h, r)
        })
    }
    fn rectify_through_f16_in_place(&mut self, x: &mut [f32], h: &mut [f16], r: Rectifier) {
        for_each_span_pair(&self.pool, x, h, |_, x, h| rectify_through_span(x, h, r))
    }
}

/// A span of [`HalfKernels::rectify_through_f16_in_place`]: F16C loops over whole eights,
/// the rest cast there and back around the rectifier loop `relu6_in_place` runs.
fn rectify_through_span(x: &mut [f32], h: &mut [f16], rectifier: Rectifier) {
    let done = cast::rectify_through_f16c(x, h, rectifier.relu6);
    let (x, h) = (&mut x[done..], &mut h[done..]);
    cast::f32_to_f16(x, h);
    cast::f16_to_f32(h, x);
    match rectifier.relu6 {
        true => pointwise::relu6_in_place(x),
        false => pointwise::relu_in_place(x),
    }
    cast::f32_to_f16(x, h)
}

impl Int8LayerKernels for Cpu {
    fn conv2d_s8(&mut self, a: &QConv2dArgs<'_>, y: &mut [i8]) {
        int8::conv2d_s8(&mut self.int8, a, y)
    }
    fn linear_s8(&mut self, a: &QLinearArgs<'_>, y: &mut [i8]) {
        int8::linear_s8(&mut self.int8, a, y)
    }
}
