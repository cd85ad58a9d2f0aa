//! Smooth and piecewise-linear activations beyond ReLU (sigmoid, hard sigmoid, hard swish,
//! leaky ReLU, GELU, SiLU, ELU, softplus, tanh) as one kernel family, and the element-wise product with per-channel
//! broadcasting (squeeze-excitation), with their gradients.

use crate::geometry::ChannelDims;
use core::fmt;

/// Hard sigmoid's slope and offset: `clamp(alpha · x + beta, 0, 1)`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HardSigmoidParams {
    pub alpha: f32,
    pub beta: f32,
}

impl HardSigmoidParams {
    /// PyTorch's `hardsigmoid`: `relu6(x + 3) / 6`.
    pub const PYTORCH: Self = Self { alpha: 1.0 / 6.0, beta: 0.5 };
    /// ONNX's `HardSigmoid` defaults.
    pub const ONNX_DEFAULT: Self = Self { alpha: 0.2, beta: 0.5 };
}

/// Leaky ReLU's slope for negative inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LeakyReluParams {
    pub alpha: f32,
}

/// GELU's form: exact (`x · Φ(x)`, through `erf`) or PyTorch's `approximate='tanh'`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GeluParams {
    pub tanh: bool,
}

/// ELU's scale of the negative part: `alpha · (e^x − 1)` below 0.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EluParams {
    pub alpha: f32,
}

/// Above this input softplus is `x` itself, as PyTorch's `threshold` (20) has it (also
/// the threshold ONNX import matches in the dynamo exporter's `Where(Greater(x, 20), ...)`).
pub const SOFTPLUS_LINEAR_ABOVE: f32 = 20.0;

/// A pointwise activation and its settings: one kernel family, one formula each. In plans
/// and model files it is an explicit tag (a varint) then the settings, like ops and kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `1 / (1 + e^-x)`. Tag 0.
    Sigmoid,
    /// `clamp(alpha · x + beta, 0, 1)`. Tag 1.
    HardSigmoid(HardSigmoidParams),
    /// `x · relu6(x + 3) / 6` (MobileNetV3). Tag 2.
    HardSwish,
    /// `x` where `x > 0`, else `alpha · x`. Tag 3.
    LeakyRelu(LeakyReluParams),
    /// `x · Φ(x)`, `Φ` the standard normal distribution function (or its tanh
    /// approximation). Tag 4.
    Gelu(GeluParams),
    /// `x · sigmoid(x)` (SiLU, swish: EfficientNet). Tag 5.
    Silu,
    /// `x` where `x > 0`, else `alpha · (e^x − 1)`. Tag 6.
    Elu(EluParams),
    /// `ln(1 + e^x)`, `x` above 20 (PyTorch's threshold). Tag 7.
    Softplus,
    /// `tanh(x)`. Tag 8.
    Tanh,
}

/// A decoded activation tag this build does not know (a file from a newer sprout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownActivationTag {
    pub tag: u32,
}

impl fmt::Display for UnknownActivationTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown activation tag {}: the file was written by a newer sprout", self.tag)
    }
}

impl core::error::Error for UnknownActivationTag {}

