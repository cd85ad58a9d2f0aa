//! Dilated convolutions: a kernel dilated by `d` is the kernel with `d - 1` zeros between
//! neighbouring taps, so a dilated convolution is an ordinary one over spread-out weights.
//! The spreading is recorded from reshape, pad and slice (whose gradients gather the taps
//! back, so only the real taps train) and recognised again where the dilation is written out
//! (ONNX export): one list of steps, [`steps`], is both recorded and matched.

use crate::builder::invalid;
use crate::graph::{Graph, GraphError};
use crate::op::{ConvParams, Op, SliceParams};
use crate::shape::Shape;
use crate::tensor::{Role, TensorId};
use alloc::format;
use alloc::vec::Vec;

/// Spreads the OIHW kernel of `dims` by `dilation` (height, width): per spatial axis of
/// length `k > 1` dilated by `d > 1`, seen as `[a, k, b]`, the four steps
/// `reshape [a·k, 1, b]`, `pad to [a·k, d, b]`, `reshape [a, k·d·b]` and `slice the first
/// ((k − 1)·d + 1)·b`, then one reshape back to 4-D. Empty when nothing spreads.
fn steps(dims: [usize; 4], dilation: (usize, usize)) -> Vec<(Op, Shape)> {
    let [o, c, kh, kw] = dims;
    let spread = |k: usize, d: usize| (k - 1) * d + 1;
    let mut out = Vec::new();
    // Width first (inner extent 1), then height (inner extent the spread width).
    let kw2 = spread(kw, dilation.1);
    for (k, d, a, b) in [(kw, dilation.1, o * c * kh, 1), (kh, dilation.0, o * c, kw2)] {
        if k > 1 && d > 1 {
            out.push((Op::Reshape, Shape::d3(a * k, 1, b)));
            out.push((Op::Pad(SliceParams { axis: 1, start: 0 }), Shape::d3(a * k, d, b)));
            out.push((Op::Reshape, Shape::d2(a, k * d * b)));
            out.push((
                Op::Slice(SliceParams { axis: 1, start: 0 }),
                Shape::d2(a, spread(k, d) * b),
            ));
        }
    }
    if !out.is_empty() {
        out.push((Op::Reshape, Shape::d4(o, c, spread(kh, dilation.0), kw2)));
    }
    out
}

/// A dilated kernel found by [`Graph::kernel_dilation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dilated {
    /// The parameter holding the real taps.
    pub kernel: TensorId,
    /// Dilation along height and width.
    pub dilation: (usize, usize),
    /// The indices of the nodes that spread it, in recording order.
    pub nodes: Vec<usize>,
}

impl Graph {
    /// A 2-D convolution whose OIHW kernel `w` is dilated by `dilation` (height, width):
    /// ONNX's and PyTorch's `dilation`. `w` keeps its shape; the convolution runs over the
    /// spread-out kernel (nodes `{name}.dilate{i}`), so it costs the MACs of that kernel.
    pub fn dilated_conv2d(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        params: ConvParams,
        dilation: (usize, usize),
    ) -> Result<TensorId, GraphError> {
        let op = Op::Conv2d(params);
        let ws = self.float_rank(op, name, w, 4)?;
        if dilation.0 == 0 || dilation.1 == 0 {
            return Err(invalid(op, name, format!("dilation {dilation:?} must be positive")));
        }
        let dims = [ws.dims()[0], ws.dims()[1], ws.dims()[2], ws.dims()[3]];
        let spread = |k: usize, d: usize| k.saturating_sub(1).checked_mul(d)?.checked_add(1);
        let fits = spread(dims[2], dilation.0)
            .zip(spread(dims[3], dilation.1))
            .and_then(|(h, w)| dims[0].checked_mul(dims[1])?.checked_mul(h)?.checked_mul(w));
        if fits.is_none() {
            return Err(invalid(op, name, format!("dilation {dilation:?} is too large")));
        }
        let mut kernel = w;
        for (i, (step, shape)) in steps(dims, dilation).into_iter().enumerate() {
            let step_name = format!("{name}.dilate{i}");
            kernel = match step {
                Op::Pad(p) => self.pad(&step_name, kernel, p.axis, 0, shape.dims()[1] - 1)?,
                Op::Slice(p) => self.slice(&step_name, kernel, p.axis, 0, shape.dims()[1])?,
                _ => self.reshape(&step_name, kernel, shape)?,
            };
        }
        self.conv2d(name, x, kernel, b, params)
    }

