//! Layers for model code: each creates its parameters (named as PyTorch's `state_dict`
//! names them, `<layer>.weight`, `<layer>.bias`, ...) with PyTorch's default initialisation
//! and records the op.

use crate::graph::{Graph, GraphError, Init};
use crate::hyperparams::BatchNormConfig;
use crate::ops::ConvParams;
use crate::rng::splitmix64;
use crate::shape::Shape;
use crate::tensor::TensorId;
use alloc::format;
use libm::sqrtf;

/// A per-tensor seed: the graph's seed mixed with a hash (FNV-1a) of the tensor's name.
fn seed_for(seed: u64, name: &str) -> u64 {
    let hash = name
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    splitmix64(seed ^ hash)
}

/// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, PyTorch's default for conv and linear weights and
/// biases, seeded by the graph's seed and the tensor's name (as every layer here is).
pub fn uniform(graph: &Graph, name: &str, fan_in: usize) -> Init {
    uniform_seeded(graph.seed(), name, fan_in)
}

/// [`uniform`] drawn from `seed` (and the tensor's name) instead of the graph's seed: a
/// layer added to a recorded graph takes the seed its user chose.
pub fn uniform_seeded(seed: u64, name: &str, fan_in: usize) -> Init {
    Init::Uniform { bound: 1.0 / sqrtf(fan_in.max(1) as f32), seed: seed_for(seed, name) }
}

/// A fully connected layer `[N, in] → [N, out]`.
pub fn linear(
    graph: &mut Graph,
    name: &str,
    x: TensorId,
    out: usize,
) -> Result<TensorId, GraphError> {
    graph.check_id(x)?;
    let k = graph.shape(x).dim(1).unwrap_or(1);
    let (wn, bn) = (format!("{name}.weight"), format!("{name}.bias"));
    let w = graph.parameter(&wn, Shape::d2(out, k), uniform(graph, &wn, k))?;
    let b = graph.parameter(&bn, Shape::d1(out), uniform(graph, &bn, k))?;
    graph.linear(name, x, w, Some(b))
}

/// A square-kernel 2-D convolution, optionally with a bias.
pub fn conv2d(
    graph: &mut Graph,
    name: &str,
    x: TensorId,
    out_channels: usize,
    kernel: usize,
    params: ConvParams,
    bias: bool,
) -> Result<TensorId, GraphError> {
    graph.check_id(x)?;
    let c = graph.shape(x).dim(1).unwrap_or(1);
    let per_group = c / params.groups.max(1);
    let fan_in = per_group * kernel * kernel;
    let wn = format!("{name}.weight");
    let w_shape = Shape::d4(out_channels, per_group, kernel, kernel);
    let w = graph.parameter(&wn, w_shape, uniform(graph, &wn, fan_in))?;
    let b = if bias {
        let bn = format!("{name}.bias");
        Some(graph.parameter(&bn, Shape::d1(out_channels), uniform(graph, &bn, fan_in))?)
    } else {
        None
    };
    graph.conv2d(name, x, w, b, params)
}

/// Batch normalisation with affine parameters (`weight` = 1, `bias` = 0) and running
/// statistics (`running_mean` = 0, `running_var` = 1).
pub fn batch_norm2d(graph: &mut Graph, name: &str, x: TensorId) -> Result<TensorId, GraphError> {
    graph.check_id(x)?;
    let c = Shape::d1(graph.shape(x).dim(1).unwrap_or(1));
    let gamma = graph.parameter(&format!("{name}.weight"), c, Init::Constant(1.0))?;
    let beta = graph.parameter(&format!("{name}.bias"), c, Init::Zeros)?;
    let mean = graph.buffer(&format!("{name}.running_mean"), c, Init::Zeros)?;
    let var = graph.buffer(&format!("{name}.running_var"), c, Init::Constant(1.0))?;
    graph.batch_norm2d(name, x, gamma, beta, mean, var, BatchNormConfig::default())
}
