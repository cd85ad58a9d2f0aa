//! Post-training int8 quantization on the host: activation ranges observed over a
//! calibration set (min/max, a percentile of each tensor's values or the range of least
//! quantization error), then core's graph rewrite (`sprout_core::int8_conversion`) into a
//! model file.

use crate::agreement::{self, Fallback, FallbackTarget, KeptFloat};
use crate::bias_correction;
use crate::closest_calibration;
use crate::error::TrainError;
use crate::model::Model;
use crate::mse_range::mse_range;
use crate::source::DataSource;
use sprout_core::format::ModelFile;
use sprout_core::int8_conversion::{
    quantize_graph, FloatFallback, QuantizeError, QuantizeOptions, Ranges,
};
use sprout_core::op::Op;
use sprout_core::{compile_inference, DType, Executor, Graph, Operand, Regions, TensorId};
use sprout_cpu::Cpu;
use std::collections::{BTreeMap, BTreeSet};

/// How a tensor's calibration range is chosen from the values it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RangeMethod {
    /// The smallest and largest value seen.
    MinMax,
    /// The `p`-th and `(100 − p)`-th percentiles (e.g. 99.99), ignoring rare outliers.
    Percentile(f64),
    /// The observed range shrunk towards zero to the least int8 quantization error
    /// (rounding and clipping) over the values seen.
    Mse,
}

/// How the activation ranges are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Calibration {
    /// One method for every tensor.
    Fixed(RangeMethod),
    /// Each of [`CANDIDATES`] in turn, keeping the model whose output over the calibration
    /// samples is closest to the float model's (least squared error relative to the float
    /// output's square): what suits a model depends on the model and the calibration set.
    Closest,
}

/// The range methods [`Calibration::Closest`] tries.
pub const CANDIDATES: [RangeMethod; 3] =
    [RangeMethod::MinMax, RangeMethod::Percentile(99.99), RangeMethod::Mse];

impl RangeMethod {
    /// The method as `sprout quantize --calibration` names it (`percentile 99.99`).
    pub fn name(&self) -> String {
        match self {
            RangeMethod::MinMax => "minmax".into(),
            RangeMethod::Percentile(p) => format!("percentile {p}"),
            RangeMethod::Mse => "mse".into(),
        }
    }
}

/// What `sprout quantize` does besides calibrating.
#[derive(Clone, Debug)]
pub struct QuantizeSettings {
    pub calibration: Calibration,
    /// Layers whose weights cannot be int8 (a dilated kernel) run in float instead of
    /// refusing the model.
    pub allow_float: bool,
    /// `--trainable`-style choice of parameters whose layers stay float (e.g. `head`).
    pub keep_float: Option<String>,
    /// Choice of parameters whose int8 layers stay trainable in integer units.
    pub trainable: Option<String>,
    /// Quantization-aware scaling for those layers' gradients.
    pub qas: bool,
    /// Empirical bias correction of the int8 layers (see [`crate::bias_correction`]).
    pub bias_correction: bool,
    /// Layers kept float until the int8 model agrees this often with the float model over
    /// the calibration samples ([`crate::agreement`]); `None`: every layer that can be int8
    /// is.
    pub fallback: Option<FallbackTarget>,
}

impl Default for QuantizeSettings {
    fn default() -> Self {
        Self {
            calibration: Calibration::Closest,
            allow_float: false,
            keep_float: None,
            trainable: None,
            qas: true,
            bias_correction: false,
            fallback: None,
        }
    }
}

/// Histogram resolution of the percentile method.
const BINS: usize = 2048;

/// One observed float tensor: its name and what it has seen.
pub(crate) struct Observed {
    name: String,
    min: f32,
    max: f32,
    histogram: Vec<u64>,
}

impl Observed {
    fn bin(&self, v: f32) -> usize {
        let width = (self.max - self.min).max(f32::MIN_POSITIVE);
        (((v - self.min) / width * BINS as f32) as usize).min(BINS - 1)
    }

    /// The value below which `fraction` of the observations lie (a bin edge).
    fn quantile(&self, fraction: f64) -> f32 {
        let total: u64 = self.histogram.iter().sum();
        let target = (fraction * total as f64).ceil() as u64;
        let mut seen = 0;
        for (i, &count) in self.histogram.iter().enumerate() {
            seen += count;
            if seen >= target.max(1) {
                let edge = if fraction < 0.5 { i } else { i + 1 };
                return self.min + (self.max - self.min) * edge as f32 / BINS as f32;
            }
        }
        self.max
    }
}

