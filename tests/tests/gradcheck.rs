//! Finite-difference checks of every op's backward rule, and of sparse update (frozen
//! parameters get no gradient work).
//!
//! Each op check records a tiny graph whose op inputs are *parameters*, lists them as
//! trainable so `differentiate` builds their gradients, and compares every element of every
//! gradient with central differences of the compiled loss (`sprout_tests::gradcheck`). Ops
//! whose output is not a scalar are checked through `loss = mse(op(...), target)` with a
//! random frozen target (mse's own rule is checked on its own), or through cross-entropy
//! where that is natural. Shapes and values are drawn from seeded SplitMix generators,
//! three cases per op.
//!
//! Step and tolerance (see the helper module's docs for the error analysis): step
//! `h = 1e-2`; an element passes when `|a − n| ≤ 2e-4 + 1e-2·max(|a|, |n|)`. The numbers
//! are f32 through and through, so the numeric derivative carries a truncation error of
//! about `h²·|L'''|/6` and a cancellation error of about `ulp(L)/h` (~1e-5 for losses of
//! order one); correct rules land at most at about a fifth of the allowed difference.
//! Every checked gradient must also reach `4e-3` somewhere, so the tolerance can tell a
//! wrong rule from a right one.
//!
//! Kinks are avoided by construction: relu/relu6 inputs stay more than `2h` away from 0 and
//! 6, max-pool inputs are distinct with gaps of `3h`, and the composite (which uses
//! `h = 5e-3`) skips, and bounds, perturbations that carry a pre-activation across 0.
//!
//! The last sections check the checker (it rejects a wrong gradient and refuses steps across
//! a kink) and sparse update: frozen parameters get no gradient nodes, no kernels, no
//! optimizer state, and keep their bytes while the rest trains.

use sprout_core::hyperparams::{BatchNormConfig, DropoutConfig};
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::{
    compile_outputs, compile_training_step, differentiate, Executor, Graph, GraphError, Init, Mode,
    Reference, Region, Shape, StepOutcome, TensorId, TrainConfig,
};
use sprout_tests::gradcheck::{check_gradients, Feed, GradCheck, Rand, Report, STEP};

/// Three random cases per op.
const SEEDS: [u64; 3] = [0x5eed_0001, 0x5eed_0002, 0x5eed_0003];

// ---- helpers ----

fn param(g: &mut Graph, name: &str, shape: Shape, values: Vec<f32>) -> TensorId {
    g.parameter(name, shape, Init::Values(values)).expect("parameter")
}

/// A parameter with values uniform in `[-1, 1)`.
fn random_param(g: &mut Graph, r: &mut Rand, name: &str, shape: Shape) -> TensorId {
    let values = r.values(shape.numel(), -1.0, 1.0);
    param(g, name, shape, values)
}

/// `mse(y, target)` with a random target, a frozen parameter so it needs no feeding.
fn mse_to_random_target(g: &mut Graph, r: &mut Rand, y: TensorId) -> TensorId {
    let target = random_param(g, r, "target", g.shape(y));
    g.mse("loss", y, target).expect("mse")
}

/// Unwraps a check, printing what it saw (`cargo test -- --nocapture` shows the margins).
fn pass(check: Result<Report, String>) {
    match check {
        Ok(report) => println!("{report}"),
        Err(failures) => panic!("{failures}"),
    }
}

fn nchw(r: &mut Rand, max_c: usize, min_hw: usize, max_hw: usize) -> Shape {
    Shape::d4(r.int(1, 2), r.int(1, max_c), r.int(min_hw, max_hw), r.int(min_hw, max_hw))
}

// ---- linear ----

fn check_linear(bias: bool) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (n, k, m) = (r.int(1, 3), r.int(1, 5), r.int(1, 4));
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", Shape::d2(n, k));
        let w = random_param(&mut g, &mut r, "w", Shape::d2(m, k));
        let b = bias.then(|| random_param(&mut g, &mut r, "b", Shape::d1(m)));
        let y = g.linear("linear", x, w, b).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        let params: Vec<_> = [Some(x), Some(w), b].into_iter().flatten().collect();
        pass(check_gradients(&format!("linear [{n},{k}]x[{m},{k}]"), &g, loss, &params));
    }
}

/// A dense layer over the last axis of `[N, H, W, K]` (channels-last, as ConvNeXt's).
#[test]
fn linear_over_the_last_axis_of_a_4d_tensor() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (n, h, w, k, m) = (r.int(1, 2), r.int(1, 3), r.int(1, 3), r.int(1, 4), r.int(1, 3));
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", Shape::d4(n, h, w, k));
        let wt = random_param(&mut g, &mut r, "w", Shape::d2(m, k));
        let b = random_param(&mut g, &mut r, "b", Shape::d1(m));
        let y = g.linear("linear", x, wt, Some(b)).unwrap();
        assert_eq!(g.shape(y), Shape::d4(n, h, w, m));
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(
            &format!("linear [{n},{h},{w},{k}]x[{m},{k}]"),
            &g,
            loss,
            &[x, wt, b],
        ));
    }
}

/// Layer normalisation over the last axis and over the last two, with respect to its
/// input, scale and shift (together and each alone).
#[test]
fn layer_norm_over_trailing_axes() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (n, h, w) = (r.int(1, 2), r.int(1, 3), r.int(3, 5));
        let shape = Shape::d3(n, h, w);
        // At least three values per row: two normalise to ±1 whatever they are.
        for d in [w, h * w] {
            let mut g = Graph::new(seed);
            let values = r.values(shape.numel(), -2.0, 2.0);
            let x = param(&mut g, "x", shape, values);
            let gamma_values = r.values(d, 0.5, 1.5);
            let gamma = param(&mut g, "gamma", Shape::d1(d), gamma_values);
            let beta = random_param(&mut g, &mut r, "beta", Shape::d1(d));
            let y = g.layer_norm("ln", x, gamma, beta, 1e-5).unwrap();
            let loss = mse_to_random_target(&mut g, &mut r, y);
            let name = format!("layer_norm {shape} over {d}");
            pass(check_gradients(&name, &g, loss, &[x, gamma, beta]));
            for only in [x, gamma, beta] {
                pass(check_gradients(&name, &g, loss, &[only]));
            }
        }
    }
}

