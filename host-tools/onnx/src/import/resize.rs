//! `Resize` of `[N, C, H, W]` over H and W: by nearest neighbour to whole multiples as views
//! and `broadcast`s, otherwise (bilinear, bicubic, nearest at any size) as products by
//! constant interpolation matrices, one per resized axis, built from ONNX's definition.

use super::{Ctx, Importer};
use crate::error::OnnxError;
use crate::fold;
use sprout_core::{Init, Shape, TensorId};

/// How an output position maps to input positions (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Coordinates {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    HalfPixelSymmetric,
    TfHalfPixelForNn,
}

/// How an output value is made from the input values around its source position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Interpolation {
    /// The input value nearest the source position, rounded as `nearest_mode` says.
    Nearest(Rounding),
    Linear,
    /// Keys' cubic with coefficient `a` (`cubic_coeff_a`); `exclude_outside` renormalises
    /// over the taps inside the input.
    Cubic {
        a: f64,
        exclude_outside: bool,
    },
}

/// `nearest_mode`: `floor`, `ceil`, or to the nearest with halves down (`round_prefer_floor`)
/// or up (`round_prefer_ceil`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Rounding {
    Floor,
    Ceil,
    HalfDown,
    HalfUp,
}

/// One axis of a resize: `from` positions to `to`, with the scale ONNX's coordinates use
/// (the `scales` value as written, or `to / from` for `sizes`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Axis {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) scale: f64,
}

impl Coordinates {
    fn parse(mode: Option<&str>) -> Result<Self, String> {
        Ok(match mode.unwrap_or("half_pixel") {
            "half_pixel" => Self::HalfPixel,
            "pytorch_half_pixel" => Self::PytorchHalfPixel,
            "align_corners" => Self::AlignCorners,
            "asymmetric" => Self::Asymmetric,
            "half_pixel_symmetric" => Self::HalfPixelSymmetric,
            "tf_half_pixel_for_nn" => Self::TfHalfPixelForNn,
            other => return Err(format!(
                "coordinate_transformation_mode '{other}' is not supported (tf_crop_and_resize needs a region of interest)"
            )),
        })
    }

    /// The input coordinate of output position `x` along `axis`, as ONNX defines it
    /// (`align_corners` over the whole output length, as PyTorch and onnxruntime do).
    fn source(self, x: usize, axis: Axis) -> f64 {
        let (x, from, to, scale) = (x as f64, axis.from as f64, axis.to as f64, axis.scale);
        match self {
            Self::HalfPixel => (x + 0.5) / scale - 0.5,
            Self::PytorchHalfPixel if axis.to > 1 => (x + 0.5) / scale - 0.5,
            Self::PytorchHalfPixel => 0.0,
            Self::AlignCorners if axis.to > 1 => x * (from - 1.0) / (to - 1.0),
            Self::AlignCorners => 0.0,
            Self::Asymmetric => x / scale,
            Self::HalfPixelSymmetric => {
                let adjustment = to / (scale * from);
                from / 2.0 * (1.0 - adjustment) + (x + 0.5) / scale - 0.5
            }
            Self::TfHalfPixelForNn => (x + 0.5) / scale,
        }
    }
}

/// The `[axis.to, axis.from]` matrix `A` (row-major) with `y = A · x` along the axis:
/// each row holds the weights of the input positions one output value reads, positions
/// outside the input standing for the nearest edge one (ONNX's edge padding).
pub(crate) fn interpolation_matrix(
    axis: Axis,
    coordinates: Coordinates,
    interpolation: Interpolation,
) -> Vec<f32> {
    let last = (axis.from as i64 - 1).max(0);
    let clamp = |i: i64| i.clamp(0, last) as usize;
    let mut a = vec![0.0f32; axis.to * axis.from];
    for (o, row) in a.chunks_exact_mut(axis.from.max(1)).enumerate() {
        let x = coordinates.source(o, axis);
        let floor = x.floor();
        match interpolation {
            Interpolation::Nearest(rounding) => {
                let i = match rounding {
                    Rounding::Floor => floor,
                    Rounding::Ceil => x.ceil(),
                    Rounding::HalfDown if x - floor == 0.5 => floor,
                    Rounding::HalfDown | Rounding::HalfUp => (x + 0.5).floor(),
                };
                row[clamp(i as i64)] = 1.0;
            }
            Interpolation::Linear => {
                let r = x - floor;
                row[clamp(floor as i64)] += (1.0 - r) as f32;
                row[clamp((floor as i64).saturating_add(1))] += r as f32;
            }
            Interpolation::Cubic { a: coefficient, exclude_outside } => {
                // Taps floor-1 .. floor+2 at distances 1+r, r, 1-r, 2-r (r in [0, 1)).
                let r = x - floor;
                let weights = cubic_weights(r, coefficient);
                let taps = (-1..=2).map(|k| (floor as i64).saturating_add(k));
                let inside = |i: i64| (0..=last).contains(&i);
                let total: f64 = match exclude_outside {
                    true => {
                        taps.clone().zip(weights).filter(|(i, _)| inside(*i)).map(|p| p.1).sum()
                    }
                    false => 1.0,
                };
                for (i, w) in taps.zip(weights) {
                    if exclude_outside && !inside(i) {
                        continue;
                    }
                    row[clamp(i)] += (w / total) as f32;
                }
            }
        }
    }
    a
}