/// The forward float tensors whose ranges an int8 rewrite may need: the input and every
/// activation the model computes without labels.
fn observable(model: &Model) -> Vec<TensorId> {
    let g = &model.zoo.graph;
    let mut out = vec![model.zoo.input];
    for node in g.nodes() {
        if matches!(node.op, Op::CrossEntropy | Op::Mse) {
            continue;
        }
        out.extend(node.outputs.first().filter(|&&t| g.tensor(t).dtype == DType::F32));
    }
    out
}

/// Observes the ranges of `model`'s float tensors over every sample of `data`.
pub fn calibrate(
    model: &Model,
    data: &mut DataSource,
    method: RangeMethod,
) -> Result<Ranges, TrainError> {
    calibrate_with_progress(model, data, method, &mut |_, _| {})
}

/// [`calibrate`], calling `progress(samples done, samples in all)` after each batch; a
/// percentile or MSE calibration reads the data twice, so "all" counts both passes.
pub fn calibrate_with_progress(
    model: &Model,
    data: &mut DataSource,
    method: RangeMethod,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Ranges, TrainError> {
    let passes = match method {
        RangeMethod::MinMax => 1,
        RangeMethod::Percentile(_) | RangeMethod::Mse => 2,
    };
    let observed = observe(model, data, passes, progress)?;
    Ok(ranges_of(&observed, method))
}

/// Every observable tensor's extremes over `data` and, with `passes` 2, a histogram of its
/// values between them (a second reading of the data).
pub(crate) fn observe(
    model: &Model,
    data: &mut DataSource,
    passes: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Observed>, TrainError> {
    if data.is_empty() {
        return Err(TrainError::Mismatch(format!(
            "{}: the calibration set is empty; quantization needs samples to observe",
            data.origin().display()
        )));
    }
    let wanted = observable(model);
    let mut observed: Vec<Observed> = wanted
        .iter()
        .map(|&t| Observed {
            name: model.zoo.graph.tensor(t).name.clone(),
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            histogram: Vec::new(),
        })
        .collect();
    let (total, mut done) = (passes * data.len(), 0);
    for pass in 0..passes {
        if pass == 1 {
            for o in &mut observed {
                o.histogram = vec![0; BINS];
            }
        }
        let mut visit = |regions: &Regions<'_>, operands: &[Option<Operand>], n: usize| {
            for (o, operand) in observed.iter_mut().zip(operands) {
                let Some(operand) = operand else { continue };
                for &v in real_samples(regions.read::<f32>(operand)?, model.batch(), n)
                    .iter()
                    .filter(|v| v.is_finite())
                {
                    if pass == 0 {
                        (o.min, o.max) = (o.min.min(v), o.max.max(v));
                    } else {
                        let bin = o.bin(v);
                        o.histogram[bin] += 1;
                    }
                }
            }
            Ok(())
        };
        let mut chunk_done = |count| {
            done += count;
            progress(done, total);
        };
        let input = model.zoo.input;
        run_over(model, &model.zoo.graph, input, &wanted, data, &mut visit, &mut chunk_done)?;
    }
    Ok(observed)
}

/// The range of each observed tensor by `method`.
pub(crate) fn ranges_of(observed: &[Observed], method: RangeMethod) -> Ranges {
    observed
        .iter()
        .filter(|o| o.min <= o.max)
        .map(|o| {
            let range = match method {
                RangeMethod::MinMax => (o.min, o.max),
                RangeMethod::Percentile(p) => {
                    let tail = (1.0 - p / 100.0).clamp(0.0, 0.5);
                    (o.quantile(tail), o.quantile(1.0 - tail))
                }
                RangeMethod::Mse => mse_range(o.min, o.max, &o.histogram),
            };
            (o.name.clone(), range)
        })
        .collect()
}

/// Widens the input's calibrated range to every value the model's own normalisation gives
/// pixels in `[0, 1]` (`(0 − mean) / std` to `(1 − mean) / std`, over the channels): the
/// calibration photos rarely hold the darkest and brightest pixels other photos do, and an
/// input clipped by the first quantization moves every layer after it. A model without a
/// recorded normalisation keeps the calibrated range.
pub(crate) fn widen_input_to_pixels(model: &Model, ranges: &mut Ranges) {
    let prep = &model.metadata.preprocessing;
    if prep.mean.is_empty() || prep.mean.len() != prep.std.len() {
        return;
    }
    let ends = prep.mean.iter().zip(&prep.std).map(|(m, s)| ((0.0 - m) / s, (1.0 - m) / s));
    let (lo, hi) = ends.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (a, b)| {
        (lo.min(a.min(b)), hi.max(a.max(b)))
    });
    let name = &model.zoo.graph.tensor(model.zoo.input).name;
    if let Some(range) = ranges.get_mut(name).filter(|_| lo.is_finite() && hi.is_finite()) {
        *range = (range.0.min(lo), range.1.max(hi));
    }
}

