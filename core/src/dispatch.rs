//! Calling one kernel: typed views of a step's operands, consumed in signature order, and
//! the match from [`KernelCall`] to a [`Kernels`] method. Shared by the executor and eager mode.

use bytemuck::Pod;

use crate::backend::{
    Affine, GradSums, GradsMut, Host, Kernels, Memory, NormAct, ParamUpdate, Running, Saved,
    SavedMut, TrainStats,
};
use crate::error::KernelError;
use crate::geometry::Conv2dGeometry;
use crate::kernel::{KernelCall, MAX_OPERANDS};
use crate::quant::chain::{BlockGrads, DepthwiseChainArgs, PointwiseWeights, ProjectionArgs};
use crate::quant::{QLayerArgs, Requantization, Requantize};

/// One operand's memory, borrowed for the length of a kernel call.
pub enum View<'a, M: Memory = Host> {
    Read(M::Bytes<'a>),
    Write(M::BytesMut<'a>),
}

/// Values a kernel reads from outside its operands.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepContext {
    /// Learning rate of this update (from a schedule).
    pub learning_rate: f32,
    /// Optimizer updates completed before this one (AdamW's bias correction uses `update + 1`).
    pub update: u32,
    /// Micro-batches run before this one; seeds dropout masks.
    pub micro_batch: u64,
}

/// What the steps after a kernel call do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// A loss scaler found overflowing gradients: the parameter updates that follow in this
    /// training step must not run.
    SkipParameterUpdates,
}

/// Why a kernel call did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operands do not match the kernel (a corrupt plan).
    Malformed(&'static str),
    Kernel(KernelError),
}

impl From<KernelError> for Fault {
    fn from(e: KernelError) -> Self {
        Fault::Kernel(e)
    }
}

/// An int8 layer's weights, biases and per-channel requantization.
type Int8Layer<'a, M> =
    (In8<'a, M>, <M as Memory>::Slice<'a, i32>, <M as Memory>::Slice<'a, Requantize>);
/// Int8 values in `M`.
type In8<'a, M> = <M as Memory>::Slice<'a, i8>;

/// A step's operands, handed out in order.
pub struct Operands<'a, M: Memory = Host> {
    views: heapless::Deque<View<'a, M>, MAX_OPERANDS>,
}

impl<'a, M: Memory> Operands<'a, M> {
    pub fn new(views: heapless::Vec<View<'a, M>, MAX_OPERANDS>) -> Self {
        let mut deque = heapless::Deque::new();
        for v in views {
            // Both hold MAX_OPERANDS, so this cannot overflow.
            let _ = deque.push_back(v);
        }
        Self { views: deque }
    }