#[test]
fn linear_with_bias() {
    check_linear(true);
}

#[test]
fn linear_without_bias() {
    check_linear(false);
}

// ---- conv2d ----

/// One conv configuration; channels and spatial sizes are drawn per seed.
#[derive(Clone, Copy)]
struct ConvCase {
    kernel: (usize, usize),
    stride: (usize, usize),
    padding: (usize, usize),
    /// `None`: depthwise (groups == channels).
    groups: Option<usize>,
    bias: bool,
}

fn check_conv(case: ConvCase) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (groups, c_in, c_out) = match case.groups {
            Some(g) => (g, g * r.int(1, 4 / g), g * r.int(1, 4 / g)),
            None => {
                let c = r.int(2, 4);
                (c, c, c)
            }
        };
        let n = r.int(1, 2);
        let (kh, kw) = case.kernel;
        let h = r.int(kh.max(3), 6);
        let w_ = r.int(kw.max(3), 6);
        let params = ConvParams { stride: case.stride, padding: case.padding, groups };
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", Shape::d4(n, c_in, h, w_));
        let w = random_param(&mut g, &mut r, "w", Shape::d4(c_out, c_in / groups, kh, kw));
        let b = case.bias.then(|| random_param(&mut g, &mut r, "b", Shape::d1(c_out)));
        let y = g.conv2d("conv", x, w, b, params).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        let trainable: Vec<_> = [Some(x), Some(w), b].into_iter().flatten().collect();
        let name = format!(
            "conv2d x{} w{} -> {} stride {:?} padding {:?} groups {groups}",
            g.shape(x),
            g.shape(w),
            g.shape(y),
            case.stride,
            case.padding
        );
        pass(check_gradients(&name, &g, loss, &trainable));
    }
}

const CONV_3X3: ConvCase =
    ConvCase { kernel: (3, 3), stride: (1, 1), padding: (0, 0), groups: Some(1), bias: true };

#[test]
fn conv2d_plain() {
    check_conv(CONV_3X3);
}

#[test]
fn conv2d_without_bias() {
    check_conv(ConvCase { bias: false, ..CONV_3X3 });
}

#[test]
fn conv2d_stride_2() {
    check_conv(ConvCase { stride: (2, 2), ..CONV_3X3 });
}

#[test]
fn conv2d_padding_1() {
    check_conv(ConvCase { padding: (1, 1), ..CONV_3X3 });
}

#[test]
fn conv2d_stride_2_padding_1() {
    check_conv(ConvCase { stride: (2, 2), padding: (1, 1), ..CONV_3X3 });
}

#[test]
fn conv2d_groups_2() {
    check_conv(ConvCase { padding: (1, 1), groups: Some(2), ..CONV_3X3 });
}

#[test]
fn conv2d_depthwise() {
    check_conv(ConvCase { stride: (2, 2), padding: (1, 1), groups: None, ..CONV_3X3 });
}

#[test]
fn conv2d_pointwise() {
    check_conv(ConvCase { kernel: (1, 1), ..CONV_3X3 });
}

#[test]
fn conv2d_non_square_kernel_stride_and_padding() {
    check_conv(ConvCase { kernel: (2, 3), stride: (2, 1), padding: (1, 0), ..CONV_3X3 });
    check_conv(ConvCase { kernel: (3, 1), stride: (1, 2), padding: (0, 1), ..CONV_3X3 });
}

/// Padding wider than the kernel (border outputs see only padding) and a stride that
/// skips input rows and columns (they get no gradient).
#[test]
fn conv2d_wide_padding_and_skipping_stride() {
    check_conv(ConvCase { kernel: (1, 2), stride: (3, 2), padding: (2, 1), ..CONV_3X3 });
}

// ---- activations ----

/// `loss = mse(act(x), target)` with `x` kept more than `2h` away from the kinks.
fn check_activation(name: &str, kinks: &[f32], low: f32, high: f32, relu6: bool) {
    check_pointwise(name, kinks, low, high, |g, x| match relu6 {
        true => g.relu6("act", x),
        false => g.relu("act", x),
    });
}

#[test]
fn relu() {
    check_activation("relu", &[0.0], -2.0, 2.0, false);
}

#[test]
fn relu6() {
    // Both kinks, and values on all three pieces.
    check_activation("relu6", &[0.0, 6.0], -2.0, 8.0, true);
}

// ---- sigmoid, hard sigmoid, hard swish, GELU, SiLU, leaky ReLU, ELU, softplus, tanh ----

/// `loss = mse(act(x), target)` for an activation recorded by `record`, with `x` kept more
/// than `2h` away from its kinks.
fn check_pointwise(
    name: &str,
    kinks: &[f32],
    low: f32,
    high: f32,
    record: impl Fn(&mut Graph, TensorId) -> Result<TensorId, GraphError>,
) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let mut g = Graph::new(seed);
        let values = r.away_from(shape.numel(), low, high, kinks, 2.0 * STEP);
        let x = param(&mut g, "x", shape, values);
        let y = record(&mut g, x).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(GradCheck::new(&format!("{name} {shape}"), &g, loss, &[x]).watch(x, kinks).run());
    }
}

#[test]
fn sigmoid() {
    check_pointwise("sigmoid", &[], -4.0, 4.0, |g, x| g.sigmoid("act", x));
}

#[test]
fn hard_sigmoid() {
    // PyTorch's settings (kinks at ±3) and ONNX's defaults (kinks at -2.5 and 2.5).
    check_pointwise("hard_sigmoid", &[-3.0, 3.0], -4.0, 4.0, |g, x| {
        g.hard_sigmoid("act", x, 1.0 / 6.0, 0.5)
    });
    check_pointwise("hard_sigmoid onnx", &[-2.5, 2.5], -4.0, 4.0, |g, x| {
        g.hard_sigmoid("act", x, 0.2, 0.5)
    });
}

#[test]
fn hard_swish() {
    check_pointwise("hard_swish", &[-3.0, 3.0], -5.0, 5.0, |g, x| g.hard_swish("act", x));
}

#[test]
fn gelu() {
    check_pointwise("gelu", &[], -4.0, 4.0, |g, x| g.gelu("act", x, false));
    check_pointwise("gelu tanh", &[], -4.0, 4.0, |g, x| g.gelu("act", x, true));
}