#[cfg(feature = "serde")]
impl serde::Serialize for Activation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const NAME: &str = "Activation";
        match self {
            Activation::Sigmoid => s.serialize_unit_variant(NAME, 0, "Sigmoid"),
            Activation::HardSigmoid(p) => s.serialize_newtype_variant(NAME, 1, "HardSigmoid", p),
            Activation::HardSwish => s.serialize_unit_variant(NAME, 2, "HardSwish"),
            Activation::LeakyRelu(p) => s.serialize_newtype_variant(NAME, 3, "LeakyRelu", p),
            Activation::Gelu(p) => s.serialize_newtype_variant(NAME, 4, "Gelu", p),
            Activation::Silu => s.serialize_unit_variant(NAME, 5, "Silu"),
            Activation::Elu(p) => s.serialize_newtype_variant(NAME, 6, "Elu", p),
            Activation::Softplus => s.serialize_unit_variant(NAME, 7, "Softplus"),
            Activation::Tanh => s.serialize_unit_variant(NAME, 8, "Tanh"),
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Activation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::VariantAccess;
        struct Tagged;
        impl<'de> serde::de::Visitor<'de> for Tagged {
            type Value = Activation;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an activation: its tag, then its settings")
            }

            fn visit_enum<A: serde::de::EnumAccess<'de>>(
                self,
                data: A,
            ) -> Result<Activation, A::Error> {
                let (tag, v) = data.variant::<u32>()?;
                Ok(match tag {
                    0 => {
                        v.unit_variant()?;
                        Activation::Sigmoid
                    }
                    1 => Activation::HardSigmoid(v.newtype_variant()?),
                    2 => {
                        v.unit_variant()?;
                        Activation::HardSwish
                    }
                    3 => Activation::LeakyRelu(v.newtype_variant()?),
                    4 => Activation::Gelu(v.newtype_variant()?),
                    5 => {
                        v.unit_variant()?;
                        Activation::Silu
                    }
                    6 => Activation::Elu(v.newtype_variant()?),
                    7 => {
                        v.unit_variant()?;
                        Activation::Softplus
                    }
                    8 => {
                        v.unit_variant()?;
                        Activation::Tanh
                    }
                    tag => return Err(serde::de::Error::custom(UnknownActivationTag { tag })),
                })
            }
        }
        const NAMES: &[&str] = &[
            "Sigmoid",
            "HardSigmoid",
            "HardSwish",
            "LeakyRelu",
            "Gelu",
            "Silu",
            "Elu",
            "Softplus",
            "Tanh",
        ];
        d.deserialize_enum("Activation", NAMES, Tagged)
    }
}

/// Which forward tensor an activation's gradient reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradientReads {
    Input,
    Output,
}

impl Activation {
    /// The activation of one value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Sigmoid => sigmoid(x),
            Activation::HardSigmoid(p) => (p.alpha * x + p.beta).clamp(0.0, 1.0),
            // PyTorch's order of operations: `x · relu6(x + 3) / 6`.
            Activation::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            Activation::LeakyRelu(p) => {
                if x > 0.0 {
                    x
                } else {
                    p.alpha * x
                }
            }
            Activation::Gelu(p) => gelu(p, x),
            Activation::Silu => silu(x),
            Activation::Elu(p) => {
                if x > 0.0 {
                    x
                } else {
                    p.alpha * libm::expm1f(x)
                }
            }
            Activation::Softplus => {
                if x > SOFTPLUS_LINEAR_ABOVE {
                    x
                } else {
                    libm::log1pf(libm::expf(x))
                }
            }
            Activation::Tanh => libm::tanhf(x),
        }
    }

    /// The forward tensor [`Activation::gradient`] reads: the output where it determines
    /// the slope (sigmoid), else the input.
    pub fn gradient_reads(self) -> GradientReads {
        match self {
            Activation::Sigmoid | Activation::Tanh => GradientReads::Output,
            Activation::HardSigmoid(_)
            | Activation::HardSwish
            | Activation::LeakyRelu(_)
            | Activation::Gelu(_)
            | Activation::Silu
            | Activation::Elu(_)
            | Activation::Softplus => GradientReads::Input,
        }
    }

    /// `dx` for one value from the upstream `dy` and the tensor [`Self::gradient_reads`]
    /// names (`saved`). At the kinks the slopes follow PyTorch.
    #[inline(always)]
    pub fn gradient(self, saved: f32, dy: f32) -> f32 {
        match self {
            Activation::Sigmoid => dy * saved * (1.0 - saved),
            Activation::HardSigmoid(p) => {
                let z = p.alpha * saved + p.beta;
                if z > 0.0 && z < 1.0 {
                    dy * p.alpha
                } else {
                    0.0
                }
            }
            Activation::HardSwish => {
                if saved < -3.0 {
                    0.0
                } else if saved <= 3.0 {
                    dy * (saved / 3.0 + 0.5)
                } else {
                    dy
                }
            }
            Activation::LeakyRelu(p) => {
                if saved > 0.0 {
                    dy
                } else {
                    dy * p.alpha
                }
            }
            Activation::Gelu(p) => dy * gelu_slope(p, saved),
            Activation::Silu => silu_gradient(saved, dy),
            // PyTorch's: the exponential's slope at 0 and below.
            Activation::Elu(p) => {
                if saved > 0.0 {
                    dy
                } else {
                    dy * p.alpha * libm::expf(saved)
                }
            }
            Activation::Softplus => {
                if saved > SOFTPLUS_LINEAR_ABOVE {
                    dy
                } else {
                    dy * sigmoid(saved)
                }
            }
            Activation::Tanh => dy * (1.0 - saved * saved),
        }
    }

    /// Floating-point operations per element of the forward pass (an estimate: `exp`
    /// counted as ten).
    pub fn flops_per_element(self) -> usize {
        match self {
            Activation::Sigmoid => 12,
            Activation::HardSigmoid(_) => 4,
            Activation::HardSwish => 5,
            Activation::LeakyRelu(_) => 1,
            Activation::Gelu(_) => 20,
            Activation::Silu => 13,
            Activation::Elu(_) => 11,
            Activation::Softplus => 21,
            Activation::Tanh => 20,
        }
    }

    /// Whether the settings are finite (an attacker's NaN slope would poison every value).
    pub fn is_valid(self) -> bool {
        match self {
            Activation::Sigmoid
            | Activation::HardSwish
            | Activation::Gelu(_)
            | Activation::Silu
            | Activation::Softplus
            | Activation::Tanh => true,
            Activation::HardSigmoid(p) => p.alpha.is_finite() && p.beta.is_finite(),
            Activation::LeakyRelu(p) => p.alpha.is_finite(),
            Activation::Elu(p) => p.alpha.is_finite(),
        }
    }
}

