//! The backend conformance suite: every kernel of [`Kernels`] run on a backend and on
//! [`Reference`] with the same random inputs, over shapes chosen to reach every code path.
//!
//! Tolerance. Kernels that compute each output from a fixed expression of a few inputs
//! (activations and their gradients, max pooling, dropout, add/copy/fill/accumulate, batch
//! norm eval/apply, the MSE gradient, the optimizer updates) must match bit for bit: they
//! leave a backend no freedom in the order of operations. Kernels that sum (dense layers,
//! convolutions, average pooling, batch-norm statistics and gradients, softmax, losses,
//! sums of squares) may add in another order, so they must satisfy
//! `|got − want| <= 1e-5 + 1e-4 · |want|` element by element: f32 addition in a different
//! order errs by about `terms · 2⁻²⁴` relative to the sum of magnitudes, under 1e-5 for
//! the few hundred terms of these cases, and the absolute part covers sums that cancel to
//! near zero; so may the fused int8 block gradients (`quant::chain`), which the reference
//! computes bit for bit as the unfused kernels. Sigmoid's forward pass alone may stray by [`SIGMOID`], the rounding of
//! another exponential. [`check_reference`] runs the suite with every tolerance bit-exact.

use half::f16;
use sprout_core::backend::{
    ActivationKernels, Affine, GradSums, GradsMut, LossKernels, NormAct, NormKernels, ParamUpdate,
    PointwiseKernels, Running, Saved, SavedMut, TrainStats,
};
use sprout_core::geometry::{
    window_output, ChannelDims, Conv2dGeometry, LinearDims, Pool2dGeometry, RowDims,
};
use sprout_core::hyperparams::{AdamWConfig, BatchNormConfig, DropoutConfig, SgdConfig};
use sprout_core::quant::backward::mask_bytes;
use sprout_core::quant::chain::{BlockGrads, DepthwiseChainArgs, PointwiseWeights, ProjectionArgs};
use sprout_core::quant::{OutputQuant, QConv2dArgs, QLinearArgs, Requantize};
use sprout_core::reference::pointwise::GradientReads;
pub use sprout_core::reference::tolerance::{Tolerance, EXACT, REDUCTION};
use sprout_core::reference::{
    Activation, EluParams, GeluParams, HardSigmoidParams, LeakyReluParams, Rectifier,
};
use sprout_core::rng::SplitMix;
use sprout_core::{Host, Kernels, Reference};

/// Sigmoid's forward pass (its gradient reads the saved output, and stays exact).
///
/// The reference computes `e = expf(-|x|)` with libm, then `1 / (1 + e)` for `x >= 0`,
/// else `e / (1 + e)`; an optimised backend may evaluate `e` with its own vectorizable
/// exponential (sprout-cpu: Cephes' range-reduced polynomial). When the two `e` differ by
/// `k` ulp (relative `k · 2⁻²³` at most), `1 + e` inherits at most half of it (`e <= 1`)
/// and the numerator `e` all of it; each side then rounds the sum and the quotient once
/// more. With `k = 1` (libm's bound and the polynomial's) the results lie within about two
/// ulp: `rel = 2 · f32::EPSILON`. sprout-cpu, checked over all 2³² inputs: at most 2 ulp,
/// relative 1.79e-7 (1.5 ε). Outputs below `f32::MIN_POSITIVE` (`x < -87.3`, where the
/// result is `e` itself on the subnormal grid) keep no relative precision; the absolute
/// part, 4 steps of that grid (5.6e-45), covers them (sprout-cpu: 1 step).
pub const SIGMOID: Tolerance = Tolerance { abs: 4.0 * f32::from_bits(1), rel: 2.0 * f32::EPSILON };

/// Runs every conformance case on a backend from `make`; panics naming the backend,
/// kernel, case and element at the first disagreement with [`Reference`].
pub fn check_backend<K: Kernels<Memory = Host>>(make: impl Fn() -> K, name: &str) {
    Suite::new(make(), name, REDUCTION, SIGMOID).run_all();
    // A fresh backend meets the conv shapes in the other order: scratch grows, then shrinks.
    let mut fresh = Suite::new(make(), name, REDUCTION, SIGMOID);
    conv_cases().iter().rev().for_each(|g| fresh.conv(g));
}

/// Runs the suite on `Reference` against itself, demanding bit-exact agreement everywhere:
/// shows the suite is deterministic and calls both sides alike.
pub fn check_reference() {
    Suite::new(Reference, "reference", EXACT, EXACT).run_all();
}

/// Convolution cases: non-square inputs and kernels, stride 2 and mixed strides, padding
/// (wider than half the kernel too), groups 2, depthwise with and without stride, grouped
/// with a channel multiplier, pointwise, and one big enough to be split over threads.
pub fn conv_cases() -> Vec<Conv2dGeometry> {
    #[rustfmt::skip]
    let raw = [
        // n, c_in, h, w, c_out, kh, kw, stride, padding, groups
        (2, 3, 7, 6, 4, 3, 3, (1, 1), (1, 1), 1),
        (1, 4, 9, 9, 6, 3, 3, (2, 2), (1, 1), 2),
        (2, 5, 8, 7, 5, 3, 3, (1, 2), (1, 0), 5),
        (2, 4, 9, 8, 4, 3, 3, (2, 2), (1, 1), 4),
        (3, 6, 5, 5, 8, 1, 1, (1, 1), (0, 0), 1),
        (1, 4, 6, 6, 3, 1, 1, (2, 2), (0, 0), 1),
        (1, 3, 8, 8, 6, 3, 3, (2, 2), (0, 0), 3),
        (2, 2, 5, 4, 3, 2, 3, (1, 1), (0, 1), 1),
        (1, 2, 4, 4, 2, 3, 3, (1, 1), (2, 2), 1),
        (4, 8, 16, 16, 16, 3, 3, (1, 1), (1, 1), 2),
        (4, 16, 32, 32, 16, 3, 3, (1, 1), (1, 1), 16),
    ];
    raw.into_iter()
        .map(|(n, c_in, h, w, c_out, kh, kw, stride, padding, groups)| {
            let out = |size, k, s, p| window_output(size, k, s, p).expect("a valid window");
            let g = Conv2dGeometry {
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
            };
            g.check().expect("a valid conv case");
            g
        })
        .collect()
}

