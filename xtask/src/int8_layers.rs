//! The int8 convolutions of sprout's own quantized LeafNet, with real activations, as a
//! layer file that firmware reads from memory: the data of the CMSIS-NN side by side.
//!
//! The float LeafNet (zoo weights, seed [`SEED`]) is calibrated on a few random images and
//! rewritten in int8 by `sprout_train::quantize`; one image then runs through the int8
//! graph on the host, which keeps every convolution's input and output. Each
//! `QConv2d` node becomes a [`Layer`]: its geometry, zero points, clamp, weights, bias,
//! `[multiplier, shift]` pairs, that input, and the host's output.
//!
//! The layer file (little endian, every section 4-byte aligned): a header of five `u32`
//! (`SPCB`, version 1, [`Layout`], layer count, total bytes), then one record of
//! [`RECORD_WORDS`] `i32` per layer (`c_in, h, w, c_out, kh, kw, stride_h, stride_w,
//! pad_h, pad_w, groups, out_h, out_w, input zero point, output zero point, clamp min,
//! clamp max`, then the byte offsets of the input, weights, bias and pairs), then the data.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use sprout_core::geometry::Conv2dGeometry;
use sprout_core::graph::{Graph, Init};
use sprout_core::op::Op;
use sprout_core::{compile_inference, Executor};
use sprout_cpu::Cpu;
use sprout_train::{
    quantize, Calibration, DataSource, Model, QuantizeSettings, RangeMethod, TensorSet,
};
use sprout_zoo::Architecture;

/// Seed of the zoo weights and of the images.
const SEED: u64 = 7;
/// Calibration images.
const CALIBRATION: usize = 4;
/// `SPCB`: the layer file's magic.
pub const MAGIC: &[u8; 4] = b"SPCB";
pub const VERSION: u32 = 1;
/// `i32` words of one layer record.
pub const RECORD_WORDS: usize = 21;
const HEADER_BYTES: usize = 20;

/// How a layer file lays out activations and weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// sprout's: activations `[C, H, W]`, weights `[C_out, C_in / groups, KH, KW]`.
    Nchw = 0,
    /// CMSIS-NN's (TFLite's): activations `[H, W, C]`, weights `[C_out, KH, KW, C_in]`,
    /// depthwise weights `[KH, KW, C]`.
    Nhwc = 1,
}

/// One int8 convolution of the quantized LeafNet, in sprout's layout.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The convolution's output tensor in the int8 graph.
    pub name: String,
    pub g: Conv2dGeometry,
    pub x_zero_point: i32,
    pub y_zero_point: i32,
    pub act: (i8, i8),
    /// `[C_in, H, W]`.
    pub x: Vec<i8>,
    /// `[C_out, C_in / groups, KH, KW]`.
    pub weights: Vec<i8>,
    pub bias: Vec<i32>,
    /// `[multiplier, shift]` per output channel.
    pub requant: Vec<i32>,
    /// The host's output (`sprout-cpu`), `[C_out, out_h, out_w]`.
    pub expected: Vec<i8>,
}

impl Layer {
    /// Whether CMSIS-NN runs it as a depthwise convolution (one filter per channel).
    pub fn is_depthwise(&self) -> bool {
        self.g.groups > 1 && self.g.groups == self.g.c_in && self.g.c_out == self.g.c_in
    }

    /// `3x3 s2 48->48 dw at 32x32`.
    pub fn describe(&self) -> String {
        let g = &self.g;
        let kind = if self.is_depthwise() { " dw" } else { "" };
        format!(
            "{}x{} s{} {}->{}{kind} at {}x{}",
            g.kh, g.kw, g.stride.0, g.c_in, g.c_out, g.h, g.w
        )
    }
}

/// `[C, H, W]` as `[H, W, C]`.
pub fn chw_to_hwc(x: &[i8], c: usize, h: usize, w: usize) -> Vec<i8> {
    let mut out = vec![0; x.len()];
    for (i, &v) in x.iter().enumerate() {
        let (ch, pixel) = (i / (h * w), i % (h * w));
        out[pixel * c + ch] = v;
    }
    out
}

/// `[H, W, C]` as `[C, H, W]`.
pub fn hwc_to_chw(x: &[i8], c: usize, h: usize, w: usize) -> Vec<i8> {
    let mut out = vec![0; x.len()];
    for (i, &v) in x.iter().enumerate() {
        let (pixel, ch) = (i / c, i % c);
        out[ch * h * w + pixel] = v;
    }
    out
}