    fn next(&mut self) -> Result<View<'a, M>, Fault> {
        self.views.pop_front().ok_or(Fault::Malformed("too few operands"))
    }

    fn read_bytes(&mut self) -> Result<M::Bytes<'a>, Fault> {
        match self.next()? {
            View::Read(b) => Ok(b),
            View::Write(_) => Err(Fault::Malformed("a written operand where a read one belongs")),
        }
    }

    fn write_bytes(&mut self) -> Result<M::BytesMut<'a>, Fault> {
        match self.next()? {
            View::Write(b) => Ok(b),
            View::Read(_) => {
                Err(Fault::Malformed("a read-only operand where a written one belongs"))
            }
        }
    }

    /// The next operand, read as `T` values.
    fn read<T: Pod>(&mut self) -> Result<M::Slice<'a, T>, Fault> {
        M::cast(self.read_bytes()?).ok_or(Fault::Malformed("misaligned"))
    }

    /// The next operand, written as `T` values.
    fn write<T: Pod>(&mut self) -> Result<M::SliceMut<'a, T>, Fault> {
        M::cast_mut(self.write_bytes()?).ok_or(Fault::Malformed("misaligned"))
    }

    fn f32(&mut self) -> Result<M::Slice<'a, f32>, Fault> {
        self.read()
    }

    fn f32_if(&mut self, present: bool) -> Result<Option<M::Slice<'a, f32>>, Fault> {
        present.then(|| self.f32()).transpose()
    }

    fn f32_mut(&mut self) -> Result<M::SliceMut<'a, f32>, Fault> {
        self.write()
    }

    /// An int8 layer's `w, bias, requant` operands.
    fn int8_weights(&mut self) -> Result<Int8Layer<'a, M>, Fault> {
        Ok((self.read()?, self.read()?, self.read()?))
    }

    /// A fused depthwise backward pass's `dy, w, w_scale, mask` operands.
    fn depthwise_chain(
        &mut self,
        shape: Conv2dGeometry,
    ) -> Result<DepthwiseChainArgs<'a, M>, Fault> {
        let (dy, w, w_scale, mask) = (self.f32()?, self.read()?, self.f32()?, self.read()?);
        Ok(DepthwiseChainArgs { dy, w, w_scale, mask, shape })
    }

    /// A fused block's `dy, w_p, w_p_scale, mask_p, w, w_scale, mask` operands.
    fn block(
        &mut self,
        shape: Conv2dGeometry,
        outputs: usize,
    ) -> Result<(DepthwiseChainArgs<'a, M>, ProjectionArgs<'a, M>), Fault> {
        let dy = self.f32()?;
        let (w, w_scale, mask) = (self.read()?, self.f32()?, self.read()?);
        let projection = ProjectionArgs { w, w_scale, mask, outputs };
        let (w, w_scale, mask) = (self.read()?, self.f32()?, self.read()?);
        Ok((DepthwiseChainArgs { dy, w, w_scale, mask, shape }, projection))
    }

    /// A one-value f32 operand.
    fn scalar(&mut self) -> Result<M::Slice<'a, f32>, Fault> {
        let bytes = self.read_bytes()?;
        let value = M::cast(bytes).ok_or(Fault::Malformed("misaligned"))?;
        match M::len(bytes) >= 4 {
            true => Ok(value),
            false => Err(Fault::Malformed("an empty scalar")),
        }
    }

    /// A one-value f32 operand, written.
    fn scalar_mut(&mut self) -> Result<M::SliceMut<'a, f32>, Fault> {
        let bytes = self.write_bytes()?;
        let long_enough = M::len(M::view(&bytes)) >= 4;
        let value = M::cast_mut(bytes).ok_or(Fault::Malformed("misaligned"))?;
        match long_enough {
            true => Ok(value),
            false => Err(Fault::Malformed("an empty scalar")),
        }
    }
}

