//! An int8 depthwise layer's backward pass run a channel at a time through the layer before
//! it: for each channel, the depthwise input gradient (gathered from the clamped output
//! gradient), stopped by the earlier layer's clamp mask, summed into that layer's bias
//! gradient and, for a 1x1 layer, carried into its input gradient. No gradient of the
//! hidden channels is ever stored, and every value is bit for bit what the unfused kernels
//! ([`conv2d_grad_input_s8`](super::backward::conv2d_grad_input_s8), `mask_grad`,
//! `bias_grad`) give: each sum adds the same terms in the same order.

use super::backward::passes;
use crate::geometry::Conv2dGeometry;
use crate::memory::{Host, Memory};

/// What the fused pass reads of the depthwise layer: its output gradient after its own
/// clamp (`[N, C, out_h, out_w]`), its int8 weights `[C, 1, kh, kw]` and their scales, the
/// clamp mask of its input (the earlier layer's output, one bit per value) and its shape
/// (`groups == c_in == c_out`).
#[derive(Clone, Copy)]
pub struct DepthwiseChainArgs<'a, M: Memory> {
    pub dy: M::Slice<'a, f32>,
    pub w: M::Slice<'a, i8>,
    pub w_scale: M::Slice<'a, f32>,
    pub mask: M::Slice<'a, i8>,
    pub shape: Conv2dGeometry,
}

/// The 1x1 layer before the depthwise one: its int8 weights `[C, inputs]` and their scales.
#[derive(Clone, Copy)]
pub struct PointwiseWeights<'a, M: Memory> {
    pub w: M::Slice<'a, i8>,
    pub w_scale: M::Slice<'a, f32>,
    pub inputs: usize,
}

/// The 1x1 projection after the depthwise layer, whose input gradient the fused pass makes
/// itself, a channel plane at a time: its int8 weights `[outputs, C]`, their scales and the
/// depthwise layer's clamp mask (its output, one bit per value).
#[derive(Clone, Copy)]
pub struct ProjectionArgs<'a, M: Memory> {
    pub w: M::Slice<'a, i8>,
    pub w_scale: M::Slice<'a, f32>,
    pub mask: M::Slice<'a, i8>,
    pub outputs: usize,
}

/// What a whole block's fused backward pass writes: the depthwise layer's bias gradient,
/// the layer before's, the block's input gradient and one output plane of scratch.
#[derive(Debug)]
pub struct BlockGrads<'a, M: Memory> {
    pub db_depthwise: M::SliceMut<'a, f32>,
    pub db: M::SliceMut<'a, f32>,
    pub dx: M::SliceMut<'a, f32>,
    pub scratch: M::SliceMut<'a, f32>,
}