/// The logistic function, computed from `e^-|x|` so that neither tail overflows.
fn sigmoid(x: f32) -> f32 {
    let e = libm::expf(-x.abs());
    if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}

/// SiLU as PyTorch's exports compute it: the sigmoid, then the product. A NaN input is
/// returned as it is: which NaN a product of two returns depends on the operand order the
/// compiler picks, and backends must agree bit for bit.
fn silu(x: f32) -> f32 {
    if x.is_nan() {
        x
    } else {
        x * sigmoid(x)
    }
}

/// SiLU's `dx`: `dy · σ + dy · x · σ(1 − σ)`, the sum of the product's two paths as
/// autograd takes them (a NaN `x` passes through, as in [`silu`]).
fn silu_gradient(x: f32, dy: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let s = sigmoid(x);
    dy * s + dy * x * (s * (1.0 - s))
}

/// `√(2/π)`, the tanh approximation's scale (also what ONNX import matches and export
/// writes).
pub const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The tanh approximation's cubic coefficient.
pub const GELU_CUBIC: f32 = 0.044_715;

/// GELU as PyTorch computes it: `x · ½(1 + erf(x / √2))`, or
/// `½x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
fn gelu(p: GeluParams, x: f32) -> f32 {
    if p.tanh {
        let t = libm::tanhf(SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x));
        0.5 * x * (1.0 + t)
    } else {
        x * 0.5 * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2))
    }
}

/// GELU's derivative at `x`.
fn gelu_slope(p: GeluParams, x: f32) -> f32 {
    if p.tanh {
        let inner = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
        let t = libm::tanhf(inner);
        let d_inner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner
    } else {
        // Φ(x) + x · φ(x), φ the standard normal density.
        let cdf = 0.5 * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2));
        let pdf = libm::expf(-0.5 * x * x)
            * (0.5 * core::f32::consts::FRAC_2_SQRT_PI)
            * core::f32::consts::FRAC_1_SQRT_2;
        cdf + x * pdf
    }
}

/// `y = f(x)` element-wise. One small loop for every activation, calling the formula per
/// element: the reference stays small in a microcontroller's flash, where every kernel a
/// plan could name is linked. [`activation_by_kind`] is the fast form.
pub fn activation(f: Activation, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    map(x, y, |v| apply_one(f, v))
}

