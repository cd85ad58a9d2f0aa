//! Classification metrics: mean cross-entropy, accuracy, per-class accuracy and the
//! confusion matrix (rows: true class, columns: predicted class).

/// Metrics over a set of samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    loss_sum: f64,
    /// `confusion[true][predicted]`: sample counts.
    pub confusion: Vec<Vec<u64>>,
}

impl Metrics {
    pub fn new(classes: usize) -> Self {
        Self { loss_sum: 0.0, confusion: vec![vec![0; classes]; classes] }
    }

    /// Adds one sample's logits and true class.
    pub fn add(&mut self, logits: &[f32], label: usize) {
        self.loss_sum += log_sum_exp(logits) - f64::from(logits[label]);
        self.confusion[label][argmax(logits)] += 1;
    }

    pub fn samples(&self) -> u64 {
        self.confusion.iter().flatten().sum()
    }

    /// Mean cross-entropy.
    pub fn loss(&self) -> f64 {
        self.loss_sum / self.samples().max(1) as f64
    }

    /// Share of samples whose largest logit is the true class.
    pub fn accuracy(&self) -> f64 {
        let right: u64 = (0..self.confusion.len()).map(|c| self.confusion[c][c]).sum();
        right as f64 / self.samples().max(1) as f64
    }

    /// Accuracy within each true class; `None` for a class without samples.
    pub fn per_class(&self) -> Vec<Option<f64>> {
        self.confusion
            .iter()
            .enumerate()
            .map(|(c, row)| {
                let total: u64 = row.iter().sum();
                (total > 0).then(|| row[c] as f64 / total as f64)
            })
            .collect()
    }
}

/// `ln(sum(exp(logits)))` in f64, shifted by the largest logit so that nothing overflows:
/// a sample's cross-entropy is this minus its true class's logit, and `logit - this` is a
/// log-probability.
pub(crate) fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    max + sum.ln()
}

/// The index of the largest value (the first of equals).
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

/// Softmax probabilities of one row of logits.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let exp: Vec<f32> = logits.iter().map(|&v| (v - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}
