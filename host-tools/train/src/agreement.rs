//! How often an int8 model gives the float model's answer, and the float fallback that
//! raises it: when the top-1 agreement over the calibration samples falls below a target,
//! int8 layers stay float one at a time, the most sensitive first, until the target is met
//! or a cap on float layers is reached (accuracy-aware quantization).
//!
//! A layer's sensitivity is the divergence of the model with that layer alone kept float
//! from the float model, measured on the calibration samples nearest a tie (those the int8
//! model answers differently and those whose two best float scores are closest): rounding
//! flips the answers of those samples, and the others say little about which layer did it.

use std::collections::BTreeSet;

use sprout_core::int8_conversion::Quantized;

use crate::closest_calibration::{int8_inference, summed_kl, Divergence};
use crate::error::TrainError;
use crate::metrics::argmax;
use crate::model::{Inference, Model};
use crate::source::{DataSource, TensorSet};

/// The most calibration samples layers are ranked on (bounded memory: this many samples
/// are held).
pub const RANKING_SAMPLES: usize = 64;

/// The layers of least divergence alone that the greedy steps after the first choose from.
const SHORTLIST: usize = 16;

/// What the fallback aims at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FallbackTarget {
    /// The least top-1 agreement with the float model over the calibration samples (a
    /// fraction, 0 to 1).
    pub min_agreement: f64,
    /// The most int8 layers kept float to reach it (`None`: [`default_max_layers`]).
    pub max_layers: Option<usize>,
}

/// A layer the fallback kept float.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KeptFloat {
    /// Its weight's name (as `--keep-float` names layers).
    pub weight: String,
    /// The agreement once it (and the layers before it) stayed float.
    pub agreement: f64,
}

/// What the fallback found and did.
pub struct Fallback {
    /// The int8 model's agreement before any layer was kept float.
    pub agreement_before: f64,
    /// The agreement of the model returned.
    pub agreement: f64,
    /// The layers kept float, in the order they were added.
    pub kept_float: Vec<KeptFloat>,
    /// The model returned: the first to meet the target, else the one of highest agreement
    /// tried (the fewest float layers of equals).
    pub quantized: Quantized,
}

/// Measures `first`'s agreement and, below `target.min_agreement`, keeps its int8 layers
/// float as the module says, quantizing each trial through `quantize(extra float weights)`.
/// Layers whose weights are in `fixed` (trainable int8 layers) stay int8. Fails unless the
/// model's output is class scores ([`measurable`]). `step(what)` follows the passes over
/// the data.
pub fn fall_back_to_float(
    model: &Model,
    data: &mut DataSource,
    first: Quantized,
    fixed: &BTreeSet<String>,
    target: FallbackTarget,
    quantize: &dyn Fn(&BTreeSet<String>) -> Result<Quantized, TrainError>,
    step: &mut dyn FnMut(&str),
) -> Result<Fallback, TrainError> {
    let classes =
        class_count(model).ok_or_else(|| TrainError::Mismatch(NOT_CLASS_SCORES.into()))?;
    step("answers");
    let answers = float_answers(model, data, classes)?;
    let first_answers = int8_answers(model, &first, data, classes)?;
    let before = agreement_of(&answers.classes, &first_answers);
    let mut best = Fallback {
        agreement_before: before,
        agreement: before,
        kept_float: Vec::new(),
        quantized: first,
    };
    let max_layers = target.max_layers.unwrap_or(default_max_layers(best.quantized.layers.len()));
    if before >= target.min_agreement || max_layers == 0 {
        return Ok(best);
    }
    let hard = nearest_ties(model, data, &answers, &first_answers)?;
    let reference = Inference::new(model)?.run(&hard.x)?;
    let divergence = |float: &BTreeSet<String>| -> Result<f64, TrainError> {
        let output = int8_inference(model, &quantize(float)?)?.run(&hard.x)?;
        Ok(summed_kl(&reference, &output, classes))
    };
    // Greedy: each step keeps float the shortlisted layer that, added to those kept, leaves
    // the least divergence on the hard samples (the first step's is the ranking's first).
    let mut shortlist = rank_layers(model, &best.quantized, fixed, &divergence, step)?;
    shortlist.truncate(SHORTLIST);
    let (mut float, mut kept) = (BTreeSet::new(), Vec::new());
    while float.len() < max_layers && !shortlist.is_empty() {
        let mut least = (0, f64::INFINITY);
        if !float.is_empty() {
            for (i, weight) in shortlist.iter().enumerate() {
                step(&format!("{} float", float.len() + 1));
                let mut trial = float.clone();
                trial.insert(weight.clone());
                let d = divergence(&trial)?;
                if d < least.1 {
                    least = (i, d);
                }
            }
        }
        let weight = shortlist.remove(least.0);
        float.insert(weight.clone());
        let trial = quantize(&float)?;
        let agreement =
            agreement_of(&answers.classes, &int8_answers(model, &trial, data, classes)?);
        kept.push(KeptFloat { weight, agreement });
        if agreement > best.agreement {
            best.agreement = agreement;
            best.kept_float = kept.clone();
            best.quantized = trial;
        }
        if agreement >= target.min_agreement {
            break;
        }
    }
    Ok(best)
}

