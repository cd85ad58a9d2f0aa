//! The reference kernels as every kernel family, for host-memory backends that choose them
//! with [`InheritReference`] ([`Reference`](super::Reference) chooses all of them).

use super::args::{
    Affine, GradSums, GradsMut, NormAct, ParamUpdate, Running, Saved, SavedMut, TrainStats,
};
use super::families::*;
use super::{family, Backend, Host, InheritReference};
use crate::error::KernelError;
use crate::geometry::{
    BroadcastDims, ChannelDims, ConcatDims, Conv2dGeometry, LinearDims, PermuteDims,
    Pool2dGeometry, RowDims, SliceDims,
};
use crate::hyperparams::{AdamWConfig, BatchNormConfig, DropoutConfig, LossScaleConfig, SgdConfig};
use crate::quant::chain::{BlockGrads, DepthwiseChainArgs, PointwiseWeights, ProjectionArgs};
use crate::quant::{
    self as q, AddRescale, ConcatRescale, MulRescale, QConv2dArgs, QLinearArgs, QuantParams,
};
use crate::reference::{self as r, Activation, Rectifier};
use half::f16;

impl<B: Backend<Memory = Host> + InheritReference<family::Dense>> DenseKernels for B {
    fn linear(&mut self, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32], d: LinearDims) {
        r::linear(x, w, b, y, d)
    }
    fn linear_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], d: LinearDims) {
        r::linear_grad_input(dy, w, dx, d)
    }
    fn linear_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], d: LinearDims) {
        r::linear_grad_weight(dy, x, dw, d)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Conv>> ConvKernels for B {
    fn conv2d(
        &mut self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        y: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        r::conv2d(x, w, b, y, g)
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
        r::conv2d_norm_act(x, w, b, then.frozen_norm(), then.rectifier, y, g)
    }
    fn conv2d_grad_input(&mut self, dy: &[f32], w: &[f32], dx: &mut [f32], g: &Conv2dGeometry) {
        r::conv2d_grad_input(dy, w, dx, g)
    }
    fn conv2d_grad_weight(&mut self, dy: &[f32], x: &[f32], dw: &mut [f32], g: &Conv2dGeometry) {
        r::conv2d_grad_weight(dy, x, dw, g)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Vector>> VectorKernels for B {
    fn add(&mut self, a: &[f32], b: &[f32], y: &mut [f32]) {
        r::add(a, b, y)
    }
    fn copy(&mut self, x: &[f32], y: &mut [f32]) {
        r::copy(x, y)
    }
    fn fill(&mut self, y: &mut [f32], value: f32) {
        r::fill(y, value)
    }
    fn accumulate(&mut self, acc: &mut [f32], g: &[f32], scale: f32) {
        r::accumulate(acc, g, scale)
    }
    fn sum_squares(&mut self, g: &[f32], acc: &mut [f32]) {
        r::sum_squares(g, acc)
    }
    fn bias_grad(&mut self, dy: &[f32], db: &mut [f32], d: ChannelDims) {
        r::bias_grad(dy, db, d)
    }
    fn concat(&mut self, a: &[f32], b: &[f32], y: &mut [f32], d: ConcatDims) {
        r::concat(a, b, y, d)
    }
    fn concat_grad(&mut self, dy: &[f32], part: &mut [f32], d: ConcatDims, second: bool) {
        r::concat_grad(dy, part, d, second)
    }
    fn slice(&mut self, x: &[f32], y: &mut [f32], d: SliceDims) {
        r::slice(x, y, d)
    }
    fn pad(&mut self, x: &[f32], y: &mut [f32], d: SliceDims) {
        r::pad(x, y, d)
    }
    fn transpose(&mut self, x: &[f32], y: &mut [f32], d: PermuteDims) {
        r::transpose(x, y, d)
    }
    fn broadcast(&mut self, x: &[f32], y: &mut [f32], d: BroadcastDims) {
        r::broadcast(x, y, d)
    }
    fn broadcast_grad(&mut self, dy: &[f32], dx: &mut [f32], d: BroadcastDims) {
        r::broadcast_grad(dy, dx, d)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Activation>> ActivationKernels for B {
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
}

impl<B: Backend<Memory = Host> + InheritReference<family::Pointwise>> PointwiseKernels for B {
    fn activation(&mut self, f: Activation, x: &[f32], y: &mut [f32]) {
        r::activation(f, x, y)
    }
    fn activation_grad(&mut self, f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
        r::activation_grad(f, saved, dy, dx)
    }
    fn mul(&mut self, a: &[f32], b: &[f32], y: &mut [f32], d: ChannelDims, broadcast: bool) {
        r::mul(a, b, y, d, broadcast)
    }
    fn mul_grad_factor(&mut self, dy: &[f32], a: &[f32], db: &mut [f32], d: ChannelDims) {
        r::mul_grad_factor(dy, a, db, d)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Pool>> PoolKernels for B {
    fn max_pool2d(&mut self, x: &[f32], y: &mut [f32], g: &Pool2dGeometry) {
        r::max_pool2d(x, y, g)
    }
    fn max_pool2d_grad(&mut self, x: &[f32], dy: &[f32], dx: &mut [f32], g: &Pool2dGeometry) {
        r::max_pool2d_grad(x, dy, dx, g)
    }
    fn avg_pool2d(&mut self, x: &[f32], y: &mut [f32], g: &Pool2dGeometry) {
        r::avg_pool2d(x, y, g)
    }
    fn avg_pool2d_grad(&mut self, dy: &[f32], dx: &mut [f32], g: &Pool2dGeometry) {
        r::avg_pool2d_grad(dy, dx, g)
    }
    fn global_avg_pool(&mut self, x: &[f32], y: &mut [f32], d: ChannelDims) {
        r::global_avg_pool(x, y, d)
    }
    fn global_avg_pool_grad(&mut self, dy: &[f32], dx: &mut [f32], d: ChannelDims) {
        r::global_avg_pool_grad(dy, dx, d)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Norm>> NormKernels for B {
    fn batch_norm_train(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        s: TrainStats<'_, Host>,
        y: &mut [f32],
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        let (rm, rv, sm, si) = (s.running_mean, s.running_var, s.saved_mean, s.saved_invstd);
        r::batch_norm_train(x, p.gamma, p.beta, rm, rv, y, sm, si, d, cfg)
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
        r::batch_norm_eval(x, p.gamma, p.beta, running.mean, running.var, y, d, cfg)
    }
    fn batch_norm_train_in_place(
        &mut self,
        x: &mut [f32],
        p: Affine<'_, Host>,
        s: TrainStats<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        let (rm, rv, sm, si) = (s.running_mean, s.running_var, s.saved_mean, s.saved_invstd);
        r::batch_norm_train_in_place(x, p.gamma, p.beta, rm, rv, sm, si, d, cfg)
    }
    fn batch_norm_eval_in_place(
        &mut self,
        x: &mut [f32],
        p: Affine<'_, Host>,
        running: Running<'_, Host>,
        d: ChannelDims,
        cfg: BatchNormConfig,
    ) {
        r::batch_norm_eval_in_place(x, p.gamma, p.beta, running.mean, running.var, d, cfg)
    }
    fn batch_norm_apply(
        &mut self,
        x: &[f32],
        p: Affine<'_, Host>,
        saved: Saved<'_, Host>,
        y: &mut [f32],
        d: ChannelDims,
    ) {
        r::batch_norm_apply(x, p.gamma, p.beta, saved.mean, saved.invstd, y, d)
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
        r::batch_norm_grad_input(dy, x, gamma, saved.mean, saved.invstd, dx, d)
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
        let (mean, invstd) = (saved.mean, saved.invstd);
        r::batch_norm_grad_input_from_sums(
            dy,
            x,
            gamma,
            mean,
            invstd,
            sums.dgamma,
            sums.dbeta,
            dx,
            d,
        )
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
        let (mean, invstd, dgamma, dbeta) = (saved.mean, saved.invstd, sums.dgamma, sums.dbeta);
        r::batch_norm_grad_input_from_sums_f16(dy, x, gamma, mean, invstd, dgamma, dbeta, dx, d)
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
        r::batch_norm_grad_params(dy, x, saved.mean, saved.invstd, dgamma, dbeta, d)
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
        let (dgamma, dbeta) = (grads.dgamma, grads.dbeta);
        let (mean, invstd) = (saved.mean, saved.invstd);
        r::batch_norm_grad_params_rectified(
            dy, x, p.gamma, p.beta, mean, invstd, dgamma, dbeta, d, rectifier,
        )
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
        let (dgamma, dbeta) = (grads.dgamma, grads.dbeta);
        let (mean, invstd) = (saved.mean, saved.invstd);
        r::batch_norm_grad_params_rectified_f16(
            dy, x, p.gamma, p.beta, mean, invstd, dgamma, dbeta, d, rectifier,
        )
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
        r::batch_norm_apply(x, p.gamma, p.beta, saved.mean, saved.invstd, y, d)
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

impl<B: Backend<Memory = Host> + InheritReference<family::LayerNorm>> LayerNormKernels for B {
    fn layer_norm(
        &mut self,
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        y: &mut [f32],
        d: RowDims,
        eps: f32,
    ) {
        r::layer_norm(x, gamma, beta, y, d, eps)
    }
    fn layer_norm_grad_input(
        &mut self,
        dy: &[f32],
        x: &[f32],
        gamma: &[f32],
        dx: &mut [f32],
        d: RowDims,
        eps: f32,
    ) {
        r::layer_norm_grad_input(dy, x, gamma, dx, d, eps)
    }
    fn layer_norm_grad_params(
        &mut self,
        dy: &[f32],
        x: &[f32],
        dgamma: &mut [f32],
        dbeta: &mut [f32],
        d: RowDims,
        eps: f32,
    ) {
        r::layer_norm_grad_params(dy, x, dgamma, dbeta, d, eps)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Dropout>> DropoutKernels for B {
    fn dropout(&mut self, x: &[f32], y: &mut [f32], cfg: DropoutConfig, step: u64) {
        r::dropout(x, y, cfg, step)
    }
    fn dropout_in_place(&mut self, x: &mut [f32], cfg: DropoutConfig, step: u64) {
        r::dropout_in_place(x, cfg, step)
    }
    fn dropout_grad(&mut self, dy: &[f32], dx: &mut [f32], cfg: DropoutConfig, step: u64) {
        r::dropout_grad(dy, dx, cfg, step)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Loss>> LossKernels for B {
    fn softmax(&mut self, x: &[f32], y: &mut [f32], d: RowDims) {
        r::softmax(x, y, d)
    }
    fn softmax_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32], d: RowDims) {
        r::softmax_grad(y, dy, dx, d)
    }
    fn log_softmax(&mut self, x: &[f32], y: &mut [f32], d: RowDims) {
        r::log_softmax(x, y, d)
    }
    fn log_softmax_grad(&mut self, y: &[f32], dy: &[f32], dx: &mut [f32], d: RowDims) {
        r::log_softmax_grad(y, dy, dx, d)
    }
    fn cross_entropy(
        &mut self,
        logits: &[f32],
        labels: &[i32],
        loss: &mut [f32],
        d: RowDims,
    ) -> Result<(), KernelError> {
        r::cross_entropy(logits, labels, loss, d)
    }
    fn cross_entropy_grad(
        &mut self,
        logits: &[f32],
        labels: &[i32],
        dloss: &[f32],
        dlogits: &mut [f32],
        d: RowDims,
    ) -> Result<(), KernelError> {
        r::cross_entropy_grad(logits, labels, dloss, dlogits, d)
    }
    fn mse(&mut self, pred: &[f32], target: &[f32], loss: &mut [f32]) {
        r::mse(pred, target, loss)
    }
    fn mse_grad(&mut self, pred: &[f32], target: &[f32], dloss: &[f32], dpred: &mut [f32]) {
        r::mse_grad(pred, target, dloss, dpred)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Optimizer>> OptimizerKernels for B {
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
        r::adamw_update(u.param, u.grad, m, v, u.learning_rate, scale, step, cfg)
    }
    fn clip_coefficient(&mut self, sum: &[f32], y: &mut [f32], max_norm: f32) {
        r::fill(y, r::clip_coefficient(sum[0], max_norm))
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Half>> HalfKernels for B {
    fn cast_f32_to_f16(&mut self, x: &[f32], y: &mut [f16]) {
        r::cast_f32_to_f16(x, y)
    }
    fn cast_f16_to_f32(&mut self, x: &[f16], y: &mut [f32]) {
        r::cast_f16_to_f32(x, y)
    }
    fn round_through_f16(&mut self, x: &[f32], h: &mut [f16], y: &mut [f32]) {
        r::round_through_f16(x, h, y)
    }
    fn round_through_f16_in_place(&mut self, x: &mut [f32], h: &mut [f16]) {
        r::round_through_f16_in_place(x, h)
    }
    fn rectify_through_f16(&mut self, x: &[f32], y: &mut [f32], h: &mut [f16], r: Rectifier) {
        r::rectify_through_f16(x, y, h, r)
    }
    fn rectify_through_f16_in_place(&mut self, x: &mut [f32], h: &mut [f16], r: Rectifier) {
        r::rectify_through_f16_in_place(x, h, r)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::LossScale>> LossScaleKernels for B {
    fn unscale_gradient(
        &mut self,
        g: &[f32],
        scale: &[f32],
        unscaled: &mut [f32],
        found_inf: &mut [f32],
    ) {
        r::unscale_gradient(g, scale[0], unscaled, found_inf)
    }
    fn update_loss_scale(
        &mut self,
        found_inf: &[f32],
        scale: &mut [f32],
        good_steps: &mut [f32],
        cfg: LossScaleConfig,
    ) -> bool {
        r::update_loss_scale(found_inf[0], &mut scale[0], &mut good_steps[0], cfg)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Int8>> Int8Kernels for B {
    fn quantize(&mut self, x: &[f32], y: &mut [i8], p: QuantParams) {
        q::quantize_slice(x, p, y)
    }
    fn dequantize(&mut self, x: &[i8], y: &mut [f32], p: QuantParams) {
        q::dequantize_slice(x, p, y)
    }
    fn add_s8(&mut self, a: &[i8], b: &[i8], y: &mut [i8], rescale: &AddRescale, act: (i8, i8)) {
        q::add_s8(a, b, y, rescale, act)
    }
    fn max_pool2d_s8(&mut self, x: &[i8], y: &mut [i8], g: &Pool2dGeometry) {
        q::max_pool2d_s8(x, y, q::FULL_RANGE, g)
    }
    fn avg_pool2d_s8(&mut self, x: &[i8], x_zp: i32, y: &mut [i8], g: &Pool2dGeometry) {
        q::avg_pool2d_s8(x, x_zp, y, q::FULL_RANGE, g)
    }
    fn global_avg_pool_s8(&mut self, x: &[i8], y: &mut [i8], d: ChannelDims) {
        q::global_avg_pool_s8(x, y, q::FULL_RANGE, d)
    }
    fn copy_i8(&mut self, x: &[i8], y: &mut [i8]) {
        y.copy_from_slice(x)
    }
    fn slice_i8(&mut self, x: &[i8], y: &mut [i8], d: SliceDims) {
        r::slice(x, y, d)
    }
    fn clamp_s8(&mut self, x: &[i8], y: &mut [i8], act: (i8, i8)) {
        y.copy_from_slice(x);
        q::clamp_s8(y, act)
    }
    fn lut_s8(&mut self, x: &[i8], table: &[i8], y: &mut [i8]) {
        q::lut_s8(x, table, y)
    }
    fn mul_s8(
        &mut self,
        a: &[i8],
        b: &[i8],
        y: &mut [i8],
        rescale: &MulRescale,
        d: ChannelDims,
        broadcast: bool,
    ) {
        q::mul_s8(a, b, y, rescale, d, broadcast)
    }
    fn concat_s8(&mut self, a: &[i8], b: &[i8], y: &mut [i8], d: ConcatDims, r: &ConcatRescale) {
        q::concat_s8(a, b, y, d, r)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Int8Layer>> Int8LayerKernels for B {
    fn conv2d_s8(&mut self, a: &QConv2dArgs<'_>, y: &mut [i8]) {
        q::conv2d_s8(a, y)
    }
    fn linear_s8(&mut self, a: &QLinearArgs<'_>, y: &mut [i8]) {
        q::linear_s8(a, y)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Int8GradInput>> Int8GradInputKernels
    for B
{
    fn conv2d_grad_input_s8(
        &mut self,
        dy: &[f32],
        w: &[i8],
        w_scale: &[f32],
        dx: &mut [f32],
        g: &Conv2dGeometry,
    ) {
        q::backward::conv2d_grad_input_s8(dy, w, w_scale, dx, g)
    }
    fn linear_grad_input_s8(
        &mut self,
        dy: &[f32],
        w: &[i8],
        w_scale: &[f32],
        dx: &mut [f32],
        d: LinearDims,
    ) {
        q::backward::linear_grad_input_s8(dy, w, w_scale, dx, d)
    }
}

impl<B: Backend<Memory = Host> + InheritReference<family::Int8Training>> Int8TrainingKernels for B {
    fn round_weights(&mut self, w_bar: &[f32], w: &mut [i8]) {
        q::backward::round_weights(w_bar, w)
    }
    fn round_bias(&mut self, b_bar: &[f32], b: &mut [i32]) {
        q::backward::round_bias(b_bar, b)
    }
    fn clamp_grad(&mut self, y: &[i8], dy: &[f32], dx: &mut [f32], act: (i8, i8)) {
        q::backward::clamp_grad(y, dy, dx, act)
    }
    fn clamp_grad_in_place(&mut self, y: &[i8], dy: &mut [f32], act: (i8, i8)) {
        q::backward::clamp_grad_in_place(y, dy, act)
    }
    fn clamp_mask(&mut self, y: &[i8], mask: &mut [i8], act: (i8, i8)) {
        q::backward::clamp_mask(y, mask, act)
    }
    fn mask_grad(&mut self, mask: &[i8], dy: &[f32], dx: &mut [f32]) {
        q::backward::mask_grad(mask, dy, dx)
    }
    fn mask_grad_in_place(&mut self, mask: &[i8], dy: &mut [f32]) {
        q::backward::mask_grad_in_place(mask, dy)
    }
    fn depthwise_chain_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Host>,
        before: &PointwiseWeights<'_, Host>,
        db: &mut [f32],
        dx: &mut [f32],
    ) {
        q::chain::depthwise_chain_grad(a, db, Some((before, dx)))
    }
    fn depthwise_chain_bias_grad_s8(&mut self, a: &DepthwiseChainArgs<'_, Host>, db: &mut [f32]) {
        q::chain::depthwise_chain_grad(a, db, None)
    }
    fn block_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Host>,
        projection: &ProjectionArgs<'_, Host>,
        before: &PointwiseWeights<'_, Host>,
        out: BlockGrads<'_, Host>,
    ) {
        q::chain::block_grad(a, projection, before, out)
    }
    fn block_bias_grad_s8(
        &mut self,
        a: &DepthwiseChainArgs<'_, Host>,
        projection: &ProjectionArgs<'_, Host>,
        db_depthwise: &mut [f32],
        db: &mut [f32],
        scratch: &mut [f32],
    ) {
        q::chain::block_bias_grad(a, projection, db_depthwise, db, scratch)
    }
    fn dequantize_weights(&mut self, w: &[i8], scale: &[f32], w_real: &mut [f32], d: ChannelDims) {
        q::backward::dequantize_weights(w, scale, w_real, d)
    }
    fn channel_scale(
        &mut self,
        g: &[f32],
        scale: &[f32],
        out: &mut [f32],
        unit: f32,
        power: i8,
        d: ChannelDims,
    ) {
        q::backward::channel_scale(g, scale, out, unit, power, d)
    }
}