#[test]
fn silu() {
    check_pointwise("silu", &[], -5.0, 5.0, |g, x| g.silu("act", x));
}

#[test]
fn leaky_relu() {
    check_pointwise("leaky_relu", &[0.0], -2.0, 2.0, |g, x| g.leaky_relu("act", x, 0.1));
}

#[test]
fn elu() {
    check_pointwise("elu", &[0.0], -3.0, 2.0, |g, x| g.elu("act", x, 0.7));
}

#[test]
fn softplus() {
    // Across its switch to `x` at 20 too.
    check_pointwise("softplus", &[], -5.0, 5.0, |g, x| g.softplus("act", x));
    check_pointwise("softplus linear", &[20.0], 19.0, 21.0, |g, x| g.softplus("act", x));
}

#[test]
fn tanh() {
    check_pointwise("tanh", &[], -3.0, 3.0, |g, x| g.tanh("act", x));
}

// ---- mul ----

#[test]
fn mul_same_shape() {
    check_same_shape_pair("mul", Graph::mul);
}

#[test]
fn mul_broadcasts_a_factor_per_channel_either_side() {
    for (i, seed) in SEEDS.into_iter().enumerate() {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let (n, c) = (shape.dims()[0], shape.dims()[1]);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        // Squeeze-excitation's [N, C, 1, 1] scale, and a plain [N, C] one.
        let factor = if i % 2 == 0 { Shape::d4(n, c, 1, 1) } else { Shape::d2(n, c) };
        let s = random_param(&mut g, &mut r, "s", factor);
        let y = if i == 1 { g.mul("mul", s, x) } else { g.mul("mul", x, s) }.unwrap();
        assert_eq!(g.shape(y), shape);
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("mul broadcast {shape} x {factor}"), &g, loss, &[x, s]));
    }
}

#[test]
fn concat_along_every_axis_but_the_batch() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        for axis in 1..4 {
            let mut g = Graph::new(seed);
            let a = random_param(&mut g, &mut r, "a", shape);
            let other = shape.with_dim(axis, r.int(1, 3));
            let b = random_param(&mut g, &mut r, "b", other);
            let y = g.concat("concat", a, b, axis).unwrap();
            let joined = shape.dims()[axis] + other.dims()[axis];
            assert_eq!(g.shape(y), shape.with_dim(axis, joined));
            let loss = mse_to_random_target(&mut g, &mut r, y);
            pass(check_gradients(
                &format!("concat {shape} {other} axis {axis}"),
                &g,
                loss,
                &[a, b],
            ));
        }
    }
}

#[test]
fn concat_refuses_the_batch_axis_and_unequal_dimensions() {
    let mut g = Graph::new(1);
    let a = g.input("a", Shape::d4(2, 3, 4, 4)).unwrap();
    let b = g.parameter("b", Shape::d4(2, 1, 4, 5), Init::Zeros).unwrap();
    for (axis, b) in [(0, a), (1, b), (4, a)] {
        let err = g.concat("concat", a, b, axis).unwrap_err().to_string();
        assert!(err.contains("batch axis 0"), "axis {axis}: {err}");
    }
}

#[test]
fn transpose_by_every_permutation_that_keeps_the_batch_axis() {
    let perms: [&[usize]; 7] = [
        &[0, 2, 1],
        &[0, 1, 3, 2],
        &[0, 2, 1, 3],
        &[0, 2, 3, 1],
        &[0, 3, 1, 2],
        &[0, 3, 2, 1],
        &[0, 1, 2],
    ];
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let four = nchw(&mut r, 3, 1, 4);
        for perm in perms {
            let shape = match perm.len() {
                3 => Shape::new(&[four.dims()[0], four.dims()[1], four.dims()[3]]).unwrap(),
                _ => four,
            };
            let mut g = Graph::new(seed);
            let x = random_param(&mut g, &mut r, "x", shape);
            let y = g.transpose("transpose", x, perm).unwrap();
            let dims: Vec<usize> = perm.iter().map(|&a| shape.dims()[a]).collect();
            assert_eq!(g.shape(y).dims(), dims);
            let loss = mse_to_random_target(&mut g, &mut r, y);
            pass(check_gradients(&format!("transpose {shape} by {perm:?}"), &g, loss, &[x]));
        }
    }
}

#[test]
fn transpose_and_slice_refuse_the_batch_axis_and_what_does_not_fit() {
    let mut g = Graph::new(1);
    let x = g.input("x", Shape::d4(2, 3, 4, 5)).unwrap();
    for perm in [&[1, 0, 2, 3][..], &[0, 1, 2], &[0, 1, 1, 3]] {
        let err = g.transpose("t", x, perm).unwrap_err().to_string();
        assert!(err.contains("batch axis 0 first"), "{perm:?}: {err}");
    }
    for (axis, start, len) in [(0, 0, 1), (1, 2, 2), (3, 0, 0), (4, 0, 1)] {
        let err = g.slice("s", x, axis, start, len).unwrap_err().to_string();
        assert!(err.contains("do not lie inside"), "{axis} {start} {len}: {err}");
    }
    for axis in [0, 4] {
        let err = g.pad("p", x, axis, 1, 1).unwrap_err().to_string();
        assert!(err.contains("cannot pad axis"), "{axis}: {err}");
    }
}

#[test]
fn zero_padding_of_every_axis_but_the_batch() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        for axis in 1..4 {
            let mut g = Graph::new(seed);
            let x = random_param(&mut g, &mut r, "x", shape);
            let (before, after) = (r.int(0, 2), r.int(0, 2));
            let y = g.pad("pad", x, axis, before, after).unwrap();
            assert_eq!(g.shape(y), shape.with_dim(axis, shape.dims()[axis] + before + after));
            let loss = mse_to_random_target(&mut g, &mut r, y);
            let name = format!("pad {shape} axis {axis} by {before}, {after}");
            pass(check_gradients(&name, &g, loss, &[x]));
        }
    }
}

