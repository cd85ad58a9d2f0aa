//! Calling one kernel: typed views of a step's operands, consumed in signature order, and
//! the match from [`Kernel`] to a [`Kernels`] method. Shared by the executor and eager mode.

use crate::backend::Kernels;
use crate::error::KernelError;
use crate::kernel::{Kernel, MAX_OPERANDS};
use crate::quant::{OutputQuant, Requantize};

/// One operand's memory, borrowed for the length of a kernel call.
pub enum View<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
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
type Int8Layer<'a> = (&'a [i8], &'a [i32], &'a [Requantize]);

/// A step's operands, handed out in order.
pub struct Operands<'a> {
    views: heapless::Deque<View<'a>, MAX_OPERANDS>,
}

impl<'a> Operands<'a> {
    pub fn new(views: heapless::Vec<View<'a>, MAX_OPERANDS>) -> Self {
        let mut deque = heapless::Deque::new();
        for v in views {
            // Both hold MAX_OPERANDS, so this cannot overflow.
            let _ = deque.push_back(v);
        }
        Self { views: deque }
    }

    fn next(&mut self) -> Result<View<'a>, Fault> {
        self.views.pop_front().ok_or(Fault::Malformed("too few operands"))
    }

    fn read_bytes(&mut self) -> Result<&'a [u8], Fault> {
        match self.next()? {
            View::Read(b) => Ok(b),
            View::Write(_) => Err(Fault::Malformed("a written operand where a read one belongs")),
        }
    }

    fn write_bytes(&mut self) -> Result<&'a mut [u8], Fault> {
        match self.next()? {
            View::Write(b) => Ok(b),
            View::Read(_) => {
                Err(Fault::Malformed("a read-only operand where a written one belongs"))
            }
        }
    }

    fn f32(&mut self) -> Result<&'a [f32], Fault> {
        bytemuck::try_cast_slice(self.read_bytes()?).map_err(|_| Fault::Malformed("misaligned"))
    }

    fn f32_if(&mut self, present: bool) -> Result<Option<&'a [f32]>, Fault> {
        present.then(|| self.f32()).transpose()
    }

    fn i32(&mut self) -> Result<&'a [i32], Fault> {
        bytemuck::try_cast_slice(self.read_bytes()?).map_err(|_| Fault::Malformed("misaligned"))
    }

    fn f16(&mut self) -> Result<&'a [half::f16], Fault> {
        bytemuck::try_cast_slice(self.read_bytes()?).map_err(|_| Fault::Malformed("misaligned"))
    }

    fn f16_mut(&mut self) -> Result<&'a mut [half::f16], Fault> {
        bytemuck::try_cast_slice_mut(self.write_bytes()?)
            .map_err(|_| Fault::Malformed("misaligned"))
    }

    fn f32_mut(&mut self) -> Result<&'a mut [f32], Fault> {
        bytemuck::try_cast_slice_mut(self.write_bytes()?)
            .map_err(|_| Fault::Malformed("misaligned"))
    }

    fn i8(&mut self) -> Result<&'a [i8], Fault> {
        Ok(bytemuck::cast_slice(self.read_bytes()?))
    }

    fn i8_mut(&mut self) -> Result<&'a mut [i8], Fault> {
        Ok(bytemuck::cast_slice_mut(self.write_bytes()?))
    }

    fn i32_mut(&mut self) -> Result<&'a mut [i32], Fault> {
        bytemuck::try_cast_slice_mut(self.write_bytes()?)
            .map_err(|_| Fault::Malformed("misaligned"))
    }

    /// An int8 layer's `w, bias, requant` operands.
    fn int8_weights(&mut self) -> Result<Int8Layer<'a>, Fault> {
        let (w, bias) = (self.i8()?, self.i32()?);
        let requant = bytemuck::try_cast_slice(self.read_bytes()?)
            .map_err(|_| Fault::Malformed("misaligned"))?;
        Ok((w, bias, requant))
    }

    fn scalar(&mut self) -> Result<f32, Fault> {
        self.f32()?.first().copied().ok_or(Fault::Malformed("an empty scalar"))
    }
}

