//! Shared by the ONNX tests: seeded values, running a sprout graph, and small f64
//! forward passes written independently of sprout's kernels.
#![allow(dead_code)]

use sprout_core::{compile_inference, Executor, Graph, Reference, TensorId};

/// Seeded uniform values in `[lo, hi)` (a 64-bit LCG, high bits).
pub fn values(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            lo + (hi - lo) * u
        })
        .collect()
}

/// Runs the inference plan of `graph` on `x` fed to `input` and returns `output`.
pub fn run(graph: &Graph, input: TensorId, output: TensorId, x: &[f32]) -> Vec<f32> {
    let plan = compile_inference(graph, &[output]).expect("compiles");
    let mut memory = plan.initial_memory(graph);
    let mut exec = Executor::new(plan.view(), Reference).expect("executor");
    let mut regions = memory.regions();
    regions.write(&plan.binding_of(input).expect("input bound").operand, x).expect("write");
    exec.run(&mut regions).expect("runs");
    regions
        .read::<f32>(&plan.binding_of(output).expect("output bound").operand)
        .expect("read")
        .to_vec()
}

pub fn assert_close(actual: &[f32], expected: &[f64], tolerance: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (*a as f64 - e).abs() <= tolerance,
            "element {i}: sprout {a}, expected {e} (tolerance {tolerance})"
        );
    }
}

pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// NCHW convolution with OIHW weights.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    wt: &[f64],
    [o, cg, kh, kw]: [usize; 4],
    bias: Option<&[f64]>,
    stride: usize,
    pad: usize,
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let oh = (h + 2 * pad - kh) / stride + 1;
    let ow = (w + 2 * pad - kw) / stride + 1;
    let og = o / groups;
    let mut y = vec![0.0; n * o * oh * ow];
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = bias.map_or(0.0, |bb| bb[oc]);
                    for ci in 0..cg {
                        let ic = g * cg + ci;
                        for u in 0..kh {
                            for v in 0..kw {
                                let (yy, xx) = (
                                    (i * stride + u) as isize - pad as isize,
                                    (j * stride + v) as isize - pad as isize,
                                );
                                if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
                                    continue;
                                }
                                acc += x[((b * c + ic) * h + yy as usize) * w + xx as usize]
                                    * wt[((oc * cg + ci) * kh + u) * kw + v];
                            }
                        }
                    }
                    y[((b * o + oc) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    (y, [n, o, oh, ow])
}

pub fn batch_norm(x: &mut [f64], [n, c, h, w]: [usize; 4], p: [&[f64]; 4], eps: f64) {
    let [gamma, beta, mean, var] = p;
    for b in 0..n {
        for ch in 0..c {
            let s = gamma[ch] / (var[ch] + eps).sqrt();
            for v in &mut x[(b * c + ch) * h * w..(b * c + ch + 1) * h * w] {
                *v = (*v - mean[ch]) * s + beta[ch];
            }
        }
    }
}

/// Max (`avg == None`) or average pooling (`Some(count_include_pad)`).
pub fn pool(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    k: usize,
    stride: usize,
    pad: usize,
    avg: Option<bool>,
) -> (Vec<f64>, [usize; 4]) {
    let oh = (h + 2 * pad - k) / stride + 1;
    let ow = (w + 2 * pad - k) / stride + 1;
    let mut y = vec![0.0; n * c * oh * ow];
    for p in 0..n * c {
        for i in 0..oh {
            for j in 0..ow {
                let (mut best, mut sum, mut count) = (f64::NEG_INFINITY, 0.0, 0usize);
                for u in 0..k {
                    for v in 0..k {
                        let (yy, xx) = (
                            (i * stride + u) as isize - pad as isize,
                            (j * stride + v) as isize - pad as isize,
                        );
                        if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
                            continue;
                        }
                        let val = x[(p * h + yy as usize) * w + xx as usize];
                        best = best.max(val);
                        sum += val;
                        count += 1;
                    }
                }
                y[(p * oh + i) * ow + j] = match avg {
                    None => best,
                    Some(true) => sum / (k * k) as f64,
                    Some(false) => sum / count as f64,
                };
            }
        }
    }
    (y, [n, c, oh, ow])
}

pub fn global_avg_pool(x: &[f64], [n, c, h, w]: [usize; 4]) -> Vec<f64> {
    (0..n * c).map(|p| x[p * h * w..(p + 1) * h * w].iter().sum::<f64>() / (h * w) as f64).collect()
}

/// `y[n, m] = x[n, k] · w[m, k]ᵀ + b[m]`.
pub fn linear(x: &[f64], n: usize, k: usize, w: &[f64], m: usize, b: Option<&[f64]>) -> Vec<f64> {
    let mut y = vec![0.0; n * m];
    for r in 0..n {
        for o in 0..m {
            y[r * m + o] =
                b.map_or(0.0, |b| b[o]) + (0..k).map(|i| x[r * k + i] * w[o * k + i]).sum::<f64>();
        }
    }
    y
}

pub fn softmax_rows(x: &mut [f64], cols: usize) {
    for row in x.chunks_mut(cols) {
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for v in row.iter_mut() {
            *v = (*v - max).exp() / sum;
        }
    }
}

pub fn relu(x: &mut [f64]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

pub fn relu6(x: &mut [f64]) {
    x.iter_mut().for_each(|v| *v = v.clamp(0.0, 6.0));
}

/// `[K, M]` → `[M, K]`.
pub fn transpose(w: &[f64], k: usize, m: usize) -> Vec<f64> {
    (0..m * k).map(|i| w[(i % k) * m + i / k]).collect()
}

/// `erf` by Abramowitz and Stegun 7.1.26 (error below 1.5e-7).
pub fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (1.0 - poly * (-x * x).exp()).copysign(x)
}