/// The most layers kept float without a cap given: a tenth of the int8 layers, at least one.
pub fn default_max_layers(int8_layers: usize) -> usize {
    int8_layers.div_ceil(10).max(1)
}

/// Why a model has no agreement to measure.
pub const NOT_CLASS_SCORES: &str =
    "the model's output is not class scores ([N, classes]): its int8 answers cannot be compared";

/// Whether the model's output is class scores, whose answers agree or not.
pub fn measurable(model: &Model) -> bool {
    class_count(model).is_some()
}

/// The number of classes when the model's output is class scores.
fn class_count(model: &Model) -> Option<usize> {
    let dims = model.zoo.graph.shape(model.zoo.logits).dims()[1..].to_vec();
    (Divergence::of_output(&dims) == Divergence::ClassScores).then(|| dims[0])
}

/// The float model's answer and the gap between its two best scores, per sample.
struct Answers {
    classes: Vec<usize>,
    margins: Vec<f32>,
}

fn float_answers(
    model: &Model,
    data: &mut DataSource,
    classes: usize,
) -> Result<Answers, TrainError> {
    let mut float = Inference::new(model)?;
    let mut answers = Answers { classes: Vec::new(), margins: Vec::new() };
    for samples in data.epoch(0) {
        let samples = samples?;
        for scores in float.run(&samples.x)?.chunks(classes) {
            let best = argmax(scores);
            let second = scores
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, &s)| s)
                .fold(f32::NEG_INFINITY, f32::max);
            answers.classes.push(best);
            answers.margins.push(scores[best] - second);
        }
    }
    Ok(answers)
}

/// The int8 model's answer per sample, in data order.
fn int8_answers(
    model: &Model,
    quantized: &Quantized,
    data: &mut DataSource,
    classes: usize,
) -> Result<Vec<usize>, TrainError> {
    let mut int8 = int8_inference(model, quantized)?;
    let mut answers = Vec::with_capacity(data.len());
    for samples in data.epoch(0) {
        answers.extend(int8.run(&samples?.x)?.chunks(classes).map(argmax));
    }
    Ok(answers)
}

/// The share of samples whose int8 answer is the float one.
fn agreement_of(float: &[usize], int8: &[usize]) -> f64 {
    let same = float.iter().zip(int8).filter(|(f, q)| f == q).count();
    if float.is_empty() {
        1.0
    } else {
        same as f64 / float.len() as f64
    }
}