/// Runs `kernel` on `ops` (which must follow the kernel's signature).
pub fn run_kernel<K: Kernels + ?Sized>(
    k: &mut K,
    kernel: &Kernel,
    mut ops: Operands<'_>,
    ctx: &StepContext,
) -> Result<Flow, Fault> {
    let o = &mut ops;
    match *kernel {
        Kernel::Linear { dims, bias } => {
            let (x, w, b) = (o.f32()?, o.f32()?, o.f32_if(bias)?);
            k.linear(x, w, b, o.f32_mut()?, dims)
        }
        Kernel::LinearGradInput(d) => k.linear_grad_input(o.f32()?, o.f32()?, o.f32_mut()?, d),
        Kernel::LinearGradWeight(d) => k.linear_grad_weight(o.f32()?, o.f32()?, o.f32_mut()?, d),
        Kernel::BiasGrad(d) => k.bias_grad(o.f32()?, o.f32_mut()?, d),
        Kernel::Conv2d { geometry, bias } => {
            let (x, w, b) = (o.f32()?, o.f32()?, o.f32_if(bias)?);
            k.conv2d(x, w, b, o.f32_mut()?, &geometry)
        }
        Kernel::Conv2dGradInput(g) => k.conv2d_grad_input(o.f32()?, o.f32()?, o.f32_mut()?, &g),
        Kernel::Conv2dGradWeight(g) => k.conv2d_grad_weight(o.f32()?, o.f32()?, o.f32_mut()?, &g),
        Kernel::Relu(_) => k.relu(o.f32()?, o.f32_mut()?),
        Kernel::Relu6(_) => k.relu6(o.f32()?, o.f32_mut()?),
        Kernel::ReluGrad(_) => k.relu_grad(o.f32()?, o.f32()?, o.f32_mut()?),
        Kernel::Relu6Grad(_) => k.relu6_grad(o.f32()?, o.f32()?, o.f32_mut()?),
        Kernel::ReluInPlace(_) => k.relu_in_place(o.f32_mut()?),
        Kernel::Relu6InPlace(_) => k.relu6_in_place(o.f32_mut()?),
        Kernel::ReluGradInPlace(_) => k.relu_grad_in_place(o.f32()?, o.f32_mut()?),
        Kernel::Relu6GradInPlace(_) => k.relu6_grad_in_place(o.f32()?, o.f32_mut()?),
        Kernel::DropoutInPlace(cfg, _) => k.dropout_in_place(o.f32_mut()?, cfg, ctx.micro_batch),
        Kernel::MaxPool2d(g) => k.max_pool2d(o.f32()?, o.f32_mut()?, &g),
        Kernel::MaxPool2dGrad(g) => k.max_pool2d_grad(o.f32()?, o.f32()?, o.f32_mut()?, &g),
        Kernel::AvgPool2d(g) => k.avg_pool2d(o.f32()?, o.f32_mut()?, &g),
        Kernel::AvgPool2dGrad(g) => k.avg_pool2d_grad(o.f32()?, o.f32_mut()?, &g),
        Kernel::GlobalAvgPool(d) => k.global_avg_pool(o.f32()?, o.f32_mut()?, d),
        Kernel::GlobalAvgPoolGrad(d) => k.global_avg_pool_grad(o.f32()?, o.f32_mut()?, d),
        Kernel::Add(_) => k.add(o.f32()?, o.f32()?, o.f32_mut()?),
        Kernel::Copy(_) => k.copy(o.f32()?, o.f32_mut()?),
        Kernel::BatchNormTrain(d, cfg) => {
            let (x, gamma, beta) = (o.f32()?, o.f32()?, o.f32()?);
            let (rm, rv) = (o.f32_mut()?, o.f32_mut()?);
            let (y, mean, invstd) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            k.batch_norm_train(x, gamma, beta, rm, rv, y, mean, invstd, d, cfg)
        }
        Kernel::BatchNormEval(d, cfg) => {
            let (x, gamma, beta, rm, rv) = (o.f32()?, o.f32()?, o.f32()?, o.f32()?, o.f32()?);
            k.batch_norm_eval(x, gamma, beta, rm, rv, o.f32_mut()?, d, cfg)
        }
        Kernel::BatchNormTrainInPlace(d, cfg) => {
            let (gamma, beta) = (o.f32()?, o.f32()?);
            let (rm, rv, x) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            let (mean, invstd) = (o.f32_mut()?, o.f32_mut()?);
            k.batch_norm_train_in_place(x, gamma, beta, rm, rv, mean, invstd, d, cfg)
        }
        Kernel::BatchNormEvalInPlace(d, cfg) => {
            let (gamma, beta, rm, rv) = (o.f32()?, o.f32()?, o.f32()?, o.f32()?);
            k.batch_norm_eval_in_place(o.f32_mut()?, gamma, beta, rm, rv, d, cfg)
        }
        Kernel::BatchNormApply(d) => {
            let (x, gamma, beta, mean, invstd) = (o.f32()?, o.f32()?, o.f32()?, o.f32()?, o.f32()?);
            k.batch_norm_apply(x, gamma, beta, mean, invstd, o.f32_mut()?, d)
        }
        Kernel::BatchNormGradInput(d) => {
            let (dy, x, gamma, mean, invstd) = (o.f32()?, o.f32()?, o.f32()?, o.f32()?, o.f32()?);
            k.batch_norm_grad_input(dy, x, gamma, mean, invstd, o.f32_mut()?, d)
        }
        Kernel::BatchNormGradParams(d) => {
            let (dy, x, mean, invstd) = (o.f32()?, o.f32()?, o.f32()?, o.f32()?);
            k.batch_norm_grad_params(dy, x, mean, invstd, o.f32_mut()?, o.f32_mut()?, d)
        }
        Kernel::Dropout(cfg, _) => k.dropout(o.f32()?, o.f32_mut()?, cfg, ctx.micro_batch),
        Kernel::DropoutGrad(cfg, _) => k.dropout_grad(o.f32()?, o.f32_mut()?, cfg, ctx.micro_batch),
        Kernel::Softmax(d) => k.softmax(o.f32()?, o.f32_mut()?, d),
        Kernel::SoftmaxGrad(d) => k.softmax_grad(o.f32()?, o.f32()?, o.f32_mut()?, d),
        Kernel::CrossEntropy(d) => k.cross_entropy(o.f32()?, o.i32()?, o.f32_mut()?, d)?,
        Kernel::CrossEntropyGrad(d) => {
            let (logits, labels, dloss) = (o.f32()?, o.i32()?, o.f32()?);
            k.cross_entropy_grad(logits, labels, dloss, o.f32_mut()?, d)?
        }
        Kernel::Mse(_) => k.mse(o.f32()?, o.f32()?, o.f32_mut()?),
        Kernel::MseGrad(_) => k.mse_grad(o.f32()?, o.f32()?, o.f32()?, o.f32_mut()?),
        Kernel::Fill(value, _) => k.fill(o.f32_mut()?, value),
        Kernel::Accumulate(scale, _) => {
            let g = o.f32()?;
            k.accumulate(o.f32_mut()?, g, scale)
        }
        Kernel::SumSquares(_) => {
            let g = o.f32()?;
            k.sum_squares(g, o.f32_mut()?)
        }
        Kernel::ClipCoefficient(max_norm) => {
            let sum = o.scalar()?;
            k.fill(o.f32_mut()?, crate::reference::clip_coefficient(sum, max_norm))
        }
        Kernel::SgdUpdate { cfg, clipped, momentum, .. } => {
            let grad = o.f32()?;
            let scale = if clipped { o.scalar()? } else { 1.0 };
            let param = o.f32_mut()?;
            let buf = if momentum { Some(o.f32_mut()?) } else { None };
            k.sgd_update(param, grad, buf, ctx.learning_rate, scale, cfg)
        }
        Kernel::AdamWUpdate { cfg, clipped, .. } => {
            let grad = o.f32()?;
            let scale = if clipped { o.scalar()? } else { 1.0 };
            let (param, m, v) = (o.f32_mut()?, o.f32_mut()?, o.f32_mut()?);
            let step = ctx.update.saturating_add(1);
            k.adamw_update(param, grad, m, v, ctx.learning_rate, scale, step, cfg)
        }
        Kernel::Zero(_) => k.fill(o.f32_mut()?, 0.0),
        Kernel::Quantize(p, _) => k.quantize(o.f32()?, o.i8_mut()?, p),
        Kernel::Dequantize(p, _) => k.dequantize(o.i8()?, o.f32_mut()?, p),
        Kernel::QConv2d { geometry, input_zero_point, output_zero_point, act } => {
            let x = o.i8()?;
            let (w, bias, multipliers) = o.int8_weights()?;
            let out = OutputQuant { multipliers, zero_point: output_zero_point, act };
            k.conv2d_s8(x, input_zero_point, w, Some(bias), o.i8_mut()?, &out, &geometry)
        }
        Kernel::QLinear { dims, input_zero_point, output_zero_point, act } => {
            let x = o.i8()?;
            let (w, bias, multipliers) = o.int8_weights()?;
            let out = OutputQuant { multipliers, zero_point: output_zero_point, act };
            k.linear_s8(x, input_zero_point, w, Some(bias), o.i8_mut()?, &out, &dims)
        }
        Kernel::QAdd(rescale, act, _) => k.add_s8(o.i8()?, o.i8()?, o.i8_mut()?, &rescale, act),
        Kernel::QMaxPool2d(g) => k.max_pool2d_s8(o.i8()?, o.i8_mut()?, &g),
        Kernel::QAvgPool2d(g, zp) => k.avg_pool2d_s8(o.i8()?, zp, o.i8_mut()?, &g),
        Kernel::QGlobalAvgPool(d) => k.global_avg_pool_s8(o.i8()?, o.i8_mut()?, d),
        Kernel::CopyI8(_) => k.copy_i8(o.i8()?, o.i8_mut()?),
        Kernel::RoundWeights(_) => {
            let (w_bar, _scale) = (o.f32()?, o.f32()?);
            k.round_weights(w_bar, o.i8_mut()?)
        }
        Kernel::RoundBias(_) => {
            let (b_bar, _scale) = (o.f32()?, o.f32()?);
            k.round_bias(b_bar, o.i32_mut()?)
        }
        Kernel::QClampGrad(act, _) => k.clamp_grad(o.i8()?, o.f32()?, o.f32_mut()?, act),
        Kernel::DequantizeWeights(d) => k.dequantize_weights(o.i8()?, o.f32()?, o.f32_mut()?, d),
        Kernel::ChannelScale { dims, unit, power } => {
            k.channel_scale(o.f32()?, o.f32()?, o.f32_mut()?, unit, power, dims)
        }
        Kernel::CastF32ToF16(_) => k.cast_f32_to_f16(o.f32()?, o.f16_mut()?),
        Kernel::CastF16ToF32(_) => k.cast_f16_to_f32(o.f16()?, o.f32_mut()?),
        Kernel::UnscaleGradient(_) => {
            let (g, scale) = (o.f32()?, o.scalar()?);
            let found_inf = o.f32_mut()?;
            k.unscale_gradient(g, scale, o.f32_mut()?, found_inf)
        }
        Kernel::UpdateLossScale(cfg) => {
            let found_inf = o.scalar()?;
            let (scale, good_steps) = (o.f32_mut()?, o.f32_mut()?);
            let (scale, good_steps) = match (scale.first_mut(), good_steps.first_mut()) {
                (Some(scale), Some(good_steps)) => (scale, good_steps),
                _ => return Err(Fault::Malformed("an empty scalar")),
            };
            if crate::reference::update_loss_scale(found_inf, scale, good_steps, cfg) {
                return Ok(Flow::SkipParameterUpdates);
            }
        }
    }
    Ok(Flow::Continue)
}