    /// Whether the convolution kernel `w` is a parameter spread by
    /// [`Graph::dilated_conv2d`] (with a dilation other than 1), its spreading nodes read
    /// by nothing else.
    pub fn kernel_dilation(&self, w: TensorId) -> Option<Dilated> {
        let producer =
            |t: TensorId| self.nodes().iter().position(|n| n.outputs.first() == Some(&t));
        let readers = |t: TensorId| {
            self.nodes().iter().filter(|n| n.inputs.contains(&t) || n.state.contains(&t)).count()
        };
        let is_param =
            |t: TensorId| matches!(self.tensor(t).role, Role::FrozenParam | Role::TrainableParam);
        // At most two axes of four steps and the final reshape.
        let mut nodes = Vec::new();
        let mut t = w;
        while nodes.len() < 9 {
            let i = producer(t)?;
            let node = &self.nodes()[i];
            if !matches!(node.op, Op::Reshape | Op::Pad(_) | Op::Slice(_)) || node.inputs.len() != 1
            {
                return None;
            }
            if t != w && readers(t) != 1 {
                return None;
            }
            nodes.push(i);
            t = node.inputs[0];
            if is_param(t) {
                break;
            }
        }
        if !is_param(t) {
            return None;
        }
        nodes.reverse();
        let (from, to) = (self.shape(t), self.shape(w));
        let (&[o, c, kh, kw], &[_, _, kh2, kw2]) = (from.dims(), to.dims()) else {
            return None;
        };
        let factor = |k: usize, k2: usize| match k {
            1 => Some(1),
            _ => k2.checked_sub(1)?.checked_div(k - 1).filter(|d| (k - 1) * d + 1 == k2),
        };
        let dilation = (factor(kh, kh2)?, factor(kw, kw2)?);
        let expected = steps([o, c, kh, kw], dilation);
        let recorded = nodes.iter().map(|&i| {
            let node = &self.nodes()[i];
            (node.op, self.shape(node.outputs[0]))
        });
        (!expected.is_empty() && expected.iter().copied().eq(recorded)).then_some(Dilated {
            kernel: t,
            dilation,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Init;
    use alloc::string::ToString;

    fn conv(dilation: (usize, usize), kernel: (usize, usize)) -> (Graph, TensorId, TensorId) {
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d4(1, 2, 9, 9)).unwrap();
        let w = g.parameter("w", Shape::d4(3, 2, kernel.0, kernel.1), Init::Zeros).unwrap();
        let p = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
        let y = g.dilated_conv2d("conv", x, w, None, p, dilation).unwrap();
        (g, w, y)
    }

    #[test]
    fn the_kernel_spreads_to_the_dilated_extent_and_is_recognised_again() {
        for (dilation, kernel, out) in
            [((2, 2), (3, 3), (5, 5)), ((3, 1), (3, 2), (3, 8)), ((1, 2), (1, 3), (9, 5))]
        {
            let (g, w, y) = conv(dilation, kernel);
            assert_eq!(g.shape(y), Shape::d4(1, 3, out.0, out.1), "{dilation:?} {kernel:?}");
            let conv = g.nodes().last().unwrap();
            let found = g.kernel_dilation(conv.inputs[1]).unwrap();
            assert_eq!((found.kernel, found.dilation), (w, dilation));
            assert_eq!(found.nodes.len(), g.nodes().len() - 1);
        }
    }

    #[test]
    fn no_dilation_records_a_plain_convolution_and_zero_is_refused() {
        let (g, w, _) = conv((1, 1), (3, 3));
        assert_eq!(g.nodes().len(), 1);
        assert_eq!(g.kernel_dilation(w), None);
        let (g, _, _) = conv((4, 4), (1, 1));
        assert_eq!(g.nodes().len(), 1);
        let mut g = Graph::new(1);
        let x = g.input("x", Shape::d4(1, 2, 9, 9)).unwrap();
        let w = g.parameter("w", Shape::d4(3, 2, 3, 3), Init::Zeros).unwrap();
        let p = ConvParams { stride: (1, 1), padding: (0, 0), groups: 1 };
        let err = g.dilated_conv2d("c", x, w, None, p, (0, 1)).unwrap_err();
        assert!(err.to_string().contains("dilation (0, 1) must be positive"), "{err}");
    }

    #[test]
    fn a_spread_kernel_read_elsewhere_is_not_taken_for_a_dilation() {
        let (mut g, _, _) = conv((2, 2), (3, 3));
        let spread = g.nodes().last().unwrap().inputs[1];
        let first = g.nodes()[0].outputs[0];
        g.relu("other", first).unwrap();
        assert_eq!(g.kernel_dilation(spread), None);
    }
}