/// One backend under test, the reference, and the inputs' random source.
struct Suite<K> {
    backend: K,
    name: String,
    reduction: Tolerance,
    /// Sigmoid's forward pass: [`SIGMOID`], or bit-exact for the reference against itself.
    sigmoid: Tolerance,
    rng: SplitMix,
}

/// A kernel call, made once on the backend and once on the reference.
type Call<'a> = dyn Fn(&mut dyn Kernels<Memory = Host>, &mut [Vec<f32>]) + 'a;
/// An int8 kernel call writing one int8 output.
type Int8Call<'a> = dyn Fn(&mut dyn Kernels<Memory = Host>, &mut [i8]) + 'a;

impl<K: Kernels<Memory = Host>> Suite<K> {
    fn new(backend: K, name: &str, reduction: Tolerance, sigmoid: Tolerance) -> Self {
        let name = name.to_string();
        Self { backend, name, reduction, sigmoid, rng: SplitMix::new(0x5eed) }
    }

    fn run_all(&mut self) {
        conv_cases().iter().for_each(|g| self.conv(g));
        for (n, k, m) in [(1, 1, 1), (3, 5, 7), (8, 33, 10), (64, 64, 128)] {
            self.linear(LinearDims { n, k, m });
        }
        self.activations();
        self.pointwise_activations();
        self.pooling();
        self.batch_norm(ChannelDims { outer: 3, channels: 4, inner: 7 });
        self.batch_norm(ChannelDims { outer: 5, channels: 6, inner: 1 });
        self.layer_norm(RowDims { rows: 6, cols: 5 });
        self.layer_norm(RowDims { rows: 1, cols: 96 });
        self.dropout();
        self.softmax_and_losses();
        self.vector_ops();
        self.optimizers();
        self.half_casts();
        conv_cases().iter().for_each(|g| self.int8_conv(g));
        for (n, k, m) in [(1, 1, 1), (3, 5, 7), (8, 33, 10), (4, 192, 3)] {
            self.int8_linear(LinearDims { n, k, m });
        }
        // (batch, block inputs, hidden channels, projection outputs, height, width, stride)
        for case in
            [(2, 3, 6, 4, 7, 5, (2, 2)), (1, 8, 48, 16, 8, 8, (2, 2)), (2, 4, 5, 3, 6, 9, (1, 1))]
        {
            self.depthwise_chains(case);
        }
    }

    /// An inverted-residual block's fused backward kernels (1x1 expansion to `c` channels,
    /// 3x3 depthwise with `stride`, 1x1 projection to `p`) on random weights, scales, clamp
    /// masks and gradients: the bias gradients and the block's input gradient (the scratch
    /// plane is the backend's own).
    fn depthwise_chains(
        &mut self,
        case: (usize, usize, usize, usize, usize, usize, (usize, usize)),
    ) {
        let (n, c_in, c, p, h, w, stride) = case;
        let out = |size, s| window_output(size, 3, s, 1).expect("a valid window");
        let (out_h, out_w) = (out(h, stride.0), out(w, stride.1));
        let shape = Conv2dGeometry {
            n,
            c_in: c,
            h,
            w,
            c_out: c,
            kh: 3,
            kw: 3,
            stride,
            padding: (1, 1),
            groups: c,
            out_h,
            out_w,
        };
        let case = format!("{shape:?}, {c_in} block inputs, {p} block outputs");
        let tol = self.reduction;
        let dy = self.random(n * p * out_h * out_w, -1.0, 1.0);
        let (w_p, s_p) = (self.codes(p * c), self.random(p, 0.001, 0.02));
        let (w_d, s_d) = (self.codes(c * 9), self.random(c, 0.001, 0.02));
        let (w_e, s_e) = (self.codes(c * c_in), self.random(c, 0.001, 0.02));
        let (m_p, m) =
            (self.codes(mask_bytes(shape.output_len())), self.codes(mask_bytes(shape.input_len())));
        let g = self.random(shape.output_len(), -1.0, 1.0);
        let projection = ProjectionArgs::<Host> { w: &w_p, w_scale: &s_p, mask: &m_p, outputs: p };
        let a = DepthwiseChainArgs::<Host> { dy: &dy, w: &w_d, w_scale: &s_d, mask: &m, shape };
        let chain = DepthwiseChainArgs::<Host> { dy: &g, ..a };
        let before = PointwiseWeights::<Host> { w: &w_e, w_scale: &s_e, inputs: c_in };
        let outputs = vec![Self::nans(c), Self::nans(c), Self::nans(n * c_in * h * w)];
        let scratch = || Self::nans(out_h * out_w);
        self.compare("block_grad_s8", &case, tol, outputs.clone(), &|k, o| {
            let [db_depthwise, db, dx] = o else { unreachable!("three outputs") };
            let mut plane = scratch();
            let (db_depthwise, db, dx) = (&mut db_depthwise[..], &mut db[..], &mut dx[..]);
            let out = BlockGrads { db_depthwise, db, dx, scratch: &mut plane[..] };
            k.block_grad_s8(&a, &projection, &before, out)
        });
        self.compare("block_bias_grad_s8", &case, tol, outputs[..2].to_vec(), &|k, o| {
            let [db_depthwise, db] = o else { unreachable!("two outputs") };
            k.block_bias_grad_s8(
                &a,
                &projection,
                &mut db_depthwise[..],
                &mut db[..],
                &mut scratch(),
            )
        });
        self.compare("depthwise_chain_grad_s8", &case, tol, outputs[1..].to_vec(), &|k, o| {
            let [db, dx] = o else { unreachable!("two outputs") };
            k.depthwise_chain_grad_s8(&chain, &before, &mut db[..], &mut dx[..])
        });
        self.compare(
            "depthwise_chain_bias_grad_s8",
            &case,
            tol,
            outputs[1..2].to_vec(),
            &|k, o| k.depthwise_chain_bias_grad_s8(&chain, &mut o[0][..]),
        );
    }

