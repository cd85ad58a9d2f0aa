//! End-to-end check of a compiled training step against an independent f64 model.
//!
//! The model is `conv2d(3x3, pad 1, bias) → batch_norm2d (training mode) → relu →
//! max_pool2d(2x2) → flatten → linear → cross_entropy` over `[4, 2, 6, 6]` inputs with 3
//! conv channels and 3 classes (`sprout_tests::models::small_cnn`), started from explicit
//! pseudo-random weights and trained on a different fixed random batch every step.
//!
//! This file holds a second implementation of the same training step in f64, written by
//! hand and sharing no code with sprout's kernels: forward pass, backward pass (conv,
//! training-mode batch norm, relu, max-pool, linear, softmax cross-entropy), batch-norm
//! running statistics (momentum 0.1, unbiased variance for the running variance), PyTorch
//! SGD with momentum and weight decay, gradient accumulation, global-norm clipping and
//! PyTorch AdamW.
//!
//! Tolerance: every loss, every trained weight and the batch-norm running mean and variance
//! must satisfy `|sprout − f64| <= 1e-5 + 1e-4 · |f64|`, element by element. Each test also
//! checks that the weights moved by far more than that, so agreement is not an accident.

use sprout_core::hyperparams::{AdamWConfig, SgdConfig};
use sprout_core::{
    compile_training_step, Executor, Optimizer, Reference, StepOutcome, TrainConfig,
};
use sprout_tests::models::{
    random_batch, small_cnn, SmallCnnWeights, BATCH, CLASSES, CONV_CHANNELS, FEATURES, IMAGE_LEN,
    IN_CHANNELS, KERNEL, POOLED, SIZE,
};

/// Absolute part of the tolerance.
const ATOL: f64 = 1e-5;
/// Relative part of the tolerance.
const RTOL: f64 = 1e-4;

/// Batch-norm epsilon and momentum (`BatchNormConfig::default()`).
const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

/// The trainable tensors, in the order of `SmallCnn::parameters`.
const NAMES: [&str; 6] =
    ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"];
const CONV_W: usize = 0;
const CONV_B: usize = 1;
const GAMMA: usize = 2;
const BETA: usize = 3;
const FC_W: usize = 4;
const FC_B: usize = 5;

type Tensors = [Vec<f64>; 6];

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn zeros_like(t: &Tensors) -> Tensors {
    core::array::from_fn(|i| vec![0.0; t[i].len()])
}

/// Index of `[n, c, h, w]` in an NCHW tensor with `channels` channels of `side x side`.
fn nchw(n: usize, c: usize, h: usize, w: usize, channels: usize, side: usize) -> usize {
    ((n * channels + c) * side + h) * side + w
}

/// The input coordinate a 3x3, padding-1 kernel tap reads, or `None` in the padding.
fn tap(out: usize, k: usize) -> Option<usize> {
    (out + k).checked_sub(1).filter(|&i| i < SIZE)
}

/// The f64 model: weights and batch-norm running statistics.
#[derive(Clone)]
struct Model64 {
    params: Tensors,
    running_mean: Vec<f64>,
    running_var: Vec<f64>,
}

impl Model64 {
    fn new(w: &SmallCnnWeights) -> Self {
        Self {
            params: [
                widen(&w.conv_weight),
                widen(&w.conv_bias),
                widen(&w.bn_weight),
                widen(&w.bn_bias),
                widen(&w.fc_weight),
                widen(&w.fc_bias),
            ],
            running_mean: widen(&w.running_mean),
            running_var: widen(&w.running_var),
        }
    }