/// `dx = f'(…) · dy` element-wise, `saved` being the tensor [`Activation::gradient_reads`]
/// names; overwrites `dx`. Small like [`activation`]; [`activation_grad_by_kind`] is the
/// fast form.
pub fn activation_grad(f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
    debug_assert_eq!(saved.len(), dx.len());
    debug_assert_eq!(dy.len(), dx.len());
    zip_map(saved, dy, dx, |s, d| gradient_one(f, s, d))
}

#[inline(never)]
fn apply_one(f: Activation, x: f32) -> f32 {
    f.apply(x)
}

#[inline(never)]
fn gradient_one(f: Activation, saved: f32, dy: f32) -> f32 {
    f.gradient(saved, dy)
}

/// [`activation`] as one loop per activation with the formula inlined: the same values,
/// bit for bit, several times faster and larger (for backends that accelerate the family).
pub fn activation_by_kind(f: Activation, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    match f {
        Activation::Sigmoid => map(x, y, |v| Activation::Sigmoid.apply(v)),
        Activation::HardSigmoid(p) => map(x, y, |v| Activation::HardSigmoid(p).apply(v)),
        Activation::HardSwish => map(x, y, |v| Activation::HardSwish.apply(v)),
        Activation::LeakyRelu(p) => map(x, y, |v| Activation::LeakyRelu(p).apply(v)),
        Activation::Gelu(p) => map(x, y, |v| Activation::Gelu(p).apply(v)),
        Activation::Silu => map(x, y, |v| Activation::Silu.apply(v)),
        Activation::Elu(p) => map(x, y, |v| Activation::Elu(p).apply(v)),
        Activation::Softplus => map(x, y, |v| Activation::Softplus.apply(v)),
        Activation::Tanh => map(x, y, |v| Activation::Tanh.apply(v)),
    }
}

