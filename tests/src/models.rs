//! Small models shared by the cross-crate tests: a conv → batch-norm → relu → max-pool →
//! linear classifier with explicit, reproducible weights, and a residual CNN with dropout.

use sprout_core::hyperparams::{BatchNormConfig, DropoutConfig};
use sprout_core::nn;
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::rng::SplitMix;
use sprout_core::{Graph, GraphError, Init, Shape, TensorId};

/// Samples per batch of [`small_cnn`].
pub const BATCH: usize = 4;
/// Input channels of [`small_cnn`].
pub const IN_CHANNELS: usize = 2;
/// Input height and width of [`small_cnn`].
pub const SIZE: usize = 6;
/// Channels the convolution of [`small_cnn`] produces.
pub const CONV_CHANNELS: usize = 3;
/// Side of the square convolution kernel (padding 1 keeps the size).
pub const KERNEL: usize = 3;
/// Height and width after the 2x2 max-pool.
pub const POOLED: usize = SIZE / 2;
/// Features the linear layer reads.
pub const FEATURES: usize = CONV_CHANNELS * POOLED * POOLED;
/// Output classes.
pub const CLASSES: usize = 3;
/// Elements of one input batch.
pub const IMAGE_LEN: usize = BATCH * IN_CHANNELS * SIZE * SIZE;

/// `n` values uniform in `[low, high)` drawn from `rng`.
pub fn uniform(rng: &mut SplitMix, n: usize, low: f32, high: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(low, high)).collect()
}

/// One batch of inputs and labels in `0..classes`, reproducible from `seed`.
pub fn random_batch(seed: u64, len: usize, batch: usize, classes: usize) -> (Vec<f32>, Vec<i32>) {
    let mut rng = SplitMix::new(seed);
    let x = uniform(&mut rng, len, -1.0, 1.0);
    let y = (0..batch).map(|_| (rng.next_u64() % classes as u64) as i32).collect();
    (x, y)
}

/// The initial weights and buffers of [`small_cnn`], in PyTorch's layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct SmallCnnWeights {
    /// `conv.weight[CONV_CHANNELS, IN_CHANNELS, KERNEL, KERNEL]`.
    pub conv_weight: Vec<f32>,
    /// `conv.bias[CONV_CHANNELS]`.
    pub conv_bias: Vec<f32>,
    /// `bn.weight[CONV_CHANNELS]` (gamma).
    pub bn_weight: Vec<f32>,
    /// `bn.bias[CONV_CHANNELS]` (beta).
    pub bn_bias: Vec<f32>,
    /// `bn.running_mean[CONV_CHANNELS]`.
    pub running_mean: Vec<f32>,
    /// `bn.running_var[CONV_CHANNELS]`.
    pub running_var: Vec<f32>,
    /// `fc.weight[CLASSES, FEATURES]`.
    pub fc_weight: Vec<f32>,
    /// `fc.bias[CLASSES]`.
    pub fc_bias: Vec<f32>,
}

impl SmallCnnWeights {
    /// Pseudo-random weights from `seed`: conv and linear layers uniform in
    /// `±1/sqrt(fan_in)`, gamma near 1, beta near 0, running statistics away from their
    /// defaults so their update is visible.
    pub fn random(seed: u64) -> Self {
        let mut rng = SplitMix::new(seed);
        let conv_bound = 1.0 / ((IN_CHANNELS * KERNEL * KERNEL) as f32).sqrt();
        let fc_bound = 1.0 / (FEATURES as f32).sqrt();
        let c = CONV_CHANNELS;
        Self {
            conv_weight: uniform(
                &mut rng,
                c * IN_CHANNELS * KERNEL * KERNEL,
                -conv_bound,
                conv_bound,
            ),
            conv_bias: uniform(&mut rng, c, -conv_bound, conv_bound),
            bn_weight: uniform(&mut rng, c, 0.8, 1.2),
            bn_bias: uniform(&mut rng, c, -0.1, 0.1),
            running_mean: uniform(&mut rng, c, -0.2, 0.2),
            running_var: uniform(&mut rng, c, 0.5, 1.5),
            fc_weight: uniform(&mut rng, CLASSES * FEATURES, -fc_bound, fc_bound),
            fc_bias: uniform(&mut rng, CLASSES, -fc_bound, fc_bound),
        }
    }
}

/// A recorded classifier and the tensors a test feeds and reads.
pub struct SmallCnn {
    pub graph: Graph,
    /// `image[BATCH, IN_CHANNELS, SIZE, SIZE]`.
    pub image: TensorId,
    /// `label[BATCH]` (i32).
    pub labels: TensorId,
    /// `fc[BATCH, CLASSES]`.
    pub logits: TensorId,
    /// `loss[]`, the mean cross-entropy.
    pub loss: TensorId,
    /// `conv.weight`, `conv.bias`, `bn.weight`, `bn.bias`, `fc.weight`, `fc.bias`.
    pub parameters: Vec<TensorId>,
}

