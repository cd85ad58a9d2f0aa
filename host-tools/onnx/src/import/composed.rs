//! ONNX operators sprout has no op of its own for, recorded from ops it has: `Resize` by
//! nearest neighbour at whole scale factors (`nn.Upsample`), `DepthToSpace`
//! (`nn.PixelShuffle`), `InstanceNormalization` (`nn.InstanceNorm2d`, and `nn.GroupNorm` as
//! PyTorch exports it), `PRelu`, `Selu` and `Mish`.

use super::{check_vector, Ctx, Importer};
use crate::error::OnnxError;
use crate::fold;
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

    /// `Resize` of `[N, C, H, W]` by nearest neighbour to whole multiples of H and W, under
    /// a coordinate transformation and rounding that repeat each value (PyTorch's
    /// `asymmetric` with `floor`, `half_pixel` with either rounding): a view with a size-1
    /// axis after W broadcast to the factor (`{out}.cols`), then one after each row's
    /// (`{out}.rows`), then a reshape. Its gradient sums the repeated values.
    pub(super) fn resize(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let &[n, c, h, w] = dims.as_slice() else {
            return Err(ctx.err(format!("input must be [N, C, H, W], it has shape {dims:?}")));
        };
        let mode = ctx.string("mode").unwrap_or_else(|| "nearest".into());
        if mode != "nearest" {
            return Err(ctx.err(format!(
                "mode '{mode}': sprout resizes by nearest neighbour only (whole scale factors)"
            )));
        }
        let to = self.resized_dims(ctx, &dims)?;
        let factor = |from: usize, to: usize| to.is_multiple_of(from).then(|| to / from);
        let (Some(sh), Some(sw)) = (factor(h, to[2]), factor(w, to[3])) else {
            return Err(ctx.err(format!(
                "resizes {dims:?} to {to:?}: sprout repeats values by whole factors of H and W only"
            )));
        };
        if to[..2] != [n, c] || sh == 0 || sw == 0 {
            return Err(ctx.err(format!(
                "resizes {dims:?} to {to:?}: sprout resizes H and W only, never down"
            )));
        }
        let coordinates = ctx.string("coordinate_transformation_mode");
        let rounding = ctx.string("nearest_mode");
        let repeats = match (coordinates.as_deref().unwrap_or("half_pixel"), rounding.as_deref()) {
            ("asymmetric" | "tf_half_pixel_for_nn", Some("floor")) => true,
            ("half_pixel" | "pytorch_half_pixel", None)
            | ("half_pixel" | "pytorch_half_pixel", Some("round_prefer_floor"))
            | ("half_pixel" | "pytorch_half_pixel", Some("round_prefer_ceil")) => true,
            _ => sh == 1 && sw == 1,
        };
        if !repeats {
            return Err(ctx.err(format!(
                "coordinate_transformation_mode {coordinates:?} with nearest_mode {rounding:?} does not repeat each value: sprout resizes as asymmetric with floor or half_pixel with rounding"
            )));
        }
        let out = ctx.output()?;
        let mut y = x;
        let graph = ctx.graph();
        if sw > 1 {
            let v = self.view(ctx, y, &[n, c * h, w, 1], &format!("{out}.cols"))?;
            let to = Shape::d4(n, c * h, w, sw);
            y = self.g.broadcast(&format!("{out}.cols"), v, to).map_err(&graph)?;
        }
        if sh > 1 {
            let v = self.view(ctx, y, &[n, c * h, 1, w * sw], &format!("{out}.rows"))?;
            let to = Shape::d4(n, c * h, sh, w * sw);
            y = self.g.broadcast(&format!("{out}.rows"), v, to).map_err(&graph)?;
        }
        self.define_reshaped(ctx, out, y, to)
    }

    /// The output dims of a `Resize` of `dims`: its constant `sizes` (input 3) or `scales`
    /// (input 2, rounded down), over its `axes` (all without).
    fn resized_dims(&self, ctx: &Ctx, dims: &[usize]) -> Result<Vec<usize>, OnnxError> {
        let axes: Vec<usize> = match ctx.ints("axes") {
            None => (0..dims.len()).collect(),
            Some(a) => a
                .iter()
                .map(|&a| fold::axis(a, dims.len()))
                .collect::<Result<_, _>>()
                .map_err(|e| ctx.err(e))?,
        };
        let mut to = dims.to_vec();
        let sizes = self.constant(ctx, 3)?.filter(|s| s.numel() > 0);
        if let Some(sizes) = sizes {
            let policy = ctx.string("keep_aspect_ratio_policy");
            if !matches!(policy.as_deref(), None | Some("stretch")) {
                return Err(ctx.err(format!("keep_aspect_ratio_policy {policy:?} is not stretch")));
            }
            let sizes = sizes.i64()?;
            if sizes.len() != axes.len() {
                return Err(ctx.err(format!("{} sizes for {} axes", sizes.len(), axes.len())));
            }
            for (&a, &s) in axes.iter().zip(sizes) {
                to[a] = usize::try_from(s).map_err(|_| ctx.err(format!("size {s} is negative")))?;
            }
            return Ok(to);
        }
        let scales = self.constant(ctx, 2)?.filter(|s| s.numel() > 0);
        let scales = scales.ok_or_else(|| ctx.err("has neither constant scales nor sizes"))?;
        let scales = scales.f32()?;
        if scales.len() != axes.len() {
            return Err(ctx.err(format!("{} scales for {} axes", scales.len(), axes.len())));
        }
        for (&a, &s) in axes.iter().zip(scales) {
            let size = (dims[a] as f64 * f64::from(s)).floor();
            if !(size.is_finite() && size >= 0.0 && size < (1u64 << 32) as f64) {
                return Err(ctx.err(format!("scale {s} of axis {a} gives no size")));
            }
            to[a] = size as usize;
        }
        Ok(to)
    }

    /// `y` defined as `out` under ONNX shape `dims`, reshaped to them (named `out`) when
    /// stored otherwise.
    fn define_reshaped(
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
    /// `{out}.negated`, `{out}.negative`); a slope per channel is a depthwise 1×1 convolution
    /// by it (trained, under its name and ONNX shape), one slope for all a constant.
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
            1 => self.affine(ctx, &sloped, negative, &nchw, &values, &[0.0])?,
            _ => self.channel_scale(ctx, &sloped, negative, &nchw, &slope)?,
        };
        let name = self.staging(out, dims.len() != 4);
        let y = self.g.add(&name, positive, sloped).map_err(&graph)?;
        self.define(out, y, dims);
        Ok(())
    }
}
