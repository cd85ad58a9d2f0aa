//! Conformance checks of this backend against sprout-core's reference kernels, without
//! heap or `std`, so the same checks run in `cargo test` on the host and on the emulated
//! Cortex-M4 (the `qemu-mps2-an386` board's `conformance` binary).
//!
//! Int8 kernels must match [`sprout_core::quant`] bit for bit on seeded random shapes and
//! data, plus saturation corners (inputs and zero points at −128/127, weights at ±127,
//! biases and multipliers that drive every output to the clamp bounds). f32 kernels must
//! satisfy [`REDUCTION`] (`|got − want| <= 1e-5 + 1e-4 · |want|`) against
//! [`sprout_core::Reference`], the conformance suite's tolerance for kernels that sum in
//! another order.

use core::fmt;

use sprout_core::backend::{ConvKernels, DenseKernels, PointwiseKernels};
use sprout_core::geometry::{window_output, Conv2dGeometry, LinearDims};
use sprout_core::quant::{OutputQuant, QConv2dArgs, QLinearArgs, Requantize, FULL_RANGE};
use sprout_core::reference::tolerance::{Tolerance, EXACT, REDUCTION};
use sprout_core::reference::{Activation, HardSigmoidParams, LeakyReluParams};
use sprout_core::rng::SplitMix;
use sprout_core::{Host, Kernels, Reference};

use crate::int8::Int8Path;

/// Largest input, weight and output of any case, in elements.
const MAX_X: usize = 2048;
const MAX_W: usize = 6656;
const MAX_Y: usize = 1024;
const MAX_CHANNELS: usize = 64;

/// One convolution case: `(n, c_in, h, w, c_out, (kh, kw), stride, padding, groups)`.
type ConvCase = (usize, usize, usize, usize, usize, Pair, Pair, Pair, usize);
type Pair = (usize, usize);

/// Convolution cases: `(n, c_in, h, w, c_out, (kh, kw), stride, padding, groups)`. They
/// reach every path: pixel counts that leave one-column tails, groups, depthwise, strides,
/// non-square kernels, padding wider than half the kernel, pointwise, a reduction longer
/// than one column chunk with more channels than one row block, depthwise planes too
/// large to pad on the stack or wider than one row of sums, and reductions of two groups.
#[rustfmt::skip]
const CONV_CASES: [ConvCase; 11] = [
    (1, 3, 7, 6, 5, (3, 3), (1, 1), (1, 1), 1),
    (2, 4, 5, 5, 6, (3, 3), (2, 2), (1, 1), 2),
    (1, 8, 6, 6, 8, (3, 3), (1, 1), (1, 1), 8),
    (2, 5, 8, 7, 5, (3, 3), (1, 2), (1, 0), 5),
    (1, 16, 4, 4, 24, (1, 1), (1, 1), (0, 0), 1),
    (1, 32, 4, 4, 20, (3, 3), (1, 1), (1, 1), 1),
    (1, 2, 5, 7, 3, (2, 3), (1, 2), (2, 1), 1),
    (2, 6, 4, 5, 9, (1, 1), (2, 2), (0, 0), 3),
    (1, 1, 36, 36, 1, (3, 3), (2, 2), (1, 1), 1),
    (1, 2, 3, 140, 2, (3, 3), (1, 1), (1, 1), 2),
    (1, 8, 5, 9, 6, (1, 1), (1, 1), (0, 0), 1),
];

/// Dense cases `(n, k, m)`: short and long reductions (over one chunk), batches that leave
/// one-row tails, more outputs than one row block, a reduction of two groups.
const LINEAR_CASES: [(usize, usize, usize); 7] =
    [(1, 17, 5), (3, 64, 10), (6, 270, 18), (4, 4, 1), (5, 3, 7), (8, 96, 33), (9, 7, 6)];

/// The first disagreement with the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    pub kernel: &'static str,
    /// Index of the case in its list; the corner pass adds 100.
    pub case: usize,
    pub index: usize,
    pub got: f32,
    pub want: f32,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { kernel, case, index, got, want } = self;
        write!(f, "{kernel}, case {case}, element {index}: got {got}, want {want}")
    }
}

impl core::error::Error for Mismatch {}

/// Buffers for the checks (about 90 KiB: keep it in a `static` on a device).
pub struct Scratch {
    x: [f32; MAX_X],
    w: [f32; MAX_W],
    got: [f32; MAX_W],
    want: [f32; MAX_W],
    xq: [i8; MAX_X],
    wq: [i8; MAX_W],
    yq_got: [i8; MAX_Y],
    yq_want: [i8; MAX_Y],
}