#[test]
fn slices_of_every_axis_but_the_batch() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 2, 5);
        for axis in 1..4 {
            let mut g = Graph::new(seed);
            let x = random_param(&mut g, &mut r, "x", shape);
            let whole = shape.dims()[axis];
            let start = r.int(0, whole - 1);
            let len = r.int(1, whole - start);
            let y = g.slice("slice", x, axis, start, len).unwrap();
            assert_eq!(g.shape(y), shape.with_dim(axis, len));
            let loss = mse_to_random_target(&mut g, &mut r, y);
            let name = format!("slice {shape} axis {axis} {start}..{}", start + len);
            pass(check_gradients(&name, &g, loss, &[x]));
        }
    }
}

// ---- pooling ----

fn pool(kernel: (usize, usize), stride: (usize, usize), padding: (usize, usize)) -> PoolParams {
    PoolParams { kernel, stride, padding, count_include_pad: true }
}

fn check_max_pool(p: PoolParams) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let min = p.kernel.0.max(p.kernel.1).max(2);
        let shape = nchw(&mut r, 3, min, 6);
        let mut g = Graph::new(seed);
        // Distinct values 3h apart: every window has one maximum no step can displace.
        let values = r.distinct(shape.numel(), 3.0 * STEP);
        let x = param(&mut g, "x", shape, values);
        let y = g.max_pool2d("pool", x, p).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        let name = format!(
            "max_pool2d {shape} -> {} kernel {:?} stride {:?} padding {:?}",
            g.shape(y),
            p.kernel,
            p.stride,
            p.padding
        );
        pass(check_gradients(&name, &g, loss, &[x]));
    }
}

#[test]
fn max_pool2d_non_overlapping() {
    check_max_pool(pool((2, 2), (2, 2), (0, 0)));
}

#[test]
fn max_pool2d_overlapping_padded() {
    check_max_pool(pool((3, 3), (1, 1), (1, 1)));
}

#[test]
fn max_pool2d_strided_padded() {
    check_max_pool(pool((3, 3), (2, 2), (1, 1)));
}

#[test]
fn max_pool2d_stride_wider_than_window() {
    check_max_pool(pool((2, 2), (3, 3), (1, 1)));
}

#[test]
fn max_pool2d_non_square() {
    check_max_pool(pool((2, 3), (1, 2), (1, 1)));
}

fn check_avg_pool(p: PoolParams) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let min = p.kernel.0.max(p.kernel.1).max(2);
        let shape = nchw(&mut r, 3, min, 6);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let y = g.avg_pool2d("pool", x, p).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        let name = format!(
            "avg_pool2d {shape} -> {} kernel {:?} stride {:?} padding {:?} count_include_pad {}",
            g.shape(y),
            p.kernel,
            p.stride,
            p.padding,
            p.count_include_pad
        );
        pass(check_gradients(&name, &g, loss, &[x]));
    }
}

#[test]
fn avg_pool2d_without_padding() {
    check_avg_pool(pool((2, 2), (2, 2), (0, 0)));
    check_avg_pool(pool((3, 3), (1, 1), (0, 0)));
    check_avg_pool(pool((2, 2), (3, 3), (0, 0)));
}

#[test]
fn avg_pool2d_padded_counting_padding() {
    check_avg_pool(pool((3, 3), (1, 1), (1, 1)));
    check_avg_pool(pool((3, 3), (2, 2), (1, 1)));
}

#[test]
fn avg_pool2d_padded_not_counting_padding() {
    let exclude = |p: PoolParams| PoolParams { count_include_pad: false, ..p };
    check_avg_pool(exclude(pool((3, 3), (1, 1), (1, 1))));
    check_avg_pool(exclude(pool((3, 3), (2, 2), (1, 1))));
    check_avg_pool(exclude(pool((2, 3), (1, 2), (1, 1))));
}

#[test]
fn global_avg_pool() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 4, 1, 5);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let y = g.global_avg_pool("gap", x).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("global_avg_pool {shape}"), &g, loss, &[x]));
    }
}

// ---- add (and fan-out) ----

/// `loss = mse(op(a, b), target)` for two parameters of one random shape.
fn check_same_shape_pair(
    name: &str,
    op: fn(&mut Graph, &str, TensorId, TensorId) -> Result<TensorId, GraphError>,
) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let mut g = Graph::new(seed);
        let a = random_param(&mut g, &mut r, "a", shape);
        let b = random_param(&mut g, &mut r, "b", shape);
        let y = op(&mut g, name, a, b).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("{name} {shape}"), &g, loss, &[a, b]));
    }
}

#[test]
fn add_two_operands() {
    check_same_shape_pair("add", Graph::add);
}

#[test]
fn add_same_operand_twice_sums_both_contributions() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let y = g.add("add", x, x).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("add(x, x) {shape}"), &g, loss, &[x]));
    }
}

#[test]
fn add_with_a_frozen_operand() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let mut g = Graph::new(seed);
        let frozen = random_param(&mut g, &mut r, "frozen", shape);
        let x = random_param(&mut g, &mut r, "x", shape);
        let y = g.add("add", frozen, x).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("add(frozen, x) {shape}"), &g, loss, &[x]));
    }
}

/// A parameter used by two ops: `y = w·relu(w·x + b1) + b2` with the same square `w`.
#[test]
fn shared_weight_fan_out() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (n, k) = (r.int(2, 3), r.int(2, 4));
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", Shape::d2(n, k));
        let w = random_param(&mut g, &mut r, "w", Shape::d2(k, k));
        let b1 = random_param(&mut g, &mut r, "b1", Shape::d1(k));
        let b2 = random_param(&mut g, &mut r, "b2", Shape::d1(k));
        let h = g.linear("l1", x, w, Some(b1)).unwrap();
        let a = g.relu("act", h).unwrap();
        let y = g.linear("l2", a, w, Some(b2)).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(
            GradCheck::new(&format!("shared weight [{k},{k}]"), &g, loss, &[x, w, b1, b2])
                .watch(h, &[0.0])
                .max_skipped(0.1)
                .run(),
        );
    }
}

// ---- batch norm ----