impl SmallCnn {
    /// The parameter called `name`.
    pub fn parameter(&self, name: &str) -> TensorId {
        self.graph.find(name).unwrap_or_else(|| panic!("no tensor named '{name}'"))
    }
}

/// `conv(3x3, pad 1, bias) → batch_norm2d → relu → max_pool2d(2x2) → flatten → linear →
/// cross_entropy` over `image[4, 2, 6, 6]`, with the given initial weights. Tensor names:
/// `image`, `label`, `conv.*`, `bn.*` (running statistics `bn.running_mean` and
/// `bn.running_var`), `fc.*`, `loss`.
pub fn small_cnn(w: &SmallCnnWeights) -> Result<SmallCnn, GraphError> {
    let mut g = Graph::new(1);
    let c = CONV_CHANNELS;
    let image = g.input("image", Shape::d4(BATCH, IN_CHANNELS, SIZE, SIZE))?;
    let labels = g.labels("label", BATCH)?;
    let values = |v: &Vec<f32>| Init::Values(v.clone());
    let conv_w = g.parameter(
        "conv.weight",
        Shape::d4(c, IN_CHANNELS, KERNEL, KERNEL),
        values(&w.conv_weight),
    )?;
    let conv_b = g.parameter("conv.bias", Shape::d1(c), values(&w.conv_bias))?;
    let gamma = g.parameter("bn.weight", Shape::d1(c), values(&w.bn_weight))?;
    let beta = g.parameter("bn.bias", Shape::d1(c), values(&w.bn_bias))?;
    let mean = g.buffer("bn.running_mean", Shape::d1(c), values(&w.running_mean))?;
    let var = g.buffer("bn.running_var", Shape::d1(c), values(&w.running_var))?;
    let fc_w = g.parameter("fc.weight", Shape::d2(CLASSES, FEATURES), values(&w.fc_weight))?;
    let fc_b = g.parameter("fc.bias", Shape::d1(CLASSES), values(&w.fc_bias))?;

    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = g.conv2d("conv", image, conv_w, Some(conv_b), same)?;
    let h = g.batch_norm2d("bn", h, gamma, beta, mean, var, BatchNormConfig::default())?;
    let h = g.relu("relu", h)?;
    let h = g.max_pool2d("pool", h, pool2x2())?;
    let h = g.flatten("flatten", h)?;
    let logits = g.linear("fc", h, fc_w, Some(fc_b))?;
    let loss = g.cross_entropy("loss", logits, labels)?;
    let parameters = vec![conv_w, conv_b, gamma, beta, fc_w, fc_b];
    Ok(SmallCnn { graph: g, image, labels, logits, loss, parameters })
}

/// A 2x2 max-pool window with stride 2 and no padding.
pub fn pool2x2() -> PoolParams {
    PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true }
}

/// Samples per batch of [`residual_cnn`].
pub const RES_BATCH: usize = 4;
/// Input shape of [`residual_cnn`].
pub const RES_INPUT: Shape = Shape::d4(RES_BATCH, 2, 8, 8);
/// Classes of [`residual_cnn`].
pub const RES_CLASSES: usize = 4;

/// A residual CNN with every kind of layer whose execution should not allocate:
/// `conv1 → bn1 → relu → conv2 → bn2 → add(skip) → relu → max_pool → global_avg_pool →
/// dropout → fc → cross_entropy` (default initialisation). Names: `image`, `label`, `fc`,
/// `loss`.
pub fn residual_cnn() -> Result<SmallCnn, GraphError> {
    let mut g = Graph::new(7);
    let image = g.input("image", RES_INPUT)?;
    let labels = g.labels("label", RES_BATCH)?;
    let same = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(&mut g, "conv1", image, 4, 3, same, false)?;
    let h = nn::batch_norm2d(&mut g, "bn1", h)?;
    let skip = g.relu("relu1", h)?;
    let h = nn::conv2d(&mut g, "conv2", skip, 4, 3, same, true)?;
    let h = nn::batch_norm2d(&mut g, "bn2", h)?;
    let h = g.add("residual", h, skip)?;
    let h = g.relu("relu2", h)?;
    let h = g.max_pool2d("pool", h, pool2x2())?;
    let h = g.global_avg_pool("gap", h)?;
    let h = g.dropout("drop", h, DropoutConfig { p: 0.25, seed: 11 })?;
    let logits = nn::linear(&mut g, "fc", h, RES_CLASSES)?;
    let loss = g.cross_entropy("loss", logits, labels)?;
    let parameters = g.parameters().collect();
    Ok(SmallCnn { graph: g, image, labels, logits, loss, parameters })
}