/// Of a tensor's values over a padded batch of `batch` samples, those of the first `n`.
pub(crate) fn real_samples<T>(values: &[T], batch: usize, n: usize) -> &[T] {
    &values[..values.len() / batch * n]
}

/// What [`run_over`] hands on after each batch: the memory, the operands of the tensors
/// asked for (`None` for those the plan does not keep) and the real samples in the batch.
pub(crate) type Visit<'v> =
    dyn FnMut(&Regions<'_>, &[Option<Operand>], usize) -> Result<(), TrainError> + 'v;

/// Runs `graph`, whose input is `input`, over every sample of `data` at the model's batch
/// (the last batch padded with zeros), calling `visit` after each batch with the values of
/// `wanted` and `chunk_done(samples)` after each chunk of data.
pub(crate) fn run_over(
    model: &Model,
    graph: &Graph,
    input: TensorId,
    wanted: &[TensorId],
    data: &mut DataSource,
    visit: &mut Visit<'_>,
    chunk_done: &mut dyn FnMut(usize),
) -> Result<(), TrainError> {
    let plan = compile_inference(graph, wanted)?;
    let mut memory = crate::memory::initial_memory(&plan, graph, "the calibration pass")?;
    let operands: Vec<Option<Operand>> =
        wanted.iter().map(|&t| plan.binding_of(t).map(|b| b.operand)).collect();
    let input = plan
        .binding_of(input)
        .map(|b| b.operand)
        .ok_or_else(|| TrainError::Mismatch("the model's outputs do not read its input".into()))?;
    let (batch, per_sample) = (model.batch(), model.sample_dims().iter().product::<usize>());
    let mut exec = Executor::new(plan.view(), Cpu::new())?;
    for samples in data.epoch(0) {
        let samples = samples?;
        let count = samples.y.len();
        for start in (0..count).step_by(batch) {
            let n = (count - start).min(batch);
            let mut x = vec![0.0f32; batch * per_sample];
            x[..n * per_sample]
                .copy_from_slice(&samples.x[start * per_sample..(start + n) * per_sample]);
            let mut regions = memory.regions();
            regions.write(&input, &x)?;
            exec.run(&mut regions)?;
            visit(&regions, &operands, n)?;
        }
        chunk_done(count);
    }
    Ok(())
}

/// A model rewritten in int8, and the ops that run in float on int8 input.
pub struct Int8Model {
    pub file: ModelFile,
    pub float_fallbacks: Vec<FloatFallback>,
    /// The range method its activation ranges came from.
    pub method: RangeMethod,
    /// With [`Calibration::Closest`]: each candidate and its output's error against the
    /// float model's ([`crate::closest_calibration`]), in [`CANDIDATES`]' order; else empty.
    pub candidates: Vec<(RangeMethod, f64)>,
    /// With [`QuantizeSettings::fallback`] on a model of class scores: the agreement with
    /// the float model before and after, and the layers kept float to raise it.
    pub agreement: Option<Agreement>,
}

/// The top-1 agreement of the int8 model with the float model over the calibration samples
/// (fractions, 0 to 1; `sprout quantize --json` writes it as it is).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Agreement {
    /// Before any layer was kept float for it.
    pub before: f64,
    /// Of the model written.
    pub after: f64,
    /// The target (`--min-agreement`).
    pub target: f64,
    /// The layers kept float for it, in order.
    pub kept_float: Vec<KeptFloat>,
}

/// Calibrates `model` on `data` and rewrites it in int8.
pub fn quantize(
    model: &Model,
    data: &mut DataSource,
    settings: &QuantizeSettings,
) -> Result<Int8Model, TrainError> {
    quantize_with_progress(model, data, settings, &mut |_, _| {})
}