/// Up to [`RANKING_SAMPLES`] samples nearest a tie: those the int8 model answers
/// differently (`int8_classes`) from the float model first, then those of the smallest float
/// margin.
fn nearest_ties(
    model: &Model,
    data: &mut DataSource,
    answers: &Answers,
    int8_classes: &[usize],
) -> Result<TensorSet, TrainError> {
    let mut order: Vec<usize> = (0..answers.classes.len()).collect();
    let differs = |i: usize| int8_classes.get(i) != Some(&answers.classes[i]);
    order.sort_by(|&a, &b| {
        differs(b).cmp(&differs(a)).then(answers.margins[a].total_cmp(&answers.margins[b]))
    });
    let mut chosen: Vec<usize> = order.into_iter().take(RANKING_SAMPLES).collect();
    chosen.sort_unstable();
    // Gather the chosen samples in one more reading (only they are held).
    let mut set = TensorSet {
        x: Vec::new(),
        y: Vec::new(),
        sample_dims: model.sample_dims(),
        path: data.origin(),
    };
    let per_sample = set.sample_dims.iter().product::<usize>();
    let (mut index, mut next) = (0usize, chosen.iter().peekable());
    for samples in data.epoch(0) {
        let samples = samples?;
        for (x, &y) in samples.x.chunks(per_sample).zip(&samples.y) {
            if next.peek() == Some(&&index) {
                set.x.extend_from_slice(x);
                set.y.push(y);
                next.next();
            }
            index += 1;
        }
    }
    Ok(set)
}

