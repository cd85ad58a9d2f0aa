//! The calibration `sprout quantize` picks by default: the activation ranges of every range
//! method in [`CANDIDATES`] from one observation of the calibration set, each made into an
//! int8 model, and the one whose output over the same samples is closest to the float
//! model's kept ([`Divergence`]: for class scores, how far the int8 model's probabilities
//! are from the float model's; for any other output, the squared error). No method suits every model: min/max ranges stretch with every outlier
//! more photos bring, percentiles clip what a small set saw once, and the least-error range
//! of each tensor alone says little about the error that reaches the output.

use std::path::Path;

use sprout_core::format::ModelFile;
use sprout_core::int8_conversion::{Quantized, Ranges};

use crate::error::TrainError;
use crate::metrics::log_sum_exp;
use crate::model::{Inference, Model, Network};
use crate::quantize::{observe, ranges_of, widen_input_to_pixels, RangeMethod, CANDIDATES};
use crate::source::DataSource;

/// The candidate kept, with every candidate's error.
pub struct Chosen {
    pub method: RangeMethod,
    pub ranges: Ranges,
    pub quantized: Quantized,
    /// Each candidate's divergence ([`output_errors`]), in [`CANDIDATES`]' order.
    pub candidates: Vec<(RangeMethod, f64)>,
}

/// Observes `data` once (two readings: extremes, then histograms), quantizes `model` with
/// each candidate's ranges through `quantize`, runs the float model and every candidate over
/// `data` again and keeps the candidate of least divergence ([`output_errors`]; the first of equals).
/// `progress(done, total)` counts samples over all of these readings.
pub fn closest(
    model: &Model,
    data: &mut DataSource,
    quantize: &dyn Fn(&Ranges) -> Result<Quantized, TrainError>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Chosen, TrainError> {
    // Two readings to observe, one to compare (the float model and every candidate run on
    // each batch as it is read).
    let total = 3 * data.len();
    let observed = observe(model, data, 2, &mut |done, _| progress(done, total))?;
    let mut made = Vec::with_capacity(CANDIDATES.len());
    for method in CANDIDATES {
        let mut ranges = ranges_of(&observed, method);
        widen_input_to_pixels(model, &mut ranges);
        let quantized = quantize(&ranges)?;
        made.push((method, ranges, quantized));
    }
    let graphs: Vec<&Quantized> = made.iter().map(|(_, _, q)| q).collect();
    let done = 2 * data.len();
    let errors = output_errors(model, &graphs, data, &mut |d| progress(done + d, total))?;
    let best = (0..errors.len()).fold(0, |best, i| if errors[i] < errors[best] { i } else { best });
    let candidates = CANDIDATES.iter().copied().zip(errors).collect();
    let (method, ranges, quantized) = made.swap_remove(best);
    Ok(Chosen { method, ranges, quantized, candidates })
}

/// How far an int8 model's output is from the float model's, summed over samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Divergence {
    /// Class scores (`[N, C]`, `C >= 2`): the mean over samples of the Kullback-Leibler
    /// divergence of the int8 model's softmax from the float model's. What decides the
    /// answers: a shift common to every score of a sample costs nothing, a near tie moved
    /// across costs much.
    ClassScores,
    /// Any other output: the squared error relative to the float output's sum of squares
    /// (a pure squared error when that sum is zero).
    RelativeSquares,
}

impl Divergence {
    /// The divergence that suits an output of `per_sample` dimensions.
    pub fn of_output(per_sample: &[usize]) -> Self {
        match per_sample {
            [classes] if *classes >= 2 => Divergence::ClassScores,
            _ => Divergence::RelativeSquares,
        }
    }
}

/// For each int8 graph, its output's [`Divergence`] from the float model's output over
/// every sample of `data`. `read(samples)` follows the samples read.
pub fn output_errors(
    model: &Model,
    candidates: &[&Quantized],
    data: &mut DataSource,
    read: &mut dyn FnMut(usize),
) -> Result<Vec<f64>, TrainError> {
    let mut float = Inference::new(model)?;
    let mut int8 =
        candidates.iter().map(|q| int8_inference(model, q)).collect::<Result<Vec<_>, _>>()?;
    let dims = model.zoo.graph.shape(model.zoo.logits).dims()[1..].to_vec();
    let divergence = Divergence::of_output(&dims);
    let per_sample = dims.iter().product::<usize>().max(1);
    let (mut reference_square, mut errors) = (0.0f64, vec![0.0f64; candidates.len()]);
    let mut seen = 0;
    for samples in data.epoch(0) {
        let samples = samples?;
        let reference = float.run(&samples.x)?;
        reference_square += reference.iter().map(|&r| f64::from(r).powi(2)).sum::<f64>();
        for (inference, error) in int8.iter_mut().zip(&mut errors) {
            let output = inference.run(&samples.x)?;
            *error += match divergence {
                Divergence::ClassScores => summed_kl(&reference, &output, per_sample),
                Divergence::RelativeSquares => {
                    output.iter().zip(&reference).map(|(&o, &r)| f64::from(o - r).powi(2)).sum()
                }
            };
        }
        seen += samples.y.len();
        read(seen);
    }
    let scale = match divergence {
        Divergence::ClassScores => seen as f64,
        Divergence::RelativeSquares => reference_square,
    };
    if scale > 0.0 {
        errors.iter_mut().for_each(|e| *e /= scale);
    }
    Ok(errors)
}

