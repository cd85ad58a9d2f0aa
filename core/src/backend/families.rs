//! The kernel families a backend implements, one trait each, over views of the backend's
//! [`Memory`](super::Memory) (`In` to read, `Out` to write). No method has a default.

use super::args::{
    Affine, GradSums, GradsMut, NormAct, ParamUpdate, Running, Saved, SavedMut, TrainStats,
};
use super::{Backend, In, Out};
use crate::error::KernelError;
use crate::geometry::{
    BroadcastDims, ChannelDims, ConcatDims, Conv2dGeometry, LinearDims, PermuteDims,
    Pool2dGeometry, RowDims, SliceDims,
};
use crate::hyperparams::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use crate::quant::chain::{BlockGrads, DepthwiseChainArgs, PointwiseWeights, ProjectionArgs};
use crate::quant::{AddRescale, ConcatRescale, MulRescale, QLayerArgs, QuantParams};
use crate::reference::{Activation, Rectifier};
use half::f16;

/// Dense layers: `y = x · wᵀ + b` and its gradients.
pub trait DenseKernels: Backend {
    fn linear(
        &mut self,
        x: In<'_, Self, f32>,
        w: In<'_, Self, f32>,
        b: Option<In<'_, Self, f32>>,
        y: Out<'_, Self, f32>,
        d: LinearDims,
    );
    fn linear_grad_input(
        &mut self,
        dy: In<'_, Self, f32>,
        w: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: LinearDims,
    );
    fn linear_grad_weight(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        dw: Out<'_, Self, f32>,
        d: LinearDims,
    );
}

/// 2-D convolutions (grouped and depthwise too) and their gradients.
pub trait ConvKernels: Backend {
    fn conv2d(
        &mut self,
        x: In<'_, Self, f32>,
        w: In<'_, Self, f32>,
        b: Option<In<'_, Self, f32>>,
        y: Out<'_, Self, f32>,
        g: &Conv2dGeometry,
    );
    /// [`conv2d`](ConvKernels::conv2d), then `then`'s batch norm and rectifier over its
    /// output, with the same arithmetic as the separate kernels.
    fn conv2d_norm_act(
        &mut self,
        x: In<'_, Self, f32>,
        w: In<'_, Self, f32>,
        b: Option<In<'_, Self, f32>>,
        then: NormAct<'_, Self::Memory>,
        y: Out<'_, Self, f32>,
        g: &Conv2dGeometry,
    );
    fn conv2d_grad_input(
        &mut self,
        dy: In<'_, Self, f32>,
        w: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        g: &Conv2dGeometry,
    );
    fn conv2d_grad_weight(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        dw: Out<'_, Self, f32>,
        g: &Conv2dGeometry,
    );
}