/// The int8 layers of `quantized` not in `fixed`, ordered by `divergence` of the model with
/// that layer alone kept float (least first).
fn rank_layers(
    model: &Model,
    quantized: &Quantized,
    fixed: &BTreeSet<String>,
    divergence: &dyn Fn(&BTreeSet<String>) -> Result<f64, TrainError>,
    step: &mut dyn FnMut(&str),
) -> Result<Vec<String>, TrainError> {
    let graph = &model.zoo.graph;
    let weights: Vec<String> = quantized
        .layers
        .iter()
        .map(|layer| graph.tensor(graph.nodes()[layer.node].inputs[1]).name.clone())
        .filter(|w| !fixed.contains(w))
        .collect();
    let mut scored = Vec::with_capacity(weights.len());
    for (i, weight) in weights.into_iter().enumerate() {
        step(&format!("rank {}/{}", i + 1, quantized.layers.len()));
        scored.push((divergence(&BTreeSet::from([weight.clone()]))?, weight));
    }
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(scored.into_iter().map(|(_, w)| w).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::{calibrate, widen_input_to_pixels, RangeMethod};
    use sprout_core::int8_conversion::{quantize_graph, QuantizeOptions};
    use sprout_zoo::Architecture;

    /// Samples of the tests: many, so that int8 rounding flips some near ties.
    const SAMPLES: usize = 256;

    fn source(model: &Model) -> DataSource {
        let per = model.sample_dims().iter().product::<usize>();
        let x = (0..SAMPLES * per).map(|i| ((i * 7919 + i / 5) % 97) as f32 / 97.0 - 0.5).collect();
        let set = TensorSet {
            x,
            y: vec![0; SAMPLES],
            sample_dims: model.sample_dims(),
            path: "samples".into(),
        };
        DataSource::tensors(set, model.batch(), 0, false)
    }

    /// The model, its int8 rewrite through `trial(extra float weights)`, and the data.
    struct Case {
        model: Model,
        data: DataSource,
        options: QuantizeOptions,
        ranges: sprout_core::int8_conversion::Ranges,
    }

    impl Case {
        fn new() -> Case {
            let model = Model::from_zoo(Architecture::Mlp, 8, 11).unwrap();
            let mut data = source(&model);
            let mut ranges = calibrate(&model, &mut data, RangeMethod::MinMax).unwrap();
            widen_input_to_pixels(&model, &mut ranges);
            Case { model, data, options: QuantizeOptions::default(), ranges }
        }

        fn trial(&self, extra: &BTreeSet<String>) -> Result<Quantized, TrainError> {
            let mut options = self.options.clone();
            options.keep_float.extend(extra.iter().cloned());
            Ok(quantize_graph(&self.model.zoo.graph, &self.ranges, &options).unwrap())
        }

        fn run(&mut self, target: FallbackTarget, fixed: &BTreeSet<String>) -> Fallback {
            let first = self.trial(&BTreeSet::new()).unwrap();
            let trial = |extra: &BTreeSet<String>| self.trial(extra);
            let mut data = source(&self.model);
            let mut steps = Vec::new();
            let fallback = fall_back_to_float(
                &self.model,
                &mut data,
                first,
                fixed,
                target,
                &trial,
                &mut |s| steps.push(s.to_string()),
            )
            .unwrap();
            assert_eq!(steps.first().map(String::as_str), Some("answers"));
            fallback
        }

        /// The agreement of `quantized`, measured afresh.
        fn measured_agreement(&mut self, quantized: &Quantized) -> f64 {
            let classes = class_count(&self.model).unwrap();
            let answers = float_answers(&self.model, &mut self.data, classes).unwrap();
            let int8 = int8_answers(&self.model, quantized, &mut self.data, classes).unwrap();
            agreement_of(&answers.classes, &int8)
        }

        fn weights(&self) -> Vec<String> {
            let q = self.trial(&BTreeSet::new()).unwrap();
            let g = &self.model.zoo.graph;
            q.layers.iter().map(|l| g.tensor(g.nodes()[l.node].inputs[1]).name.clone()).collect()
        }
    }

    #[test]
    fn a_met_target_keeps_every_layer_int8() {
        let mut case = Case::new();
        let fallback =
            case.run(FallbackTarget { min_agreement: 0.0, max_layers: None }, &BTreeSet::new());
        assert!(fallback.kept_float.is_empty());
        assert_eq!(fallback.agreement, fallback.agreement_before);
        let measured = case.measured_agreement(&fallback.quantized);
        assert_eq!(measured, fallback.agreement);
        assert_eq!(fallback.quantized.layers.len(), case.weights().len());
    }

    #[test]
    fn layers_stay_float_until_the_answers_agree() {
        let mut case = Case::new();
        let weights = case.weights();
        assert!(weights.len() >= 2, "{weights:?}");
        let all = FallbackTarget { min_agreement: 1.0, max_layers: Some(weights.len()) };
        let fallback = case.run(all, &BTreeSet::new());
        assert!(
            fallback.agreement_before < 1.0,
            "int8 rounding flips no answer here: {}",
            fallback.agreement_before
        );
        // With every layer float if need be, the int8 model answers as the float one.
        assert_eq!(fallback.agreement, 1.0);
        assert!(!fallback.kept_float.is_empty());
        let kept: Vec<&String> = fallback.kept_float.iter().map(|k| &k.weight).collect();
        assert!(kept.iter().all(|w| weights.contains(w)), "{kept:?}");
        assert_eq!(fallback.quantized.layers.len(), weights.len() - kept.len());
        assert_eq!(fallback.kept_float.last().unwrap().agreement, 1.0);
        assert_eq!(case.measured_agreement(&fallback.quantized), 1.0);

        // A cap of one layer: one layer at most, and the best agreement of the trials.
        let one = FallbackTarget { min_agreement: 1.0, max_layers: Some(1) };
        let capped = case.run(one, &BTreeSet::new());
        assert!(capped.kept_float.len() <= 1);
        assert!(capped.agreement >= capped.agreement_before);
        assert_eq!(case.measured_agreement(&capped.quantized), capped.agreement);

        // Layers the caller fixes (trainable int8 ones) stay int8.
        let fixed = BTreeSet::from([kept[0].clone()]);
        let without = case.run(all, &fixed);
        assert!(without.kept_float.iter().all(|k| k.weight != *kept[0]));
    }

    #[test]
    fn ranking_holds_at_most_its_sample_budget() {
        let mut case = Case::new();
        let first = case.trial(&BTreeSet::new()).unwrap();
        let classes = class_count(&case.model).unwrap();
        let answers = float_answers(&case.model, &mut case.data, classes).unwrap();
        let int8 = int8_answers(&case.model, &first, &mut case.data, classes).unwrap();
        let hard = nearest_ties(&case.model, &mut case.data, &answers, &int8).unwrap();
        assert_eq!(hard.len(), RANKING_SAMPLES.min(SAMPLES));
        assert_eq!(hard.x.len(), hard.len() * case.model.sample_dims().iter().product::<usize>());
        assert_eq!(default_max_layers(0), 1);
        assert_eq!(default_max_layers(11), 2);
    }
}