/// Keys' cubic convolution weights of the taps at distances `1 + r`, `r`, `1 - r`, `2 - r`.
fn cubic_weights(r: f64, a: f64) -> [f64; 4] {
    let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    [far(1.0 + r), near(r), near(1.0 - r), far(2.0 - r)]
}

impl Importer<'_> {
    /// `Resize` of `[N, C, H, W]` over H and W. Nearest neighbour to whole multiples under
    /// a coordinate transformation and rounding that repeat each value (PyTorch's
    /// `asymmetric` with `floor`, `half_pixel` with either rounding) is a view with a
    /// size-1 axis after W broadcast to the factor (`{out}.cols`), then one after each
    /// row's (`{out}.rows`), then a reshape; every other resize is a product by constant
    /// interpolation matrices (see [`Importer::resize_by_matrices`]).
    pub(super) fn resize(&mut self, ctx: &Ctx) -> Result<(), OnnxError> {
        let (x, dims) = self.act(ctx, 0)?;
        let &[n, c, h, w] = dims.as_slice() else {
            return Err(ctx.err(format!("input must be [N, C, H, W], it has shape {dims:?}")));
        };
        let (to, scales) = self.resized_dims(ctx, &dims)?;
        if to[..2] != [n, c] {
            return Err(ctx.err(format!(
                "resizes {dims:?} to {to:?}: sprout resizes H and W only, not N or C"
            )));
        }
        if to[2..].contains(&0) || dims[2..].contains(&0) {
            return Err(ctx.err(format!("resizes {dims:?} to {to:?}: an axis is empty")));
        }
        let coordinates = ctx.string("coordinate_transformation_mode");
        let coordinates = Coordinates::parse(coordinates.as_deref()).map_err(|e| ctx.err(e))?;
        let mode = ctx.string("mode").unwrap_or_else(|| "nearest".into());
        let interpolation = match mode.as_str() {
            "nearest" => Interpolation::Nearest(match ctx.string("nearest_mode").as_deref() {
                None | Some("round_prefer_floor") => Rounding::HalfDown,
                Some("round_prefer_ceil") => Rounding::HalfUp,
                Some("floor") => Rounding::Floor,
                Some("ceil") => Rounding::Ceil,
                Some(other) => return Err(ctx.err(format!("nearest_mode '{other}' is unknown"))),
            }),
            "linear" => Interpolation::Linear,
            "cubic" => Interpolation::Cubic {
                a: f64::from(ctx.float("cubic_coeff_a", -0.75)?),
                exclude_outside: ctx.int("exclude_outside", 0)? != 0,
            },
            other => return Err(ctx.err(format!("mode '{other}' is unknown"))),
        };
        let axes = [2, 3].map(|a| Axis { from: dims[a], to: to[a], scale: scales[a] });
        if let Some(bad) = axes.iter().find(|a| !(a.scale.is_finite() && a.scale > 0.0)) {
            return Err(ctx.err(format!("scale {} is not a positive number", bad.scale)));
        }
        let shrinks = axes.iter().any(|a| a.to < a.from);
        if ctx.int("antialias", 0)? != 0
            && shrinks
            && !matches!(interpolation, Interpolation::Nearest(_))
        {
            return Err(ctx.err(
                "antialias = 1 while shrinking: sprout interpolates without an anti-aliasing filter",
            ));
        }
        let out = ctx.output()?;
        let repeats = |a: &Axis| a.to.is_multiple_of(a.from) && a.scale == (a.to / a.from) as f64;
        let repeated = match (coordinates, interpolation) {
            (
                Coordinates::Asymmetric | Coordinates::TfHalfPixelForNn,
                Interpolation::Nearest(r),
            ) => r == Rounding::Floor,
            (Coordinates::HalfPixel | Coordinates::PytorchHalfPixel, Interpolation::Nearest(r)) => {
                r != Rounding::Floor && r != Rounding::Ceil
            }
            _ => false,
        };
        let y = if repeated && axes.iter().all(repeats) {
            self.repeat(ctx, out, x, [n, c, h, w], axes[0].to / h, axes[1].to / w)?
        } else {
            self.resize_by_matrices(ctx, out, x, [n, c], axes, coordinates, interpolation)?
        };
        self.define_reshaped(ctx, out, y, to)
    }

    /// Each value of `x` `[N, C, H, W]` repeated `sh` times down and `sw` across.
    fn repeat(
        &mut self,
        ctx: &Ctx,
        out: &str,
        x: TensorId,
        [n, c, h, w]: [usize; 4],
        sh: usize,
        sw: usize,
    ) -> Result<TensorId, OnnxError> {
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
        Ok(y)
    }

    /// `x` `[N, C, H, W]` resized as `A_h · x · A_wᵀ` per plane, each interpolation matrix
    /// a constant buffer (`{out}.width.weight` `[W', W]`, `{out}.height.weight` `[H', H]`):
    /// a `linear` over W (`{out}.width`), a transpose putting H last (`{out}.transposed`),
    /// a `linear` over H (`{out}.height`) and a transpose back. An axis whose matrix is the
    /// identity is left out. Gradients flow through the products and transposes.
    #[allow(clippy::too_many_arguments)]
    fn resize_by_matrices(
        &mut self,
        ctx: &Ctx,
        out: &str,
        x: TensorId,
        [n, c]: [usize; 2],
        [height, width]: [Axis; 2],
        coordinates: Coordinates,
        interpolation: Interpolation,
    ) -> Result<TensorId, OnnxError> {
        let bytes = [height, width]
            .iter()
            .map(|a| (a.to as u64).saturating_mul(a.from as u64).saturating_mul(4))
            .fold(0u64, u64::saturating_add);
        self.reserve(ctx, bytes, "its interpolation matrices")?;
        let matrix = |axis: Axis| {
            let a = interpolation_matrix(axis, coordinates, interpolation);
            let diagonal = |i: usize| i.is_multiple_of(axis.from + 1);
            let identity = axis.from == axis.to
                && a.iter().enumerate().all(|(i, &v)| v == if diagonal(i) { 1.0 } else { 0.0 });
            (!identity).then_some(a)
        };
        let (along_h, along_w) = (matrix(height), matrix(width));
        let mut y = self.view(ctx, x, &[n, c, height.from, width.from], out)?;
        if let Some(a) = along_w {
            let name = if along_h.is_some() { format!("{out}.width") } else { out.to_string() };
            y = self.interpolate(ctx, &name, y, width, a)?;
        }
        if let Some(a) = along_h {
            let now = [n, c, height.from, width.to];
            let (t, t_dims) =
                self.permuted(ctx, y, &now, &[0, 1, 3, 2], &format!("{out}.transposed"))?;
            let t = self.view(ctx, t, &t_dims, &format!("{out}.transposed"))?;
            let r = self.interpolate(ctx, &format!("{out}.height"), t, height, a)?;
            (y, _) = self.permuted(ctx, r, &[n, c, width.to, height.to], &[0, 1, 3, 2], out)?;
        }
        Ok(y)
    }

    /// `x` times the constant interpolation matrix `a` `[axis.to, axis.from]` over its last
    /// axis: a `linear` op `name` by the buffer `{name}.weight`.
    fn interpolate(
        &mut self,
        ctx: &Ctx,
        name: &str,
        x: TensorId,
        axis: Axis,
        a: Vec<f32>,
    ) -> Result<TensorId, OnnxError> {
        let shape = Shape::d2(axis.to, axis.from);
        let w = self
            .g
            .buffer(&format!("{name}.weight"), shape, Init::Values(a))
            .map_err(ctx.graph())?;
        self.g.linear(name, x, w, None).map_err(ctx.graph())
    }

    /// The output dims of a `Resize` of `dims` and each axis's scale: its constant `sizes`
    /// (input 3; scale `size / dim`) or `scales` (input 2, sizes rounded down), over its
    /// `axes` (all without).
    fn resized_dims(&self, ctx: &Ctx, dims: &[usize]) -> Result<(Vec<usize>, Vec<f64>), OnnxError> {
        let axes: Vec<usize> = match ctx.ints("axes") {
            None => (0..dims.len()).collect(),
            Some(a) => a
                .iter()
                .map(|&a| fold::axis(a, dims.len()))
                .collect::<Result<_, _>>()
                .map_err(|e| ctx.err(e))?,
        };
        let (mut to, mut scales) = (dims.to_vec(), vec![1.0; dims.len()]);
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
                scales[a] = to[a] as f64 / dims[a] as f64;
            }
            return Ok((to, scales));
        }
        let given = self.constant(ctx, 2)?.filter(|s| s.numel() > 0);
        let given = given.ok_or_else(|| ctx.err("has neither constant scales nor sizes"))?;
        let given = given.f32()?;
        if given.len() != axes.len() {
            return Err(ctx.err(format!("{} scales for {} axes", given.len(), axes.len())));
        }
        for (&a, &s) in axes.iter().zip(given) {
            let size = (dims[a] as f64 * f64::from(s)).floor();
            if !(size.is_finite() && size >= 0.0 && size < (1u64 << 32) as f64) {
                return Err(ctx.err(format!("scale {s} of axis {a} gives no size")));
            }
            to[a] = size as usize;
            scales[a] = f64::from(s);
        }
        Ok((to, scales))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(from: usize, to: usize, c: Coordinates, i: Interpolation) -> Vec<f32> {
        interpolation_matrix(Axis { from, to, scale: to as f64 / from as f64 }, c, i)
    }

    /// Doubling 3 values with half-pixel centres: output 0 sits at -0.25 (the edge value),
    /// output 1 at 0.25, ..., output 5 at 2.25 (the edge again).
    #[test]
    fn bilinear_half_pixel_doubling_weighs_neighbours_and_repeats_edges() {
        let a = matrix(3, 6, Coordinates::HalfPixel, Interpolation::Linear);
        #[rustfmt::skip]
        let want = [
            1.0, 0.0, 0.0,
            0.75, 0.25, 0.0,
            0.25, 0.75, 0.0,
            0.0, 0.75, 0.25,
            0.0, 0.25, 0.75,
            0.0, 0.0, 1.0,
        ];
        assert_eq!(a, want);
    }

    /// `align_corners` maps the first and last positions onto each other: 3 to 5 steps by
    /// exactly a half.
    #[test]
    fn align_corners_keeps_the_corners() {
        let a = matrix(3, 5, Coordinates::AlignCorners, Interpolation::Linear);
        #[rustfmt::skip]
        let want = [
            1.0, 0.0, 0.0,
            0.5, 0.5, 0.0,
            0.0, 1.0, 0.0,
            0.0, 0.5, 0.5,
            0.0, 0.0, 1.0,
        ];
        assert_eq!(a, want);
        // One output position reads the first input.
        assert_eq!(matrix(3, 1, Coordinates::AlignCorners, Interpolation::Linear), [1.0, 0.0, 0.0]);
    }

    /// Rows always sum to one; halving averages neighbour pairs (half-pixel).
    #[test]
    fn shrinking_averages_and_every_row_sums_to_one() {
        let a = matrix(4, 2, Coordinates::HalfPixel, Interpolation::Linear);
        assert_eq!(a, [0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5]);
        for i in [Interpolation::Linear, Interpolation::Cubic { a: -0.75, exclude_outside: true }] {
            let a = matrix(5, 7, Coordinates::Asymmetric, i);
            for row in a.chunks(5) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{row:?}");
            }
        }
    }

    /// Cubic at a whole position reads that position alone; nearest rounds as asked.
    #[test]
    fn cubic_at_a_sample_and_nearest_rounding() {
        let a = matrix(
            4,
            4,
            Coordinates::Asymmetric,
            Interpolation::Cubic { a: -0.75, exclude_outside: false },
        );
        for (i, row) in a.chunks(4).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                assert!((v - f32::from(u8::from(i == j))).abs() < 1e-12, "{a:?}");
            }
        }
        // 2 to 3 asymmetric: sources 0, 2/3, 4/3.
        let near = |r| matrix(2, 3, Coordinates::Asymmetric, Interpolation::Nearest(r));
        assert_eq!(near(Rounding::Floor), [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
        assert_eq!(near(Rounding::HalfDown), [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]);
        assert_eq!(near(Rounding::Ceil), [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]);
    }
}
