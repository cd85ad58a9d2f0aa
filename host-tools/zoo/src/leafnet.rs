//! `leafnet`: the plant-leaf disease classifier, a MobileNetV2 at about 0.35 width for
//! 64x64 RGB photos and three classes, with torchvision's `mobilenet_v2` parameter names.
//!
//! | name | layer | output (per sample) |
//! | --- | --- | --- |
//! | `features.0` | conv 3x3 stride 2 → 16, batch norm, ReLU6 | 16 x 32 x 32 |
//! | `features.1` | inverted residual, t = 1 | 8 x 32 x 32 |
//! | `features.2`, `features.3` | inverted residuals, t = 6, stride 2 then 1 | 16 x 16 x 16 |
//! | `features.4`, `features.5` | inverted residuals, t = 6, stride 2 then 1 | 24 x 8 x 8 |
//! | `features.6`, `features.7` | inverted residuals, t = 6, stride 2 then 1 | 32 x 4 x 4 |
//! | `features.8`, `features.9` | inverted residuals, t = 6 | 48 x 4 x 4 |
//! | `features.10` | conv 1x1 → 192, batch norm, ReLU6 | 192 x 4 x 4 |
//! | `pool` | global average pool | 192 |
//! | `classifier.0`, `classifier.1` | Dropout(0.2), Linear 192 → 3 (the head) | 3 |
//!
//! An inverted residual `features.k` with expansion `t` widens its `c` input channels to
//! `t·c`, filters each channel alone and projects to its output channels:
//! - `t > 1`: `conv.0.{0,1,2}` (1x1 expand conv, batch norm, ReLU6), `conv.1.{0,1,2}`
//!   (3x3 depthwise conv with the block's stride, batch norm, ReLU6), `conv.2` (1x1 project
//!   conv), `conv.3` (batch norm);
//! - `t = 1`: no expansion, so `conv.0.*` is the depthwise layer, `conv.1` the projection and
//!   `conv.2` its batch norm.
//!
//! When the stride is 1 and the channels do not change, `add` sums the block's input and
//! output. Convolutions have no bias. The largest activation is the first expansion,
//! `features.2.conv.0.0` (48 x 32 x 32 values per sample).
//!
//! 105 379 parameters in all.

use crate::blocks::{classifier, conv_bn, conv_bn_act, Conv, Head};
use sprout_core::{Graph, GraphError, TensorId};

/// Input channels (RGB).
pub const CHANNELS: usize = 3;
/// Input height and width.
pub const SIZE: usize = 64;
/// What each output means, in logit order.
pub const CLASS_NAMES: [&str; 3] = ["healthy", "leaf_spot", "rust"];
/// Channels of the stem convolution.
const STEM: usize = 16;
/// The inverted-residual stages as torchvision writes them: expansion factor `t`, output
/// channels `c`, blocks `n`, stride `s` of the first block.
const STAGES: [(usize, usize, usize, usize); 5] =
    [(1, 8, 1, 1), (6, 16, 2, 2), (6, 24, 2, 2), (6, 32, 2, 2), (6, 48, 2, 1)];
/// Channels of the last 1x1 convolution, which the head reads after pooling.
const LAST: usize = 192;
/// Drop probability before the head.
const DROPOUT: f32 = 0.2;

/// Records the model on `x[N, CHANNELS, SIZE, SIZE]`.
pub(crate) fn record(g: &mut Graph, x: TensorId, classes: usize) -> Result<Head, GraphError> {
    let mut h = conv_bn_act(g, "features.0", x, Conv::new(STEM, 3).stride(2), Graph::relu6)?;
    let mut index = 1;
    for (t, c, n, s) in STAGES {
        for block in 0..n {
            let stride = if block == 0 { s } else { 1 };
            h = inverted_residual(g, &format!("features.{index}"), h, c, stride, t)?;
            index += 1;
        }
    }
    let h = conv_bn_act(g, &format!("features.{index}"), h, Conv::new(LAST, 1), Graph::relu6)?;
    let h = g.global_avg_pool("pool", h)?;
    classifier(g, "classifier.0", "classifier.1", h, DROPOUT, classes)
}

/// MobileNetV2's block: expand (unless `expansion` is 1), depthwise, project, and a residual
/// connection when the shape allows it.
fn inverted_residual(
    g: &mut Graph,
    name: &str,
    x: TensorId,
    out: usize,
    stride: usize,
    expansion: usize,
) -> Result<TensorId, GraphError> {
    let c_in = g.shape(x).dim(1).unwrap_or(0);
    let hidden = c_in * expansion;
    let mut layer = 0;
    let mut h = x;
    if expansion != 1 {
        h = conv_bn_act(g, &format!("{name}.conv.0"), h, Conv::new(hidden, 1), Graph::relu6)?;
        layer = 1;
    }
    let depthwise = Conv::new(hidden, 3).stride(stride).depthwise();
    h = conv_bn_act(g, &format!("{name}.conv.{layer}"), h, depthwise, Graph::relu6)?;
    let (conv, bn) = (format!("{name}.conv.{}", layer + 1), format!("{name}.conv.{}", layer + 2));
    h = conv_bn(g, &conv, &bn, h, Conv::new(out, 1))?;
    if stride == 1 && c_in == out {
        h = g.add(&format!("{name}.add"), x, h)?;
    }
    Ok(h)
}
