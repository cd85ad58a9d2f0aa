//! The portable int8 path: the blocked product with a plain Rust multiply-accumulate loop,
//! for cores without the DSP extension (Cortex-M0+, `thumbv6m`) and the host.

use super::columns::{natural_order, WIDE};
use super::product::Engine;
use super::Int8Path;

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

/// The int8 kernels on the scalar path.
pub const KERNELS: Int8Path = Int8Path::on::<Scalar>();
