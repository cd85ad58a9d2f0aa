//! Pointwise activations (ReLU, ReLU6, sigmoid, hard sigmoid, hard swish, leaky ReLU, GELU,
//! SiLU, ELU, softplus, tanh) and
//! their gradients as branch-free loops the compiler vectorizes, and the factor gradient of the
//! element-wise product as a dot product over partial sums. (The product itself stays the
//! reference's: its loop already vectorizes and streams memory at the same speed.)
//!
//! The reference evaluates one out-of-line `Activation::apply` per element (small code on
//! a microcontroller); here each activation is its own loop with the reference's own
//! formula inlined, so the piecewise-linear activations and every gradient match it bit
//! for bit. Sigmoid replaces libm's `expf` with [`exp_neg`], a range-reduced
//! polynomial that vectorizes; it stays within a few ulp of the reference (the conformance
//! suite's `SIGMOID` tolerance gives the error analysis).
//!
//! On x86-64 each loop is compiled three times, for the baseline (SSE2), AVX2 and
//! AVX-512F, and the widest the CPU supports runs (one cached feature check per call).
//! The backend cuts long tensors into spans over its threads (`parallel::for_each_span`).

use sprout_core::geometry::ChannelDims;
use sprout_core::reference::Activation;

/// `y = f(x)` element-wise: the reference's formula ([`Activation::apply`], inlined) in
/// one loop per kind, except sigmoid's `expf`.
pub fn activation(f: Activation, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    match f {
        Activation::Sigmoid => map(x, y, sigmoid),
        Activation::HardSigmoid(p) => map(x, y, move |x| Activation::HardSigmoid(p).apply(x)),
        Activation::HardSwish => map(x, y, |x| Activation::HardSwish.apply(x)),
        Activation::LeakyRelu(p) => map(x, y, move |x| Activation::LeakyRelu(p).apply(x)),
        Activation::Gelu(p) => map(x, y, move |x| Activation::Gelu(p).apply(x)),
        Activation::Silu => map(x, y, |x| Activation::Silu.apply(x)),
        Activation::Elu(p) => map(x, y, move |x| Activation::Elu(p).apply(x)),
        Activation::Softplus => map(x, y, |x| Activation::Softplus.apply(x)),
        Activation::Tanh => map(x, y, |x| Activation::Tanh.apply(x)),
    }
}

/// `dx = f'(…) · dy` element-wise, `saved` being the input or output as
/// `Activation::gradient_reads` says: the reference's [`Activation::gradient`], inlined
/// into one loop per kind, so the result is bit-identical.
pub fn activation_grad(f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
    debug_assert_eq!(saved.len(), dx.len());
    debug_assert_eq!(dy.len(), dx.len());
    let grad = |g: Activation| move |s, dy| g.gradient(s, dy);
    match f {
        Activation::Sigmoid => zip_map(saved, dy, dx, grad(Activation::Sigmoid)),
        Activation::HardSigmoid(p) => zip_map(saved, dy, dx, grad(Activation::HardSigmoid(p))),
        Activation::HardSwish => zip_map(saved, dy, dx, grad(Activation::HardSwish)),
        Activation::LeakyRelu(p) => zip_map(saved, dy, dx, grad(Activation::LeakyRelu(p))),
        Activation::Gelu(p) => zip_map(saved, dy, dx, grad(Activation::Gelu(p))),
        Activation::Silu => zip_map(saved, dy, dx, grad(Activation::Silu)),
        Activation::Elu(p) => zip_map(saved, dy, dx, grad(Activation::Elu(p))),
        Activation::Softplus => zip_map(saved, dy, dx, grad(Activation::Softplus)),
        Activation::Tanh => zip_map(saved, dy, dx, grad(Activation::Tanh)),
    }
}

/// `db[o, c] = Σ_i dy[o, c, i] · a[o, c, i]`, each sum over [`LANES`] partial sums (so in
/// another order than the reference's, within the suite's reduction tolerance).
pub fn mul_grad_factor(dy: &[f32], a: &[f32], db: &mut [f32], d: ChannelDims) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(a.len(), d.len());
    debug_assert_eq!(db.len(), d.outer * d.channels);
    if d.inner == 0 {
        db.fill(0.0);
        return;
    }
    for ((out, dy), a) in db.iter_mut().zip(dy.chunks_exact(d.inner)).zip(a.chunks_exact(d.inner)) {
        *out = dot(dy, a);
    }
}

/// Partial sums of a dot product: as wide as an AVX-512 register.
const LANES: usize = 16;

/// The logistic function from `e^-|x|`, as the reference: `1 / (1 + e)` for `x >= 0`,
/// else `e / (1 + e)` (one division of a selected numerator: the same value).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let e = exp_neg(-x.abs());
    let numerator = if x >= 0.0 { 1.0 } else { e };
    numerator / (1.0 + e)
}