/// Element-wise vector arithmetic and the reductions of gradients into their parameters.
pub trait VectorKernels: Backend {
    fn add(&mut self, a: In<'_, Self, f32>, b: In<'_, Self, f32>, y: Out<'_, Self, f32>);
    fn copy(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>);
    fn fill(&mut self, y: Out<'_, Self, f32>, value: f32);
    /// `acc += scale · g`.
    fn accumulate(&mut self, acc: Out<'_, Self, f32>, g: In<'_, Self, f32>, scale: f32);
    /// `acc[0] += Σ g²`.
    fn sum_squares(&mut self, g: In<'_, Self, f32>, acc: Out<'_, Self, f32>);
    /// A bias gradient: `dy` summed over everything but the channel.
    fn bias_grad(&mut self, dy: In<'_, Self, f32>, db: Out<'_, Self, f32>, d: ChannelDims);
    /// `y` = per outer index, `a`'s block then `b`'s.
    fn concat(
        &mut self,
        a: In<'_, Self, f32>,
        b: In<'_, Self, f32>,
        y: Out<'_, Self, f32>,
        d: ConcatDims,
    );
    /// `part` = the first or, `second`, the second part's blocks of `dy`.
    fn concat_grad(
        &mut self,
        dy: In<'_, Self, f32>,
        part: Out<'_, Self, f32>,
        d: ConcatDims,
        second: bool,
    );
    /// `y` = per outer index, a run of `x`'s block.
    fn slice(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: SliceDims);
    /// `y` = per outer index, zeros with `x`'s block in the run (the converse of a slice).
    fn pad(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: SliceDims);
    /// `y` = `x` with its axes reordered.
    fn transpose(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: PermuteDims);
    /// `y` = `x` repeated along the axes where it has 1.
    fn broadcast(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: BroadcastDims);
    /// `dx` = `dy` summed over the axes a broadcast repeated along.
    fn broadcast_grad(&mut self, dy: In<'_, Self, f32>, dx: Out<'_, Self, f32>, d: BroadcastDims);
}

/// ReLU and ReLU6, out of place and in place, and their gradients.
pub trait ActivationKernels: Backend {
    fn relu(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>);
    fn relu6(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>);
    fn relu_in_place(&mut self, x: Out<'_, Self, f32>);
    fn relu6_in_place(&mut self, x: Out<'_, Self, f32>);
    fn relu_grad(&mut self, y: In<'_, Self, f32>, dy: In<'_, Self, f32>, dx: Out<'_, Self, f32>);
    fn relu6_grad(&mut self, y: In<'_, Self, f32>, dy: In<'_, Self, f32>, dx: Out<'_, Self, f32>);
    fn relu_grad_in_place(&mut self, y: In<'_, Self, f32>, dy: Out<'_, Self, f32>);
    fn relu6_grad_in_place(&mut self, y: In<'_, Self, f32>, dy: Out<'_, Self, f32>);
}

/// The pointwise kernels of [`crate::reference::pointwise`]: the activations of
/// [`Activation`] (sigmoid, hard sigmoid, hard swish, leaky ReLU) with their gradients,
/// and the element-wise product with per-channel broadcasting.
pub trait PointwiseKernels: Backend {
    fn activation(&mut self, f: Activation, x: In<'_, Self, f32>, y: Out<'_, Self, f32>);
    /// `dx = f'(…) · dy`, `saved` being the input or output as [`Activation::gradient_reads`]
    /// says.
    fn activation_grad(
        &mut self,
        f: Activation,
        saved: In<'_, Self, f32>,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
    );
    /// `y = a · b`, `b` of `a`'s size or, with `broadcast`, one factor per channel.
    fn mul(
        &mut self,
        a: In<'_, Self, f32>,
        b: In<'_, Self, f32>,
        y: Out<'_, Self, f32>,
        d: ChannelDims,
        broadcast: bool,
    );
    /// The gradient of a broadcast factor: `db[o, c] = Σ_i dy[o, c, i] · a[o, c, i]`.
    fn mul_grad_factor(
        &mut self,
        dy: In<'_, Self, f32>,
        a: In<'_, Self, f32>,
        db: Out<'_, Self, f32>,
        d: ChannelDims,
    );
}

/// Max, average and global average pooling and their gradients.
pub trait PoolKernels: Backend {
    fn max_pool2d(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, g: &Pool2dGeometry);
    fn max_pool2d_grad(
        &mut self,
        x: In<'_, Self, f32>,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        g: &Pool2dGeometry,
    );
    fn avg_pool2d(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, g: &Pool2dGeometry);
    fn avg_pool2d_grad(
        &mut self,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        g: &Pool2dGeometry,
    );
    fn global_avg_pool(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: ChannelDims);
    fn global_avg_pool_grad(
        &mut self,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: ChannelDims,
    );
}

/// Batch normalisation: training (batch statistics, running statistics updated) and
/// evaluation forms, out of place and in place, and the gradients.
pub trait NormKernels: Backend {
    fn batch_norm_train(
        &mut self,
        x: In<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        stats: TrainStats<'_, Self::Memory>,
        y: Out<'_, Self, f32>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    );
    fn batch_norm_eval(
        &mut self,
        x: In<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        running: Running<'_, Self::Memory>,
        y: Out<'_, Self, f32>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    );
    fn batch_norm_train_in_place(
        &mut self,
        x: Out<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        stats: TrainStats<'_, Self::Memory>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    );
    fn batch_norm_eval_in_place(
        &mut self,
        x: Out<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        running: Running<'_, Self::Memory>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    );
    /// Normalises with saved batch statistics (a recomputed forward pass).
    fn batch_norm_apply(
        &mut self,
        x: In<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        saved: Saved<'_, Self::Memory>,
        y: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    fn batch_norm_grad_input(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        gamma: In<'_, Self, f32>,
        saved: Saved<'_, Self::Memory>,
        dx: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    /// The input gradient of [`NormKernels::batch_norm_train`] from the sums
    /// [`NormKernels::batch_norm_grad_params`] made, without summing again.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_grad_input_from_sums(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        gamma: In<'_, Self, f32>,
        saved: Saved<'_, Self::Memory>,
        sums: GradSums<'_, Self::Memory>,
        dx: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    /// [`NormKernels::batch_norm_grad_input_from_sums`] of a batch norm in f16 storage: `x`
    /// read as f16, and `dx` rounded to f16 (held as f32).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_grad_input_from_sums_f16(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f16>,
        gamma: In<'_, Self, f32>,
        saved: Saved<'_, Self::Memory>,
        sums: GradSums<'_, Self::Memory>,
        dx: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    fn batch_norm_grad_params(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        saved: Saved<'_, Self::Memory>,
        dgamma: Out<'_, Self, f32>,
        dbeta: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    /// [`NormKernels::batch_norm_grad_params`] of a batch norm whose output `rectifier`
    /// rectified, from the rectifier's output gradient `dy`, which it gates in place into
    /// the batch norm's output gradient: the rectifier's gradient, worked out from `x`
    /// with the arithmetic of the forward pass.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_grad_params_rectified(
        &mut self,
        x: In<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        saved: Saved<'_, Self::Memory>,
        dy: Out<'_, Self, f32>,
        grads: GradsMut<'_, Self::Memory>,
        d: ChannelDims,
        rectifier: Rectifier,
    );
    /// [`NormKernels::batch_norm_grad_params_rectified`] of a batch norm in f16 storage:
    /// `x` read as f16, the gate worked out from each pre-activation rounded to f16 (what
    /// the rectifier read) and `dy` rounded to f16 as it passes, with the same sums.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_grad_params_rectified_f16(
        &mut self,
        x: In<'_, Self, f16>,
        p: Affine<'_, Self::Memory>,
        saved: Saved<'_, Self::Memory>,
        dy: Out<'_, Self, f32>,
        grads: GradsMut<'_, Self::Memory>,
        d: ChannelDims,
        rectifier: Rectifier,
    );
    /// Training that normalises with the running statistics (which stay as they are) and
    /// saves them, as mean and inverse standard deviation, for the backward pass.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_running(
        &mut self,
        x: In<'_, Self, f32>,
        p: Affine<'_, Self::Memory>,
        running: Running<'_, Self::Memory>,
        y: Out<'_, Self, f32>,
        saved: SavedMut<'_, Self::Memory>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    );
    /// The input gradient of [`NormKernels::batch_norm_running`]: `dx = gamma · invstd · dy`.
    fn batch_norm_grad_input_running(
        &mut self,
        dy: In<'_, Self, f32>,
        gamma: In<'_, Self, f32>,
        saved: Saved<'_, Self::Memory>,
        dx: Out<'_, Self, f32>,
        d: ChannelDims,
    );
}

/// Layer normalisation over the trailing axes (rows), forward and backward; the backward
/// kernels recompute the row statistics.
pub trait LayerNormKernels: Backend {
    /// Layer normalisation of each row: `y = gamma · (x − mean) · invstd + beta`.
    fn layer_norm(
        &mut self,
        x: In<'_, Self, f32>,
        gamma: In<'_, Self, f32>,
        beta: In<'_, Self, f32>,
        y: Out<'_, Self, f32>,
        d: RowDims,
        eps: f32,
    );
    fn layer_norm_grad_input(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        gamma: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: RowDims,
        eps: f32,
    );
    fn layer_norm_grad_params(
        &mut self,
        dy: In<'_, Self, f32>,
        x: In<'_, Self, f32>,
        dgamma: Out<'_, Self, f32>,
        dbeta: Out<'_, Self, f32>,
        d: RowDims,
        eps: f32,
    );
}

/// Dropout with masks drawn from `(cfg.seed, micro-batch)`, forward, in place and backward.
pub trait DropoutKernels: Backend {
    fn dropout(
        &mut self,
        x: In<'_, Self, f32>,
        y: Out<'_, Self, f32>,
        cfg: DropoutConfig,
        step: u64,
    );
    fn dropout_in_place(&mut self, x: Out<'_, Self, f32>, cfg: DropoutConfig, step: u64);
    fn dropout_grad(
        &mut self,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        cfg: DropoutConfig,
        step: u64,
    );
}

/// Softmax, log-softmax, cross entropy (with labels) and mean squared error, and their gradients.
pub trait LossKernels: Backend {
    fn softmax(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: RowDims);
    fn softmax_grad(
        &mut self,
        y: In<'_, Self, f32>,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: RowDims,
    );
    fn log_softmax(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f32>, d: RowDims);
    /// The gradient from the forward output `y`.
    fn log_softmax_grad(
        &mut self,
        y: In<'_, Self, f32>,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: RowDims,
    );
    fn cross_entropy(
        &mut self,
        logits: In<'_, Self, f32>,
        labels: In<'_, Self, i32>,
        loss: Out<'_, Self, f32>,
        d: RowDims,
    ) -> Result<(), KernelError>;
    fn cross_entropy_grad(
        &mut self,
        logits: In<'_, Self, f32>,
        labels: In<'_, Self, i32>,
        dloss: In<'_, Self, f32>,
        dlogits: Out<'_, Self, f32>,
        d: RowDims,
    ) -> Result<(), KernelError>;
    fn mse(&mut self, pred: In<'_, Self, f32>, target: In<'_, Self, f32>, loss: Out<'_, Self, f32>);
    fn mse_grad(
        &mut self,
        pred: In<'_, Self, f32>,
        target: In<'_, Self, f32>,
        dloss: In<'_, Self, f32>,
        dpred: Out<'_, Self, f32>,
    );
}

/// Optimizer updates and gradient clipping.
pub trait OptimizerKernels: Backend {
    fn sgd_update(
        &mut self,
        u: ParamUpdate<'_, Self::Memory>,
        momentum: Option<Out<'_, Self, f32>>,
        cfg: SgdConfig,
    );
    /// `step` counts updates from 1 (bias correction).
    fn adamw_update(
        &mut self,
        u: ParamUpdate<'_, Self::Memory>,
        m: Out<'_, Self, f32>,
        v: Out<'_, Self, f32>,
        step: u32,
        cfg: AdamWConfig,
    );
    /// `y[0]`: the factor that scales gradients of squared norm `sum[0]` to at most
    /// `max_norm`.
    fn clip_coefficient(&mut self, sum: In<'_, Self, f32>, y: Out<'_, Self, f32>, max_norm: f32);
}

/// Half precision storage: casts between f32 and f16.
pub trait HalfKernels: Backend {
    fn cast_f32_to_f16(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, f16>);
    fn cast_f16_to_f32(&mut self, x: In<'_, Self, f16>, y: Out<'_, Self, f32>);
    /// `h = f16(x)` and `y = f32(h)`: both casts in one pass.
    fn round_through_f16(
        &mut self,
        x: In<'_, Self, f32>,
        h: Out<'_, Self, f16>,
        y: Out<'_, Self, f32>,
    );
    /// [`HalfKernels::round_through_f16`] with `y` written over `x`.
    fn round_through_f16_in_place(&mut self, x: Out<'_, Self, f32>, h: Out<'_, Self, f16>);
    /// `y = rectifier(f32(f16(x)))` and `h = f16(y)` in one pass.
    fn rectify_through_f16(
        &mut self,
        x: In<'_, Self, f32>,
        y: Out<'_, Self, f32>,
        h: Out<'_, Self, f16>,
        rectifier: Rectifier,
    );
    /// [`HalfKernels::rectify_through_f16`] with `y` written over `x`.
    fn rectify_through_f16_in_place(
        &mut self,
        x: Out<'_, Self, f32>,
        h: Out<'_, Self, f16>,
        rectifier: Rectifier,
    );
}

/// Dynamic loss scaling of mixed-precision training.
pub trait LossScaleKernels: Backend {
    /// `unscaled = g / scale[0]`; sets `found_inf[0]` when a value is not finite.
    fn unscale_gradient(
        &mut self,
        g: In<'_, Self, f32>,
        scale: In<'_, Self, f32>,
        unscaled: Out<'_, Self, f32>,
        found_inf: Out<'_, Self, f32>,
    );
    /// Grows or backs off `scale[0]`; `true` when `found_inf[0]` says this step's parameter
    /// updates must be skipped.
    fn update_loss_scale(
        &mut self,
        found_inf: In<'_, Self, f32>,
        scale: Out<'_, Self, f32>,
        good_steps: Out<'_, Self, f32>,
        cfg: LossScaleConfig,
    ) -> bool;
}

/// Int8 inference kernels other than the layers: (de)quantization, add, pooling, copies.
pub trait Int8Kernels: Backend {
    fn quantize(&mut self, x: In<'_, Self, f32>, y: Out<'_, Self, i8>, p: QuantParams);
    fn dequantize(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, f32>, p: QuantParams);
    fn add_s8(
        &mut self,
        a: In<'_, Self, i8>,
        b: In<'_, Self, i8>,
        y: Out<'_, Self, i8>,
        rescale: &AddRescale,
        act: (i8, i8),
    );
    fn max_pool2d_s8(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, i8>, g: &Pool2dGeometry);
    fn avg_pool2d_s8(
        &mut self,
        x: In<'_, Self, i8>,
        x_zp: i32,
        y: Out<'_, Self, i8>,
        g: &Pool2dGeometry,
    );
    fn global_avg_pool_s8(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, i8>, d: ChannelDims);
    fn copy_i8(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, i8>);
    /// Per outer index, the run `start..start + len` of `x`: a slice keeps its quantization.
    fn slice_i8(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, i8>, d: SliceDims);
    /// `y = clamp(x, act)`: a standalone ReLU or ReLU6 in the input's units.
    fn clamp_s8(&mut self, x: In<'_, Self, i8>, y: Out<'_, Self, i8>, act: (i8, i8));
    /// `y = table[x + 128]`: an element-wise function through its 256-entry table.
    fn lut_s8(&mut self, x: In<'_, Self, i8>, table: In<'_, Self, i8>, y: Out<'_, Self, i8>);
    /// `y = a · b` in the real domain; `b` of `a`'s size or, `broadcast`, per channel.
    fn mul_s8(
        &mut self,
        a: In<'_, Self, i8>,
        b: In<'_, Self, i8>,
        y: Out<'_, Self, i8>,
        rescale: &MulRescale,
        d: ChannelDims,
        broadcast: bool,
    );
    /// `y` = per outer index, `a`'s block then `b`'s, in the output's quantization.
    fn concat_s8(
        &mut self,
        a: In<'_, Self, i8>,
        b: In<'_, Self, i8>,
        y: Out<'_, Self, i8>,
        d: ConcatDims,
        rescale: &ConcatRescale,
    );
}

/// Int8 convolutions and dense layers, bit-exact with the reference.
pub trait Int8LayerKernels: Backend {
    fn conv2d_s8(&mut self, a: &QLayerArgs<'_, Conv2dGeometry, Self::Memory>, y: Out<'_, Self, i8>);
    fn linear_s8(&mut self, a: &QLayerArgs<'_, LinearDims, Self::Memory>, y: Out<'_, Self, i8>);
}

/// The input gradients of int8 layers, through their int8 weights: the hot loops of a
/// backward pass through a frozen int8 backbone, which a backend may shape for its core.
pub trait Int8GradInputKernels: Backend {
    /// `dx` = input gradient of a convolution whose weights are `w_scale[o] · w`.
    fn conv2d_grad_input_s8(
        &mut self,
        dy: In<'_, Self, f32>,
        w: In<'_, Self, i8>,
        w_scale: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        g: &Conv2dGeometry,
    );
    /// `dx` = input gradient of a dense layer whose weights are `w_scale[m] · w`.
    fn linear_grad_input_s8(
        &mut self,
        dy: In<'_, Self, f32>,
        w: In<'_, Self, i8>,
        w_scale: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        d: LinearDims,
    );
}

/// Quantization-aware training of int8 layers: rounding trained weights and biases to
/// codes, and the gradients through the quantized forward pass but for the layers' input
/// gradients ([`Int8GradInputKernels`]).
pub trait Int8TrainingKernels: Backend {
    fn round_weights(&mut self, w_bar: In<'_, Self, f32>, w: Out<'_, Self, i8>);
    fn round_bias(&mut self, b_bar: In<'_, Self, f32>, b: Out<'_, Self, i32>);
    fn clamp_grad(
        &mut self,
        y: In<'_, Self, i8>,
        dy: In<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
        act: (i8, i8),
    );
    /// [`Self::clamp_grad`] with the gradient written over `dy`.
    fn clamp_grad_in_place(&mut self, y: In<'_, Self, i8>, dy: Out<'_, Self, f32>, act: (i8, i8));
    /// `mask` = one bit per `y`, set where [`Self::clamp_grad`] passes the gradient.
    fn clamp_mask(&mut self, y: In<'_, Self, i8>, mask: Out<'_, Self, i8>, act: (i8, i8));
    /// [`Self::clamp_grad`] from the clamp's [`Self::clamp_mask`].
    fn mask_grad(&mut self, mask: In<'_, Self, i8>, dy: In<'_, Self, f32>, dx: Out<'_, Self, f32>);
    /// [`Self::mask_grad`] with the gradient written over `dy`.
    fn mask_grad_in_place(&mut self, mask: In<'_, Self, i8>, dy: Out<'_, Self, f32>);
    /// A depthwise layer's input gradient through the clamp mask of the 1x1 layer `before`
    /// it, a channel at a time: that layer's bias gradient `db` (real units) and input
    /// gradient `dx` (see [`crate::quant::chain`]).
    fn depthwise_chain_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Self::Memory>,
        before: &PointwiseWeights<'_, Self::Memory>,
        db: Out<'_, Self, f32>,
        dx: Out<'_, Self, f32>,
    );
    /// An inverted-residual block's backward pass from its output gradient `a.dy`, a
    /// hidden channel at a time: the `projection`'s input gradient, then
    /// [`Self::depthwise_chain_grad_s8`]'s work (see [`crate::quant::chain::block_grad`]).
    fn block_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Self::Memory>,
        projection: &ProjectionArgs<'_, Self::Memory>,
        before: &PointwiseWeights<'_, Self::Memory>,
        out: BlockGrads<'_, Self::Memory>,
    );
    /// [`Self::block_grad_s8`] without the block's input gradient.
    fn block_bias_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Self::Memory>,
        projection: &ProjectionArgs<'_, Self::Memory>,
        db_depthwise: Out<'_, Self, f32>,
        db: Out<'_, Self, f32>,
        scratch: Out<'_, Self, f32>,
    );
    /// [`Self::depthwise_chain_grad_s8`] without the earlier layer's input gradient.
    fn depthwise_chain_bias_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Self::Memory>,
        db: Out<'_, Self, f32>,
    );
    fn dequantize_weights(
        &mut self,
        w: In<'_, Self, i8>,
        scale: In<'_, Self, f32>,
        w_real: Out<'_, Self, f32>,
        d: ChannelDims,
    );
    fn channel_scale(
        &mut self,
        g: In<'_, Self, f32>,
        scale: In<'_, Self, f32>,
        out: Out<'_, Self, f32>,
        unit: f32,
        power: i8,
        d: ChannelDims,
    );
}