/// A random batch norm over `[2, C, H, W]` for `seed`: the graph, the random source after
/// it, the input's shape, the input, scale (drawn from `gamma_range`) and shift, and the
/// output. Running statistics are drawn at random too.
fn batch_norm_net(
    seed: u64,
    gamma_range: (f32, f32),
) -> (Graph, Rand, Shape, [TensorId; 3], TensorId) {
    let mut r = Rand::new(seed);
    // At least four elements per channel, so the batch statistics are not degenerate.
    let (n, c, h, w) = (2, r.int(1, 3), r.int(2, 4), r.int(2, 4));
    let shape = Shape::d4(n, c, h, w);
    let mut g = Graph::new(seed);
    let values = r.values(shape.numel(), -2.0, 2.0);
    let x = param(&mut g, "x", shape, values);
    let gamma_values = r.values(c, gamma_range.0, gamma_range.1);
    let gamma = param(&mut g, "gamma", Shape::d1(c), gamma_values);
    let beta = random_param(&mut g, &mut r, "beta", Shape::d1(c));
    let mean = Init::Values(r.values(c, -1.0, 1.0));
    let mean = g.buffer("running_mean", Shape::d1(c), mean).unwrap();
    let var = Init::Values(r.values(c, 0.5, 2.0));
    let var = g.buffer("running_var", Shape::d1(c), var).unwrap();
    let cfg = BatchNormConfig::default();
    let y = g.batch_norm2d("bn", x, gamma, beta, mean, var, cfg).unwrap();
    (g, r, shape, [x, gamma, beta], y)
}

/// Batch norm's gradients with respect to its input, scale and shift when compiled in
/// `mode`, running statistics drawn at random (a batch's own statistics in `Mode::Train`;
/// the running ones, as constants, in `Mode::TrainRunningStats`).
fn check_batch_norm2d(mode: Mode) {
    for seed in SEEDS {
        let (mut g, mut r, shape, [x, gamma, beta], y) = batch_norm_net(seed, (0.5, 1.5));
        let loss = mse_to_random_target(&mut g, &mut r, y);
        let name = format!("batch_norm2d {shape} {mode:?}");
        let check = |params: &[TensorId]| GradCheck::new(&name, &g, loss, params).mode(mode).run();
        pass(check(&[x, gamma, beta]));
        // Each gradient on its own too: the rule builds only what is wanted.
        for only in [x, gamma, beta] {
            pass(check(&[only]));
        }
    }
}

#[test]
fn batch_norm2d_training_mode() {
    check_batch_norm2d(Mode::Train);
}

/// Batch norm then ReLU or ReLU6 in `mode`: the plan folds the rectifier's gradient into
/// the batch norm's parameter gradient (`batch_norm_grad_params_rectified`), and the
/// gradients of the input, scale and shift stay right.
fn check_rectified_batch_norm2d(mode: Mode) {
    for seed in SEEDS {
        for relu6 in [false, true] {
            // Wide enough that ReLU6 clamps some outputs at 6.
            let (mut g, mut r, shape, params, z) = batch_norm_net(seed, (2.0, 5.0));
            let y = if relu6 { g.relu6("act", z) } else { g.relu("act", z) }.unwrap();
            let loss = mse_to_random_target(&mut g, &mut r, y);
            let d = differentiate(&g, loss, &params).unwrap();
            let grads: Vec<TensorId> = d.gradients.iter().map(|&(_, grad)| grad).collect();
            let plan = compile_outputs(&d.graph, &[&[loss][..], &grads].concat(), mode).unwrap();
            let kernels: Vec<&str> = plan.steps.iter().map(|s| s.kernel.name()).collect();
            let name = format!("batch_norm2d {shape} {mode:?} then relu6 {relu6}");
            assert!(kernels.contains(&"batch_norm_grad_params_rectified"), "{name}: {kernels:?}");
            let rectifier_grad = |k: &&str| k.starts_with("relu") && k.contains("grad");
            assert!(!kernels.iter().any(rectifier_grad), "{name}: {kernels:?}");
            let kinks: &[f32] = if relu6 { &[0.0, 6.0] } else { &[0.0] };
            let check = GradCheck::new(&name, &g, loss, &params).mode(mode).watch(z, kinks);
            pass(check.max_skipped(0.2).run());
        }
    }
}

#[test]
fn rectified_batch_norm2d_training_mode() {
    check_rectified_batch_norm2d(Mode::Train);
}

#[test]
fn rectified_batch_norm2d_normalising_with_running_statistics() {
    check_rectified_batch_norm2d(Mode::TrainRunningStats);
}

#[test]
fn batch_norm2d_normalising_with_running_statistics() {
    check_batch_norm2d(Mode::TrainRunningStats);
}

// ---- dropout ----

#[test]
fn dropout_p_0_3() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 2, 4);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let y = g.dropout("drop", x, DropoutConfig { p: 0.3, seed }).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        // `Executor::run` keeps the micro-batch counter, so every run sees one mask.
        let report = check_gradients(&format!("dropout {shape}"), &g, loss, &[x]);
        pass(report);

        // The mask is real: some elements get no gradient, the others 1 / (1 − p) of it.
        let d = differentiate(&g, loss, &[x]).unwrap();
        let dx = d.gradients[0].1;
        let plan = compile_outputs(&d.graph, &[loss, dx, y], Mode::Train).unwrap();
        let mut memory = plan.initial_memory(&d.graph);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let mut regions = memory.regions();
        exec.run(&mut regions).unwrap();
        let grads = regions.read::<f32>(&plan.binding_of(dx).unwrap().operand).unwrap();
        let dropped = grads.iter().filter(|&&v| v == 0.0).count();
        assert!(
            dropped > 0 && dropped < grads.len(),
            "dropout {shape}: {dropped} of {} gradients are zero",
            grads.len()
        );
    }
}

// ---- reshape / flatten ----

#[test]
fn reshape() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 4);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let d = shape.dims();
        let y = g.reshape("reshape", x, Shape::d2(d[0] * d[1], d[2] * d[3])).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("reshape {shape} -> {}", g.shape(y)), &g, loss, &[x]));
    }
}

#[test]
fn flatten_into_linear() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 3);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", shape);
        let flat = g.flatten("flatten", x).unwrap();
        // A layer after the flatten makes every flattened position matter differently.
        let w = random_param(&mut g, &mut r, "w", Shape::d2(2, shape.per_sample()));
        let y = g.linear("fc", flat, w, None).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("flatten {shape}"), &g, loss, &[x, w]));
    }
}