/// `e^t` for `t <= 0` (or NaN), Cephes' `expf`: `t = n·ln 2 + r` with `|r| <= ln 2 / 2`,
/// `e^r` by a degree-7 polynomial (about 1 ulp), then `2^n` applied as two exact powers of
/// two so that results down to the smallest subnormal round once. Inputs below -104 (where
/// `e^t` rounds to zero) are clamped; NaN propagates. No branches, no table, no float to
/// int conversion: it vectorizes.
#[inline(always)]
fn exp_neg(t: f32) -> f32 {
    // 1.5 · 2²³: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] =
        [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
    // A comparison, not `max`, so that NaN passes through.
    let t = if t < -104.0 { -104.0 } else { t };
    let k = t * core::f32::consts::LOG2_E + ROUND;
    let n_f = k - ROUND;
    let n = (k.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = t - n_f * LN2_HI - n_f * LN2_LO;
    let p = ((((P[0] * r + P[1]) * r + P[2]) * r + P[3]) * r + P[4]) * r + P[5];
    let e_r = p * (r * r) + r + 1.0;
    // n ∈ [-150, 0]: each half is a normal power of two.
    let half = n >> 1;
    e_r * pow2(half) * pow2(n.wrapping_sub(half))
}

/// `2^n` for `n` in the normal exponent range.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

#[inline(always)]
fn dot_generic(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() - a.len() % LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (a, b) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += a[i] * b[i];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    a_tail.iter().zip(b_tail).fold(acc[0], |s, (a, b)| s + a * b)
}

#[inline(always)]
fn map_generic(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
    for (out, &x) in y.iter_mut().zip(x) {
        *out = f(x);
    }
}

/// Values an in-place pass reads through [`core::hint::black_box`] at a time.
const IN_PLACE_CHUNK: usize = 16;

/// `y[i] = f(y[i])`, every value stored. Whole chunks are read through `black_box`: the
/// compiler then cannot see that `f` keeps some values as they are (ReLU keeps the positive
/// ones) and store only the others with masked stores, which AMD's Zen cores run many
/// times slower than plain ones.
#[inline(always)]
fn map_in_place_generic(y: &mut [f32], f: impl Fn(f32) -> f32) {
    let (chunks, rest) = y.as_chunks_mut::<IN_PLACE_CHUNK>();
    for chunk in chunks {
        let old = core::hint::black_box(*chunk);
        for (v, old) in chunk.iter_mut().zip(old) {
            *v = f(old);
        }
    }
    rest.iter_mut().for_each(|v| *v = f(*v));
}

/// `y[i] = f(a[i], y[i])`, every value stored (see [`map_in_place_generic`]).
#[inline(always)]
fn zip_map_in_place_generic(a: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let (chunks, rest) = y.as_chunks_mut::<IN_PLACE_CHUNK>();
    let a_chunks = a.chunks_exact(IN_PLACE_CHUNK);
    let a_rest = &a[chunks.len() * IN_PLACE_CHUNK..];
    for (chunk, a) in chunks.iter_mut().zip(a_chunks) {
        let old = core::hint::black_box(*chunk);
        for ((v, old), &a) in chunk.iter_mut().zip(old).zip(a) {
            *v = f(a, old);
        }
    }
    rest.iter_mut().zip(a_rest).for_each(|(v, &a)| *v = f(a, *v));
}

#[inline(always)]
fn zip_map_generic(a: &[f32], b: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((out, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *out = f(a, b);
    }
}

multiversion!(pub(crate) dot = dot_generic(a: &[f32], b: &[f32]) -> f32);
multiversion!(map = map_generic(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32));
multiversion!(zip_map = zip_map_generic(a: &[f32], b: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32));
multiversion!(pub(crate) map_in_place = map_in_place_generic(y: &mut [f32], f: impl Fn(f32) -> f32));
multiversion!(zip_map_in_place = zip_map_in_place_generic(a: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32));

/// ReLU: `x < 0 ? 0 : x`, as the reference (NaN passes).
#[inline(always)]
pub(crate) fn relu_value(x: f32) -> f32 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}

/// ReLU6: `clamp(x, 0, 6)`, as the reference (NaN passes).
#[inline(always)]
pub(crate) fn relu6_value(x: f32) -> f32 {
    x.clamp(0.0, 6.0)
}

/// `dy` where ReLU's output `y > 0`, else 0.
#[inline(always)]
fn relu_gate(y: f32, dy: f32) -> f32 {
    if y > 0.0 {
        dy
    } else {
        0.0
    }
}

/// `dy` where ReLU6's output lies strictly between 0 and 6, else 0.
#[inline(always)]
fn relu6_gate(y: f32, dy: f32) -> f32 {
    if y > 0.0 && y < 6.0 {
        dy
    } else {
        0.0
    }
}

/// `y = relu(x)`.
pub fn relu(x: &[f32], y: &mut [f32]) {
    map(x, y, relu_value)
}

/// `y = relu6(x)`.
pub fn relu6(x: &[f32], y: &mut [f32]) {
    map(x, y, relu6_value)
}

/// `x = relu(x)`.
pub fn relu_in_place(x: &mut [f32]) {
    map_in_place(x, relu_value)
}

/// `x = relu6(x)`.
pub fn relu6_in_place(x: &mut [f32]) {
    map_in_place(x, relu6_value)
}

/// `dx = dy` where `y > 0`, else 0.
pub fn relu_grad(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    zip_map(y, dy, dx, relu_gate)
}

/// `dx = dy` where `0 < y < 6`, else 0.
pub fn relu6_grad(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    zip_map(y, dy, dx, relu6_gate)
}

/// [`relu_grad`] over `dy`.
pub fn relu_grad_in_place(y: &[f32], dy: &mut [f32]) {
    zip_map_in_place(y, dy, relu_gate)
}

/// [`relu6_grad`] over `dy`.
pub fn relu6_grad_in_place(y: &[f32], dy: &mut [f32]) {
    zip_map_in_place(y, dy, relu6_gate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_within_two_ulp_of_libm_down_to_the_subnormals() {
        let mut t = 0.0f32;
        while t > -104.0 {
            let (got, want) = (exp_neg(t), (t as f64).exp() as f32);
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 2, "e^{t}: {got} vs {want} ({ulps} ulp)");
            t -= 0.000_731;
        }
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-0.0), 1.0);
        assert_eq!(exp_neg(-1e4), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert!(exp_neg(f32::NAN).is_nan());
    }

    #[test]
    fn sigmoid_edges_match_the_reference_limits() {
        let x = [0.0, -0.0, 1e4, -1e4, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -90.0];
        let mut y = [f32::NAN; 8];
        activation(Activation::Sigmoid, &x, &mut y);
        assert_eq!(y[..6], [0.5, 0.5, 1.0, 0.0, 1.0, 0.0]);
        assert!(y[6].is_nan());
        // e^-90 is subnormal, not flushed to zero.
        assert!(y[7] > 0.0 && y[7] < f32::MIN_POSITIVE);
        assert!(sigmoid_of(-103.9) > 0.0 && sigmoid_of(-104.5) == 0.0);
    }

    fn sigmoid_of(x: f32) -> f32 {
        let mut y = [f32::NAN];
        activation(Activation::Sigmoid, &[x], &mut y);
        y[0]
    }

    /// Every ReLU kernel, in and out of place, equals the reference's value by value, edge
    /// cases (the thresholds, NaN, signed zeros, infinities) included.
    #[test]
    fn relu_kernels_match_the_reference_bit_for_bit() {
        use sprout_core::reference as r;
        let mut x: Vec<f32> = (0..103).map(|i| (i as f32 - 40.0) * 0.17).collect();
        x.extend([0.0, -0.0, 6.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 5.999_999]);
        let dy: Vec<f32> = (0..x.len()).map(|i| 1.0 + i as f32).collect();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        type Map = fn(&[f32], &mut [f32]);
        type InPlace = fn(&mut [f32]);
        type Grad = fn(&[f32], &[f32], &mut [f32]);
        type GradInPlace = fn(&[f32], &mut [f32]);
        let forward: [(Map, Map, InPlace, InPlace); 2] = [
            (relu, r::relu, relu_in_place, r::relu_in_place),
            (relu6, r::relu6, relu6_in_place, r::relu6_in_place),
        ];
        for (ours, theirs, ours_in_place, theirs_in_place) in forward {
            let (mut a, mut b) = (vec![1.0; x.len()], vec![2.0; x.len()]);
            ours(&x, &mut a);
            theirs(&x, &mut b);
            assert_eq!(bits(&a), bits(&b));
            let (mut a, mut b) = (x.clone(), x.clone());
            ours_in_place(&mut a);
            theirs_in_place(&mut b);
            assert_eq!(bits(&a), bits(&b));
        }
        let backward: [(Grad, Grad, GradInPlace, GradInPlace); 2] = [
            (relu_grad, r::relu_grad, relu_grad_in_place, r::relu_grad_in_place),
            (relu6_grad, r::relu6_grad, relu6_grad_in_place, r::relu6_grad_in_place),
        ];
        for (ours, theirs, ours_in_place, theirs_in_place) in backward {
            let (mut a, mut b) = (vec![1.0; x.len()], vec![2.0; x.len()]);
            ours(&x, &dy, &mut a);
            theirs(&x, &dy, &mut b);
            assert_eq!(bits(&a), bits(&b));
            let (mut a, mut b) = (dy.clone(), dy.clone());
            ours_in_place(&x, &mut a);
            theirs_in_place(&x, &mut b);
            assert_eq!(bits(&a), bits(&b));
        }
    }

    #[test]
    fn dot_sums_every_element_in_any_length() {
        for len in [0, 1, 15, 16, 17, 33, 100] {
            let a: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let want: f32 = a.iter().map(|v| v * 2.0).sum();
            assert_eq!(dot(&a, &vec![2.0; len]), want);
        }
    }
}
