//! The portable int8 path: the blocked product with a plain Rust multiply-accumulate loop,
//! for cores without the DSP extension (Cortex-M0+, `thumbv6m`) and the host.

use sprout_core::geometry::{Conv2dGeometry, LinearDims};
use sprout_core::quant::OutputQuant;

use super::columns::{natural_order, WIDE};
use super::product::Engine;

/// Plain `i32` multiply-accumulates.
pub struct Scalar;

/// `Σ w[k] · x[k]` of one group of four, `lanes` in column-block order.
fn group_dot(w: &[i8], lanes: &[i16]) -> i32 {
    let x = natural_order(lanes);
    (0..4).fold(0i32, |acc, k| acc.wrapping_add(i32::from(w[k]) * i32::from(x[k])))
}

impl Engine for Scalar {
    fn dot_wide(w: &[i8], values: &[i16], acc: &mut [i32; WIDE]) {
        for (w, columns) in w.chunks_exact(4).zip(values.chunks_exact(4 * WIDE)) {
            for (acc, lanes) in acc.iter_mut().zip(columns.chunks_exact(4)) {
                *acc = acc.wrapping_add(group_dot(w, lanes));
            }
        }
    }
    fn dot_one(w: &[i8], values: &[i16], acc: &mut i32) {
        for (w, lanes) in w.chunks_exact(4).zip(values.chunks_exact(4)) {
            *acc = acc.wrapping_add(group_dot(w, lanes));
        }
    }
}

/// [`super::conv2d_s8`] on the scalar path.
pub fn conv2d_s8(
    x: &[i8],
    x_zp: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    y: &mut [i8],
    out: &OutputQuant<'_>,
    g: &Conv2dGeometry,
) {
    super::conv2d::<Scalar>(x, x_zp, w, bias, y, out, g)
}

/// [`super::linear_s8`] on the scalar path.
pub fn linear_s8(
    x: &[i8],
    x_zp: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    y: &mut [i8],
    out: &OutputQuant<'_>,
    d: &LinearDims,
) {
    super::linear::<Scalar>(x, x_zp, w, bias, y, out, d)
}