// ---- softmax and losses ----

fn check_row_wise(
    name: &str,
    op: impl Fn(&mut Graph, &str, TensorId) -> Result<TensorId, GraphError>,
) {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = Shape::d2(r.int(1, 3), r.int(2, 5));
        let mut g = Graph::new(seed);
        let values = r.values(shape.numel(), -2.0, 2.0);
        let x = param(&mut g, "x", shape, values);
        let y = op(&mut g, name, x).unwrap();
        let loss = mse_to_random_target(&mut g, &mut r, y);
        pass(check_gradients(&format!("{name} {shape}"), &g, loss, &[x]));
    }
}

#[test]
fn softmax() {
    check_row_wise("softmax", Graph::softmax);
}

#[test]
fn log_softmax() {
    check_row_wise("log_softmax", Graph::log_softmax);
}

/// `cross_entropy(logits, labels)` with random labels; returns the graph, logits and loss.
fn cross_entropy_graph(seed: u64) -> (Graph, TensorId, TensorId, TensorId, Vec<i32>, Shape) {
    let mut r = Rand::new(seed);
    let (n, classes) = (r.int(1, 4), r.int(2, 5));
    let shape = Shape::d2(n, classes);
    let mut g = Graph::new(seed);
    let values = r.values(shape.numel(), -3.0, 3.0);
    let logits = param(&mut g, "logits", shape, values);
    let labels = g.labels("labels", n).unwrap();
    let loss = g.cross_entropy("ce", logits, labels).unwrap();
    (g, logits, labels, loss, r.labels(n, classes), shape)
}

#[test]
fn cross_entropy_wrt_logits() {
    for seed in SEEDS {
        let (g, logits, labels, loss, values, shape) = cross_entropy_graph(seed);
        let check = GradCheck::new(&format!("cross_entropy {shape}"), &g, loss, &[logits]);
        pass(check.feed(labels, Feed::I32(values)).run());
    }
}

/// The upstream gradient reaching cross-entropy is not always 1: `(ce − t)²` makes it
/// `2·(ce − t)`, which the rule must scale by.
#[test]
fn cross_entropy_scales_by_upstream_gradient() {
    for seed in SEEDS {
        let (mut g, logits, labels, ce, values, shape) = cross_entropy_graph(seed);
        let t = param(&mut g, "t", Shape::SCALAR, vec![-1.0]);
        let loss = g.mse("loss", ce, t).unwrap();
        let check = GradCheck::new(&format!("mse(cross_entropy {shape})"), &g, loss, &[logits]);
        pass(check.feed(labels, Feed::I32(values)).run());
    }
}

#[test]
fn mse_wrt_prediction() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = nchw(&mut r, 3, 1, 3);
        let mut g = Graph::new(seed);
        let pred = random_param(&mut g, &mut r, "pred", shape);
        let loss = mse_to_random_target(&mut g, &mut r, pred);
        pass(check_gradients(&format!("mse {shape}"), &g, loss, &[pred]));
    }
}

/// `mse` of a fed (non-parameter) target, and an upstream gradient other than 1.
#[test]
fn mse_with_fed_target_scales_by_upstream_gradient() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let shape = Shape::d2(r.int(1, 3), r.int(1, 4));
        let mut g = Graph::new(seed);
        let pred = random_param(&mut g, &mut r, "pred", shape);
        let target = g.target("target", shape).unwrap();
        let inner = g.mse("inner", pred, target).unwrap();
        let t = param(&mut g, "t", Shape::SCALAR, vec![2.0]);
        let loss = g.mse("loss", inner, t).unwrap();
        let values = r.values(shape.numel(), -1.0, 1.0);
        let check = GradCheck::new(&format!("mse(mse {shape})"), &g, loss, &[pred]);
        pass(check.feed(target, Feed::F32(values)).run());
    }
}

// ---- composite ----

/// The finite-difference step of the composite.
const COMPOSITE_STEP: f32 = 5e-3;

/// A residual block: `x → conv → bn → relu → add(·, x) → global pool → linear →
/// cross-entropy`. `x` fans out to the conv and the skip connection, so its gradient is a
/// sum of two contributions; every parameter is checked.
#[test]
fn residual_block() {
    for seed in SEEDS {
        let mut r = Rand::new(seed);
        let (n, c, hw, classes) = (2, r.int(2, 3), r.int(3, 4), 3);
        let mut g = Graph::new(seed);
        let x = random_param(&mut g, &mut r, "x", Shape::d4(n, c, hw, hw));
        let cw = random_param(&mut g, &mut r, "conv.weight", Shape::d4(c, c, 3, 3));
        let gamma_values = r.values(c, 0.5, 1.5);
        let gamma = param(&mut g, "bn.weight", Shape::d1(c), gamma_values);
        let beta = random_param(&mut g, &mut r, "bn.bias", Shape::d1(c));
        let mean = g.buffer("bn.running_mean", Shape::d1(c), Init::Zeros).unwrap();
        let var = g.buffer("bn.running_var", Shape::d1(c), Init::Constant(1.0)).unwrap();
        let fw = random_param(&mut g, &mut r, "fc.weight", Shape::d2(classes, c));
        let fb = random_param(&mut g, &mut r, "fc.bias", Shape::d1(classes));
        let labels = g.labels("labels", n).unwrap();

        let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
        // No conv bias: batch norm subtracts any per-channel constant, so its gradient is 0.
        let h = g.conv2d("conv", x, cw, None, same).unwrap();
        let h = g.batch_norm2d("bn", h, gamma, beta, mean, var, Default::default()).unwrap();
        let a = g.relu("relu", h).unwrap();
        let s = g.add("skip", a, x).unwrap();
        let p = g.global_avg_pool("gap", s).unwrap();
        let logits = g.linear("fc", p, fw, Some(fb)).unwrap();
        let loss = g.cross_entropy("loss", logits, labels).unwrap();

        let params = [x, cw, gamma, beta, fw, fb];
        let check = GradCheck::new(&format!("residual block c={c} hw={hw}"), &g, loss, &params)
            .feed(labels, Feed::I32(r.labels(n, classes)))
            // Steps that carry a pre-activation across relu's kink are not comparable; half
            // the default step crosses none in these cases (at 1e-2 up to a fifth of the conv
            // weights' steps do) while cancellation stays below 5e-5.
            .step(COMPOSITE_STEP)
            .watch(h, &[0.0])
            .max_skipped(0.1);
        pass(check.run());
    }
}

