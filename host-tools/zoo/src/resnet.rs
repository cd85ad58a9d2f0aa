//! `resnet`: a small ResNet for 32x32 RGB images and 10 classes (CIFAR-sized), three stages
//! of two basic blocks each, with torchvision's `resnet` parameter names.
//!
//! | name | layer | output (per sample) |
//! | --- | --- | --- |
//! | `conv1`, `bn1`, `relu` | conv 3x3 → 16, batch norm, ReLU | 16 x 32 x 32 |
//! | `layer1.{0,1}` | basic blocks, 16 channels | 16 x 32 x 32 |
//! | `layer2.{0,1}` | basic blocks, 32 channels, the first with stride 2 | 32 x 16 x 16 |
//! | `layer3.{0,1}` | basic blocks, 64 channels, the first with stride 2 | 64 x 8 x 8 |
//! | `avgpool` | global average pool | 64 |
//! | `dropout`, `fc` | Dropout(0.2), Linear 64 → 10 (the head) | 10 |
//!
//! A basic block `layerS.B` is `conv1` (3x3, the block's stride) → `bn1` → `relu1` →
//! `conv2` (3x3) → `bn2`, plus a shortcut, then `add` and `relu`. The shortcut is the input
//! itself, or `downsample.0` (1x1 conv with the block's stride) → `downsample.1` (batch
//! norm) where the shape changes. Convolutions have no bias (batch norm follows each).
//!
//! 175 258 parameters in all.

use crate::blocks::{classifier, conv_bn, Conv, Head};
use sprout_core::{Graph, GraphError, TensorId};

/// Input channels (RGB).
pub const CHANNELS: usize = 3;
/// Input height and width.
pub const SIZE: usize = 32;
/// Output classes.
pub const CLASSES: usize = 10;
/// Channels of the stem and of each stage; every stage after the first halves the size.
const STAGES: [usize; 3] = [16, 32, 64];
/// Basic blocks per stage.
const BLOCKS: usize = 2;
/// Drop probability before the head.
const DROPOUT: f32 = 0.2;

/// Records the model on `x[N, CHANNELS, SIZE, SIZE]`.
pub(crate) fn record(g: &mut Graph, x: TensorId, classes: usize) -> Result<Head, GraphError> {
    let h = conv_bn(g, "conv1", "bn1", x, Conv::new(STAGES[0], 3))?;
    let mut h = g.relu("relu", h)?;
    for (stage, channels) in STAGES.into_iter().enumerate() {
        for block in 0..BLOCKS {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            h = basic_block(g, &format!("layer{}.{block}", stage + 1), h, channels, stride)?;
        }
    }
    let h = g.global_avg_pool("avgpool", h)?;
    classifier(g, "dropout", "fc", h, DROPOUT, classes)
}

/// Two 3x3 conv + batch-norm layers and a residual connection around them.
fn basic_block(
    g: &mut Graph,
    name: &str,
    x: TensorId,
    channels: usize,
    stride: usize,
) -> Result<TensorId, GraphError> {
    let h = conv_bn(
        g,
        &format!("{name}.conv1"),
        &format!("{name}.bn1"),
        x,
        Conv::new(channels, 3).stride(stride),
    )?;
    let h = g.relu(&format!("{name}.relu1"), h)?;
    let h =
        conv_bn(g, &format!("{name}.conv2"), &format!("{name}.bn2"), h, Conv::new(channels, 3))?;
    let shortcut = if stride != 1 || g.shape(x).dim(1) != Some(channels) {
        let (conv, bn) = (format!("{name}.downsample.0"), format!("{name}.downsample.1"));
        conv_bn(g, &conv, &bn, x, Conv::new(channels, 1).stride(stride))?
    } else {
        x
    };
    let sum = g.add(&format!("{name}.add"), h, shortcut)?;
    g.relu(&format!("{name}.relu"), sum)
}