/// The int8 convolutions of the quantized LeafNet, in graph order.
pub fn leafnet() -> Result<Vec<Layer>> {
    let model = Model::from_zoo(Architecture::LeafNet, 1, SEED)?;
    let dims = model.sample_dims();
    let per_sample: usize = dims.iter().product();
    let mut rng = sprout_core::rng::SplitMix::new(SEED);
    let mut image = || (0..per_sample).map(|_| rng.uniform(-1.0, 1.0)).collect::<Vec<f32>>();
    let calibration: Vec<f32> = (0..CALIBRATION).flat_map(|_| image()).collect();
    let set = TensorSet {
        x: calibration,
        y: vec![0; CALIBRATION],
        sample_dims: dims,
        path: Path::new("random images").to_path_buf(),
    };
    let mut data = DataSource::tensors(set, 1, SEED, false);
    // The ranges the kernels were first compared and counted with: random images need no
    // choice of calibration.
    let settings = QuantizeSettings {
        calibration: Calibration::Fixed(RangeMethod::MinMax),
        allow_float: true,
        ..QuantizeSettings::default()
    };
    let file = quantize(&model, &mut data, &settings)?.file;
    let graph = file.to_graph().map_err(|e| anyhow!("the quantized leafnet: {e}"))?;
    run_layers(&graph, &image())
}

/// Runs `image` through the int8 `graph` on the host and collects its convolutions.
fn run_layers(graph: &Graph, image: &[f32]) -> Result<Vec<Layer>> {
    let convs: Vec<_> =
        graph.nodes().iter().filter(|n| matches!(n.op, Op::QConv2d(_))).cloned().collect();
    if convs.is_empty() {
        bail!("the quantized leafnet has no int8 convolution");
    }
    let wanted: Vec<_> = convs.iter().flat_map(|n| [n.inputs[0], n.outputs[0]]).collect();
    let plan = compile_inference(graph, &wanted)?;
    let mut memory = plan.initial_memory(graph);
    let input = graph.find("input").context("the quantized leafnet has no `input`")?;
    let operand = |t| {
        plan.binding_of(t)
            .map(|b| b.operand)
            .with_context(|| format!("the plan keeps no `{}`", graph.tensor(t).name))
    };
    let mut exec = Executor::new(plan.view(), Cpu::with_threads(1))?;
    let mut regions = memory.regions();
    regions.write(&operand(input)?, image)?;
    exec.run(&mut regions)?;
    let ints = |t| match &graph.tensor(t).init {
        Some(Init::Ints(values)) => Ok(values.clone()),
        _ => Err(anyhow!("`{}` holds no integers", graph.tensor(t).name)),
    };
    convs
        .iter()
        .map(|node| {
            let Op::QConv2d(p) = node.op else { unreachable!("filtered on QConv2d") };
            let (x, y) = (node.inputs[0], node.outputs[0]);
            let ([_, c_in, h, w], [c_out, _, kh, kw], [_, _, out_h, out_w]) =
                (dims4(graph, x)?, dims4(graph, node.inputs[1])?, dims4(graph, y)?);
            let g = Conv2dGeometry {
                n: 1,
                c_in,
                h,
                w,
                c_out,
                kh,
                kw,
                stride: p.conv.stride,
                padding: p.conv.padding,
                groups: p.conv.groups,
                out_h,
                out_w,
            };
            let weights = ints(node.inputs[1])?.iter().map(|&q| q as i8).collect();
            Ok(Layer {
                name: graph.tensor(y).name.clone(),
                g,
                x_zero_point: p.input.zero_point,
                y_zero_point: p.output.zero_point,
                act: p.act,
                x: regions.read::<i8>(&operand(x)?)?.to_vec(),
                weights,
                bias: ints(node.inputs[2])?,
                requant: ints(node.inputs[3])?,
                expected: regions.read::<i8>(&operand(y)?)?.to_vec(),
            })
        })
        .collect()
}

fn dims4(graph: &Graph, t: sprout_core::TensorId) -> Result<[usize; 4]> {
    let dims = graph.shape(t).dims().to_vec();
    dims.try_into().map_err(|d| anyhow!("`{}` is not 4-d: {d:?}", graph.tensor(t).name))
}