/// `detach` passes the value and stops the gradient: a parameter reached only through it
/// cannot be trained, and one reached both ways gets only the attached path's gradient.
#[test]
fn detach_stops_the_gradient() {
    let mut g = Graph::new(1);
    let a = param(&mut g, "a", Shape::d1(3), vec![0.5, -1.0, 2.0]);
    let b = param(&mut g, "b", Shape::d1(3), vec![1.0, 1.5, -0.5]);
    let db = g.detach("b_detached", b).unwrap();
    let y = g.add("y", a, db).unwrap();
    let target = param(&mut g, "target", Shape::d1(3), vec![0.0; 3]);
    let loss = g.mse("loss", y, target).unwrap();
    match differentiate(&g, loss, &[a, b]) {
        Err(GraphError::Invalid { node, .. }) => assert_eq!(node, "b"),
        Err(e) => panic!("expected 'b' to be reported as not reaching the loss, got {e}"),
        Ok(_) => panic!("differentiate trained 'b' through a detach"),
    }
    // add(a, detach(a)): d/da of mean((2a)²) would be 8a/3; through the detach it is 4a/3.
    let mut g = Graph::new(1);
    let a = param(&mut g, "a", Shape::d1(3), vec![0.5, -1.0, 2.0]);
    let da = g.detach("a_detached", a).unwrap();
    let y = g.add("y", a, da).unwrap();
    let target = param(&mut g, "target", Shape::d1(3), vec![0.0; 3]);
    let loss = g.mse("loss", y, target).unwrap();
    let d = differentiate(&g, loss, &[a]).unwrap();
    let grad = d.gradients[0].1;
    let plan = compile_outputs(&d.graph, &[loss, grad], Mode::Train).unwrap();
    let mut memory = plan.initial_memory(&d.graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = memory.regions();
    exec.run(&mut regions).unwrap();
    let got = regions.read::<f32>(&plan.binding_of(grad).unwrap().operand).unwrap();
    for (i, (&got, a)) in got.iter().zip([0.5f32, -1.0, 2.0]).enumerate() {
        let expected = 4.0 * a / 3.0;
        assert!((got - expected).abs() < 1e-6, "d/da[{i}]: {got}, expected {expected}");
    }
}

// ---- the checker itself ----

/// Through `add(x, detach(x))` the analytic gradient is half the numeric one (the loss
/// does depend on both paths): the checker must fail and say where.
#[test]
fn checker_rejects_a_wrong_gradient() {
    let mut r = Rand::new(5);
    let mut g = Graph::new(5);
    let x = random_param(&mut g, &mut r, "x", Shape::d2(2, 3));
    let dx = g.detach("x_detached", x).unwrap();
    let y = g.add("y", x, dx).unwrap();
    let loss = mse_to_random_target(&mut g, &mut r, y);
    let failures = check_gradients("add(x, detach(x))", &g, loss, &[x])
        .expect_err("a gradient half the true one passed the check");
    for expected in ["add(x, detach(x)): 6 gradient check failures", "d(loss)/d(x)[0] at [0, 0]"] {
        assert!(failures.contains(expected), "'{expected}' missing from:\n{failures}");
    }
    assert!(failures.contains("analytic") && failures.contains("numeric"), "{failures}");
}

/// A relu input within one step of 0: the step across the kink is skipped, which fails
/// unless skips are allowed, and the other elements are still compared.
#[test]
fn checker_skips_steps_across_a_kink() {
    let mut r = Rand::new(6);
    let mut g = Graph::new(6);
    let x = param(&mut g, "x", Shape::d1(4), vec![0.5, STEP / 2.0, -0.7, 1.2]);
    let y = g.relu("relu", x).unwrap();
    let loss = mse_to_random_target(&mut g, &mut r, y);
    let check = GradCheck::new("relu at its kink", &g, loss, &[x]).watch(x, &[0.0]);
    let failures = check.run().expect_err("a step across relu's kink was compared");
    assert!(failures.contains("1 of 4 elements of 'x' were skipped"), "{failures}");
    let report = check.max_skipped(0.25).run().unwrap();
    assert_eq!((report.tensors[0].checked, report.tensors[0].skipped), (3, 1));
}

// ---- frozen parameters get no gradient work ----

/// `x → l1 (conv 3x3, pad 1) → relu → flatten → l2 (linear) → cross-entropy`, with `x` a
/// fed input.
struct TwoLayer {
    g: Graph,
    x: TensorId,
    labels: TensorId,
    loss: TensorId,
    l1: [TensorId; 2],
    l2: [TensorId; 2],
    l1_out: TensorId,
}

const BATCH: usize = 2;
const CLASSES: usize = 3;

fn two_layer() -> TwoLayer {
    let mut r = Rand::new(7);
    let mut g = Graph::new(7);
    let x = g.input("x", Shape::d4(BATCH, 2, 4, 4)).unwrap();
    let labels = g.labels("labels", BATCH).unwrap();
    let w1 = random_param(&mut g, &mut r, "l1.weight", Shape::d4(3, 2, 3, 3));
    let b1 = random_param(&mut g, &mut r, "l1.bias", Shape::d1(3));
    let w2 = random_param(&mut g, &mut r, "l2.weight", Shape::d2(CLASSES, 3 * 4 * 4));
    let b2 = random_param(&mut g, &mut r, "l2.bias", Shape::d1(CLASSES));
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let l1_out = g.conv2d("l1", x, w1, Some(b1), same).unwrap();
    let h = g.relu("relu", l1_out).unwrap();
    let h = g.flatten("flatten", h).unwrap();
    let logits = g.linear("l2", h, w2, Some(b2)).unwrap();
    let loss = g.cross_entropy("loss", logits, labels).unwrap();
    TwoLayer { g, x, labels, loss, l1: [w1, b1], l2: [w2, b2], l1_out }
}

/// How many backward nodes of each kind `differentiate` appended, sorted by kind.
fn backward_kinds(model: &Graph, trained: &Graph) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for node in &trained.nodes()[model.nodes().len()..] {
        match counts.iter_mut().find(|(k, _)| *k == node.op.kind()) {
            Some((_, c)) => *c += 1,
            None => counts.push((node.op.kind(), 1)),
        }
    }
    counts.sort();
    counts
}