/// [`quantize`], reporting the calibration as [`calibrate_with_progress`] does.
pub fn quantize_with_progress(
    model: &Model,
    data: &mut DataSource,
    settings: &QuantizeSettings,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Int8Model, TrainError> {
    quantize_with_reports(model, data, settings, progress, &mut |_| {})
}

/// [`quantize_with_progress`], also naming each step of the float fallback in `phase`.
pub fn quantize_with_reports(
    model: &Model,
    data: &mut DataSource,
    settings: &QuantizeSettings,
    progress: &mut dyn FnMut(usize, usize),
    phase: &mut dyn FnMut(&str),
) -> Result<Int8Model, TrainError> {
    let names = |choice: &Option<String>| -> Result<BTreeSet<String>, TrainError> {
        let Some(choice) = choice else { return Ok(BTreeSet::new()) };
        let ids = sprout_zoo::select_trainable(&model.zoo, choice)?;
        Ok(ids.iter().map(|&id| model.zoo.graph.tensor(id).name.clone()).collect())
    };
    let mut options = QuantizeOptions {
        keep_float: names(&settings.keep_float)?,
        trainable: names(&settings.trainable)?,
        qas: settings.qas,
        allow_float: settings.allow_float,
        bias_shift: BTreeMap::new(),
    };
    let quantize = |ranges: &Ranges, options: &QuantizeOptions| {
        quantize_graph(&model.zoo.graph, ranges, options).map_err(|e| {
            let hint = match (&e, settings.allow_float) {
                (QuantizeError::NoInt8Kernel { .. }, false) => {
                    " (allowing float keeps it in float)"
                }
                _ => "",
            };
            TrainError::Mismatch(format!("cannot quantize the model: {e}{hint}"))
        })
    };
    let (method, ranges, mut quantized, candidates) = match settings.calibration {
        Calibration::Fixed(method) => {
            let mut ranges = calibrate_with_progress(model, data, method, progress)?;
            widen_input_to_pixels(model, &mut ranges);
            let quantized = quantize(&ranges, &options)?;
            (method, ranges, quantized, Vec::new())
        }
        Calibration::Closest => {
            let quantize = |ranges: &Ranges| quantize(ranges, &options);
            let chosen = closest_calibration::closest(model, data, &quantize, progress)?;
            (chosen.method, chosen.ranges, chosen.quantized, chosen.candidates)
        }
    };
    if settings.bias_correction && !quantized.layers.is_empty() {
        // The float pass, then one int8 pass per depth of layers.
        let passes = 1 + bias_correction::passes(&model.zoo.graph, &quantized.layers);
        let (total, mut done) = (passes * data.len(), 0);
        let mut read = |count| {
            done += count;
            progress(done, total);
        };
        options.bias_shift =
            bias_correction::bias_shifts(model, data, &ranges, &options, &mut read)?;
        quantized = quantize(&ranges, &options)?;
    }
    let mut agreement = None;
    if let Some(target) = settings.fallback.filter(|_| agreement::measurable(model)) {
        let trial = |extra: &BTreeSet<String>| {
            let mut options = options.clone();
            options.keep_float.extend(extra.iter().cloned());
            quantize(&ranges, &options)
        };
        let fixed = &options.trainable;
        let fallback =
            agreement::fall_back_to_float(model, data, quantized, fixed, target, &trial, phase)?;
        let Fallback { agreement_before, agreement: after, kept_float, quantized: kept } = fallback;
        let target = target.min_agreement;
        agreement = Some(Agreement { before: agreement_before, after, target, kept_float });
        quantized = kept;
    }
    let mut metadata = model.metadata.clone();
    metadata.provenance = format!("{} quantized to int8", metadata.provenance);
    let file = ModelFile::from_graph(&quantized.graph, metadata);
    let float_fallbacks = quantized.float_fallbacks;
    Ok(Int8Model { file, float_fallbacks, method, candidates, agreement })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_zoo::Architecture;

    #[test]
    fn the_input_range_widens_to_what_the_normalisation_gives_pixels() {
        let mut model = Model::from_zoo(Architecture::Mlp, 8, 5).unwrap();
        let input = model.zoo.graph.tensor(model.zoo.input).name.clone();
        let ranged = |model: &Model, calibrated: (f32, f32)| {
            let mut ranges = Ranges::from([(input.clone(), calibrated), ("h".into(), (-9., 9.))]);
            widen_input_to_pixels(model, &mut ranges);
            assert_eq!(ranges["h"], (-9.0, 9.0), "only the input moves");
            ranges[&input]
        };
        // No recorded normalisation: the calibrated range stays.
        assert_eq!(ranged(&model, (-1.0, 1.0)), (-1.0, 1.0));
        // Pixels in [0, 1] normalised by channel: the widest channel's ends, (0 − 0.5) / 0.25
        // and (1 − 0.25) / 0.25; calibrated values beyond them stay.
        model.metadata.preprocessing.mean = vec![0.5, 0.25, 0.5];
        model.metadata.preprocessing.std = vec![0.25, 0.25, 0.5];
        assert_eq!(ranged(&model, (-1.0, 1.0)), (-2.0, 3.0));
        assert_eq!(ranged(&model, (-5.0, 1.0)), (-5.0, 3.0));
    }
}
