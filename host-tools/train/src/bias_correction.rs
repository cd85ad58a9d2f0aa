//! Empirical bias correction of int8 layers (Nagel et al., "Data-Free Quantization Through
//! Weight Equalization and Bias Correction"): rounded weights and int8 inputs move each
//! convolution's and dense layer's mean output per channel, and its int32 bias takes the
//! move back, at no cost at run time.
//!
//! The move is measured on the calibration data: each layer's mean input, per position, in
//! the float graph and in the int8 graph, through the layer's float and its int8 weights.
//! Correcting a layer moves the inputs of the layers after it, so the layers are corrected
//! in order of depth, one pass over the data through the int8 graph for each depth, each
//! measured with every layer before it already corrected.

use std::collections::BTreeMap;

use sprout_core::int8_conversion::{quantize_graph, QuantizeOptions, QuantizedLayer, Ranges};
use sprout_core::quant::QuantParams;
use sprout_core::{DType, Graph, Operand, Regions, TensorId};

use crate::model::Model;
use crate::quantize::{real_samples, run_over};
use crate::source::DataSource;
use crate::TrainError;

/// The bias shifts ([`QuantizeOptions::bias_shift`]) that give each int8 layer of `model`
/// its float mean output per channel over `data`, the int8 graph made with `ranges` and
/// `options`; `data` is read `1 +` [`passes`] times, and `progress(samples)` follows each
/// chunk of it read.
pub(crate) fn bias_shifts(
    model: &Model,
    data: &mut DataSource,
    ranges: &Ranges,
    options: &QuantizeOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<BTreeMap<String, Vec<f32>>, TrainError> {
    let float = &model.zoo.graph;
    let quantized = |shifts: &BTreeMap<String, Vec<f32>>| {
        let options = QuantizeOptions { bias_shift: shifts.clone(), ..options.clone() };
        quantize_graph(float, ranges, &options)
            .map_err(|e| TrainError::Mismatch(format!("cannot quantize the model: {e}")))
    };
    let mut shifts = BTreeMap::new();
    let layers = quantized(&shifts)?.layers;
    let inputs: Vec<TensorId> = layers.iter().map(|l| l.float_input).collect();
    let means = mean_inputs(model, float, model.zoo.input, &inputs, &[], data, progress)?;
    let targets: Vec<Vec<f32>> = (layers.iter().zip(&means))
        .map(|(layer, mean)| mean_output(layer, &layer.float_weights, mean, float))
        .collect();
    let depths = depths(float, &layers);
    for depth in 1..=depths.iter().copied().max().unwrap_or(0) {
        let int8 = quantized(&shifts)?;
        let input = int8.graph.find(&float.tensor(model.zoo.input).name).ok_or_else(|| {
            TrainError::Mismatch("the int8 graph does not read the model's input".into())
        })?;
        let at: Vec<usize> = (0..layers.len()).filter(|&l| depths[l] == depth).collect();
        let (ids, params): (Vec<TensorId>, Vec<QuantParams>) =
            at.iter().map(|&l| int8.layers[l].int8_input).unzip();
        let means = mean_inputs(model, &int8.graph, input, &ids, &params, data, progress)?;
        for (&l, mean) in at.iter().zip(&means) {
            let layer = &int8.layers[l];
            let got = mean_output(layer, &layer.int8_weights, mean, float);
            let shift = targets[l].iter().zip(&got).map(|(t, g)| t - g).collect();
            shifts.insert(layer.output.clone(), shift);
        }
    }
    Ok(shifts)
}

/// The passes [`bias_shifts`] makes over the data through the int8 graph: the depth of
/// the deepest of `layers` (those of [`quantize_graph`] on `float`).
pub(crate) fn passes(float: &Graph, layers: &[QuantizedLayer]) -> usize {
    depths(float, layers).into_iter().max().unwrap_or(0)
}

/// Each layer's depth: 1 for those with no int8 layer before them, else one more than the
/// deepest int8 layer before them.
fn depths(float: &Graph, layers: &[QuantizedLayer]) -> Vec<usize> {
    let mut is_layer = vec![false; float.nodes().len()];
    layers.iter().for_each(|l| is_layer[l.node] = true);
    let mut depth = vec![0usize; float.tensors().len()];
    for (i, node) in float.nodes().iter().enumerate() {
        let before = node.inputs.iter().chain(&node.state).map(|t| depth[t.index()]).max();
        let d = before.unwrap_or(0) + usize::from(is_layer[i]);
        node.outputs.iter().for_each(|t| depth[t.index()] = d);
    }
    layers.iter().map(|l| depth[float.nodes()[l.node].outputs[0].index()]).collect()
}

/// Each of `tensors`' mean value per position of a sample over `data`, dequantized with
/// `params` where the tensor is int8.
fn mean_inputs(
    model: &Model,
    graph: &Graph,
    input: TensorId,
    tensors: &[TensorId],
    params: &[QuantParams],
    data: &mut DataSource,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<f32>>, TrainError> {
    let batch = model.batch();
    let per_sample = |&t: &TensorId| graph.shape(t).numel() / batch;
    let mut sums: Vec<Vec<f64>> = tensors.iter().map(|t| vec![0.0; per_sample(t)]).collect();
    let mut samples = 0usize;
    let mut visit = |regions: &Regions<'_>, operands: &[Option<Operand>], n: usize| {
        for (i, (sum, operand)) in sums.iter_mut().zip(operands).enumerate() {
            let Some(operand) = operand else {
                let name = &graph.tensor(tensors[i]).name;
                return Err(TrainError::Mismatch(format!("the plan does not keep '{name}'")));
            };
            let values: Vec<f32> = match operand.dtype {
                DType::I8 => (real_samples(regions.read::<i8>(operand)?, batch, n).iter())
                    .map(|&q| params[i].dequantize(q))
                    .collect(),
                _ => real_samples(regions.read::<f32>(operand)?, batch, n).to_vec(),
            };
            for sample in values.chunks_exact(sum.len()) {
                sum.iter_mut().zip(sample).for_each(|(s, &v)| *s += f64::from(v));
            }
        }
        samples += n;
        Ok(())
    };
    run_over(model, graph, input, tensors, data, &mut visit, progress)?;
    let count = samples.max(1) as f64;
    Ok(sums.into_iter().map(|s| s.into_iter().map(|v| (v / count) as f32).collect()).collect())
}

/// The mean output per channel, bias left out, of `layer` with `weights` over the positions
/// of one sample whose input is `mean` (the layer is linear, so this is its mean output
/// over the samples whose mean input that is). `float` gives the input's shape.
fn mean_output(layer: &QuantizedLayer, weights: &[f32], mean: &[f32], float: &Graph) -> Vec<f32> {
    let dims = layer.weight_shape.dims();
    let (outputs, fan_in) = (dims[0], weights.len() / dims[0].max(1));
    let Some(conv) = layer.conv else {
        return weights.chunks_exact(fan_in).map(|w| dot(w, mean)).collect();
    };
    let input = float.shape(layer.float_input);
    let (channels, h, w) = (input.dims()[1], input.dims()[2], input.dims()[3]);
    let (kh, kw) = (dims[2], dims[3]);
    let ((sh, sw), (ph, pw)) = (conv.stride, conv.padding);
    let (oh, ow) = ((h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1);
    // taps[c, i, j]: channel c at tap (i, j), averaged over the output positions.
    let mut taps = vec![0.0f32; channels * kh * kw];
    for c in 0..channels {
        let plane = &mean[c * h * w..][..h * w];
        for (i, j) in (0..kh).flat_map(|i| (0..kw).map(move |j| (i, j))) {
            let mut sum = 0.0;
            for y in (0..oh).filter_map(|y| (y * sh + i).checked_sub(ph)).filter(|&y| y < h) {
                let row = &plane[y * w..][..w];
                let xs = (0..ow).filter_map(|x| (x * sw + j).checked_sub(pw)).filter(|&x| x < w);
                sum += xs.map(|x| row[x]).sum::<f32>();
            }
            taps[(c * kh + i) * kw + j] = sum / (oh * ow) as f32;
        }
    }
    let per_group = outputs / conv.groups.max(1);
    let group_taps = fan_in;
    (0..outputs)
        .map(|o| {
            let first = o / per_group.max(1) * group_taps;
            dot(&weights[o * fan_in..][..fan_in], &taps[first..][..group_taps])
        })
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{quantize, QuantizeSettings, TensorSet};
    use sprout_core::format::{Metadata, ModelFile, Preprocessing};
    use sprout_core::op::ConvParams;
    use sprout_core::rng::SplitMix;
    use sprout_core::{compile_inference, nn, save_model, Executor, Reference, Shape};
    use std::path::Path;

    const BATCH: usize = 4;

    /// Weights that all round down by 0.45 of a step but the first, which sets the step:
    /// `[1, (n + 0.45) / 127 ...]` with `n` cycling over 0..30, for each of `rows`.
    fn rounded_down(rows: usize, per_row: usize) -> Vec<f32> {
        (0..rows * per_row)
            .map(|i| match i % per_row {
                0 => 1.0,
                k => ((k % 30) as f32 + 0.45) / 127.0,
            })
            .collect()
    }

    fn set(g: &mut Graph, name: &str, values: Vec<f32>) {
        let id = g.find(name).unwrap();
        g.set_initial_values(id, values).unwrap();
    }

    /// `input [N, 64, 1, 1] -> global average pool (a flatten) -> fc (3)`, or `input [N, 3, 8, 8] -> conv (3 x 3, stride 2, pad 1, 4
    /// channels) -> global average pool -> fc (3)`, with rounded-down weights.
    fn model(conv: bool) -> Model {
        let mut g = Graph::new(1);
        let sample = if conv { Shape::d4(BATCH, 3, 8, 8) } else { Shape::d4(BATCH, 64, 1, 1) };
        let x = g.input("input", sample).unwrap();
        let labels = g.labels("labels", BATCH).unwrap();
        let h = if conv {
            let params = ConvParams { stride: (2, 2), padding: (1, 1), groups: 1 };
            let h = nn::conv2d(&mut g, "conv", x, 4, 3, params, true).unwrap();
            set(&mut g, "conv.weight", rounded_down(4, 27));
            g.global_avg_pool("pool", h).unwrap()
        } else {
            g.global_avg_pool("pool", x).unwrap()
        };
        let k = g.shape(h).dim(1).unwrap();
        let logits = nn::linear(&mut g, "fc", h, 3).unwrap();
        set(&mut g, "fc.weight", rounded_down(3, k));
        g.cross_entropy("loss", logits, labels).unwrap();
        let metadata = Metadata {
            class_names: vec!["a".into(), "b".into(), "c".into()],
            input_shape: sample,
            preprocessing: Preprocessing::default(),
            provenance: "bias correction test".into(),
        };
        let bytes = save_model(&ModelFile::from_graph(&g, metadata)).unwrap();
        Model::from_bytes(&bytes, Path::new("test.sprout")).unwrap()
    }

    /// `n` samples of `model` uniform in [0, 1]: a positive mean input, so weights that all
    /// round down move the mean output down.
    fn samples(model: &Model, n: usize, seed: u64) -> TensorSet {
        let per_sample: usize = model.sample_dims().iter().product();
        let mut rng = SplitMix::new(seed);
        TensorSet {
            x: (0..n * per_sample).map(|_| rng.next_f32()).collect(),
            y: vec![0; n],
            sample_dims: model.sample_dims(),
            path: "samples".into(),
        }
    }

    /// The mean over `x`'s samples and channels of `graph`'s float logits (`name`).
    fn mean_logit(graph: &Graph, name: &str, x: &[f32]) -> f32 {
        let id = graph.find(name).unwrap();
        let plan = compile_inference(graph, &[id]).unwrap();
        let mut memory = plan.initial_memory(graph);
        let mut exec = Executor::new(plan.view(), Reference).unwrap();
        let (input, output) = (plan.operand("input").unwrap(), plan.operand(name).unwrap());
        let (mut sum, mut count) = (0.0, 0);
        for batch in x.chunks_exact(input.len) {
            let mut regions = memory.regions();
            regions.write(&input, batch).unwrap();
            exec.run(&mut regions).unwrap();
            let values = regions.read::<f32>(&output).unwrap();
            sum += values.iter().sum::<f32>();
            count += values.len();
        }
        sum / count as f32
    }

    /// The int8 model's mean logit minus the float model's on unseen samples.
    fn mean_error(conv: bool, bias_correction: bool) -> f32 {
        let model = model(conv);
        let calibration = samples(&model, 64, 1);
        let mut data = DataSource::tensors(calibration, BATCH, 0, false);
        let settings = QuantizeSettings { bias_correction, ..QuantizeSettings::default() };
        let file = quantize(&model, &mut data, &settings).unwrap().file;
        let int8 = file.to_graph().unwrap();
        let logits = model.zoo.graph.tensor(model.zoo.logits).name.clone();
        let unseen = samples(&model, 64, 2).x;
        let float = mean_logit(&model.zoo.graph, &logits, &unseen);
        mean_logit(&int8, &format!("{logits}.dequantized"), &unseen) - float
    }

    #[test]
    fn weights_rounded_down_move_a_dense_layers_mean_and_the_correction_takes_it_back() {
        // 63 of 64 weights a row 0.45 / 127 low, inputs of mean 0.5: 63 · 0.45 / 127 · 0.5.
        let expected = -63.0 * 0.45 / 127.0 * 0.5;
        let uncorrected = mean_error(false, false);
        assert!((uncorrected - expected).abs() < 0.2 * expected.abs(), "{uncorrected}");
        let corrected = mean_error(false, true);
        assert!(corrected.abs() < 0.1 * expected.abs(), "{corrected} against {uncorrected}");
    }

    #[test]
    fn a_strided_padded_convolution_before_a_dense_layer_is_corrected_too() {
        let uncorrected = mean_error(true, false);
        let corrected = mean_error(true, true);
        assert!(uncorrected < -0.05, "{uncorrected}");
        assert!(corrected.abs() < 0.1 * uncorrected.abs(), "{corrected} against {uncorrected}");
    }

    #[test]
    fn layers_are_corrected_in_order_of_depth() {
        let model = model(true);
        let mut data = DataSource::tensors(samples(&model, 8, 1), BATCH, 0, false);
        let ranges = crate::calibrate(&model, &mut data, crate::RangeMethod::MinMax).unwrap();
        let layers =
            quantize_graph(&model.zoo.graph, &ranges, &QuantizeOptions::default()).unwrap().layers;
        assert_eq!(depths(&model.zoo.graph, &layers), [1, 2]);
    }
}