/// `db[c]` = the earlier layer's bias gradient (real units) and, given the 1x1 layer
/// `before`, its input gradient `dx [N, inputs, h, w]`, overwritten; `a.dy` is the
/// depthwise layer's output gradient after its clamp.
pub fn depthwise_chain_grad(
    a: &DepthwiseChainArgs<'_, Host>,
    db: &mut [f32],
    before: Option<(&PointwiseWeights<'_, Host>, &mut [f32])>,
) {
    run(a, None, db, before)
}

/// A whole inverted-residual block's backward pass from `a.dy`, the gradient of the block's
/// output (the projection's, after its clamp): per channel, the projection's input
/// gradient into `scratch`, the depthwise clamp and bias gradient, then
/// [`depthwise_chain_grad`]'s work.
pub fn block_grad(
    a: &DepthwiseChainArgs<'_, Host>,
    projection: &ProjectionArgs<'_, Host>,
    before: &PointwiseWeights<'_, Host>,
    out: BlockGrads<'_, Host>,
) {
    let BlockGrads { db_depthwise, db, dx, scratch } = out;
    run(a, Some((projection, db_depthwise, scratch)), db, Some((before, dx)))
}

/// [`block_grad`] without the block's input gradient: the bias gradients alone.
pub fn block_bias_grad(
    a: &DepthwiseChainArgs<'_, Host>,
    projection: &ProjectionArgs<'_, Host>,
    db_depthwise: &mut [f32],
    db: &mut [f32],
    scratch: &mut [f32],
) {
    run(a, Some((projection, db_depthwise, scratch)), db, None)
}

/// The projection of [`block_grad`] with its bias gradient and scratch plane.
type Projection<'p, 'a> = (&'p ProjectionArgs<'a, Host>, &'p mut [f32], &'p mut [f32]);

fn run(
    a: &DepthwiseChainArgs<'_, Host>,
    mut projection: Option<Projection<'_, '_>>,
    db: &mut [f32],
    mut before: Option<(&PointwiseWeights<'_, Host>, &mut [f32])>,
) {
    let g = &a.shape;
    let (plane, out_plane) = (g.h * g.w, g.out_h * g.out_w);
    if let Some((_, dx)) = before.as_mut() {
        dx.fill(0.0);
    }
    for (c, db) in db.iter_mut().enumerate().take(g.c_out) {
        let (mut sum, mut depthwise_sum) = (0.0, 0.0);
        for n in 0..g.n {
            let dy = match projection.as_mut() {
                Some((p, _, scratch)) => {
                    let scratch = &mut scratch[..out_plane];
                    projection_plane(a, p, (n, c), scratch, &mut depthwise_sum);
                    &*scratch
                }
                None => &a.dy[(n * g.c_out + c) * out_plane..][..out_plane],
            };
            let first = (n * g.c_out + c) * plane;
            for (i, (iy, ix)) in (0..g.h).flat_map(|y| (0..g.w).map(move |x| (y, x))).enumerate() {
                let v = match passes(a.mask, first + i) {
                    true => tap_sum(a, dy, c, (iy, ix)),
                    false => 0.0,
                };
                sum += v;
                if let Some((p, dx)) = before.as_mut() {
                    let (k, scale) = (p.inputs, p.w_scale[c]);
                    for (j, &q) in p.w[c * k..][..k].iter().enumerate() {
                        dx[(n * k + j) * plane + i] += v * (scale * f32::from(q));
                    }
                }
            }
        }
        *db = sum;
        if let Some((_, db_depthwise, _)) = projection.as_mut() {
            db_depthwise[c] = depthwise_sum;
        }
    }
}

/// The projection's input gradient for channel `c` of sample `n` (its output gradient
/// `a.dy` through its weights, outputs in order), stopped by the depthwise clamp, into
/// `plane`, each value added to `sum` in turn (the depthwise bias gradient's order).
fn projection_plane(
    a: &DepthwiseChainArgs<'_, Host>,
    p: &ProjectionArgs<'_, Host>,
    (n, c): (usize, usize),
    plane: &mut [f32],
    sum: &mut f32,
) {
    let (channels, len) = (a.shape.c_out, plane.len());
    let first = (n * channels + c) * len;
    for (o, out) in plane.iter_mut().enumerate() {
        let mut acc = 0.0;
        for (j, &scale) in p.w_scale[..p.outputs].iter().enumerate() {
            let weight = scale * f32::from(p.w[j * channels + c]);
            acc += a.dy[(n * p.outputs + j) * len + o] * weight;
        }
        *out = if passes(p.mask, first + o) { acc } else { 0.0 };
        *sum += *out;
    }
}

/// The depthwise input gradient of channel `c` at `(iy, ix)`: the output gradients `dy`
/// (that channel's plane) that read it, output rows then columns ascending, as the
/// reference's scatter adds them.
fn tap_sum(
    a: &DepthwiseChainArgs<'_, Host>,
    dy: &[f32],
    c: usize,
    (iy, ix): (usize, usize),
) -> f32 {
    let g = &a.shape;
    let scale = a.w_scale[c];
    let w = &a.w[c * g.kh * g.kw..][..g.kh * g.kw];
    let mut acc = 0.0;
    for (oy, ky) in taps(iy, g.kh, g.stride.0, g.padding.0, g.out_h) {
        for (ox, kx) in taps(ix, g.kw, g.stride.1, g.padding.1, g.out_w) {
            acc += dy[oy * g.out_w + ox] * (scale * f32::from(w[ky * g.kw + kx]));
        }
    }
    acc
}

/// The outputs `o` (ascending) whose window of `k` taps reads input coordinate `i`, each
/// with the tap that does (`o · stride + tap − padding = i`).
fn taps(
    i: usize,
    k: usize,
    stride: usize,
    padding: usize,
    out: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let reach = i + padding;
    let first = (reach + 1).saturating_sub(k).div_ceil(stride.max(1));
    let end = (reach / stride.max(1) + 1).min(out);
    (first..end).map(move |o| (o, reach - o * stride))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{window_output, ChannelDims};
    use crate::quant::backward::{clamp_mask, conv2d_grad_input_s8, mask_bytes, mask_grad};
    use crate::reference::dense::bias_grad;
    use crate::rng::SplitMix;
    use alloc::vec;
    use alloc::vec::Vec;

    fn reals(rng: &mut SplitMix, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| rng.uniform(lo, hi)).collect()
    }

    fn codes(rng: &mut SplitMix, n: usize) -> Vec<i8> {
        (0..n).map(|_| rng.uniform(-127.0, 127.0) as i8).collect()
    }

    /// A clamp mask over `len` outputs, about a third of them saturated.
    fn mask(rng: &mut SplitMix, len: usize) -> Vec<i8> {
        let y: Vec<i8> = (0..len).map(|_| rng.uniform(-128.0, 127.0) as i8).collect();
        let mut mask = vec![0; mask_bytes(len)];
        clamp_mask(&y, &mut mask, (-50, 80));
        mask
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn conv(n: usize, c_in: usize, hw: (usize, usize), c_out: usize, k: usize, s: Pair) -> G {
        let out = |size| window_output(size, k, s.0, k / 2).unwrap();
        let out_w = window_output(hw.1, k, s.1, k / 2).unwrap();
        let groups = if k == 1 { 1 } else { c_in };
        G {
            n,
            c_in,
            h: hw.0,
            w: hw.1,
            c_out,
            kh: k,
            kw: k,
            stride: s,
            padding: (k / 2, k / 2),
            groups,
            out_h: out(hw.0),
            out_w,
        }
    }

    type G = Conv2dGeometry;
    type Pair = (usize, usize);

    /// A block (1x1 expansion to `c` channels, depthwise, 1x1 projection) run fused and
    /// through the unfused kernels gives the same bits: both bias gradients and the block's
    /// input gradient, and so do the fused chains that start at the depthwise layer.
    #[test]
    fn fused_blocks_match_the_unfused_kernels_bit_for_bit() {
        // (batch, block inputs, hidden channels, projection outputs, height, width, stride)
        let cases =
            [(2, 3, 6, 4, 7, 5, (2, 2)), (1, 2, 5, 7, 6, 6, (1, 1)), (2, 4, 3, 2, 5, 8, (2, 1))];
        let mut rng = SplitMix::new(0xC4A1);
        for (n, c_in, c, p, h, w, stride) in cases {
            let dw = conv(n, c, (h, w), c, 3, stride);
            let (oh, ow) = (dw.out_h, dw.out_w);
            let project = conv(n, c, (oh, ow), p, 1, (1, 1));
            let expand = conv(n, c_in, (h, w), c, 1, (1, 1));
            let dy = reals(&mut rng, project.output_len(), -1.0, 1.0);
            let (w_p, s_p) = (codes(&mut rng, p * c), reals(&mut rng, p, 0.001, 0.02));
            let (w_d, s_d) = (codes(&mut rng, dw.weight_len()), reals(&mut rng, c, 0.001, 0.02));
            let (w_e, s_e) = (codes(&mut rng, c * c_in), reals(&mut rng, c, 0.001, 0.02));
            let (m_d, m_e) = (mask(&mut rng, dw.output_len()), mask(&mut rng, dw.input_len()));
            // Unfused: the projection's input gradient, the depthwise clamp and bias
            // gradient, its input gradient, the expansion's clamp, bias and input gradients.
            let hidden = |len| vec![f32::NAN; len];
            let (mut p2, mut g) = (hidden(dw.output_len()), hidden(dw.output_len()));
            conv2d_grad_input_s8(&dy, &w_p, &s_p, &mut p2, &project);
            mask_grad(&m_d, &p2, &mut g);
            let (mut db_d, mut db_e) = (vec![0.0; c], vec![0.0; c]);
            bias_grad(&g, &mut db_d, ChannelDims { outer: n, channels: c, inner: oh * ow });
            let (mut t1, mut t2) = (hidden(dw.input_len()), hidden(dw.input_len()));
            conv2d_grad_input_s8(&g, &w_d, &s_d, &mut t1, &dw);
            mask_grad(&m_e, &t1, &mut t2);
            bias_grad(&t2, &mut db_e, ChannelDims { outer: n, channels: c, inner: h * w });
            let mut dx = hidden(expand.input_len());
            conv2d_grad_input_s8(&t2, &w_e, &s_e, &mut dx, &expand);
            assert!(db_e.iter().chain(&dx).all(|v| v.is_finite()) && dx.iter().any(|&v| v != 0.0));

            let projection =
                ProjectionArgs::<Host> { w: &w_p, w_scale: &s_p, mask: &m_d, outputs: p };
            let a = DepthwiseChainArgs::<Host> {
                dy: &dy,
                w: &w_d,
                w_scale: &s_d,
                mask: &m_e,
                shape: dw,
            };
            let before = PointwiseWeights::<Host> { w: &w_e, w_scale: &s_e, inputs: c_in };
            let (mut got_d, mut got_e, mut got_dx) = (hidden(c), hidden(c), hidden(dx.len()));
            let mut scratch = hidden(oh * ow);
            let out = BlockGrads::<Host> {
                db_depthwise: &mut got_d,
                db: &mut got_e,
                dx: &mut got_dx,
                scratch: &mut scratch,
            };
            block_grad(&a, &projection, &before, out);
            assert_eq!(bits(&got_d), bits(&db_d));
            assert_eq!(bits(&got_e), bits(&db_e));
            assert_eq!(bits(&got_dx), bits(&dx));
            let (mut only_d, mut only_e) = (hidden(c), hidden(c));
            block_bias_grad(&a, &projection, &mut only_d, &mut only_e, &mut scratch);
            assert_eq!((bits(&only_d), bits(&only_e)), (bits(&db_d), bits(&db_e)));
            // From the depthwise layer's clamped output gradient instead.
            let a = DepthwiseChainArgs::<Host> { dy: &g, ..a };
            let (mut chain_e, mut chain_dx) = (hidden(c), hidden(dx.len()));
            depthwise_chain_grad(&a, &mut chain_e, Some((&before, &mut chain_dx)));
            assert_eq!((bits(&chain_e), bits(&chain_dx)), (bits(&db_e), bits(&dx)));
            depthwise_chain_grad(&a, &mut chain_e, None);
            assert_eq!(bits(&chain_e), bits(&db_e));
        }
    }
}
