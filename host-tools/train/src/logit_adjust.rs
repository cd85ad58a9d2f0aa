//! Logit adjustment for label skew (Menon et al. 2021, "Long-tail learning via logit
//! adjustment"; the balanced softmax of FedLC, Zhang et al. 2022): the training loss reads
//! `logits + tau * ln(prior)`, the prior being the training set's class frequencies, so a
//! data set that holds mostly one class does not pull the classifier towards it. Only the
//! training step's loss changes; evaluation and the saved model read the plain logits.

use sprout_core::op::Op;
use sprout_core::{Graph, Init, Shape, TensorId};

use crate::TrainError;

/// The adjustment's strength and the class counts its prior comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitAdjust {
    /// `tau`: finite, 0 or more (0: the plain loss).
    pub tau: f32,
    /// Training samples per class, in the model's class order; a class without samples
    /// counts as one, so every class keeps a finite prior.
    pub class_counts: Vec<usize>,
}

impl LogitAdjust {
    /// `tau * ln(prior_c)` per class: the offsets the loss adds to every row of logits.
    pub fn offsets(&self) -> Result<Vec<f32>, TrainError> {
        let tau = self.tau;
        if !(tau.is_finite() && tau >= 0.0) {
            return Err(TrainError::Mismatch(format!(
                "--logit-adjust {tau}: give a finite value of 0 or more"
            )));
        }
        let counts: Vec<f64> = self.class_counts.iter().map(|&n| n.max(1) as f64).collect();
        let total: f64 = counts.iter().sum();
        Ok(counts.iter().map(|n| (f64::from(tau) * (n / total).ln()) as f32).collect())
    }
}

/// `graph` with a loss that reads the adjusted logits: the cross-entropy node that writes
/// `loss` is recorded again on `logits + offsets` (a frozen parameter holding the offsets
/// once per row), and the new loss is returned with the graph. The original nodes stay,
/// so every tensor id of `graph` keeps its meaning.
pub fn adjusted_loss(
    graph: &Graph,
    loss: TensorId,
    adjust: &LogitAdjust,
) -> Result<(Graph, TensorId), TrainError> {
    let offsets = adjust.offsets()?;
    let node = graph
        .nodes()
        .iter()
        .find(|n| n.outputs.contains(&loss) && n.op == Op::CrossEntropy)
        .ok_or_else(|| {
            TrainError::Mismatch("--logit-adjust: the model's loss is not a cross-entropy".into())
        })?;
    let (logits, labels) = (node.inputs[0], node.inputs[1]);
    let dims = graph.shape(logits).dims().to_vec();
    let &[rows, classes] = dims.as_slice() else {
        return Err(TrainError::Mismatch(format!(
            "--logit-adjust: the logits have shape {dims:?}, not [batch, classes]"
        )));
    };
    if classes != offsets.len() {
        return Err(TrainError::Mismatch(format!(
            "--logit-adjust: the model has {classes} classes, the data's counts {}",
            offsets.len()
        )));
    }
    let mut adjusted = graph.clone();
    let tiled = offsets.iter().copied().cycle().take(rows * classes).collect();
    let shape = Shape::d2(rows, classes);
    let offset = adjusted.parameter("logit_adjust.offsets", shape, Init::Values(tiled))?;
    let shifted = adjusted.add("logit_adjust.logits", logits, offset)?;
    let new_loss = adjusted.cross_entropy("logit_adjust.loss", shifted, labels)?;
    Ok((adjusted, new_loss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offsets_are_tau_times_the_log_prior() {
        let adjust = LogitAdjust { tau: 2.0, class_counts: vec![24, 6, 6, 0] };
        let offsets = adjust.offsets().unwrap();
        let total = 37.0f64;
        let expected = [24.0, 6.0, 6.0, 1.0].map(|n: f64| (2.0 * (n / total).ln()) as f32);
        assert_eq!(offsets, expected);
        let off = LogitAdjust { tau: 0.0, class_counts: vec![3, 1] };
        assert_eq!(off.offsets().unwrap(), [0.0, 0.0]);
        for tau in [-0.5, f32::NAN, f32::INFINITY] {
            let bad = LogitAdjust { tau, class_counts: vec![1, 1] };
            let refused = bad.offsets().unwrap_err().to_string();
            assert!(refused.contains("give a finite value of 0 or more"), "{refused}");
        }
    }
}