    fn codes(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| self.rng.next_u64() as i8).collect()
    }

    /// Per-channel multipliers in `[2^-12, 1)`, an output zero point and clamp bounds that
    /// rotate through the full range, a fused ReLU and a fused ReLU6.
    fn output_quant(&mut self, channels: usize) -> (Vec<Requantize>, i32, (i8, i8)) {
        let multipliers = (0..channels)
            .map(|_| Requantize::new(f64::from(self.rng.uniform(-12.0, 0.0)).exp2()).unwrap())
            .collect();
        let zero_point = (self.rng.next_u64() % 256) as i32 - 128;
        let act = match self.rng.next_u64() % 3 {
            0 => (i8::MIN, i8::MAX),
            1 => (zero_point as i8, i8::MAX),
            _ => (zero_point as i8, (zero_point + 60).min(127) as i8),
        };
        (multipliers, zero_point, act)
    }

    /// Runs an int8 kernel on the backend and on the reference; the outputs must be equal.
    fn compare_i8(&mut self, kernel: &str, case: &str, len: usize, call: &Int8Call<'_>) {
        let (mut got, mut want) = (vec![0x55u8 as i8; len], vec![0x55u8 as i8; len]);
        call(&mut self.backend, &mut got);
        call(&mut Reference, &mut want);
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            panic!(
                "{}: {kernel} ({case}): element {i}: got {}, reference {}",
                self.name, got[i], want[i]
            );
        }
    }

    fn int8_conv(&mut self, g: &Conv2dGeometry) {
        let case = format!("{g:?}");
        let (x, w) = (self.codes(g.input_len()), self.codes(g.weight_len()));
        let bias: Vec<i32> = (0..g.c_out).map(|_| (self.rng.next_u64() as i32) >> 12).collect();
        let (multipliers, zero_point, act) = self.output_quant(g.c_out);
        let out = OutputQuant { multipliers: &multipliers, zero_point, act };
        let x_zp = (self.rng.next_u64() % 256) as i32 - 128;
        let a = QConv2dArgs { x: &x, x_zero_point: x_zp, weights: &w, bias: None, out, shape: *g };
        let biased = QConv2dArgs { bias: Some(&bias), ..a };
        self.compare_i8("conv2d_s8", &case, g.output_len(), &|k, y| k.conv2d_s8(&biased, y));
        self.compare_i8("conv2d_s8 without bias", &case, g.output_len(), &|k, y| {
            k.conv2d_s8(&a, y)
        });
    }

    fn int8_linear(&mut self, d: LinearDims) {
        let case = format!("{d:?}");
        let (x, w) = (self.codes(d.n * d.k), self.codes(d.m * d.k));
        let bias: Vec<i32> = (0..d.m).map(|_| (self.rng.next_u64() as i32) >> 12).collect();
        let (multipliers, zero_point, act) = self.output_quant(d.m);
        let out = OutputQuant { multipliers: &multipliers, zero_point, act };
        let x_zp = (self.rng.next_u64() % 256) as i32 - 128;
        let a = QLinearArgs {
            x: &x,
            x_zero_point: x_zp,
            weights: &w,
            bias: Some(&bias),
            out,
            shape: d,
        };
        self.compare_i8("linear_s8", &case, d.n * d.m, &|k, y| k.linear_s8(&a, y));
    }

    /// f16 casts there and back, apart and as one kernel (and that in place), bit for bit
    /// (any NaN for NaN): values across f16's range and beyond it, its subnormals, ties,
    /// signed zeros and infinities, at both ends of a run long enough (2^18 values and 5)
    /// for a threaded backend to split it and for a vector loop to leave a tail.
    fn half_casts(&mut self) {
        let mut edges = self.random(257, -70000.0, 70000.0);
        edges.extend(self.random(64, -1e-4, 1e-4));
        let tiny = 2f32.powi(-25);
        edges.extend([0.0, -0.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e-9, 2.0 * tiny, tiny]);
        edges.extend([
            3.0 * tiny,
            1.0 + 2f32.powi(-11),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        let mut x = edges.clone();
        x.extend(self.random((1 << 18) + 5 - 2 * edges.len(), -1e5, 1e5));
        x.extend(edges);
        let widened = |half: &[f16]| half.iter().map(|h| f32::from(*h)).collect::<Vec<f32>>();
        let casts = |k: &mut dyn Kernels<Memory = Host>| {
            let mut half = vec![f16::ZERO; x.len()];
            k.cast_f32_to_f16(&x, &mut half);
            let mut back = vec![0.0; x.len()];
            k.cast_f16_to_f32(&half, &mut back);
            let (mut fused_half, mut fused) = (vec![f16::NAN; x.len()], vec![f32::NAN; x.len()]);
            k.round_through_f16(&x, &mut fused_half, &mut fused);
            let (mut in_place_half, mut in_place) = (vec![f16::NAN; x.len()], x.clone());
            k.round_through_f16_in_place(&mut in_place, &mut in_place_half);
            // With a rectifier after the round trip and the cast of its output (f32 in,
            // f32 and f16 out): ReLU6 apart, ReLU in place.
            let relu6 = Rectifier { relu6: true };
            let (mut rectified_half, mut rectified) =
                (vec![f16::NAN; x.len()], vec![f32::NAN; x.len()]);
            k.rectify_through_f16(&x, &mut rectified, &mut rectified_half, relu6);
            let (mut relu_half, mut relu) = (vec![f16::NAN; x.len()], x.clone());
            k.rectify_through_f16_in_place(&mut relu, &mut relu_half, Rectifier { relu6: false });
            [
                widened(&half),
                back,
                widened(&fused_half),
                fused,
                widened(&in_place_half),
                in_place,
                widened(&rectified_half),
                rectified,
                widened(&relu_half),
                relu,
            ]
        };
        let (got, want) = (casts(&mut self.backend), casts(&mut Reference));
        let kernels = [
            "f32 -> f16",
            "f16 -> f32",
            "round_through_f16 (f16)",
            "round_through_f16 (f32)",
            "round_through_f16_in_place (f16)",
            "round_through_f16_in_place (f32)",
            "rectify_through_f16 (f16)",
            "rectify_through_f16 (f32)",
            "rectify_through_f16_in_place (f16)",
            "rectify_through_f16_in_place (f32)",
        ];
        for ((kernel, got), want) in kernels.into_iter().zip(got).zip(want) {
            for ((g, w), x) in got.iter().zip(&want).zip(&x) {
                let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                assert!(same, "{}: cast {kernel} of {x}: got {g}, reference {w}", self.name);
            }
        }
    }

    fn random(&mut self, len: usize, low: f32, high: f32) -> Vec<f32> {
        (0..len).map(|_| self.rng.uniform(low, high)).collect()
    }

    fn nans(len: usize) -> Vec<f32> {
        vec![f32::NAN; len]
    }

    /// Runs `call` on the backend and on the reference, each over its own copy of
    /// `buffers` (outputs start as NaN, so an output left unwritten shows), and compares
    /// every buffer afterwards.
    fn compare(
        &mut self,
        kernel: &str,
        case: &str,
        tol: Tolerance,
        buffers: Vec<Vec<f32>>,
        call: &Call<'_>,
    ) {
        let mut got = buffers.clone();
        let mut want = buffers;
        call(&mut self.backend, &mut got);
        call(&mut Reference, &mut want);
        for (index, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_eq!(got.len(), want.len());
            for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
                assert!(
                    tol.accepts(a, b),
                    "{}: {kernel} ({case}): buffer {index} element {i}: got {a}, reference {b} \
                     (tolerance {tol:?})",
                    self.name
                );
            }
        }
    }

    fn conv(&mut self, g: &Conv2dGeometry) {
        let case = format!("{g:?}");
        let tol = self.reduction;
        let x = self.random(g.input_len(), -1.0, 1.0);
        let w = self.random(g.weight_len(), -1.0, 1.0);
        let b = self.random(g.c_out, -1.0, 1.0);
        let dy = self.random(g.output_len(), -1.0, 1.0);
        let y = Self::nans(g.output_len());
        self.compare("conv2d", &case, tol, vec![y.clone()], &|k, o| {
            k.conv2d(&x, &w, Some(&b), &mut o[0], g)
        });
        self.compare("conv2d without bias", &case, tol, vec![y], &|k, o| {
            k.conv2d(&x, &w, None, &mut o[0], g)
        });
        self.compare("conv2d_grad_input", &case, tol, vec![Self::nans(x.len())], &|k, o| {
            k.conv2d_grad_input(&dy, &w, &mut o[0], g)
        });
        self.compare("conv2d_grad_weight", &case, tol, vec![Self::nans(w.len())], &|k, o| {
            k.conv2d_grad_weight(&dy, &x, &mut o[0], g)
        });
        let d = ChannelDims { outer: g.n, channels: g.c_out, inner: g.out_h * g.out_w };
        self.compare("bias_grad", &case, tol, vec![Self::nans(g.c_out)], &|k, o| {
            k.bias_grad(&dy, &mut o[0], d)
        });
        self.conv_norm_act(g, &x, &w, &b);
    }

    /// A convolution fused with a frozen batch norm and a rectifier: within the reduction
    /// tolerance of the reference, and bit for bit what the backend's own three kernels
    /// give one after the other (fusing a plan changes no result).
    fn conv_norm_act(&mut self, g: &Conv2dGeometry, x: &[f32], w: &[f32], b: &[f32]) {
        let c = g.c_out;
        // Scales up to 4 and spread-out means: some outputs land past 6 and below 0.
        let (gamma, beta) = (self.random(c, -4.0, 4.0), self.random(c, -1.0, 1.0));
        let (mean, var) = (self.random(c, -1.0, 1.0), self.random(c, 0.25, 2.0));
        let p = Affine { gamma: &gamma[..], beta: &beta[..] };
        let running = Running { mean: &mean[..], var: &var[..] };
        let cfg = BatchNormConfig::default();
        let y = Self::nans(g.output_len());
        for (rectifier, bias) in [(None, true), (Some(false), false), (Some(true), true)] {
            let rectifier = rectifier.map(|relu6| Rectifier { relu6 });
            let b = bias.then_some(b);
            let then = NormAct { p, running, cfg, rectifier };
            let case = format!("{g:?}, {rectifier:?}, bias {bias}");
            self.compare("conv2d_norm_act", &case, self.reduction, vec![y.clone()], &|k, o| {
                k.conv2d_norm_act(x, w, b, then, &mut o[0], g)
            });
            let (mut fused, mut separate) = (y.clone(), y.clone());
            self.backend.conv2d_norm_act(x, w, b, then, &mut fused, g);
            self.backend.conv2d(x, w, b, &mut separate, g);
            self.backend.batch_norm_eval_in_place(
                &mut separate,
                p,
                running,
                g.output_channels(),
                cfg,
            );
            match rectifier {
                Some(Rectifier { relu6: true }) => self.backend.relu6_in_place(&mut separate),
                Some(Rectifier { relu6: false }) => self.backend.relu_in_place(&mut separate),
                None => {}
            }
            let same = fused.iter().zip(&separate).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{}: conv2d_norm_act ({case}) differs from its three kernels", self.name);
        }
    }

    fn linear(&mut self, d: LinearDims) {
        let case = format!("{d:?}");
        let tol = self.reduction;
        let x = self.random(d.n * d.k, -1.0, 1.0);
        let w = self.random(d.m * d.k, -1.0, 1.0);
        let b = self.random(d.m, -1.0, 1.0);
        let dy = self.random(d.n * d.m, -1.0, 1.0);
        let y = Self::nans(d.n * d.m);
        self.compare("linear", &case, tol, vec![y.clone()], &|k, o| {
            k.linear(&x, &w, Some(&b), &mut o[0], d)
        });
        self.compare("linear without bias", &case, tol, vec![y], &|k, o| {
            k.linear(&x, &w, None, &mut o[0], d)
        });
        self.compare("linear_grad_input", &case, tol, vec![Self::nans(x.len())], &|k, o| {
            k.linear_grad_input(&dy, &w, &mut o[0], d)
        });
        self.compare("linear_grad_weight", &case, tol, vec![Self::nans(w.len())], &|k, o| {
            k.linear_grad_weight(&dy, &x, &mut o[0], d)
        });
    }

    /// Inputs in `[-2, 8)` with exact zeros and sixes, where relu and relu6 switch.
    fn activations(&mut self) {
        let mut x = self.random(301, -2.0, 8.0);
        x.iter_mut().step_by(7).for_each(|v| *v = 0.0);
        x.iter_mut().skip(3).step_by(11).for_each(|v| *v = 6.0);
        let dy = self.random(x.len(), -1.0, 1.0);
        let out = Self::nans(x.len());
        let case = "301 values";
        for six in [false, true] {
            let (name, grad, grad_in_place) = match six {
                false => ("relu", "relu_grad", "relu_grad_in_place"),
                true => ("relu6", "relu6_grad", "relu6_grad_in_place"),
            };
            let mut y = x.clone();
            match six {
                false => Reference.relu_in_place(&mut y),
                true => Reference.relu6_in_place(&mut y),
            }
            self.compare(name, case, EXACT, vec![out.clone()], &|k, o| match six {
                false => k.relu(&x, &mut o[0]),
                true => k.relu6(&x, &mut o[0]),
            });
            self.compare(&format!("{name}_in_place"), case, EXACT, vec![x.clone()], &|k, o| {
                match six {
                    false => k.relu_in_place(&mut o[0]),
                    true => k.relu6_in_place(&mut o[0]),
                }
            });
            self.compare(grad, case, EXACT, vec![out.clone()], &|k, o| match six {
                false => k.relu_grad(&y, &dy, &mut o[0]),
                true => k.relu6_grad(&y, &dy, &mut o[0]),
            });
            self.compare(grad_in_place, case, EXACT, vec![dy.clone()], &|k, o| match six {
                false => k.relu_grad_in_place(&y, &mut o[0]),
                true => k.relu6_grad_in_place(&y, &mut o[0]),
            });
        }
    }

    /// Sigmoid, hard sigmoid, hard swish, leaky ReLU, GELU and SiLU with their gradients, on values
    /// that include each activation's kinks, and edge values: -0, ±large, ±∞, NaN, and
    /// inputs whose sigmoid is subnormal, the smallest subnormal, or rounds to 0 or 1.
    fn pointwise_activations(&mut self) {
        let mut x = self.random(301, -8.0, 8.0);
        for (i, kink) in [0.0, 3.0, -3.0, 2.5, -2.5].into_iter().enumerate() {
            x.iter_mut().skip(i).step_by(13).for_each(|v| *v = kink);
        }
        let edges = [-0.0, 1e4, -1e4, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -87.5, -90.0];
        let edges = edges.into_iter().chain([-100.0, -103.9, -104.5, 17.0, 88.0, -20.0]);
        for (i, edge) in edges.enumerate() {
            x[5 + 13 * i] = edge;
        }
        let dy = self.random(x.len(), -1.0, 1.0);
        let out = Self::nans(x.len());
        let case = "301 values";
        let activations = [
            Activation::Sigmoid,
            Activation::HardSigmoid(HardSigmoidParams::PYTORCH),
            Activation::HardSigmoid(HardSigmoidParams::ONNX_DEFAULT),
            Activation::HardSwish,
            Activation::LeakyRelu(LeakyReluParams { alpha: 0.1 }),
            Activation::Gelu(GeluParams { tanh: false }),
            Activation::Gelu(GeluParams { tanh: true }),
            Activation::Silu,
            Activation::Elu(EluParams { alpha: 0.7 }),
            Activation::Softplus,
            Activation::Tanh,
        ];
        for f in activations {
            let mut y = out.clone();
            Reference.activation(f, &x, &mut y);
            let saved = match f.gradient_reads() {
                GradientReads::Input => &x,
                GradientReads::Output => &y,
            };
            let name = format!("{f:?}");
            let tol = if f == Activation::Sigmoid { self.sigmoid } else { EXACT };
            self.compare(&name, case, tol, vec![out.clone()], &|k, o| {
                k.activation(f, &x, &mut o[0])
            });
            self.compare(&format!("{name} grad"), case, EXACT, vec![out.clone()], &|k, o| {
                k.activation_grad(f, saved, &dy, &mut o[0])
            });
        }
    }

    fn pooling(&mut self) {
        #[rustfmt::skip]
        let cases = [
            // n, c, h, w, kh, kw, stride, padding, count_include_pad
            (2, 3, 6, 6, 2, 2, (2, 2), (0, 0), true),
            (1, 2, 7, 5, 3, 3, (2, 2), (1, 1), false),
            (1, 2, 7, 5, 3, 3, (2, 1), (1, 1), true),
            (2, 1, 5, 5, 3, 2, (1, 1), (1, 0), true),
        ];
        for (n, c, h, w, kh, kw, stride, padding, count_include_pad) in cases {
            let out = |size, k, s, p| window_output(size, k, s, p).expect("a valid window");
            let g = Pool2dGeometry {
                n,
                c,
                h,
                w,
                kh,
                kw,
                stride,
                padding,
                count_include_pad,
                out_h: out(h, kh, stride.0, padding.0),
                out_w: out(w, kw, stride.1, padding.1),
            };
            g.check().expect("a valid pool case");
            let case = format!("{g:?}");
            let x = self.random(g.input_len(), -1.0, 1.0);
            let dy = self.random(g.output_len(), -1.0, 1.0);
            let (y, dx) = (Self::nans(g.output_len()), Self::nans(g.input_len()));
            self.compare("max_pool2d", &case, EXACT, vec![y.clone()], &|k, o| {
                k.max_pool2d(&x, &mut o[0], &g)
            });
            self.compare("max_pool2d_grad", &case, self.reduction, vec![dx.clone()], &|k, o| {
                k.max_pool2d_grad(&x, &dy, &mut o[0], &g)
            });
            self.compare("avg_pool2d", &case, self.reduction, vec![y], &|k, o| {
                k.avg_pool2d(&x, &mut o[0], &g)
            });
            self.compare("avg_pool2d_grad", &case, self.reduction, vec![dx], &|k, o| {
                k.avg_pool2d_grad(&dy, &mut o[0], &g)
            });
        }
        let d = ChannelDims { outer: 3, channels: 4, inner: 10 };
        let x = self.random(d.len(), -1.0, 1.0);
        let dy = self.random(d.outer * d.channels, -1.0, 1.0);
        let case = format!("{d:?}");
        self.compare(
            "global_avg_pool",
            &case,
            self.reduction,
            vec![Self::nans(dy.len())],
            &|k, o| k.global_avg_pool(&x, &mut o[0], d),
        );
        self.compare("global_avg_pool_grad", &case, EXACT, vec![Self::nans(x.len())], &|k, o| {
            k.global_avg_pool_grad(&dy, &mut o[0], d)
        });
    }

    fn batch_norm(&mut self, d: ChannelDims) {
        let case = format!("{d:?}");
        let tol = self.reduction;
        let cfg = BatchNormConfig::default();
        let c = d.channels;
        let x = self.random(d.len(), -2.0, 3.0);
        let dy = self.random(d.len(), -1.0, 1.0);
        let gamma = self.random(c, 0.5, 1.5);
        let beta = self.random(c, -0.5, 0.5);
        let mean = self.random(c, -0.5, 0.5);
        let var = self.random(c, 0.5, 1.5);
        let (y, stat) = (Self::nans(d.len()), Self::nans(c));
        let affine = Affine { gamma: &gamma[..], beta: &beta[..] };
        let running = Running { mean: &mean[..], var: &var[..] };
        let train_state = vec![mean.clone(), var.clone(), y.clone(), stat.clone(), stat.clone()];
        self.compare("batch_norm_train", &case, tol, train_state, &|k, o| {
            let [m, v, y, sm, si] = o else { unreachable!("five buffers") };
            let (running_mean, running_var) = (&mut m[..], &mut v[..]);
            let (saved_mean, saved_invstd) = (&mut sm[..], &mut si[..]);
            let stats = TrainStats { running_mean, running_var, saved_mean, saved_invstd };
            k.batch_norm_train(&x, affine, stats, y, d, cfg)
        });
        let in_place = vec![x.clone(), mean.clone(), var.clone(), stat.clone(), stat.clone()];
        self.compare("batch_norm_train_in_place", &case, tol, in_place, &|k, o| {
            let [x, m, v, sm, si] = o else { unreachable!("five buffers") };
            let (running_mean, running_var) = (&mut m[..], &mut v[..]);
            let (saved_mean, saved_invstd) = (&mut sm[..], &mut si[..]);
            let stats = TrainStats { running_mean, running_var, saved_mean, saved_invstd };
            k.batch_norm_train_in_place(x, affine, stats, d, cfg)
        });
        self.compare("batch_norm_eval", &case, EXACT, vec![y.clone()], &|k, o| {
            k.batch_norm_eval(&x, affine, running, &mut o[0], d, cfg)
        });
        self.compare("batch_norm_eval_in_place", &case, EXACT, vec![x.clone()], &|k, o| {
            k.batch_norm_eval_in_place(&mut o[0], affine, running, d, cfg)
        });
        // The saved statistics of a training pass, from the reference.
        let (mut m, mut v, mut out) = (mean.clone(), var.clone(), y.clone());
        let (mut saved_mean, mut saved_invstd) = (stat.clone(), stat.clone());
        let stats = TrainStats {
            running_mean: &mut m[..],
            running_var: &mut v[..],
            saved_mean: &mut saved_mean[..],
            saved_invstd: &mut saved_invstd[..],
        };
        Reference.batch_norm_train(&x, affine, stats, &mut out, d, cfg);
        let saved = Saved { mean: &saved_mean[..], invstd: &saved_invstd[..] };
        self.compare("batch_norm_apply", &case, EXACT, vec![y.clone()], &|k, o| {
            k.batch_norm_apply(&x, affine, saved, &mut o[0], d)
        });
        self.compare("batch_norm_grad_input", &case, tol, vec![Self::nans(d.len())], &|k, o| {
            k.batch_norm_grad_input(&dy, &x, &gamma, saved, &mut o[0], d)
        });
        self.compare(
            "batch_norm_grad_params",
            &case,
            tol,
            vec![stat.clone(), stat.clone()],
            &|k, o| {
                let [dgamma, dbeta] = o else { unreachable!("two buffers") };
                k.batch_norm_grad_params(&dy, &x, saved, dgamma, dbeta, d)
            },
        );
        // Rectifiers after the batch norm: ReLU, and ReLU6 with a gamma that takes many
        // pre-activations past 6.
        let wide_gamma: Vec<f32> = gamma.iter().map(|g| 6.0 * g).collect();
        let x_half: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        for (relu6, gamma) in [(false, &gamma), (true, &wide_gamma)] {
            let p = Affine { gamma: &gamma[..], beta: &beta[..] };
            let rectifier = Rectifier { relu6 };
            let outputs = vec![dy.clone(), stat.clone(), stat.clone()];
            let case = format!("{d:?}, {rectifier:?}");
            self.compare(
                "batch_norm_grad_params_rectified",
                &case,
                tol,
                outputs.clone(),
                &|k, o| {
                    let [dy, dgamma, dbeta] = o else { unreachable!("three buffers") };
                    let grads = GradsMut { dgamma: &mut dgamma[..], dbeta: &mut dbeta[..] };
                    k.batch_norm_grad_params_rectified(&x, p, saved, dy, grads, d, rectifier)
                },
            );
            // In f16 storage: `x` read as f16 (f16 in, f32 out), the gate worked out from
            // pre-activations rounded to f16.
            let name = "batch_norm_grad_params_rectified_f16";
            self.compare(name, &case, tol, outputs, &|k, o| {
                let [dy, dgamma, dbeta] = o else { unreachable!("three buffers") };
                let grads = GradsMut { dgamma: &mut dgamma[..], dbeta: &mut dbeta[..] };
                k.batch_norm_grad_params_rectified_f16(&x_half, p, saved, dy, grads, d, rectifier)
            });
        }
        // The sums of the parameter gradients, from the reference, for the input gradient.
        let (mut dgamma, mut dbeta) = (stat.clone(), stat.clone());
        Reference.batch_norm_grad_params(&dy, &x, saved, &mut dgamma, &mut dbeta, d);
        let sums = GradSums { dgamma: &dgamma[..], dbeta: &dbeta[..] };
        let nans = vec![Self::nans(d.len())];
        self.compare("batch_norm_grad_input_from_sums", &case, tol, nans.clone(), &|k, o| {
            k.batch_norm_grad_input_from_sums(&dy, &x, &gamma, saved, sums, &mut o[0], d)
        });
        // In f16 storage: `x` read as f16 (f16 in), `dx` rounded to f16 (f32 out).
        self.compare("batch_norm_grad_input_from_sums_f16", &case, tol, nans, &|k, o| {
            k.batch_norm_grad_input_from_sums_f16(&dy, &x_half, &gamma, saved, sums, &mut o[0], d)
        });
        let running_outputs = vec![y.clone(), stat.clone(), stat.clone()];
        self.compare("batch_norm_running", &case, EXACT, running_outputs, &|k, o| {
            let [y, mean, invstd] = o else { unreachable!("three buffers") };
            let saved = SavedMut { mean: &mut mean[..], invstd: &mut invstd[..] };
            k.batch_norm_running(&x, affine, running, y, saved, d, cfg)
        });
        self.compare("batch_norm_grad_input_running", &case, EXACT, vec![y], &|k, o| {
            k.batch_norm_grad_input_running(&dy, &gamma, saved, &mut o[0], d)
        });
    }

    fn dropout(&mut self) {
        let x = self.random(500, -1.0, 1.0);
        for (p, step) in [(0.3, 5), (0.0, 1), (0.9, 77)] {
            let cfg = DropoutConfig { p, seed: 9 };
            let case = format!("{cfg:?}, step {step}");
            let out = Self::nans(x.len());
            self.compare("dropout", &case, EXACT, vec![out.clone()], &|k, o| {
                k.dropout(&x, &mut o[0], cfg, step)
            });
            self.compare("dropout_in_place", &case, EXACT, vec![x.clone()], &|k, o| {
                k.dropout_in_place(&mut o[0], cfg, step)
            });
            self.compare("dropout_grad", &case, EXACT, vec![out], &|k, o| {
                k.dropout_grad(&x, &mut o[0], cfg, step)
            });
        }
    }

    /// Layer normalisation of `d.rows` rows and its input and parameter gradients.
    fn layer_norm(&mut self, d: RowDims) {
        let tol = self.reduction;
        let case = format!("{d:?}");
        let n = d.rows * d.cols;
        let x = self.random(n, -3.0, 3.0);
        let dy = self.random(n, -1.0, 1.0);
        let gamma = self.random(d.cols, 0.5, 1.5);
        let beta = self.random(d.cols, -0.5, 0.5);
        let eps = 1e-5;
        let out = Self::nans(n);
        self.compare("layer_norm", &case, tol, vec![out.clone()], &|k, o| {
            k.layer_norm(&x, &gamma, &beta, &mut o[0], d, eps)
        });
        self.compare("layer_norm_grad_input", &case, tol, vec![out.clone()], &|k, o| {
            k.layer_norm_grad_input(&dy, &x, &gamma, &mut o[0], d, eps)
        });
        let params = vec![Self::nans(d.cols), Self::nans(d.cols)];
        self.compare("layer_norm_grad_params", &case, tol, params, &|k, o| {
            let (dgamma, dbeta) = o.split_at_mut(1);
            k.layer_norm_grad_params(&dy, &x, &mut dgamma[0], &mut dbeta[0], d, eps)
        });
    }

    fn softmax_and_losses(&mut self) {
        let tol = self.reduction;
        let d = RowDims { rows: 5, cols: 7 };
        let case = format!("{d:?}");
        let x = self.random(d.rows * d.cols, -4.0, 4.0);
        let dy = self.random(x.len(), -1.0, 1.0);
        let mut y = Self::nans(x.len());
        Reference.softmax(&x, &mut y, d);
        let out = Self::nans(x.len());
        self.compare("softmax", &case, tol, vec![out.clone()], &|k, o| k.softmax(&x, &mut o[0], d));
        self.compare("softmax_grad", &case, tol, vec![out.clone()], &|k, o| {
            k.softmax_grad(&y, &dy, &mut o[0], d)
        });
        let labels = [0, 6, 3, 3, 1];
        let dloss = [0.7];
        self.compare("cross_entropy", &case, tol, vec![Self::nans(1)], &|k, o| {
            k.cross_entropy(&x, &labels, &mut o[0], d).expect("labels in range")
        });
        self.compare("cross_entropy_grad", &case, tol, vec![out.clone()], &|k, o| {
            k.cross_entropy_grad(&x, &labels, &dloss, &mut o[0], d).expect("labels in range")
        });
        for bad in [[0, 7, 3, 3, 1], [0, 1, -1, 3, 1]] {
            let mut loss = [0.0];
            let mut grad = out.clone();
            assert_eq!(
                self.backend.cross_entropy(&x, &bad, &mut loss, d),
                Reference.cross_entropy(&x, &bad, &mut [0.0], d),
                "{}: cross_entropy with labels {bad:?}",
                self.name
            );
            assert_eq!(
                self.backend.cross_entropy_grad(&x, &bad, &dloss, &mut grad, d),
                Reference.cross_entropy_grad(&x, &bad, &dloss, &mut out.clone(), d),
                "{}: cross_entropy_grad with labels {bad:?}",
                self.name
            );
        }
        let target = self.random(x.len(), -4.0, 4.0);
        self.compare("mse", &case, tol, vec![Self::nans(1)], &|k, o| k.mse(&x, &target, &mut o[0]));
        self.compare("mse_grad", &case, EXACT, vec![out], &|k, o| {
            k.mse_grad(&x, &target, &dloss, &mut o[0])
        });
    }

    fn vector_ops(&mut self) {
        let case = "257 values";
        let a = self.random(257, -1.0, 1.0);
        let b = self.random(a.len(), -1.0, 1.0);
        let out = Self::nans(a.len());
        self.compare("add", case, EXACT, vec![out.clone()], &|k, o| k.add(&a, &b, &mut o[0]));
        self.compare("copy", case, EXACT, vec![out.clone()], &|k, o| k.copy(&a, &mut o[0]));
        self.compare("fill", case, EXACT, vec![out], &|k, o| k.fill(&mut o[0], -0.25));
        self.compare("accumulate", case, EXACT, vec![a.clone()], &|k, o| {
            k.accumulate(&mut o[0], &b, 0.5)
        });
        self.compare("sum_squares", case, self.reduction, vec![vec![1.5]], &|k, o| {
            k.sum_squares(&a, &mut o[0])
        });
        self.compare("mul", case, EXACT, vec![Self::nans(a.len())], &|k, o| {
            k.mul(&a, &b, &mut o[0], ChannelDims { outer: 1, channels: 1, inner: 257 }, false)
        });
        // Squeeze-excitation's shape: one factor per channel of [3, 5, 7, 2].
        let d = ChannelDims { outer: 3, channels: 5, inner: 14 };
        let (full, factor) = (self.random(d.len(), -1.0, 1.0), self.random(15, -1.0, 1.0));
        let case = "[3, 5, 7, 2] by [3, 5]";
        self.compare("mul broadcast", case, EXACT, vec![Self::nans(d.len())], &|k, o| {
            k.mul(&full, &factor, &mut o[0], d, true)
        });
        let dy = self.random(d.len(), -1.0, 1.0);
        self.compare("mul_grad_factor", case, self.reduction, vec![Self::nans(15)], &|k, o| {
            k.mul_grad_factor(&dy, &full, &mut o[0], d)
        });
    }

    fn optimizers(&mut self) {
        let param = self.random(129, -1.0, 1.0);
        let grad = self.random(param.len(), -1.0, 1.0);
        let state = self.random(param.len(), -0.1, 0.1);
        let second = self.random(param.len(), 0.0, 0.01);
        for (momentum, nesterov) in [(0.0, false), (0.9, false), (0.9, true)] {
            let cfg = SgdConfig { momentum, weight_decay: 1e-3, nesterov };
            let case = format!("{cfg:?}");
            let buffers = vec![param.clone(), state.clone()];
            self.compare("sgd_update", &case, EXACT, buffers, &|k, o| {
                let [p, m] = o else { unreachable!("two buffers") };
                let m = (momentum > 0.0).then_some(&mut m[..]);
                let u = ParamUpdate {
                    param: &mut p[..],
                    grad: &grad[..],
                    clip_scale: Some(&[0.5][..]),
                    learning_rate: 0.05,
                };
                k.sgd_update(u, m, cfg)
            });
        }
        for step in [1, 3] {
            let cfg = AdamWConfig::default();
            let case = format!("{cfg:?}, step {step}");
            let buffers = vec![param.clone(), state.clone(), second.clone()];
            self.compare("adamw_update", &case, EXACT, buffers, &|k, o| {
                let [p, m, v] = o else { unreachable!("three buffers") };
                let u = ParamUpdate {
                    param: &mut p[..],
                    grad: &grad[..],
                    clip_scale: Some(&[1.0][..]),
                    learning_rate: 1e-3,
                };
                k.adamw_update(u, m, v, step, cfg)
            });
        }
    }
}
