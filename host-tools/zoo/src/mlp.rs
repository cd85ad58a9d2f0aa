//! `mlp`: a three-layer perceptron over 64 features (an 8x8 image, flattened) with 10
//! classes; the smallest model of the zoo, for quick checks of the whole tool chain.
//!
//! Layers and parameter names (torchvision's `features` / `classifier` split):
//!
//! | name | layer | parameters |
//! | --- | --- | --- |
//! | `features.0` | Linear 64 → 128 | 8 320 |
//! | `features.1` | ReLU | |
//! | `features.2` | Linear 128 → 64 | 8 256 |
//! | `features.3` | ReLU | |
//! | `classifier.0` | Dropout(0.1) | |
//! | `classifier.1` | Linear 64 → 10 (the head) | 650 |
//!
//! 17 226 parameters in all.

use crate::blocks::{classifier, Head};
use sprout_core::{nn, Graph, GraphError, TensorId};

/// Input features per sample.
pub const FEATURES: usize = 64;
/// Output classes.
pub const CLASSES: usize = 10;
/// Widths of the two hidden layers.
const HIDDEN: [usize; 2] = [128, 64];
/// Drop probability before the head.
const DROPOUT: f32 = 0.1;

/// Records the model on `x[N, FEATURES]`.
pub(crate) fn record(g: &mut Graph, x: TensorId, classes: usize) -> Result<Head, GraphError> {
    let mut h = x;
    for (i, width) in HIDDEN.into_iter().enumerate() {
        h = nn::linear(g, &format!("features.{}", 2 * i), h, width)?;
        h = g.relu(&format!("features.{}", 2 * i + 1), h)?;
    }
    classifier(g, "classifier.0", "classifier.1", h, DROPOUT, classes)
}