/// Runs `kernel` on `ops` (which must follow the kernel's signature).
pub fn run_kernel<K: Kernels + ?Sized>(
    k: &mut K,
    kernel: &KernelCall,
    mut ops: Operands<'_, K::Memory>,
    ctx: &StepContext,
) -> Result<Flow, Fault> {
    let o = &mut ops;
    match *kernel {
        KernelCall::Linear { dims, bias } => {
            let (x, w, b) = (o.f32()?, o.f32()?, o.f32_if(bias)?);
            k.linear(x, w, b, o.f32_mut()?, dims)
        }
        KernelCall::LinearGradInput(d) => k.linear_grad_input(o.f32()?, o.f32()?, o.f32_mut()?, d),
        KernelCall::LinearGradWeight(d) => {
            k.linear_grad_weight(o.f32()?, o.f32()?, o.f32_mut()?, d)
        }
        KernelCall::BiasGrad(d) => k.bias_grad(o.f32()?, o.f32_mut()?, d),
        KernelCall::Conv2d { geometry, bias } => {
            let (x, w, b) = (o.f32()?, o.f32()?, o.f32_if(bias)?);
            k.conv2d(x, w, b, o.f32_mut()?, &geometry)
        }
        KernelCall::Conv2dNormAct { geometry, bias, cfg, rectifier } => {
            let (x, w, b) = (o.f32()?, o.f32()?, o.f32_if(bias)?);
            let p = Affine { gamma: o.f32()?, beta: o.f32()? };
            let running = Running { mean: o.f32()?, var: o.f32()? };
            let then = NormAct { p, running, cfg, rectifier };
            k.conv2d_norm_act(x, w, b, then, o.f32_mut()?, &geometry)
        }
        KernelCall::Conv2dGradInput(g) => k.conv2d_grad_input(o.f32()?, o.f32()?, o.f32_mut()?, &g),
        KernelCall::Conv2dGradWeight(g) => {
            k.conv2d_grad_weight(o.f32()?, o.f32()?, o.f32_mut()?, &g)
        }
        KernelCall::Relu(_) => k.relu(o.f32()?, o.f32_mut()?),
        KernelCall::Relu6(_) => k.relu6(o.f32()?, o.f32_mut()?),
        KernelCall::ReluGrad(_) => k.relu_grad(o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::Relu6Grad(_) => k.relu6_grad(o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::ReluInPlace(_) => k.relu_in_place(o.f32_mut()?),
        KernelCall::Relu6InPlace(_) => k.relu6_in_place(o.f32_mut()?),
        KernelCall::ReluGradInPlace(_) => k.relu_grad_in_place(o.f32()?, o.f32_mut()?),
        KernelCall::Relu6GradInPlace(_) => k.relu6_grad_in_place(o.f32()?, o.f32_mut()?),
        KernelCall::DropoutInPlace(cfg, _) => {
            k.dropout_in_place(o.f32_mut()?, cfg, ctx.micro_batch)
        }
        KernelCall::MaxPool2d(g) => k.max_pool2d(o.f32()?, o.f32_mut()?, &g),
        KernelCall::MaxPool2dGrad(g) => k.max_pool2d_grad(o.f32()?, o.f32()?, o.f32_mut()?, &g),
        KernelCall::AvgPool2d(g) => k.avg_pool2d(o.f32()?, o.f32_mut()?, &g),
        KernelCall::AvgPool2dGrad(g) => k.avg_pool2d_grad(o.f32()?, o.f32_mut()?, &g),
        KernelCall::GlobalAvgPool(d) => k.global_avg_pool(o.f32()?, o.f32_mut()?, d),
        KernelCall::GlobalAvgPoolGrad(d) => k.global_avg_pool_grad(o.f32()?, o.f32_mut()?, d),
        KernelCall::Add(_) => k.add(o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::Copy(_) => k.copy(o.f32()?, o.f32_mut()?),
        KernelCall::BatchNormTrain(d, cfg) => {
            let (x, p) = (o.f32()?, Affine { gamma: o.f32()?, beta: o.f32()? });
            let (running_mean, running_var, y) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            let (saved_mean, saved_invstd) = (o.f32_mut()?, o.f32_mut()?);
            let stats = TrainStats { running_mean, running_var, saved_mean, saved_invstd };
            k.batch_norm_train(x, p, stats, y, d, cfg)
        }
        KernelCall::BatchNormEval(d, cfg) => {
            let (x, p) = (o.f32()?, Affine { gamma: o.f32()?, beta: o.f32()? });
            let running = Running { mean: o.f32()?, var: o.f32()? };
            k.batch_norm_eval(x, p, running, o.f32_mut()?, d, cfg)
        }
        KernelCall::BatchNormTrainInPlace(d, cfg) => {
            let p = Affine { gamma: o.f32()?, beta: o.f32()? };
            let (running_mean, running_var, x) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            let (saved_mean, saved_invstd) = (o.f32_mut()?, o.f32_mut()?);
            let stats = TrainStats { running_mean, running_var, saved_mean, saved_invstd };
            k.batch_norm_train_in_place(x, p, stats, d, cfg)
        }
        KernelCall::BatchNormEvalInPlace(d, cfg) => {
            let p = Affine { gamma: o.f32()?, beta: o.f32()? };
            let running = Running { mean: o.f32()?, var: o.f32()? };
            k.batch_norm_eval_in_place(o.f32_mut()?, p, running, d, cfg)
        }
        KernelCall::BatchNormApply(d) => {
            let (x, p) = (o.f32()?, Affine { gamma: o.f32()?, beta: o.f32()? });
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            k.batch_norm_apply(x, p, saved, o.f32_mut()?, d)
        }
        KernelCall::BatchNormGradInput(d) => {
            let (dy, x, gamma) = (o.f32()?, o.f32()?, o.f32()?);
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            k.batch_norm_grad_input(dy, x, gamma, saved, o.f32_mut()?, d)
        }
        KernelCall::BatchNormRunning(d, cfg) => {
            let (x, p) = (o.f32()?, Affine { gamma: o.f32()?, beta: o.f32()? });
            let running = Running { mean: o.f32()?, var: o.f32()? };
            let y = o.f32_mut()?;
            let saved = SavedMut { mean: o.f32_mut()?, invstd: o.f32_mut()? };
            k.batch_norm_running(x, p, running, y, saved, d, cfg)
        }
        KernelCall::BatchNormGradInputRunning(d) => {
            let (dy, _x, gamma) = (o.f32()?, o.f32()?, o.f32()?);
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            k.batch_norm_grad_input_running(dy, gamma, saved, o.f32_mut()?, d)
        }
        KernelCall::BatchNormGradInputFromSums(d) => {
            let (dy, x, gamma) = (o.f32()?, o.f32()?, o.f32()?);
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            let sums = GradSums { dgamma: o.f32()?, dbeta: o.f32()? };
            k.batch_norm_grad_input_from_sums(dy, x, gamma, saved, sums, o.f32_mut()?, d)
        }
        KernelCall::BatchNormGradInputFromSumsF16(d) => {
            let (dy, x, gamma) = (o.f32()?, o.read()?, o.f32()?);
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            let sums = GradSums { dgamma: o.f32()?, dbeta: o.f32()? };
            k.batch_norm_grad_input_from_sums_f16(dy, x, gamma, saved, sums, o.f32_mut()?, d)
        }
        KernelCall::BatchNormGradParams(d) => {
            let (dy, x) = (o.f32()?, o.f32()?);
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            k.batch_norm_grad_params(dy, x, saved, o.f32_mut()?, o.f32_mut()?, d)
        }
        KernelCall::BatchNormGradParamsRectified(d, r) => {
            let x = o.f32()?;
            let p = Affine { gamma: o.f32()?, beta: o.f32()? };
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            let dy = o.f32_mut()?;
            let grads = GradsMut { dgamma: o.f32_mut()?, dbeta: o.f32_mut()? };
            k.batch_norm_grad_params_rectified(x, p, saved, dy, grads, d, r)
        }
        KernelCall::BatchNormGradParamsRectifiedF16(d, r) => {
            let x = o.read()?;
            let p = Affine { gamma: o.f32()?, beta: o.f32()? };
            let saved = Saved { mean: o.f32()?, invstd: o.f32()? };
            let dy = o.f32_mut()?;
            let grads = GradsMut { dgamma: o.f32_mut()?, dbeta: o.f32_mut()? };
            k.batch_norm_grad_params_rectified_f16(x, p, saved, dy, grads, d, r)
        }
        KernelCall::Dropout(cfg, _) => k.dropout(o.f32()?, o.f32_mut()?, cfg, ctx.micro_batch),
        KernelCall::DropoutGrad(cfg, _) => {
            k.dropout_grad(o.f32()?, o.f32_mut()?, cfg, ctx.micro_batch)
        }
        KernelCall::Softmax(d) => k.softmax(o.f32()?, o.f32_mut()?, d),
        KernelCall::SoftmaxGrad(d) => k.softmax_grad(o.f32()?, o.f32()?, o.f32_mut()?, d),
        KernelCall::LogSoftmax(d) => k.log_softmax(o.f32()?, o.f32_mut()?, d),
        KernelCall::LogSoftmaxGrad(d) => k.log_softmax_grad(o.f32()?, o.f32()?, o.f32_mut()?, d),
        KernelCall::LayerNorm(d, eps) => {
            let (x, gamma, beta) = (o.f32()?, o.f32()?, o.f32()?);
            k.layer_norm(x, gamma, beta, o.f32_mut()?, d, eps)
        }
        KernelCall::LayerNormGradInput(d, eps) => {
            let (dy, x, gamma) = (o.f32()?, o.f32()?, o.f32()?);
            k.layer_norm_grad_input(dy, x, gamma, o.f32_mut()?, d, eps)
        }
        KernelCall::LayerNormGradParams(d, eps) => {
            let (dy, x) = (o.f32()?, o.f32()?);
            k.layer_norm_grad_params(dy, x, o.f32_mut()?, o.f32_mut()?, d, eps)
        }
        KernelCall::CrossEntropy(d) => k.cross_entropy(o.f32()?, o.read()?, o.f32_mut()?, d)?,
        KernelCall::CrossEntropyGrad(d) => {
            let (logits, labels, dloss) = (o.f32()?, o.read()?, o.f32()?);
            k.cross_entropy_grad(logits, labels, dloss, o.f32_mut()?, d)?
        }
        KernelCall::Mse(_) => k.mse(o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::MseGrad(_) => k.mse_grad(o.f32()?, o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::Fill(value, _) => k.fill(o.f32_mut()?, value),
        KernelCall::Accumulate(scale, _) => {
            let g = o.f32()?;
            k.accumulate(o.f32_mut()?, g, scale)
        }
        KernelCall::SumSquares(_) => {
            let g = o.f32()?;
            k.sum_squares(g, o.f32_mut()?)
        }
        KernelCall::ClipCoefficient(max_norm) => {
            let sum = o.scalar()?;
            k.clip_coefficient(sum, o.f32_mut()?, max_norm)
        }
        KernelCall::SgdUpdate { cfg, clipped, momentum, .. } => {
            let u = param_update(o, clipped, ctx)?;
            let buf = if momentum { Some(o.f32_mut()?) } else { None };
            k.sgd_update(u, buf, cfg)
        }
        KernelCall::AdamWUpdate { cfg, clipped, .. } => {
            let u = param_update(o, clipped, ctx)?;
            let (m, v) = (o.f32_mut()?, o.f32_mut()?);
            k.adamw_update(u, m, v, ctx.update.saturating_add(1), cfg)
        }
        KernelCall::Zero(_) => k.fill(o.f32_mut()?, 0.0),
        KernelCall::Quantize(p, _) => k.quantize(o.f32()?, o.write()?, p),
        KernelCall::Dequantize(p, _) => k.dequantize(o.read()?, o.f32_mut()?, p),
        KernelCall::QConv2d { geometry, input_zero_point, output_zero_point, act } => {
            let a = int8_layer(o, input_zero_point, output_zero_point, act, geometry)?;
            k.conv2d_s8(&a, o.write()?)
        }
        KernelCall::QLinear { dims, input_zero_point, output_zero_point, act } => {
            let a = int8_layer(o, input_zero_point, output_zero_point, act, dims)?;
            k.linear_s8(&a, o.write()?)
        }
        KernelCall::QAdd(rescale, act, _) => {
            k.add_s8(o.read()?, o.read()?, o.write()?, &rescale, act)
        }
        KernelCall::QMaxPool2d(g) => k.max_pool2d_s8(o.read()?, o.write()?, &g),
        KernelCall::QAvgPool2d(g, zp) => k.avg_pool2d_s8(o.read()?, zp, o.write()?, &g),
        KernelCall::QGlobalAvgPool(d) => k.global_avg_pool_s8(o.read()?, o.write()?, d),
        KernelCall::CopyI8(_) => k.copy_i8(o.read()?, o.write()?),
        KernelCall::QClamp(act, _) => k.clamp_s8(o.read()?, o.write()?, act),
        KernelCall::QLut(_) => k.lut_s8(o.read()?, o.read()?, o.write()?),
        KernelCall::QMul { rescale, dims, broadcast } => {
            k.mul_s8(o.read()?, o.read()?, o.write()?, &rescale, dims, broadcast)
        }
        KernelCall::QConcat { dims, rescale } => {
            k.concat_s8(o.read()?, o.read()?, o.write()?, dims, &rescale)
        }
        KernelCall::RoundWeights(_) => {
            let (w_bar, _scale) = (o.f32()?, o.f32()?);
            k.round_weights(w_bar, o.write()?)
        }
        KernelCall::RoundBias(_) => {
            let (b_bar, _scale) = (o.f32()?, o.f32()?);
            k.round_bias(b_bar, o.write()?)
        }
        KernelCall::QClampGrad(act, _) => k.clamp_grad(o.read()?, o.f32()?, o.f32_mut()?, act),
        KernelCall::QConv2dGradInput(g) => {
            k.conv2d_grad_input_s8(o.f32()?, o.read()?, o.f32()?, o.f32_mut()?, &g)
        }
        KernelCall::QLinearGradInput(d) => {
            k.linear_grad_input_s8(o.f32()?, o.read()?, o.f32()?, o.f32_mut()?, d)
        }
        KernelCall::QClampGradInPlace(act, _) => {
            k.clamp_grad_in_place(o.read()?, o.f32_mut()?, act)
        }
        KernelCall::QClampMask(act, _) => k.clamp_mask(o.read()?, o.write()?, act),
        KernelCall::QMaskGrad(_) => k.mask_grad(o.read()?, o.f32()?, o.f32_mut()?),
        KernelCall::QMaskGradInPlace(_) => k.mask_grad_in_place(o.read()?, o.f32_mut()?),
        KernelCall::QDepthwiseChainGrad { depthwise, c_in } => {
            let a = o.depthwise_chain(depthwise)?;
            let before = PointwiseWeights { w: o.read()?, w_scale: o.f32()?, inputs: c_in };
            k.depthwise_chain_grad_s8(&a, &before, o.f32_mut()?, o.f32_mut()?)
        }
        KernelCall::QBlockGrad { depthwise, c_in, c_out } => {
            let (a, projection) = o.block(depthwise, c_out)?;
            let before = PointwiseWeights { w: o.read()?, w_scale: o.f32()?, inputs: c_in };
            let (db_depthwise, db) = (o.f32_mut()?, o.f32_mut()?);
            let out = BlockGrads { db_depthwise, db, dx: o.f32_mut()?, scratch: o.f32_mut()? };
            k.block_grad_s8(&a, &projection, &before, out)
        }
        KernelCall::QBlockBiasGrad { depthwise, c_out } => {
            let (a, projection) = o.block(depthwise, c_out)?;
            let (db_depthwise, db, scratch) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            k.block_bias_grad_s8(&a, &projection, db_depthwise, db, scratch)
        }
        KernelCall::QDepthwiseChainBiasGrad(depthwise) => {
            let a = o.depthwise_chain(depthwise)?;
            k.depthwise_chain_bias_grad_s8(&a, o.f32_mut()?)
        }
        KernelCall::DequantizeWeights(d) => {
            k.dequantize_weights(o.read()?, o.f32()?, o.f32_mut()?, d)
        }
        KernelCall::ChannelScale { dims, unit, power } => {
            k.channel_scale(o.f32()?, o.f32()?, o.f32_mut()?, unit, power, dims)
        }
        KernelCall::Activation(f, _) => k.activation(f, o.f32()?, o.f32_mut()?),
        KernelCall::ActivationGrad(f, _) => k.activation_grad(f, o.f32()?, o.f32()?, o.f32_mut()?),
        KernelCall::Mul { dims, broadcast } => {
            k.mul(o.f32()?, o.f32()?, o.f32_mut()?, dims, broadcast)
        }
        KernelCall::MulGradFactor(d) => k.mul_grad_factor(o.f32()?, o.f32()?, o.f32_mut()?, d),
        KernelCall::Concat(d) => k.concat(o.f32()?, o.f32()?, o.f32_mut()?, d),
        KernelCall::ConcatGrad { dims, second } => {
            k.concat_grad(o.f32()?, o.f32_mut()?, dims, second)
        }
        KernelCall::Slice(d) => k.slice(o.f32()?, o.f32_mut()?, d),
        KernelCall::SliceI8(d) => k.slice_i8(o.read()?, o.write()?, d),
        KernelCall::Pad(d) => k.pad(o.f32()?, o.f32_mut()?, d),
        KernelCall::Transpose(d) => k.transpose(o.f32()?, o.f32_mut()?, d),
        KernelCall::Broadcast(d) => k.broadcast(o.f32()?, o.f32_mut()?, d),
        KernelCall::BroadcastGrad(d) => k.broadcast_grad(o.f32()?, o.f32_mut()?, d),
        KernelCall::CastF32ToF16(_) => k.cast_f32_to_f16(o.f32()?, o.write()?),
        KernelCall::CastF16ToF32(_) => k.cast_f16_to_f32(o.read()?, o.f32_mut()?),
        KernelCall::RoundThroughF16(_) => k.round_through_f16(o.f32()?, o.write()?, o.f32_mut()?),
        KernelCall::RoundThroughF16InPlace(_) => {
            k.round_through_f16_in_place(o.f32_mut()?, o.write()?)
        }
        KernelCall::RectifyThroughF16(_, r) => {
            k.rectify_through_f16(o.f32()?, o.f32_mut()?, o.write()?, r)
        }
        KernelCall::RectifyThroughF16InPlace(_, r) => {
            k.rectify_through_f16_in_place(o.f32_mut()?, o.write()?, r)
        }
        KernelCall::UnscaleGradient(_) => {
            let (g, scale) = (o.f32()?, o.scalar()?);
            let found_inf = o.f32_mut()?;
            k.unscale_gradient(g, scale, o.f32_mut()?, found_inf)
        }
        KernelCall::UpdateLossScale(cfg) => {
            let found_inf = o.scalar()?;
            let (scale, good_steps) = (o.scalar_mut()?, o.scalar_mut()?);
            if k.update_loss_scale(found_inf, scale, good_steps, cfg) {
                return Ok(Flow::SkipParameterUpdates);
            }
        }
    }
    Ok(Flow::Continue)
}

/// An optimizer step's `grad, [clip scale], param` operands and learning rate.
fn param_update<'a, M: Memory>(
    o: &mut Operands<'a, M>,
    clipped: bool,
    ctx: &StepContext,
) -> Result<ParamUpdate<'a, M>, Fault> {
    let grad = o.f32()?;
    let clip_scale = if clipped { Some(o.scalar()?) } else { None };
    Ok(ParamUpdate { grad, clip_scale, param: o.f32_mut()?, learning_rate: ctx.learning_rate })
}

/// An int8 layer's `x, w, bias, requant` operands with its quantization and shape.
fn int8_layer<'a, S, M: Memory>(
    o: &mut Operands<'a, M>,
    x_zero_point: i32,
    zero_point: i32,
    act: (i8, i8),
    shape: S,
) -> Result<QLayerArgs<'a, S, M>, Fault> {
    let x = o.read()?;
    let (weights, bias, multipliers) = o.int8_weights()?;
    let out = Requantization { multipliers, zero_point, act };
    Ok(QLayerArgs { x, x_zero_point, weights, bias: Some(bias), out, shape })
}