/// The layer file of `layers` in `layout`.
pub fn encode(layers: &[Layer], layout: Layout) -> Vec<u8> {
    let data_at = HEADER_BYTES + layers.len() * RECORD_WORDS * 4;
    let mut records = Vec::new();
    let mut data = Vec::new();
    let mut section = |bytes: &[u8]| {
        let offset = data_at + data.len();
        data.extend_from_slice(bytes);
        data.resize(data.len().next_multiple_of(4), 0);
        offset as i32
    };
    for layer in layers {
        let g = &layer.g;
        let (x, weights) = match layout {
            Layout::Nchw => (layer.x.clone(), layer.weights.clone()),
            Layout::Nhwc if layer.is_depthwise() => (
                chw_to_hwc(&layer.x, g.c_in, g.h, g.w),
                chw_to_hwc(&layer.weights, g.c_out, g.kh, g.kw),
            ),
            Layout::Nhwc => {
                let per_filter = g.weight_len() / g.c_out;
                let weights = layer
                    .weights
                    .chunks_exact(per_filter)
                    .flat_map(|f| chw_to_hwc(f, g.c_in_per_group(), g.kh, g.kw))
                    .collect();
                (chw_to_hwc(&layer.x, g.c_in, g.h, g.w), weights)
            }
        };
        let words = |v: &[i32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let bytes = |v: &[i8]| v.iter().map(|&q| q as u8).collect::<Vec<u8>>();
        let offsets = [
            section(&bytes(&x)),
            section(&bytes(&weights)),
            section(&words(&layer.bias)),
            section(&words(&layer.requant)),
        ];
        let fields = [
            g.c_in,
            g.h,
            g.w,
            g.c_out,
            g.kh,
            g.kw,
            g.stride.0,
            g.stride.1,
            g.padding.0,
            g.padding.1,
            g.groups,
            g.out_h,
            g.out_w,
        ]
        .map(|v| v as i32);
        let quant = [
            layer.x_zero_point,
            layer.y_zero_point,
            i32::from(layer.act.0),
            i32::from(layer.act.1),
        ];
        for word in fields.iter().chain(&quant).chain(&offsets) {
            records.extend_from_slice(&word.to_le_bytes());
        }
    }
    let total = HEADER_BYTES + records.len() + data.len();
    let mut file = Vec::with_capacity(total);
    file.extend_from_slice(MAGIC);
    for word in [VERSION, layout as u32, layers.len() as u32, total as u32] {
        file.extend_from_slice(&word.to_le_bytes());
    }
    file.extend_from_slice(&records);
    file.extend_from_slice(&data);
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(groups: usize) -> Layer {
        let c = if groups > 1 { groups } else { 2 };
        let g = Conv2dGeometry {
            n: 1,
            c_in: c,
            h: 2,
            w: 3,
            c_out: c,
            kh: 1,
            kw: 2,
            stride: (1, 1),
            padding: (0, 0),
            groups,
            out_h: 2,
            out_w: 2,
        };
        let ramp = |len: usize| (0..len).map(|i| i as i8).collect::<Vec<i8>>();
        Layer {
            name: "conv".into(),
            g,
            x_zero_point: -3,
            y_zero_point: 4,
            act: (-128, 100),
            x: ramp(g.input_len()),
            weights: ramp(g.weight_len()),
            bias: vec![5; c],
            requant: [1 << 30, -2].repeat(c),
            expected: ramp(g.output_len()),
        }
    }

    #[test]
    fn layouts_round_trip() {
        let x: Vec<i8> = (0..24).collect();
        let hwc = chw_to_hwc(&x, 2, 3, 4);
        assert_eq!(&hwc[..4], &[0, 12, 1, 13]);
        assert_eq!(hwc_to_chw(&hwc, 2, 3, 4), x);
    }

    #[test]
    fn the_file_holds_header_records_and_both_layouts_of_the_data() {
        let layers = [layer(1)];
        let nchw = encode(&layers, Layout::Nchw);
        let nhwc = encode(&layers, Layout::Nhwc);
        let word =
            |file: &[u8], i: usize| i32::from_le_bytes(file[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(&nchw[..4], MAGIC);
        assert_eq!((word(&nchw, 2), word(&nchw, 3), word(&nchw, 4)), (0, 1, nchw.len() as i32));
        assert_eq!(word(&nhwc, 2), 1);
        let record = |i: usize| word(&nchw, 5 + i);
        assert_eq!((record(0), record(10), record(13), record(14)), (2, 1, -3, 4));
        let (x_at, w_at) = (record(17) as usize, record(18) as usize);
        assert_eq!(&nchw[x_at..x_at + 3], &[0, 1, 2]);
        // NHWC: channel 1's first pixel follows channel 0's; each filter is [KH, KW, C_in].
        assert_eq!(&nhwc[x_at..x_at + 3], &[0, 6, 1]);
        assert_eq!(&nhwc[w_at..w_at + 4], &[0, 2, 1, 3]);
        assert!(record(19) % 4 == 0 && record(20) % 4 == 0);
    }

    #[test]
    fn depthwise_weights_become_kh_kw_c() {
        let layer = layer(4);
        assert!(layer.is_depthwise());
        let nhwc = encode(&[layer], Layout::Nhwc);
        let w_at = i32::from_le_bytes(nhwc[20 + 18 * 4..20 + 19 * 4].try_into().unwrap()) as usize;
        // Weights [C=4, 1, KH=1, KW=2] as [KH, KW, C].
        assert_eq!(&nhwc[w_at..w_at + 8], &[0, 2, 4, 6, 1, 3, 5, 7]);
    }
}