    /// One training-mode forward and backward pass: returns the mean cross-entropy and the
    /// gradient of every parameter, and moves the running statistics.
    fn loss_and_grads(&mut self, image: &[f32], labels: &[i32]) -> (f64, Tensors) {
        let x = widen(image);
        let p = &self.params;
        let (c_in, c_out, k) = (IN_CHANNELS, CONV_CHANNELS, KERNEL);
        let conv_len = BATCH * c_out * SIZE * SIZE;
        let at = |n, c, h, w| nchw(n, c, h, w, c_out, SIZE);

        // conv2d, 3x3, stride 1, padding 1, with bias.
        let mut conv = vec![0.0; conv_len];
        for n in 0..BATCH {
            for o in 0..c_out {
                for i in 0..SIZE {
                    for j in 0..SIZE {
                        let mut s = p[CONV_B][o];
                        for c in 0..c_in {
                            for ky in 0..k {
                                for kx in 0..k {
                                    if let (Some(ii), Some(jj)) = (tap(i, ky), tap(j, kx)) {
                                        let wv = p[CONV_W][((o * c_in + c) * k + ky) * k + kx];
                                        s += wv * x[nchw(n, c, ii, jj, c_in, SIZE)];
                                    }
                                }
                            }
                        }
                        conv[at(n, o, i, j)] = s;
                    }
                }
            }
        }

        // Batch norm with batch statistics (biased variance), per channel.
        let m = (BATCH * SIZE * SIZE) as f64;
        let channel = |c: usize| {
            (0..BATCH)
                .flat_map(move |n| (0..SIZE * SIZE).map(move |s| (n * c_out + c) * SIZE * SIZE + s))
        };
        let mut xhat = vec![0.0; conv_len];
        let mut bn = vec![0.0; conv_len];
        let mut invstd = vec![0.0; c_out];
        for c in 0..c_out {
            let mean = channel(c).map(|i| conv[i]).sum::<f64>() / m;
            let ssd = channel(c).map(|i| (conv[i] - mean).powi(2)).sum::<f64>();
            invstd[c] = 1.0 / (ssd / m + BN_EPS).sqrt();
            for i in channel(c) {
                xhat[i] = (conv[i] - mean) * invstd[c];
                bn[i] = p[GAMMA][c] * xhat[i] + p[BETA][c];
            }
            self.running_mean[c] = (1.0 - BN_MOMENTUM) * self.running_mean[c] + BN_MOMENTUM * mean;
            self.running_var[c] =
                (1.0 - BN_MOMENTUM) * self.running_var[c] + BN_MOMENTUM * ssd / (m - 1.0);
        }

        // relu, then 2x2 max-pool remembering where each maximum came from.
        let relu: Vec<f64> = bn.iter().map(|&v| v.max(0.0)).collect();
        let mut pooled = vec![0.0; BATCH * FEATURES];
        let mut argmax = vec![0usize; BATCH * FEATURES];
        for n in 0..BATCH {
            for c in 0..c_out {
                for i in 0..POOLED {
                    for j in 0..POOLED {
                        let mut best = at(n, c, 2 * i, 2 * j);
                        for (dy, dx) in [(0, 1), (1, 0), (1, 1)] {
                            let cand = at(n, c, 2 * i + dy, 2 * j + dx);
                            if relu[cand] > relu[best] {
                                best = cand;
                            }
                        }
                        let out = nchw(n, c, i, j, c_out, POOLED);
                        pooled[out] = relu[best];
                        argmax[out] = best;
                    }
                }
            }
        }

        // Flatten is the identity on NCHW memory; linear `z = f · Wᵀ + b`.
        let f = &pooled;
        let mut z = [0.0; BATCH * CLASSES];
        for n in 0..BATCH {
            for cls in 0..CLASSES {
                let row = &p[FC_W][cls * FEATURES..(cls + 1) * FEATURES];
                z[n * CLASSES + cls] = p[FC_B][cls]
                    + row
                        .iter()
                        .zip(&f[n * FEATURES..(n + 1) * FEATURES])
                        .map(|(a, b)| a * b)
                        .sum::<f64>();
            }
        }

        // Softmax cross-entropy, mean over the batch, and its gradient.
        let mut loss = 0.0;
        let mut dz = [0.0; BATCH * CLASSES];
        for n in 0..BATCH {
            let row = &z[n * CLASSES..(n + 1) * CLASSES];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            let label = labels[n] as usize;
            loss += max + sum.ln() - row[label];
            for cls in 0..CLASSES {
                let softmax = (row[cls] - max).exp() / sum;
                let onehot = if cls == label { 1.0 } else { 0.0 };
                dz[n * CLASSES + cls] = (softmax - onehot) / BATCH as f64;
            }
        }
        loss /= BATCH as f64;

        let mut grads = zeros_like(&self.params);
        // Linear: dW = dzᵀ · f, db = Σ dz, df = dz · W.
        let mut df = vec![0.0; BATCH * FEATURES];
        for n in 0..BATCH {
            for cls in 0..CLASSES {
                let d = dz[n * CLASSES + cls];
                grads[FC_B][cls] += d;
                for q in 0..FEATURES {
                    grads[FC_W][cls * FEATURES + q] += d * f[n * FEATURES + q];
                    df[n * FEATURES + q] += d * p[FC_W][cls * FEATURES + q];
                }
            }
        }
        // Max-pool routes each gradient to its window's maximum; relu passes it where the
        // output is positive.
        let mut dbn = vec![0.0; conv_len];
        for (out, &src) in argmax.iter().enumerate() {
            dbn[src] += df[out];
        }
        for (d, &r) in dbn.iter_mut().zip(&relu) {
            if r <= 0.0 {
                *d = 0.0;
            }
        }
        // Batch norm (training mode): dgamma = Σ dy·xhat, dbeta = Σ dy,
        // dx = gamma·invstd/m · (m·dy − Σ dy − xhat · Σ dy·xhat).
        let mut dconv = vec![0.0; conv_len];
        for c in 0..c_out {
            let sum_dy: f64 = channel(c).map(|i| dbn[i]).sum();
            let sum_dy_xhat: f64 = channel(c).map(|i| dbn[i] * xhat[i]).sum();
            grads[GAMMA][c] = sum_dy_xhat;
            grads[BETA][c] = sum_dy;
            let factor = p[GAMMA][c] * invstd[c] / m;
            for i in channel(c) {
                dconv[i] = factor * (m * dbn[i] - sum_dy - xhat[i] * sum_dy_xhat);
            }
        }
        // Convolution: dW[o, c, ky, kx] = Σ dy[n, o, i, j] · x[n, c, i+ky−1, j+kx−1],
        // db[o] = Σ dy[n, o, ·, ·].
        for n in 0..BATCH {
            for o in 0..c_out {
                for i in 0..SIZE {
                    for j in 0..SIZE {
                        let d = dconv[at(n, o, i, j)];
                        grads[CONV_B][o] += d;
                        for c in 0..c_in {
                            for ky in 0..k {
                                for kx in 0..k {
                                    if let (Some(ii), Some(jj)) = (tap(i, ky), tap(j, kx)) {
                                        grads[CONV_W][((o * c_in + c) * k + ky) * k + kx] +=
                                            d * x[nchw(n, c, ii, jj, c_in, SIZE)];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        (loss, grads)
    }
}

/// PyTorch SGD (no dampening, no Nesterov): `g += wd·p; buf = μ·buf + g; p −= lr·buf`.
fn sgd64(
    model: &mut Model64,
    grads: &Tensors,
    bufs: &mut Tensors,
    lr: f64,
    cfg: SgdConfig,
    trained: &[usize],
) {
    let (mu, wd) = (cfg.momentum as f64, cfg.weight_decay as f64);
    for &t in trained {
        for ((p, &g), b) in model.params[t].iter_mut().zip(&grads[t]).zip(&mut bufs[t]) {
            let g = g + wd * *p;
            *b = mu * *b + g;
            *p -= lr * *b;
        }
    }
}

/// PyTorch's `clip_grad_norm_` coefficient over the tensors in `trained`.
fn clip_coefficient64(grads: &Tensors, trained: &[usize], max_norm: f64) -> f64 {
    let norm = trained.iter().flat_map(|&t| &grads[t]).map(|g| g * g).sum::<f64>().sqrt();
    (max_norm / (norm + 1e-6)).min(1.0)
}

/// PyTorch AdamW, update number `step` (1-based), gradients scaled by `coef` first.
#[allow(clippy::too_many_arguments)]
fn adamw64(
    model: &mut Model64,
    grads: &Tensors,
    coef: f64,
    m: &mut Tensors,
    v: &mut Tensors,
    lr: f64,
    step: i32,
    cfg: AdamWConfig,
    trained: &[usize],
) {
    let (b1, b2, eps, wd) =
        (cfg.beta1 as f64, cfg.beta2 as f64, cfg.eps as f64, cfg.weight_decay as f64);
    let (bc1, bc2) = (1.0 - b1.powi(step), 1.0 - b2.powi(step));
    for &t in trained {
        for i in 0..model.params[t].len() {
            let g = grads[t][i] * coef;
            let p = &mut model.params[t][i];
            *p *= 1.0 - lr * wd;
            m[t][i] = b1 * m[t][i] + (1.0 - b1) * g;
            v[t][i] = b2 * v[t][i] + (1.0 - b2) * g * g;
            *p -= lr * (m[t][i] / bc1) / ((v[t][i] / bc2).sqrt() + eps);
        }
    }
}

fn assert_close(what: &str, actual: &[f32], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &b)) in actual.iter().zip(expected).enumerate() {
        let diff = (a as f64 - b).abs();
        assert!(
            diff <= ATOL + RTOL * b.abs(),
            "{what}[{i}]: sprout {a} vs f64 {b} (|diff| = {diff:e}, allowed {:e})",
            ATOL + RTOL * b.abs()
        );
    }
}

fn max_change(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
}

/// What sprout produced: the loss of every micro-batch, every `train_step` outcome, and
/// the final value of each trained tensor and running statistic (by name).
struct SproutRun {
    losses: Vec<f32>,
    outcomes: Vec<StepOutcome>,
    finals: Vec<(String, Vec<f32>)>,
}

impl SproutRun {
    fn get(&self, name: &str) -> &[f32] {
        &self.finals.iter().find(|(n, _)| n == name).expect("read back").1
    }
}

/// Compiles the training step of `small_cnn(weights)` with `trained` (indices into
/// [`NAMES`]) trainable and runs it once per batch with the given learning rates.
fn run_sprout(
    weights: &SmallCnnWeights,
    trained: &[usize],
    cfg: &TrainConfig,
    batches: &[(Vec<f32>, Vec<i32>)],
    lrs: &[f32],
) -> SproutRun {
    let model = small_cnn(weights).expect("the model records");
    let trainable: Vec<_> = trained.iter().map(|&t| model.parameters[t]).collect();
    let training =
        compile_training_step(&model.graph, model.loss, &trainable, cfg).expect("compiles");
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference).expect("the plan is valid");
    let operand = |name: &str| plan.operand(name).expect("bound");
    let (image, label, loss) = (operand("image"), operand("label"), operand("loss"));
    let mut run = SproutRun { losses: Vec::new(), outcomes: Vec::new(), finals: Vec::new() };
    for ((x, y), &lr) in batches.iter().zip(lrs) {
        let mut regions = memory.regions();
        regions.write(&image, x).expect("image fits");
        regions.write(&label, y).expect("labels fit");
        run.outcomes.push(exec.train_step(&mut regions, lr).expect("the step runs"));
        run.losses.push(regions.read::<f32>(&loss).expect("loss")[0]);
    }
    let regions = memory.regions();
    let read_back = trained.iter().map(|&t| NAMES[t]).chain(["bn.running_mean", "bn.running_var"]);
    for name in read_back {
        let values = regions.read::<f32>(&operand(name)).expect("readable").to_vec();
        run.finals.push((name.to_string(), values));
    }
    run
}

fn batches(count: usize) -> Vec<(Vec<f32>, Vec<i32>)> {
    (0..count).map(|k| random_batch(1000 + k as u64, IMAGE_LEN, BATCH, CLASSES)).collect()
}

fn check_finals(run: &SproutRun, model: &Model64, trained: &[usize]) {
    for &t in trained {
        assert_close(NAMES[t], run.get(NAMES[t]), &model.params[t]);
    }
    assert_close("bn.running_mean", run.get("bn.running_mean"), &model.running_mean);
    assert_close("bn.running_var", run.get("bn.running_var"), &model.running_var);
}

#[test]
fn sgd_momentum_weight_decay_five_steps_match_f64() {
    let weights = SmallCnnWeights::random(2024);
    let sgd = SgdConfig { momentum: 0.9, weight_decay: 1e-3, nesterov: false };
    let cfg = TrainConfig {
        optimizer: Optimizer::Sgd(sgd),
        clip_grad_norm: None,
        accumulation: 1,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let data = batches(5);
    let lrs = [0.1, 0.1, 0.05, 0.05, 0.02];
    let trained = [CONV_W, CONV_B, GAMMA, BETA, FC_W, FC_B];
    let run = run_sprout(&weights, &trained, &cfg, &data, &lrs);

    let initial = Model64::new(&weights);
    let mut model = initial.clone();
    let mut bufs = zeros_like(&model.params);
    for (step, ((x, y), &lr)) in data.iter().zip(&lrs).enumerate() {
        let (loss, grads) = model.loss_and_grads(x, y);
        assert_close(&format!("loss of step {step}"), &[run.losses[step]], &[loss]);
        sgd64(&mut model, &grads, &mut bufs, lr as f64, sgd, &trained);
    }
    let updates: Vec<_> = (1..=5).map(|update| StepOutcome::Updated { update }).collect();
    assert_eq!(run.outcomes, updates);
    check_finals(&run, &model, &trained);

    // The comparison means something: everything but the conv bias (whose gradient is zero
    // in exact arithmetic, batch norm removing any per-channel offset) moved well beyond
    // the tolerance.
    for t in [CONV_W, GAMMA, BETA, FC_W, FC_B] {
        let moved = max_change(&model.params[t], &initial.params[t]);
        assert!(moved > 1e-2, "{} moved only {moved:e}", NAMES[t]);
    }
    assert!(max_change(&model.running_var, &initial.running_var) > 1e-2);
}

#[test]
fn adamw_accumulation_and_clipping_match_f64() {
    let weights = SmallCnnWeights::random(77);
    let adamw = AdamWConfig::default();
    let max_norm = 0.5;
    let cfg = TrainConfig {
        optimizer: Optimizer::AdamW(adamw),
        clip_grad_norm: Some(max_norm),
        accumulation: 2,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let data = batches(4);
    let lr = 0.01;
    // The conv bias stays frozen: batch norm makes its gradient zero in exact arithmetic,
    // and Adam would turn f32 rounding noise into ±lr steps in either direction.
    let trained = [CONV_W, GAMMA, BETA, FC_W, FC_B];
    let run = run_sprout(&weights, &trained, &cfg, &data, &[lr; 4]);

    assert_eq!(
        run.outcomes,
        [
            StepOutcome::Accumulated { remaining: 1 },
            StepOutcome::Updated { update: 1 },
            StepOutcome::Accumulated { remaining: 1 },
            StepOutcome::Updated { update: 2 },
        ]
    );

    // `clip`: whether the f64 model clips, so the test can show that clipping matters.
    let train64 = |clip: bool| {
        let mut model = Model64::new(&weights);
        let (mut m, mut v) = (zeros_like(&model.params), zeros_like(&model.params));
        let mut losses = Vec::new();
        let mut coefficients = Vec::new();
        for (update, pair) in data.chunks(2).enumerate() {
            let mut sum = zeros_like(&model.params);
            for (x, y) in pair {
                let (loss, grads) = model.loss_and_grads(x, y);
                losses.push(loss);
                for (s, g) in sum.iter_mut().zip(&grads) {
                    for (s, g) in s.iter_mut().zip(g) {
                        *s += g / 2.0;
                    }
                }
            }
            let coef = if clip { clip_coefficient64(&sum, &trained, max_norm as f64) } else { 1.0 };
            coefficients.push(coef);
            let step = update as i32 + 1;
            adamw64(&mut model, &sum, coef, &mut m, &mut v, lr as f64, step, adamw, &trained);
        }
        (model, losses, coefficients)
    };
    let (model, losses, coefficients) = train64(true);
    for (i, (&a, &b)) in run.losses.iter().zip(&losses).enumerate() {
        assert_close(&format!("loss of micro-batch {i}"), &[a], &[b]);
    }
    check_finals(&run, &model, &trained);

    // Clipping is active at both updates with different coefficients, and skipping it
    // would change the result by far more than the tolerance.
    assert!(coefficients.iter().all(|&c| c < 1.0), "clipping inactive: {coefficients:?}");
    let (unclipped, _, _) = train64(false);
    let effect = trained
        .iter()
        .map(|&t| max_change(&unclipped.params[t], &model.params[t]))
        .fold(0.0, f64::max);
    assert!(effect > 10.0 * ATOL, "clipping changes the weights by only {effect:e}");
    let initial = Model64::new(&weights);
    for &t in &trained {
        let moved = max_change(&model.params[t], &initial.params[t]);
        assert!(moved > 1e-2, "{} moved only {moved:e}", NAMES[t]);
    }
}

/// AdamW with clipping at every update cannot see whether micro-batch gradients are summed
/// or averaged (both the clip and Adam's normalisation remove a common scale), so SGD,
/// which is scale-sensitive, checks the averaging.
#[test]
fn sgd_accumulation_averages_micro_batches() {
    let weights = SmallCnnWeights::random(5);
    let sgd = SgdConfig { momentum: 0.9, weight_decay: 0.0, nesterov: false };
    let cfg = TrainConfig {
        optimizer: Optimizer::Sgd(sgd),
        clip_grad_norm: None,
        accumulation: 3,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let data = batches(6);
    let lr = 0.1;
    let trained = [CONV_W, GAMMA, BETA, FC_W, FC_B];
    let run = run_sprout(&weights, &trained, &cfg, &data, &[lr; 6]);
    let accumulated = |remaining| StepOutcome::Accumulated { remaining };
    assert_eq!(
        run.outcomes,
        [
            accumulated(2),
            accumulated(1),
            StepOutcome::Updated { update: 1 },
            accumulated(2),
            accumulated(1),
            StepOutcome::Updated { update: 2 },
        ]
    );

    let mut model = Model64::new(&weights);
    let mut bufs = zeros_like(&model.params);
    for (update, group) in data.chunks(3).enumerate() {
        let mut mean = zeros_like(&model.params);
        for (i, (x, y)) in group.iter().enumerate() {
            let (loss, grads) = model.loss_and_grads(x, y);
            let micro_batch = 3 * update + i;
            assert_close(
                &format!("loss of micro-batch {micro_batch}"),
                &[run.losses[micro_batch]],
                &[loss],
            );
            for (s, g) in mean.iter_mut().zip(&grads) {
                for (s, g) in s.iter_mut().zip(g) {
                    *s += g / 3.0;
                }
            }
        }
        sgd64(&mut model, &mean, &mut bufs, lr as f64, sgd, &trained);
    }
    check_finals(&run, &model, &trained);
}