impl Scratch {
    pub const fn new() -> Self {
        Self {
            x: [0.0; MAX_X],
            w: [0.0; MAX_W],
            got: [0.0; MAX_W],
            want: [0.0; MAX_W],
            xq: [0; MAX_X],
            wq: [0; MAX_W],
            yq_got: [0; MAX_Y],
            yq_want: [0; MAX_Y],
        }
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// The convolution cases as geometries.
pub fn conv_cases() -> impl Iterator<Item = Conv2dGeometry> {
    CONV_CASES.into_iter().map(|(n, c_in, h, w, c_out, (kh, kw), stride, padding, groups)| {
        let out = |size, k, s, p| window_output(size, k, s, p).unwrap_or(0);
        Conv2dGeometry {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            stride,
            padding,
            groups,
            out_h: out(h, kh, stride.0, padding.0),
            out_w: out(w, kw, stride.1, padding.1),
        }
    })
}

/// The dense cases as dimensions.
pub fn linear_cases() -> impl Iterator<Item = LinearDims> {
    LINEAR_CASES.into_iter().map(|(n, k, m)| LinearDims { n, k, m })
}

/// Random int8 data or, in the corner pass, only the extremes.
fn fill_i8(rng: &mut SplitMix, out: &mut [i8], corner: bool, low: i8) {
    for q in out {
        let r = rng.next_u64();
        *q = match corner {
            true if r & 1 == 0 => low,
            true => i8::MAX,
            false => (r as i8).max(low),
        };
    }
}

/// Per-channel requantization: random multipliers around 2^-8 or, in the corner pass,
/// between 1/4 and 3/2 (every shift form, from `2^-2` to `2^1`) with biases near `±2^30`
/// so that outputs reach both clamp bounds.
struct Quantization {
    multipliers: [Requantize; MAX_CHANNELS],
    bias: [i32; MAX_CHANNELS],
    x_zp: i32,
    y_zp: i32,
    act: (i8, i8),
}

impl Quantization {
    fn random(rng: &mut SplitMix, corner: bool) -> Self {
        let unit = |rng: &mut SplitMix| rng.next_f32();
        let multipliers = core::array::from_fn(|_| {
            let m = match corner {
                true => 0.25 + 1.25 * unit(rng),
                false => 1e-3 + 7e-3 * unit(rng),
            };
            Requantize::new(f64::from(m)).unwrap_or(Requantize { multiplier: 1 << 30, shift: 0 })
        });
        let bias = core::array::from_fn(|_| {
            let r = rng.next_u64();
            match corner {
                true if r & 1 == 0 => i32::MAX / 2,
                true => i32::MIN / 2,
                false => (r % 40_001) as i32 - 20_000,
            }
        });
        let (x_zp, y_zp, act) = match corner {
            true => (-128, 127, FULL_RANGE),
            false => {
                // Activation bounds half the time, the full int8 range (no bounds but
                // int8's, a path of its own in the DSP requantization) otherwise.
                let lo = ((rng.next_u64() % 64) as i32 - 128) as i8;
                let act = if rng.next_u64().is_multiple_of(2) { (lo, 120) } else { FULL_RANGE };
                ((rng.next_u64() % 256) as i32 - 128, (rng.next_u64() % 21) as i32 - 10, act)
            }
        };
        Self { multipliers, bias, x_zp, y_zp, act }
    }

    fn output(&self, channels: usize) -> OutputQuant<'_> {
        OutputQuant {
            multipliers: &self.multipliers[..channels],
            zero_point: self.y_zp,
            act: self.act,
        }
    }
}

fn compare_i8(kernel: &'static str, case: usize, got: &[i8], want: &[i8]) -> Result<(), Mismatch> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(index) => Err(Mismatch {
            kernel,
            case,
            index,
            got: f32::from(got[index]),
            want: f32::from(want[index]),
        }),
    }
}

fn compare_f32(
    kernel: &'static str,
    case: usize,
    got: &[f32],
    want: &[f32],
) -> Result<(), Mismatch> {
    compare_within(REDUCTION, kernel, case, got, want)
}

fn compare_within(
    tolerance: Tolerance,
    kernel: &'static str,
    case: usize,
    got: &[f32],
    want: &[f32],
) -> Result<(), Mismatch> {
    match got.iter().zip(want).position(|(&g, &w)| !tolerance.accepts(g, w)) {
        None => Ok(()),
        Some(index) => Err(Mismatch { kernel, case, index, got: got[index], want: want[index] }),
    }
}

