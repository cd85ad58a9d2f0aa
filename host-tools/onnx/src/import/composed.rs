//! ONNX operators sprout has no op of its own for, recorded from ops it has: `DepthToSpace`
//! (`nn.PixelShuffle`), `InstanceNormalization` (`nn.InstanceNorm2d`, and `nn.GroupNorm` as
//! PyTorch exports it before opset 21), `GroupNormalization`, `PRelu`, `Selu` and `Mish`.

use super::{check_vector, Ctx, Importer};
use crate::error::OnnxError;
use sprout_core::op::ConvParams;
use sprout_core::{Shape, TensorId};

impl Importer<'_> {
    /// `DepthToSpace` of `[N, C·b², H, W]` to `[N, C, H·b, W·b]` (`DCR` order, or `CRD` as
    /// `nn.PixelShuffle` exports it): the 6-D shuffle as transposes (`{out}.shuffle`), then
    /// a reshape.
    pub(super) fn depth_to_space(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let &[n, c, h, w] = dims.as_slice() else {
            return Err(ctx.err(format!("input must be [N, C, H, W], it has shape {dims:?}")));
        };
        let b = ctx.int("blocksize", 0)?;
        let b =
            usize::try_from(b).ok().filter(|&b| b >= 1 && c % (b * b) == 0).ok_or_else(|| {
                ctx.err(format!("blocksize {b} must be >= 1 and its square divide {c} channels"))
            })?;
        let depth = c / (b * b);
        let (six, perm) = match ctx.string("mode").as_deref() {
            None | Some("DCR") => ([n, b, b, depth, h, w], [0, 3, 4, 1, 5, 2]),
            Some("CRD") => ([n, depth, b, b, h, w], [0, 1, 4, 2, 5, 3]),
            Some(other) => return Err(ctx.err(format!("mode '{other}' is neither DCR nor CRD"))),
        };
        let out = ctx.output()?;
        let (y, _) = self.permuted(ctx, x, &six, &perm, &format!("{out}.shuffle"))?;
        self.define_reshaped(ctx, out, y, vec![n, depth, h * b, w * b])
    }

    /// `y` defined as `out` under ONNX shape `dims`, reshaped to them (named `out`) when
    /// stored otherwise.
    pub(super) fn define_reshaped(
        &mut self,
        ctx: &Ctx,
        out: &str,
        y: TensorId,
        dims: Vec<usize>,
    ) -> Result<(), OnnxError> {
        let shape = Shape::new(&dims).map_err(|e| ctx.err(e.to_string()))?;
        let y = match self.g.shape(y) == shape {
            true => y,
            false => self.g.reshape(out, y, shape).map_err(ctx.graph())?,
        };
        self.define(out, y, dims);
        Ok(())
    }

    /// `InstanceNormalization` of `[N, C, ...]`: each channel of each sample normalised over
    /// the axes after C (a layer norm with no scale of its own, `{out}.normed`), then a
    /// depthwise 1×1 convolution by its scale and shift (trained, under their names), left
    /// out when they are ones and zeros (`nn.GroupNorm` as PyTorch exports it: over
    /// `[N, G, L]`, its own scale and shift following as `Mul` and `Add`).
    pub(super) fn instance_normalization(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        if dims.len() < 3 {
            return Err(ctx.err(format!(
                "input must be [N, C, ...] with a spatial axis, it has shape {dims:?}"
            )));
        }
        let eps = ctx.float("epsilon", 1e-5)?;
        let (scale, shift) = (self.required_constant(ctx, 1)?, self.required_constant(ctx, 2)?);
        check_vector(ctx, &scale, dims[1])?;
        check_vector(ctx, &shift, dims[1])?;
        let out = ctx.output()?;
        let plain =
            scale.f32()?.iter().all(|&v| v == 1.0) && shift.f32()?.iter().all(|&v| v == 0.0);
        let normed = if plain { out.to_string() } else { format!("{out}.normed") };
        let axes = dims.len() - 2;
        let y = self.layer_norm(ctx, &normed, x, dims.clone(), axes, eps, None, None)?;
        if plain {
            return Ok(());
        }
        let (y, c) = self.channel_view(ctx, y, &dims, out)?;
        let w = self.vector(ctx, &scale, c, false)?;
        let w = self.view(ctx, w, &[c, 1, 1, 1], &format!("{out}.scale"))?;
        let b = self.vector(ctx, &shift, c, false)?;
        let params = ConvParams { stride: (1, 1), padding: (0, 0), groups: c };
        let name = self.staging(out, dims.len() != 4);
        let y = self.g.conv2d(&name, y, w, Some(b), params).map_err(ctx.graph())?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `GroupNormalization` (opset 21, as the dynamo exporter writes `nn.GroupNorm` from
    /// opset 21 on) of `[N, C, ...]`: each group of `C / num_groups` channels of each sample
    /// normalised together (a layer norm over `[N, G, C/G · L]`, `{out}.normed`), then a
    /// depthwise 1×1 convolution by its per-channel scale and bias (trained, under their
    /// names). Opset 18's scale and bias per group are refused by their shape.
    pub(super) fn group_normalization(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let c = dims.get(1).copied().unwrap_or(0);
        let groups = ctx.int("num_groups", 0)?;
        let g = usize::try_from(groups)
            .ok()
            .filter(|&g| g >= 1 && c.is_multiple_of(g) && dims.len() >= 3)
            .ok_or_else(|| {
                ctx.err(format!(
                    "num_groups {groups} must divide the channels of an [N, C, ...] input with a spatial axis, it has shape {dims:?}"
                ))
            })?;
        let eps = ctx.float("epsilon", 1e-5)?;
        let (scale, bias) = (self.required_constant(ctx, 1)?, self.required_constant(ctx, 2)?);
        check_vector(ctx, &scale, c)?;
        check_vector(ctx, &bias, c)?;
        let out = ctx.output()?;
        let grouped = vec![dims[0], g, c / g * dims[2..].iter().product::<usize>()];
        let x = self.view(ctx, x, &grouped, &format!("{out}.grouped"))?;
        let normed = format!("{out}.normed");
        let y = self.layer_norm(ctx, &normed, x, grouped, 1, eps, None, None)?;
        let y = self.channel_scale(ctx, out, y, &dims, &scale, Some(&bias))?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Selu`: `gamma · elu(x, alpha)` (`{out}.elu`, then a constant scale).
    pub(super) fn selu(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let alpha = ctx.float("alpha", 1.673_263_2)?;
        let gamma = ctx.float("gamma", 1.050_701)?;
        let out = ctx.output()?;
        let elu = self.g.elu(&format!("{out}.elu"), x, alpha).map_err(ctx.graph())?;
        let y = self.affine(ctx, out, elu, &dims, &[gamma], &[0.0])?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `Mish` (opset 18): `x · tanh(softplus(x))` (`{out}.softplus`, `{out}.tanh`), as
    /// PyTorch's TorchScript exporter spells it.
    pub(super) fn mish(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let out = ctx.output()?;
        let graph = ctx.graph();
        let soft = self.g.softplus(&format!("{out}.softplus"), x).map_err(&graph)?;
        let t = self.g.tanh(&format!("{out}.tanh"), soft).map_err(&graph)?;
        let y = self.g.mul(out, x, t).map_err(&graph)?;
        self.define(out, y, dims);
        Ok(())
    }

    /// `PRelu`: `relu(x) + slope · min(x, 0)`, `min(x, 0)` as `x − relu(x)` (`{out}.positive`,
    /// `{out}.negated`, `{out}.negative`); the slope an initializer, it trains under its name
    /// and ONNX shape: a depthwise 1×1 convolution by a slope per channel, a 1×1 convolution
    /// of one channel over the activation viewed as `[N, 1, C·H, W]` by one slope for all
    /// (its gradient summed over every position); a `Constant` slope is a constant scale.
    pub(super) fn prelu(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let slope = self.required_constant(ctx, 1)?;
        let values = self.channel_values(ctx, &slope, &dims)?;
        let out = ctx.output()?;
        let (x, _) = self.channel_view(ctx, x, &dims, out)?;
        let nchw = self.g.shape(x).dims().to_vec();
        let graph = ctx.graph();
        let positive = self.g.relu(&format!("{out}.positive"), x).map_err(&graph)?;
        let negated =
            self.affine(ctx, &format!("{out}.negated"), positive, &nchw, &[-1.0], &[0.0])?;
        let negative = self.g.add(&format!("{out}.negative"), x, negated).map_err(&graph)?;
        let sloped = format!("{out}.sloped");
        let sloped = match values.len() {
            1 if !self.initializers.contains(&slope.name) => {
                self.affine(ctx, &sloped, negative, &nchw, &values, &[0.0])?
            }
            _ => self.channel_scale(ctx, &sloped, negative, &nchw, &slope, None)?,
        };
        let name = self.staging(out, dims.len() != 4);
        let y = self.g.add(&name, positive, sloped).map_err(&graph)?;
        self.define(out, y, dims);
        Ok(())
    }
}
