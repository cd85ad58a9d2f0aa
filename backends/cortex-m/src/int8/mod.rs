//! Int8 convolution and dense kernels with the exact results of
//! [`sprout_core::quant::conv2d_s8`] and [`sprout_core::quant::linear_s8`] (same
//! parameters): [`conv2d_s8`] and [`linear_s8`] take the DSP-SIMD path where the target has
//! the DSP extension and the scalar path elsewhere; [`scalar::KERNELS`] and (on DSP targets)
//! [`dsp::KERNELS`] are each path's kernels, so both can be tested and benchmarked on one
//! core.
//!
//! Both are the product of [`product`]: output channels against columns of
//! zero-point-free `i16` inputs ([`columns`]), accumulated in wrapping `i32` like the
//! reference, then requantized with [`OutputQuant`]'s exact results ([`requantize`]);
//! depthwise convolutions, with too few taps per output to repay columns, run direct
//! loops over a zero-point-padded plane ([`depthwise`]).

mod columns;
pub use columns::CHUNK;
mod depthwise;
mod product;
mod requantize;
pub mod scalar;

#[cfg(dsp_simd)]
pub mod dsp;

use core::ops::Range;

use sprout_core::quant::{QConv2dArgs, QLayerArgs, QLinearArgs};

use columns::{centered, largest_centered, ConvPatch};
use product::{product, Columns, Engine, Rows, Sink, MOST_OUTPUTS};

#[cfg(dsp_simd)]
use dsp::Dsp as Best;
#[cfg(not(dsp_simd))]
use scalar::Scalar as Best;

/// An int8 convolution with [`sprout_core::quant::conv2d_s8`]'s parameters.
pub type ConvS8 = fn(&QConv2dArgs<'_>, &mut [i8]);
/// An int8 dense layer with [`sprout_core::quant::linear_s8`]'s parameters.
pub type LinearS8 = fn(&QLinearArgs<'_>, &mut [i8]);

/// One path's int8 convolution and dense kernels.
#[derive(Clone, Copy)]
pub struct Int8Path {
    pub conv2d_s8: ConvS8,
    pub linear_s8: LinearS8,
}

impl Int8Path {
    /// The kernels on the path of `E`'s multiply-accumulate loops.
    const fn on<E: Engine>() -> Self {
        Self { conv2d_s8: conv2d::<E>, linear_s8: linear::<E> }
    }
}

/// Int8 convolution, bit-exact with [`sprout_core::quant::conv2d_s8`], on the fastest path
/// this target has.
pub fn conv2d_s8(a: &QConv2dArgs<'_>, y: &mut [i8]) {
    conv2d::<Best>(a, y)
}

/// Int8 dense layer, bit-exact with [`sprout_core::quant::linear_s8`], on the fastest path
/// this target has.
pub fn linear_s8(a: &QLinearArgs<'_>, y: &mut [i8]) {
    linear::<Best>(a, y)
}

/// The output positions of one image and group, as columns of their receptive fields.
struct ConvColumns<'a> {
    patch: ConvPatch<'a>,
}

impl Columns for ConvColumns<'_> {
    fn count(&self) -> usize {
        self.patch.g.out_h * self.patch.g.out_w
    }
    fn largest(&self) -> u64 {
        largest_centered(self.patch.zero_point)
    }
    fn fill(&self, column: usize, range: Range<usize>, out: &mut [i16]) {
        let out_w = self.patch.g.out_w;
        self.patch.fill((column / out_w, column % out_w), range, out)
    }
    fn fill_panel<E: Engine>(&self, first: usize, range: Range<usize>, panel: &mut [i16]) -> bool {
        self.patch.fill_pointwise_panel::<E>(first, range, panel)
    }
}

/// The rows of a dense layer's input, as columns.
struct InputRows<'a> {
    x: &'a [i8],
    zero_point: i32,
    k: usize,
}

impl Columns for InputRows<'_> {
    fn count(&self) -> usize {
        self.x.len().checked_div(self.k).unwrap_or(0)
    }
    fn largest(&self) -> u64 {
        largest_centered(self.zero_point)
    }
    fn fill(&self, column: usize, range: Range<usize>, out: &mut [i16]) {
        let row = &self.x[column * self.k..][range];
        for (value, &q) in out.iter_mut().zip(row) {
            *value = centered(q, self.zero_point);
        }
    }
}

fn conv2d<E: Engine>(a: &QConv2dArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref g } = *a;
    debug_assert_eq!(x.len(), g.input_len());
    debug_assert_eq!(w.len(), g.weight_len());
    debug_assert_eq!(y.len(), g.output_len());
    debug_assert_eq!(out.multipliers.len(), g.c_out);
    if depthwise::is_depthwise(g) {
        return depthwise::depthwise_s8::<E>(a, y);
    }
    let (cig, cog, plane) = (g.c_in_per_group(), g.c_out_per_group(), g.out_h * g.out_w);
    let depth = cig * g.kh * g.kw;
    for n in 0..g.n {
        for group in 0..g.groups {
            let first = group * cog;
            let patch = ConvPatch { x, zero_point: x_zp, g, first_plane: n * g.c_in + group * cig };
            let rows = Rows {
                w: &w[first * depth..(first + cog) * depth],
                count: cog,
                depth,
                bias,
                first,
                out,
            };
            let mut sink = Planes { y: &mut *y, first: (n * g.c_out + first) * plane, plane };
            product::<E>(&ConvColumns { patch }, &rows, &mut sink);
        }
    }
}

fn linear<E: Engine>(a: &QLinearArgs<'_>, y: &mut [i8]) {
    let QLayerArgs { x, x_zero_point: x_zp, weights: w, bias, ref out, shape: ref d } = *a;
    debug_assert_eq!(x.len(), d.n * d.k);
    debug_assert_eq!(w.len(), d.m * d.k);
    debug_assert_eq!(y.len(), d.n * d.m);
    debug_assert_eq!(out.multipliers.len(), d.m);
    let columns = InputRows { x, zero_point: x_zp, k: d.k };
    let rows = Rows { w, count: d.m, depth: d.k, bias, first: 0, out };
    product::<E>(&columns, &rows, &mut Rowwise { y, m: d.m });
}

/// A convolution's outputs: a row's outputs lie together in its output channel's plane,
/// so they are written in place.
struct Planes<'a> {
    y: &'a mut [i8],
    /// Where the product's first output channel starts in `y`.
    first: usize,
    plane: usize,
}

impl Sink for Planes<'_> {
    fn put(&mut self, first: usize, row: usize, len: usize, finish: impl FnOnce(&mut [i8])) {
        finish(&mut self.y[self.first + row * self.plane + first..][..len])
    }
}

/// A dense layer's outputs: a row's outputs (one output feature for consecutive samples)
/// lie `m` apart, so they are finished into a buffer and spread out.
struct Rowwise<'a> {
    y: &'a mut [i8],
    m: usize,
}

impl Sink for Rowwise<'_> {
    fn put(&mut self, first: usize, row: usize, len: usize, finish: impl FnOnce(&mut [i8])) {
        let mut values = [0i8; MOST_OUTPUTS];
        let values = &mut values[..len];
        finish(values);
        for (i, &value) in (first..).zip(&*values) {
            self.y[i * self.m + row] = value;
        }
    }
}
