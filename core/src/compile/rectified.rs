//! A rectifier's gradient folded into the parameter gradient of the batch norm before it:
//! the batch norm's kernel gates the rectifier's output gradient itself, recomputing each
//! pre-activation from the batch norm's input, so the rectifier's output is not read again.

use super::Lowered;
use crate::graph::Graph;
use crate::kernel::KernelCall;
use crate::ops::Op;
use crate::reference::Rectifier;
use crate::tensor::TensorId;
use alloc::vec;
use alloc::vec::Vec;

/// Where each tensor comes from: the node that outputs it, and the forward kernel each
/// node lowered to.
pub(super) struct Sources<'a> {
    graph: &'a Graph,
    producer: Vec<Option<usize>>,
    kernel: Vec<Option<KernelCall>>,
}

impl<'a> Sources<'a> {
    pub(super) fn new(graph: &'a Graph, lowered: &[Lowered]) -> Self {
        let mut producer = vec![None; graph.tensors().len()];
        for (n, node) in graph.nodes().iter().enumerate() {
            for t in &node.outputs {
                producer[t.index()] = Some(n);
            }
        }
        let mut kernel = vec![None; graph.nodes().len()];
        for l in lowered {
            kernel[l.node] = Some(l.kernel);
        }
        Self { graph, producer, kernel }
    }

    /// The node that outputs `t`, with its index.
    fn producer(&self, t: TensorId) -> Option<(usize, &'a crate::graph::Node)> {
        let n = self.producer[t.index()]?;
        Some((n, &self.graph.nodes()[n]))
    }

    /// The fused step for a rectifier's gradient `relu_grad` (`y, dy → g`, run in place over
    /// `dy`) followed by `params` (`g, x, mean, invstd → dgamma, dbeta`): when `y` is the
    /// rectifier's output of the pre-activation that a training batch norm normalised from
    /// `x` with that `mean` and `invstd`, the batch norm's parameter gradient gates `dy` in
    /// place (`x, gamma, beta, mean, invstd, [dy], dgamma, dbeta`).
    pub(super) fn fuse(
        &self,
        relu_grad: &Lowered,
        params: &Lowered,
    ) -> Option<(KernelCall, Vec<TensorId>)> {
        let relu6 = match relu_grad.kernel {
            KernelCall::ReluGrad(_) => false,
            KernelCall::Relu6Grad(_) => true,
            _ => return None,
        };
        let KernelCall::BatchNormGradParams(dims) = params.kernel else { return None };
        let [y, _, g] = relu_grad.operands[..] else { return None };
        let [dy_of_params, x, mean, invstd, dgamma, dbeta] = params.operands[..] else {
            return None;
        };
        let (_, rectifier) = self.producer(y)?;
        let rectified = match rectifier.op {
            Op::Relu => !relu6,
            Op::Relu6 => relu6,
            _ => false,
        };
        let (norm_index, norm) = self.producer(*rectifier.inputs.first()?)?;
        // The forward kernels that normalise with the statistics they save, by the
        // arithmetic the fused kernel repeats.
        let trained = matches!(
            self.kernel[norm_index],
            Some(KernelCall::BatchNormTrain(..) | KernelCall::BatchNormRunning(..))
        );
        let same_norm = matches!(norm.op, Op::BatchNorm2d(_))
            && norm.inputs.first() == Some(&x)
            && norm.outputs.get(1..3) == Some(&[mean, invstd][..]);
        if !(rectified && trained && same_norm && dy_of_params == g) {
            return None;
        }
        let (gamma, beta) = (*norm.inputs.get(1)?, *norm.inputs.get(2)?);
        let kernel = KernelCall::BatchNormGradParamsRectified(dims, Rectifier { relu6 });
        Some((kernel, vec![x, gamma, beta, mean, invstd, g, dgamma, dbeta]))
    }
}
