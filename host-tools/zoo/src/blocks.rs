//! Building blocks the zoo's models share: convolution + batch norm (+ activation) under
//! torchvision's module names, and the dropout + linear classifier head.

use sprout_core::hyperparams::DropoutConfig;
use sprout_core::nn;
use sprout_core::op::ConvParams;
use sprout_core::rng::splitmix64;
use sprout_core::{Graph, GraphError, TensorId};

/// A square convolution: output channels, kernel side, stride and groups. Padding is
/// `kernel / 2`, so a stride-1 convolution keeps the height and width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conv {
    pub out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub groups: usize,
}

impl Conv {
    /// A dense, stride-1 convolution.
    pub fn new(out: usize, kernel: usize) -> Self {
        Self { out, kernel, stride: 1, groups: 1 }
    }

    pub fn stride(self, stride: usize) -> Self {
        Self { stride, ..self }
    }

    /// One filter per channel (`groups == out`, input channels must equal `out`).
    pub fn depthwise(self) -> Self {
        Self { groups: self.out, ..self }
    }

    fn params(self) -> ConvParams {
        let pad = self.kernel / 2;
        ConvParams { stride: (self.stride, self.stride), padding: (pad, pad), groups: self.groups }
    }
}

/// A bias-free convolution named `conv` followed by batch norm named `bn` (the norm's
/// shift makes a convolution bias redundant).
pub(crate) fn conv_bn(
    g: &mut Graph,
    conv: &str,
    bn: &str,
    x: TensorId,
    spec: Conv,
) -> Result<TensorId, GraphError> {
    let h = nn::conv2d(g, conv, x, spec.out, spec.kernel, spec.params(), false)?;
    nn::batch_norm2d(g, bn, h)
}

/// An activation op such as [`Graph::relu`] or [`Graph::relu6`].
pub(crate) type Activation = fn(&mut Graph, &str, TensorId) -> Result<TensorId, GraphError>;

/// torchvision's `Conv2dNormActivation`: `{prefix}.0` convolution, `{prefix}.1` batch
/// norm, `{prefix}.2` activation.
pub(crate) fn conv_bn_act(
    g: &mut Graph,
    prefix: &str,
    x: TensorId,
    spec: Conv,
    act: Activation,
) -> Result<TensorId, GraphError> {
    let h = conv_bn(g, &format!("{prefix}.0"), &format!("{prefix}.1"), x, spec)?;
    act(g, &format!("{prefix}.2"), h)
}

/// What a model's body hands back: its logits and the parameters of its classifier head.
pub(crate) struct Head {
    pub logits: TensorId,
    pub params: Vec<TensorId>,
}

/// The classifier head: dropout with probability `p` named `dropout`, then a linear layer
/// named `linear` to `classes` logits. The dropout seed mixes the graph's seed with the
/// op's position, so it follows the model seed and differs between dropout ops.
pub(crate) fn classifier(
    g: &mut Graph,
    dropout: &str,
    linear: &str,
    x: TensorId,
    p: f32,
    classes: usize,
) -> Result<Head, GraphError> {
    let seed = splitmix64(g.seed() ^ g.nodes().len() as u64);
    let h = g.dropout(dropout, x, DropoutConfig { p, seed })?;
    let first_new = g.tensors().len();
    let logits = nn::linear(g, linear, h, classes)?;
    let params = g.parameters().filter(|id| id.index() >= first_new).collect();
    Ok(Head { logits, params })
}