#[test]
fn frozen_layer_gets_no_gradient_nodes() {
    let m = two_layer();
    let d = differentiate(&m.g, m.loss, &m.l2).unwrap();

    // (a) Only l2's parameters have gradients.
    let params: Vec<_> = d.gradients.iter().map(|&(p, _)| p).collect();
    assert_eq!(params, m.l2);

    // (b) No gradient tensor of l1's parameters, and no weight-gradient node reading l1's input.
    let grads =
        ["l1.weight.grad", "l1.bias.grad", "l1.grad", "x.grad", "relu.grad", "flatten.grad"];
    for name in grads {
        assert_eq!(d.graph.find(name), None, "'{name}' was built for a frozen layer");
    }
    let backward = &d.graph.nodes()[m.g.nodes().len()..];
    for node in backward {
        let is_weight_grad = matches!(node.op.kind(), "linear_grad_weight" | "conv2d_grad_weight");
        assert!(
            !(is_weight_grad && node.inputs.contains(&m.x)),
            "'{}' ({}) computes a gradient from l1's input",
            node.name,
            node.op.kind()
        );
        assert!(
            !node.outputs.iter().any(|&o| d.graph.tensor(o).name.starts_with("l1.")),
            "'{}' ({}) produces a tensor of frozen layer l1",
            node.name,
            node.op.kind()
        );
    }

    // (c) Nothing below l2 needs a gradient, so not even l2's input gradient is built:
    // the seed, the loss rule and l2's two parameter gradients, nothing else.
    assert_eq!(
        backward_kinds(&m.g, &d.graph),
        [("bias_grad", 1), ("cross_entropy_grad", 1), ("fill", 1), ("linear_grad_weight", 1)]
    );
    let has_node = |name: &str| d.graph.nodes().iter().any(|n| n.name == name);
    assert!(!has_node("l2.grad_input"), "l2's input gradient was built");
    assert!(!has_node("relu.grad") && !has_node("flatten.grad"));
}

/// The counter-check: training l1 as well builds the path down to it, but still not the
/// gradient of the fed input.
#[test]
fn trainable_first_layer_builds_the_path_to_it() {
    let m = two_layer();
    let all = [m.l1[0], m.l1[1], m.l2[0], m.l2[1]];
    let d = differentiate(&m.g, m.loss, &all).unwrap();
    let params: Vec<_> = d.gradients.iter().map(|&(p, _)| p).collect();
    assert_eq!(params, all);
    assert_eq!(
        backward_kinds(&m.g, &d.graph),
        [
            ("bias_grad", 2),
            ("conv2d_grad_weight", 1),
            ("cross_entropy_grad", 1),
            ("fill", 1),
            ("linear_grad_input", 1),
            ("linear_grad_weight", 1),
            ("relu_grad", 1),
            ("reshape", 1),
        ]
    );
    let l1_out_grad = d.graph.find("l1.grad").expect("l1's output gradient is built");
    assert_eq!(d.graph.shape(l1_out_grad), d.graph.shape(m.l1_out));
    assert!(d.graph.find("flatten.grad").is_some() && d.graph.find("x.grad").is_none());
    assert!(d.graph.nodes().iter().any(|n| n.name == "l2.grad_input"));
}

#[test]
fn frozen_weights_stay_frozen_while_training() {
    let m = two_layer();
    let training = compile_training_step(&m.g, m.loss, &m.l2, &TrainConfig::sgd(0.9)).unwrap();
    let plan = &training.plan;

    for name in ["l1.weight", "l1.bias"] {
        let b = plan.binding(name).unwrap();
        assert_eq!(b.operand.region, Region::Frozen, "'{name}' is not in the frozen region");
        let momentum = format!("{name}.momentum_buffer");
        assert!(plan.binding(&momentum).is_none(), "'{momentum}' exists for a frozen weight");
    }
    for name in ["l2.weight", "l2.bias", "l2.weight.momentum_buffer"] {
        let b = plan.binding(name).unwrap();
        assert_eq!(b.operand.region, Region::State, "'{name}' is not in the state region");
    }
    for step in plan.steps.iter().chain(&plan.update_steps) {
        let kernel = step.kernel.name();
        assert!(
            !matches!(kernel, "conv2d_grad_weight" | "conv2d_grad_input" | "linear_grad_input"),
            "the training plan runs {kernel} although only l2 trains"
        );
    }

    let mut memory = plan.initial_memory(&training.graph);
    let frozen_before = memory.region(Region::Frozen).to_vec();
    let w1 = plan.operand("l1.weight").unwrap();
    let w2 = plan.operand("l2.weight").unwrap();
    let l1_before = memory.regions().read::<f32>(&w1).unwrap().to_vec();
    let mut l2_previous = memory.regions().read::<f32>(&w2).unwrap().to_vec();

    let mut r = Rand::new(99);
    let inputs = r.values(BATCH * 2 * 4 * 4, -1.0, 1.0);
    let labels = r.labels(BATCH, CLASSES);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut losses = Vec::new();
    for step in 1..=4 {
        let mut regions = memory.regions();
        regions.write(&plan.operand("x").unwrap(), &inputs).unwrap();
        regions.write(&plan.binding_of(m.labels).unwrap().operand, &labels).unwrap();
        let outcome = exec.train_step(&mut regions, 0.1).unwrap();
        assert_eq!(outcome, StepOutcome::Updated { update: step });
        losses.push(regions.read::<f32>(&plan.operand("loss").unwrap()).unwrap()[0]);
        let l2_now = regions.read::<f32>(&w2).unwrap().to_vec();
        assert_ne!(l2_now, l2_previous, "l2.weight did not change at step {step}");
        l2_previous = l2_now;
    }
    assert_eq!(memory.region(Region::Frozen), frozen_before, "the frozen region changed");
    assert_eq!(memory.regions().read::<f32>(&w1).unwrap(), l1_before);
    assert!(losses[3] < losses[0], "training l2 did not lower the loss: {losses:?}");
}