/// [`activation_grad`] as one loop per activation with the formula inlined (bit for bit).
pub fn activation_grad_by_kind(f: Activation, saved: &[f32], dy: &[f32], dx: &mut [f32]) {
    debug_assert_eq!(saved.len(), dx.len());
    debug_assert_eq!(dy.len(), dx.len());
    let grad = |g: Activation| move |s, d| g.gradient(s, d);
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

fn map(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
    for (out, &x) in y.iter_mut().zip(x) {
        *out = f(x);
    }
}

fn zip_map(a: &[f32], b: &[f32], y: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((out, &a), &b) in y.iter_mut().zip(a).zip(b) {
        *out = f(a, b);
    }
}

/// `y = a · b` where `a` is `[outer, channels, inner]` and `b` either the same shape or,
/// with `broadcast`, `[outer, channels]`: one factor per channel (squeeze-excitation).
pub fn mul(a: &[f32], b: &[f32], y: &mut [f32], d: ChannelDims, broadcast: bool) {
    debug_assert_eq!(a.len(), d.len());
    debug_assert_eq!(y.len(), d.len());
    if !broadcast {
        debug_assert_eq!(b.len(), d.len());
        return zip_map(a, b, y, |a, b| a * b);
    }
    debug_assert_eq!(b.len(), d.outer * d.channels);
    if d.inner == 0 {
        return;
    }
    for ((y, a), &b) in y.chunks_exact_mut(d.inner).zip(a.chunks_exact(d.inner)).zip(b) {
        map(a, y, |a| a * b);
    }
}

/// The gradient of a broadcast factor: `db[o, c] = Σ_i dy[o, c, i] · a[o, c, i]`.
pub fn mul_grad_factor(dy: &[f32], a: &[f32], db: &mut [f32], d: ChannelDims) {
    debug_assert_eq!(dy.len(), d.len());
    debug_assert_eq!(a.len(), d.len());
    debug_assert_eq!(db.len(), d.outer * d.channels);
    if d.inner == 0 {
        db.fill(0.0);
        return;
    }
    for ((out, dy), a) in db.iter_mut().zip(dy.chunks_exact(d.inner)).zip(a.chunks_exact(d.inner)) {
        *out = dy.iter().zip(a).map(|(dy, a)| dy * a).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::testing::assert_close;

    const PYTORCH_HARD_SIGMOID: Activation = Activation::HardSigmoid(HardSigmoidParams::PYTORCH);

    fn forward(f: Activation, x: &[f32]) -> [f32; 5] {
        let mut y = [f32::NAN; 5];
        activation(f, x, &mut y);
        y
    }

    #[test]
    fn activations_match_hand_values() {
        let x = [-4.0, -1.0, 0.0, 2.0, 5.0];
        let s = |v: f32| 1.0 / (1.0 + (-v).exp());
        assert_close(&forward(Activation::Sigmoid, &x), &x.map(s), 1e-7);
        let hs = [0.0, 1.0 / 3.0, 0.5, 5.0 / 6.0, 1.0];
        assert_close(&forward(PYTORCH_HARD_SIGMOID, &x), &hs, 1e-7);
        let onnx_default = Activation::HardSigmoid(HardSigmoidParams::ONNX_DEFAULT);
        assert_close(&forward(onnx_default, &x), &[0.0, 0.3, 0.5, 0.9, 1.0], 1e-7);
        let swish = [0.0, -1.0 / 3.0, 0.0, 2.0 * 5.0 / 6.0, 5.0];
        assert_close(&forward(Activation::HardSwish, &x), &swish, 1e-6);
        let leaky = Activation::LeakyRelu(LeakyReluParams { alpha: 0.1 });
        assert_close(&forward(leaky, &x), &[-0.4, -0.1, 0.0, 2.0, 5.0], 1e-7);
        // torch.nn.functional.gelu at x, exact and approximate='tanh'.
        let gelu = [-1.266_85e-4, -0.158_655_25, 0.0, 1.954_499_7, 4.999_998_6];
        assert_close(&forward(Activation::Gelu(GeluParams { tanh: false }), &x), &gelu, 1e-6);
        let tanh = [-7.024_595e-5, -0.158_808, 0.0, 1.954_597_7, 5.0];
        assert_close(&forward(Activation::Gelu(GeluParams { tanh: true }), &x), &tanh, 1e-6);
        // torch.nn.functional.silu at x.
        let silu = [-0.071_944_84, -0.268_941_43, 0.0, 1.761_594, 4.966_535_6];
        assert_close(&forward(Activation::Silu, &x), &silu, 1e-6);
    }

    #[test]
    fn sigmoid_tails_stay_finite() {
        let y = forward(Activation::Sigmoid, &[-1000.0, -90.0, 90.0, 1000.0, f32::NAN]);
        assert_eq!([y[0], y[2], y[3]], [0.0, 1.0, 1.0]);
        // e^-90 is subnormal, not zero: the tail is computed, not cut off.
        assert!(y[1] > 0.0 && y[1] < 1e-38);
        assert!(y[4].is_nan());
    }

    #[test]
    fn gradients_match_central_differences() {
        let fs = [
            Activation::Sigmoid,
            PYTORCH_HARD_SIGMOID,
            Activation::HardSwish,
            Activation::LeakyRelu(LeakyReluParams { alpha: 0.02 }),
            Activation::Gelu(GeluParams { tanh: false }),
            Activation::Gelu(GeluParams { tanh: true }),
            Activation::Silu,
            Activation::Elu(EluParams { alpha: 0.7 }),
            Activation::Softplus,
            Activation::Tanh,
        ];
        // Away from the kinks (±3, 0) so that a finite difference is a derivative.
        for f in fs {
            for x in [-4.5f32, -2.0, -0.7, 0.4, 1.3, 2.5, 3.8] {
                let h = 1e-2f64;
                let at = |v: f64| f.apply(v as f32) as f64;
                let want = (at(x as f64 + h) - at(x as f64 - h)) / (2.0 * h);
                let saved = match f.gradient_reads() {
                    GradientReads::Input => x,
                    GradientReads::Output => f.apply(x),
                };
                let got = f.gradient(saved, 1.0) as f64;
                assert!((got - want).abs() < 2e-3, "{f:?} at {x}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn gradient_at_kinks_follows_pytorch() {
        // hardswish'(3) = 3/3 + 1/2 (PyTorch's `x <= 3` branch), hardswish'(-3) = -1/2.
        assert_eq!(Activation::HardSwish.gradient(3.0, 1.0), 1.5);
        assert_eq!(Activation::HardSwish.gradient(-3.0, 1.0), -0.5);
        assert_eq!(PYTORCH_HARD_SIGMOID.gradient(3.0, 1.0), 0.0);
        assert_eq!(Activation::LeakyRelu(LeakyReluParams { alpha: 0.5 }).gradient(0.0, 2.0), 1.0);
        // elu'(0) = alpha (PyTorch's `x <= 0` branch); softplus is x itself above 20.
        assert_eq!(Activation::Elu(EluParams { alpha: 0.5 }).gradient(0.0, 2.0), 1.0);
        assert_eq!(Activation::Softplus.apply(20.5), 20.5);
        assert_eq!(Activation::Softplus.gradient(20.5, 3.0), 3.0);
    }

    #[test]
    fn the_fast_forms_give_the_reference_bit_for_bit() {
        let x: [f32; 9] = [-9.0, -3.0, -2.9, -0.5, 0.0, 0.25, 2.999, 3.0, 40.0];
        let dy = [0.5, -1.0, 2.0, 0.75, -0.25, 1.0, -3.0, 0.125, 1.5];
        for f in [
            Activation::Sigmoid,
            PYTORCH_HARD_SIGMOID,
            Activation::HardSwish,
            Activation::LeakyRelu(LeakyReluParams { alpha: 0.3 }),
            Activation::Gelu(GeluParams { tanh: false }),
            Activation::Gelu(GeluParams { tanh: true }),
            Activation::Silu,
            Activation::Elu(EluParams { alpha: 0.7 }),
            Activation::Softplus,
            Activation::Tanh,
        ] {
            let (mut slow, mut fast) = ([0.0f32; 9], [1.0f32; 9]);
            activation(f, &x, &mut slow);
            activation_by_kind(f, &x, &mut fast);
            assert_eq!(slow.map(f32::to_bits), fast.map(f32::to_bits), "{f:?}");
            activation_grad(f, &x, &dy, &mut slow);
            activation_grad_by_kind(f, &x, &dy, &mut fast);
            assert_eq!(slow.map(f32::to_bits), fast.map(f32::to_bits), "{f:?} gradient");
        }
    }

    #[test]
    fn wire_form_is_the_explicit_tag_then_the_settings() {
        let leaky = Activation::LeakyRelu(LeakyReluParams { alpha: 0.5 });
        let bytes = postcard::to_allocvec(&leaky).unwrap();
        assert_eq!(bytes, [3, 0, 0, 0, 0x3f]);
        assert_eq!(postcard::from_bytes::<Activation>(&bytes).unwrap(), leaky);
        let swish = postcard::to_allocvec(&Activation::HardSwish).unwrap();
        assert_eq!(swish, [2]);
        let elu = Activation::Elu(EluParams { alpha: 0.5 });
        assert_eq!(postcard::to_allocvec(&elu).unwrap(), [6, 0, 0, 0, 0x3f]);
        for (f, tag) in [(elu, 6), (Activation::Softplus, 7), (Activation::Tanh, 8)] {
            let bytes = postcard::to_allocvec(&f).unwrap();
            assert_eq!(bytes[0], tag);
            assert_eq!(postcard::from_bytes::<Activation>(&bytes).unwrap(), f);
        }
        assert!(postcard::from_bytes::<Activation>(&[9]).is_err());
    }

    #[test]
    fn mul_broadcasts_one_factor_per_channel() {
        let d = ChannelDims { outer: 1, channels: 2, inner: 3 };
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [f32::NAN; 6];
        mul(&a, &[2.0, -1.0], &mut y, d, true);
        assert_close(&y, &[2.0, 4.0, 6.0, -4.0, -5.0, -6.0], 0.0);
        mul(&a, &a, &mut y, d, false);
        assert_close(&y, &[1.0, 4.0, 9.0, 16.0, 25.0, 36.0], 0.0);
        let mut db = [f32::NAN; 2];
        mul_grad_factor(&[1.0; 6], &a, &mut db, d);
        assert_close(&db, &[6.0, 15.0], 0.0);
    }
}