/// Checks an int8 convolution and dense layer against the reference kernels: every case
/// with random data, then again at the saturation corners. Returns the cases checked.
pub fn check_int8(kernels: Int8Path, s: &mut Scratch) -> Result<usize, Mismatch> {
    let Int8Path { conv2d_s8: conv, linear_s8: linear } = kernels;
    let mut rng = SplitMix::new(0x5EED);
    let mut checked = 0;
    for corner in [false, true] {
        let offset = if corner { 100 } else { 0 };
        for (case, g) in conv_cases().enumerate() {
            let q = Quantization::random(&mut rng, corner);
            let (x, w) = (&mut s.xq[..g.input_len()], &mut s.wq[..g.weight_len()]);
            fill_i8(&mut rng, x, corner, i8::MIN);
            fill_i8(&mut rng, w, corner, -i8::MAX);
            let (out, bias) = (q.output(g.c_out), Some(&q.bias[..g.c_out]));
            let a = QConv2dArgs { x, x_zero_point: q.x_zp, weights: w, bias, out, shape: g };
            let (got, want) = (&mut s.yq_got[..g.output_len()], &mut s.yq_want[..g.output_len()]);
            conv(&a, got);
            sprout_core::quant::conv2d_s8(&a, want);
            compare_i8("int8 conv2d", offset + case, got, want)?;
            checked += 1;
        }
        for (case, d) in linear_cases().enumerate() {
            let q = Quantization::random(&mut rng, corner);
            let (x, w) = (&mut s.xq[..d.n * d.k], &mut s.wq[..d.m * d.k]);
            fill_i8(&mut rng, x, corner, i8::MIN);
            fill_i8(&mut rng, w, corner, -i8::MAX);
            let (out, bias) = (q.output(d.m), (case % 2 == 0).then_some(&q.bias[..d.m]));
            let a = QLinearArgs { x, x_zero_point: q.x_zp, weights: w, bias, out, shape: d };
            let (got, want) = (&mut s.yq_got[..d.n * d.m], &mut s.yq_want[..d.n * d.m]);
            linear(&a, got);
            sprout_core::quant::linear_s8(&a, want);
            compare_i8("int8 linear", offset + case, got, want)?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// Checks a backend's f32 dense and convolution kernels (forward and both gradients)
/// against [`Reference`] within the stated tolerance. Returns the kernel calls checked.
pub fn check_f32(
    backend: &mut impl Kernels<Memory = Host>,
    s: &mut Scratch,
) -> Result<usize, Mismatch> {
    let mut rng = SplitMix::new(0xF32);
    let mut checked = 0;
    let mut bias = [0.0f32; MAX_CHANNELS];
    for (case, g) in conv_cases().enumerate() {
        let (xl, wl, yl) = (g.input_len(), g.weight_len(), g.output_len());
        s.x[..xl.max(yl)].iter_mut().for_each(|v| *v = rng.uniform(-1.0, 1.0));
        s.w[..wl].iter_mut().for_each(|v| *v = rng.uniform(-0.5, 0.5));
        bias.iter_mut().for_each(|v| *v = rng.uniform(-1.0, 1.0));
        let (x, w, b) = (&s.x[..xl], &s.w[..wl], Some(&bias[..g.c_out]));
        backend.conv2d(x, w, b, &mut s.got[..yl], &g);
        Reference.conv2d(x, w, b, &mut s.want[..yl], &g);
        compare_f32("f32 conv2d", case, &s.got[..yl], &s.want[..yl])?;
        // The gradients take `x` (long enough for both) as dy.
        let dy = &s.x[..yl];
        backend.conv2d_grad_input(dy, w, &mut s.got[..xl], &g);
        Reference.conv2d_grad_input(dy, w, &mut s.want[..xl], &g);
        compare_f32("f32 conv2d_grad_input", case, &s.got[..xl], &s.want[..xl])?;
        let x = &s.w[wl..wl + xl];
        backend.conv2d_grad_weight(dy, x, &mut s.got[..wl], &g);
        Reference.conv2d_grad_weight(dy, x, &mut s.want[..wl], &g);
        compare_f32("f32 conv2d_grad_weight", case, &s.got[..wl], &s.want[..wl])?;
        checked += 3;
    }
    for (case, d) in linear_cases().enumerate() {
        let (xl, wl, yl) = (d.n * d.k, d.m * d.k, d.n * d.m);
        s.x[..xl.max(yl)].iter_mut().for_each(|v| *v = rng.uniform(-1.0, 1.0));
        s.w[..wl + xl].iter_mut().for_each(|v| *v = rng.uniform(-0.5, 0.5));
        bias.iter_mut().for_each(|v| *v = rng.uniform(-1.0, 1.0));
        let (x, w, b) = (&s.x[..xl], &s.w[..wl], (case % 2 == 0).then_some(&bias[..d.m]));
        backend.linear(x, w, b, &mut s.got[..yl], d);
        Reference.linear(x, w, b, &mut s.want[..yl], d);
        compare_f32("f32 linear", case, &s.got[..yl], &s.want[..yl])?;
        let dy = &s.x[..yl];
        backend.linear_grad_input(dy, w, &mut s.got[..xl], d);
        Reference.linear_grad_input(dy, w, &mut s.want[..xl], d);
        compare_f32("f32 linear_grad_input", case, &s.got[..xl], &s.want[..xl])?;
        let x = &s.w[wl..wl + xl];
        backend.linear_grad_weight(dy, x, &mut s.got[..wl], d);
        Reference.linear_grad_weight(dy, x, &mut s.want[..wl], d);
        compare_f32("f32 linear_grad_weight", case, &s.got[..wl], &s.want[..wl])?;
        checked += 3;
    }
    Ok(checked)
}

/// Checks a backend's pointwise activations (forward and gradient) against [`Reference`]
/// bit for bit, on random values with every kink among them. Returns the calls checked.
pub fn check_activations(
    backend: &mut impl Kernels<Memory = Host>,
    s: &mut Scratch,
) -> Result<usize, Mismatch> {
    let mut rng = SplitMix::new(0xAC7);
    let n = 512;
    s.x[..n].iter_mut().for_each(|v| *v = rng.uniform(-8.0, 8.0));
    s.w[..n].iter_mut().for_each(|v| *v = rng.uniform(-1.0, 1.0));
    for (i, kink) in [0.0, 3.0, -3.0, 2.5, -2.5].into_iter().enumerate() {
        s.x[i * 7] = kink;
    }
    let activations = [
        Activation::Sigmoid,
        Activation::HardSigmoid(HardSigmoidParams::PYTORCH),
        Activation::HardSigmoid(HardSigmoidParams::ONNX_DEFAULT),
        Activation::HardSwish,
        Activation::LeakyRelu(LeakyReluParams { alpha: 0.1 }),
    ];
    let (x, dy) = (&s.x[..n], &s.w[..n]);
    for (case, f) in activations.into_iter().enumerate() {
        backend.activation(f, x, &mut s.got[..n]);
        Reference.activation(f, x, &mut s.want[..n]);
        compare_within(EXACT, "f32 activation", case, &s.got[..n], &s.want[..n])?;
        backend.activation_grad(f, x, dy, &mut s.got[..n]);
        Reference.activation_grad(f, x, dy, &mut s.want[..n]);
        compare_within(EXACT, "f32 activation_grad", case, &s.got[..n], &s.want[..n])?;
    }
    Ok(2 * activations.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int8::scalar;
    use crate::CortexM;

    #[test]
    fn cases_are_valid_and_fit_the_scratch() {
        for g in conv_cases() {
            g.check().unwrap();
            assert!(g.input_len().max(g.output_len()) <= MAX_X && g.c_out <= MAX_CHANNELS);
            assert!(g.weight_len() + g.input_len() <= MAX_W && g.output_len() <= MAX_Y);
        }
        for d in linear_cases() {
            d.check().unwrap();
            assert!(d.n * d.k <= MAX_X && d.m * d.k + d.n * d.k <= MAX_W && d.n * d.m <= MAX_Y);
        }
        // One case reduces over more than a column chunk into more rows than a row block.
        assert!(conv_cases().any(|g| g.c_in_per_group() * g.kh * g.kw > crate::int8::CHUNK));
    }

    #[test]
    fn the_scalar_int8_kernels_are_bit_exact() {
        let mut scratch = Scratch::new();
        assert_eq!(check_int8(scalar::KERNELS, &mut scratch), Ok(36));
    }

    #[test]
    fn the_activations_are_bit_exact() {
        let mut scratch = Scratch::new();
        assert_eq!(check_activations(&mut CortexM, &mut scratch), Ok(10));
    }

    #[test]
    fn the_f32_kernels_are_within_tolerance() {
        let mut scratch = Scratch::new();
        assert_eq!(check_f32(&mut CortexM, &mut scratch), Ok(54));
    }

    /// A kernel off by one step in one output is caught.
    #[test]
    fn a_wrong_int8_kernel_is_caught() {
        fn off_by_one(a: &QLinearArgs<'_>, y: &mut [i8]) {
            (scalar::KERNELS.linear_s8)(a, y);
            y[y.len() / 2] = y[y.len() / 2].wrapping_add(1);
        }
        let mut scratch = Scratch::new();
        let wrong = Int8Path { linear_s8: off_by_one, ..scalar::KERNELS };
        let error = check_int8(wrong, &mut scratch).unwrap_err();
        assert_eq!((error.kernel, error.case), ("int8 linear", 0));
    }
}