/// Runs an int8 rewrite of `model` as `sprout predict` runs the file it would write (the
/// graph encoded and loaded again), at the model's batch.
pub(crate) fn int8_inference(
    model: &Model,
    quantized: &Quantized,
) -> Result<Inference, TrainError> {
    let file = ModelFile::from_graph(&quantized.graph, model.metadata.clone());
    let bytes = sprout_core::save_model(&file)
        .map_err(|e| TrainError::Mismatch(format!("cannot encode an int8 candidate: {e}")))?;
    let network = Network::from_bytes(&bytes, Path::new("an int8 candidate"))?;
    Inference::of_network(&network, model.batch())
}

/// The KL divergence of `output`'s class probabilities from `reference`'s, summed over the
/// samples (`classes` scores each).
pub(crate) fn summed_kl(reference: &[f32], output: &[f32], classes: usize) -> f64 {
    reference.chunks(classes).zip(output.chunks(classes)).map(|(p, q)| kl_of_softmax(p, q)).sum()
}

/// KL(softmax(p) || softmax(q)) of two score vectors, computed from log-probabilities so
/// that no probability underflows to a logarithm of zero.
fn kl_of_softmax(p: &[f32], q: &[f32]) -> f64 {
    let (lse_p, lse_q) = (log_sum_exp(p), log_sum_exp(q));
    let log_probabilities =
        p.iter().zip(q).map(|(&a, &b)| (f64::from(a) - lse_p, f64::from(b) - lse_q));
    log_probabilities.map(|(a, b)| a.exp() * (a - b)).sum::<f64>().max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::{quantize, Calibration, QuantizeSettings};
    use crate::source::TensorSet;
    use sprout_zoo::Architecture;

    /// Samples of the tests.
    const SAMPLES: usize = 64;

    /// Samples whose values are mostly small with a rare large one, where the candidates'
    /// ranges differ.
    fn samples(model: &Model, n: usize) -> TensorSet {
        let per = model.sample_dims().iter().product::<usize>();
        let x = (0..n * per)
            .map(|i| if i % 31 == 0 { 40.0 } else { ((i * 7919) % 23) as f32 / 23.0 - 0.5 })
            .collect();
        TensorSet { x, y: vec![0; n], sample_dims: model.sample_dims(), path: "samples".into() }
    }

    fn source(model: &Model) -> DataSource {
        DataSource::tensors(samples(model, SAMPLES), model.batch(), 0, false)
    }

    /// Each candidate's output error, measured here on the model its fixed calibration
    /// writes (as `sprout predict` would run it).
    fn error_alone(model: &Model, method: RangeMethod) -> f64 {
        let settings = QuantizeSettings {
            calibration: Calibration::Fixed(method),
            ..QuantizeSettings::default()
        };
        let alone = quantize(model, &mut source(model), &settings).unwrap();
        assert!(alone.candidates.is_empty());
        assert_eq!(alone.method, method);
        let bytes = sprout_core::save_model(&alone.file).unwrap();
        let network = Network::from_bytes(&bytes, Path::new("alone")).unwrap();
        let x = samples(model, SAMPLES).x;
        let float = Inference::new(model).unwrap().run(&x).unwrap();
        let int8 = Inference::of_network(&network, model.batch()).unwrap().run(&x).unwrap();
        let classes = model.classes();
        let each = float.chunks(classes).zip(int8.chunks(classes));
        each.map(|(f, q)| kl_of_softmax(f, q)).sum::<f64>() / SAMPLES as f64
    }

    #[test]
    fn class_scores_diverge_by_their_probabilities_other_outputs_by_squares() {
        assert_eq!(Divergence::of_output(&[3]), Divergence::ClassScores);
        assert_eq!(Divergence::of_output(&[1]), Divergence::RelativeSquares);
        assert_eq!(Divergence::of_output(&[4, 5, 5]), Divergence::RelativeSquares);
        // A shift common to every score changes nothing; a swapped near tie does.
        assert!(kl_of_softmax(&[1.0, 2.0, 3.0], &[11.0, 12.0, 13.0]) < 1e-12);
        let swapped = kl_of_softmax(&[0.0, 5.0, 5.1], &[0.0, 5.1, 5.0]);
        assert!(swapped > 1e-3, "{swapped}");
        // Far from every other score, a probability that underflows in f32 still counts.
        assert!(kl_of_softmax(&[0.0, 200.0], &[0.0, 100.0]).is_finite());
        let by_hand = {
            let (p, q) = ([0.5f64, 0.5], [0.25f64, 0.75]);
            p[0] * (p[0] / q[0]).ln() + p[1] * (p[1] / q[1]).ln()
        };
        let (l1, l2) = (0.0f32, 3f32.ln());
        assert!((kl_of_softmax(&[0.0, 0.0], &[l1, l2]) - by_hand).abs() < 1e-6);
    }

    #[test]
    fn the_default_keeps_the_candidate_whose_output_is_closest_to_float() {
        let model = Model::from_zoo(Architecture::Mlp, 4, 3).unwrap();
        assert_eq!(QuantizeSettings::default().calibration, Calibration::Closest);
        let chosen = quantize(&model, &mut source(&model), &QuantizeSettings::default()).unwrap();
        let methods: Vec<RangeMethod> = chosen.candidates.iter().map(|c| c.0).collect();
        assert_eq!(methods, CANDIDATES);
        let least = chosen.candidates.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
        let kept = chosen.candidates.iter().find(|c| c.0 == chosen.method).unwrap();
        assert_eq!(kept.1, least, "{:?}", chosen.candidates);
        for &(method, error) in &chosen.candidates {
            let alone = error_alone(&model, method);
            assert!((alone - error).abs() <= 1e-9 * error.max(1e-6), "{method:?}: {alone} {error}");
        }
        let errors: Vec<f64> = chosen.candidates.iter().map(|c| c.1).collect();
        assert!(errors.iter().any(|&e| e != errors[0]), "the candidates differ: {errors:?}");
    }
}
