//! Stride-1 "same" depthwise convolution (odd `k x k` filters padded by `(k - 1) / 2`, so
//! every plane keeps its size) read and written in place, without padded copies.
//!
//! The whole `[N·C, H, W]` tensor is one flat run: output `q` of a plane reads input `q +
//! offset[t]` through tap `t` (`offset[t] = (ky - py)·W + kx - px`), cut into [`BLOCK`]-wide
//! register accumulators. A plane holds whole blocks (`H·W` is a multiple of `BLOCK`), so
//! each block lies in one plane, and block `m` of a plane always has the same taps inside
//! the plane and the same ones off its borders: a 0/1 mask per (block of a plane, tap),
//! worked out once per call, multiplies the tap's weight, so the reads a border would have
//! padded (they land in a neighbouring row or plane) count zero. Blocks whose reads would
//! leave the tensor (the first and last few) take a scalar loop over the taps inside.
//!
//! The input gradient of such a filter is the same convolution of the output gradient with
//! the filter turned 180 degrees (tap `t` of the flipped filter reads at `-offset[t]`, and
//! its mask is the original's); the weight gradient correlates the output gradient, masked
//! the same way, with each tap's shifted input, summed over the batch in vector lanes.
//!
//! On AVX-512 the masks are bits of masked loads and multiply-adds: a lane off the plane
//! is neither read nor added. Elsewhere a value a border masks out still meets a zero
//! weight: a non-finite input next to a plane's border can make its neighbour's border
//! outputs NaN where the padded reference would not (finite inputs give the reference's
//! sums).

use crate::depthwise::BLOCK;
use crate::epilogue::{with_row_map, Epilogue};
use crate::gemm::{fma, RowMap};
use crate::parallel::{for_each_chunk, sum_over_batch, workers, Scratch};
use crate::pool::Pool;
use sprout_core::geometry::Conv2dGeometry;

/// Taps of the largest filter run here.
const MAX_TAPS: usize = 64;

/// Whether `g` (depthwise) runs here: stride 1, an odd square-padded filter of at most
/// [`MAX_TAPS`] taps that keeps the plane's size, and planes of whole blocks.
pub fn runs_in_place(g: &Conv2dGeometry) -> bool {
    g.stride == (1, 1)
        && g.kh == 2 * g.padding.0 + 1
        && g.kw == 2 * g.padding.1 + 1
        && (g.out_h, g.out_w) == (g.h, g.w)
        && g.kh * g.kw <= MAX_TAPS
        && (g.h * g.w).is_multiple_of(BLOCK)
}

/// Scratch values a call needs: one mask per (output of a plane, tap), in two orders, one
/// mask of bits per (block of a plane, tap), and the flipped filters of the input gradient.
pub fn scratch_len(g: &Conv2dGeometry) -> usize {
    (2 * g.h * g.w + (g.h * g.w).div_ceil(BLOCK) + g.c_in) * g.kh * g.kw
}

/// A call's shape: the taps' offsets and every tap's masks over a plane.
struct Shape<'a> {
    taps: usize,
    plane: usize,
    offsets: [isize; MAX_TAPS],
    /// Tap `t`'s mask of every output of a plane, at `t·plane`.
    masks: &'a [f32],
    /// The same masks block by block: block `m`'s, tap after tap, at `m·taps·BLOCK`.
    block_masks: &'a [f32],
    /// The same masks as bits (lane `j` in bit `j`), block `m`'s tap `t` at `m·taps + t`,
    /// each kept in an `f32`'s bits (`f32::from_bits`): the AVX-512 loops' masks.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    lane_bits: &'a [f32],
    /// Reads of a block starting at `p` span `p - reach .. p + BLOCK + reach`.
    reach: usize,
}

impl<'a> Shape<'a> {
    /// Works out the offsets and writes the masks into `scratch`.
    fn new(g: &Conv2dGeometry, scratch: &'a mut [f32]) -> Self {
        let (taps, plane, (py, px)) = (g.kh * g.kw, g.h * g.w, g.padding);
        let mut offsets = [0; MAX_TAPS];
        for (t, o) in offsets[..taps].iter_mut().enumerate() {
            let (ky, kx) = (t / g.kw, t % g.kw);
            *o = (ky as isize - py as isize) * g.w as isize + kx as isize - px as isize;
        }
        let blocks = plane / BLOCK;
        let (masks, rest) = scratch[..(2 * plane + blocks) * taps].split_at_mut(plane * taps);
        let (block_masks, lane_bits) = rest.split_at_mut(plane * taps);
        for (t, mask) in masks.chunks_exact_mut(plane).enumerate() {
            let (ky, kx) = (t / g.kw, t % g.kw);
            for (oy, row) in mask.chunks_exact_mut(g.w).enumerate() {
                let iy = (oy + ky).wrapping_sub(py);
                for (ox, m) in row.iter_mut().enumerate() {
                    let ix = (ox + kx).wrapping_sub(px);
                    *m = f32::from(u8::from(iy < g.h && ix < g.w));
                }
            }
        }
        for (m, block) in block_masks.chunks_exact_mut(taps * BLOCK).enumerate() {
            for (t, dest) in block.chunks_exact_mut(BLOCK).enumerate() {
                dest.copy_from_slice(&masks[t * plane + m * BLOCK..][..BLOCK]);
            }
        }
        for (bits, masks) in lane_bits.iter_mut().zip(block_masks.chunks_exact(BLOCK)) {
            let lanes = masks.iter().enumerate().map(|(j, &m)| u32::from(m != 0.0) << j);
            *bits = f32::from_bits(lanes.fold(0, |bits, lane| bits | lane));
        }
        let (masks, block_masks, lane_bits) = (&*masks, &*block_masks, &*lane_bits);
        Self { taps, plane, offsets, masks, block_masks, lane_bits, reach: py * g.w + px }
    }

    /// The blocks `lo..hi` of the plane at flat index `p0` whose reads all lie in `len`
    /// values; the others (at most a few at either end of the tensor) do not.
    fn inside(&self, p0: usize, len: usize) -> (usize, usize) {
        let blocks = self.plane / BLOCK;
        let lo = self.reach.saturating_sub(p0).div_ceil(BLOCK).min(blocks);
        let end = len.saturating_sub(self.reach + p0) / BLOCK;
        (lo, end.clamp(lo, blocks))
    }

    fn offsets(&self) -> &[isize] {
        &self.offsets[..self.taps]
    }
}

/// The [`BLOCK`] values of `src` from `p + offset`.
///
/// # Safety
/// `p + offset .. p + offset + BLOCK` lies in `src` (a block [`Shape::inside`] `src`).
#[inline(always)]
unsafe fn block_at(src: &[f32], p: usize, offset: isize) -> [f32; BLOCK] {
    // SAFETY: the caller keeps the block inside `src`.
    unsafe { src.as_ptr().add(p).offset(offset).cast::<[f32; BLOCK]>().read_unaligned() }
}

/// Output plane `y` from the plane starting at `x[p0]`: `y[q] = start + Σ_t w[t]·mask·x[p0 +
/// q + offset[t]]`, accumulated in registers a block at a time.
#[inline(always)]
fn plane_generic<const FUSED: bool>(
    s: &Shape,
    start: f32,
    w: &[f32],
    x: &[f32],
    p0: usize,
    y: &mut [f32],
) {
    let (lo, hi) = s.inside(p0, x.len());
    let blocks = y.chunks_exact_mut(BLOCK).zip(s.block_masks.chunks_exact(s.taps * BLOCK));
    for (m, (out, masks)) in blocks.enumerate() {
        let (q, mut acc) = (m * BLOCK, [start; BLOCK]);
        let taps = w.iter().zip(s.offsets()).zip(masks.chunks_exact(BLOCK));
        if (lo..hi).contains(&m) {
            for ((&wt, &offset), mask) in taps {
                // SAFETY: block `m` is inside `x`, checked just above.
                let v = unsafe { block_at(x, p0 + q, offset) };
                for j in 0..BLOCK {
                    acc[j] = fma::<FUSED>(wt * mask[j], v[j], acc[j]);
                }
            }
        } else {
            for ((&wt, &offset), mask) in taps {
                for (j, acc) in acc.iter_mut().enumerate().filter(|&(j, _)| mask[j] != 0.0) {
                    // Inside the plane, so inside `x`.
                    *acc = fma::<FUSED>(wt, x[(p0 + q + j).wrapping_add_signed(offset)], *acc);
                }
            }
        }
        out.copy_from_slice(&acc);
    }
}

/// `acc[j] += Σ d·m·v` over the lanes `j` of whole blocks of `d`, `v` and `m` (as long as
/// the shortest).
#[inline(always)]
fn correlate_blocks<const FUSED: bool>(acc: &mut [f32; BLOCK], d: &[f32], v: &[f32], m: &[f32]) {
    let blocks = d.chunks_exact(BLOCK).zip(v.chunks_exact(BLOCK)).zip(m.chunks_exact(BLOCK));
    for ((d, v), m) in blocks {
        for j in 0..BLOCK {
            acc[j] = fma::<FUSED>(d[j] * m[j], v[j], acc[j]);
        }
    }
}

/// Adds plane `p0`'s share of every tap's weight gradient to `sums[t]`, lane by lane:
/// `Σ_q dy[p0 + q]·mask·x[p0 + q + offset[t]]`, one tap at a time in registers over zipped
/// slices (the blocks inside `x`), then the few outside lane by lane.
#[inline(always)]
fn correlate_generic<const FUSED: bool>(
    s: &Shape,
    dy: &[f32],
    x: &[f32],
    p0: usize,
    sums: &mut [[f32; BLOCK]],
) {
    let (lo, hi) = s.inside(p0, x.len());
    let plane = &dy[p0..][..s.plane];
    let tap_masks = s.masks.chunks_exact(s.plane);
    if (lo, hi) == (0, s.plane / BLOCK) {
        // Every block inside: one zipped run per tap, no setup for the blocks outside.
        for ((&offset, sum), mask) in s.offsets().iter().zip(sums).zip(tap_masks) {
            let mut acc = *sum;
            let v = &x[p0.wrapping_add_signed(offset)..][..s.plane];
            correlate_blocks::<FUSED>(&mut acc, plane, v, mask);
            *sum = acc;
        }
        return;
    }
    let (inner, len) = (lo * BLOCK, (hi - lo) * BLOCK);
    for ((&offset, sum), mask) in s.offsets().iter().zip(sums).zip(tap_masks) {
        let mut acc = *sum;
        // Empty when no block is inside (its start may then lie outside `x`).
        let v = x.get((p0 + inner).wrapping_add_signed(offset)..).map_or(&[][..], |v| &v[..len]);
        correlate_blocks::<FUSED>(&mut acc, &plane[inner..][..len], v, &mask[inner..]);
        let outside = (0..inner).chain(inner + len..s.plane).filter(|&q| mask[q] != 0.0);
        for q in outside {
            // Inside the plane, so inside `x`.
            let j = q % BLOCK;
            acc[j] = fma::<FUSED>(plane[q], x[(p0 + q).wrapping_add_signed(offset)], acc[j]);
        }
        *sum = acc;
    }
}

/// Blocks the AVX-512 loops accumulate at once, one register each.
#[cfg(target_arch = "x86_64")]
const GROUP: usize = 4;

/// [`plane_generic`] in AVX-512 registers, [`GROUP`] blocks at a time: each tap's read of a
/// block is a masked load (lanes off the plane are neither read nor added), so no block
/// needs the scalar loop, and each output is the same chain of fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn plane_avx512(s: &Shape, start: f32, w: &[f32], x: &[f32], p0: usize, y: &mut [f32]) {
    use std::arch::x86_64::{
        _mm512_mask3_fmadd_ps, _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps,
    };
    assert!(p0 + y.len() <= x.len() && y.len() == s.plane, "a whole plane of x");
    let taps = s.offsets().iter().zip(w);
    let mut m = 0;
    while m < s.plane / BLOCK {
        let group = GROUP.min(s.plane / BLOCK - m);
        let mut acc = [_mm512_set1_ps(start); GROUP];
        for (t, (&offset, &wt)) in taps.clone().enumerate() {
            let wt = _mm512_set1_ps(wt);
            for (b, acc) in acc[..group].iter_mut().enumerate() {
                let bits = s.lane_bits[(m + b) * s.taps + t].to_bits() as u16;
                let at = x.as_ptr().wrapping_add(p0 + (m + b) * BLOCK).wrapping_offset(offset);
                // SAFETY: the lanes in `bits` read inside the plane at `p0`, which lies in
                // `x` (asserted above); the load reads no other lane.
                let v = unsafe { _mm512_maskz_loadu_ps(bits, at) };
                *acc = _mm512_mask3_fmadd_ps(wt, v, *acc, bits);
            }
        }
        for (b, acc) in acc[..group].iter().enumerate() {
            let out = &mut y[(m + b) * BLOCK..][..BLOCK];
            // SAFETY: `out` holds one block.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), *acc) };
        }
        m += group;
    }
}

/// The planes of `y` from plane `first` on, each [`plane_generic`]'s and then through its
/// channel's map in `rows`; `bias` holds each channel's start, `w` its filter.
#[inline(always)]
fn planes_generic<const FUSED: bool>(
    s: &Shape,
    bias: Option<&[f32]>,
    w: &[f32],
    x: &[f32],
    first: usize,
    y: &mut [f32],
    rows: &impl RowMap,
) {
    let channels = w.len() / s.taps;
    for (i, y) in y.chunks_exact_mut(s.plane).enumerate() {
        let c = (first + i) % channels;
        let start = bias.map_or(0.0, |b| b[c]);
        plane_generic::<FUSED>(s, start, &w[c * s.taps..][..s.taps], x, (first + i) * s.plane, y);
        rows.map_row(c, y);
    }
}

/// [`planes_generic`] in AVX-512 registers: planes of four blocks or more one at a time
/// ([`plane_avx512`]), smaller planes four blocks at a time across planes, so that four
/// independent chains of multiply-adds run there too, each block through its channel's map
/// as soon as it is stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn planes_avx512(
    s: &Shape,
    bias: Option<&[f32]>,
    w: &[f32],
    x: &[f32],
    first: usize,
    y: &mut [f32],
    rows: &impl RowMap,
) {
    use std::arch::x86_64::{
        _mm512_mask3_fmadd_ps, _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps,
    };
    let (per_plane, channels) = (s.plane / BLOCK, w.len() / s.taps);
    let start = |c: usize| bias.map_or(0.0, |b| b[c]);
    if per_plane >= GROUP {
        for (i, y) in y.chunks_exact_mut(s.plane).enumerate() {
            let c = (first + i) % channels;
            let filter = &w[c * s.taps..][..s.taps];
            plane_avx512(s, start(c), filter, x, (first + i) * s.plane, y);
            rows.map_row(c, y);
        }
        return;
    }
    assert!(first * s.plane + y.len() <= x.len(), "whole planes of x");
    let blocks = y.len() / BLOCK;
    let mut m = 0;
    while m < blocks {
        let group = GROUP.min(blocks - m);
        // Each block's channel, filter and masks.
        let (mut channel, mut masks) = ([0; GROUP], [0; GROUP]);
        let mut acc = [_mm512_set1_ps(0.0); GROUP];
        for b in 0..group {
            channel[b] = (first + (m + b) / per_plane) % channels;
            masks[b] = (m + b) % per_plane * s.taps;
            acc[b] = _mm512_set1_ps(start(channel[b]));
        }
        let x_at = x.as_ptr().wrapping_add(first * s.plane + m * BLOCK);
        for (t, &offset) in s.offsets().iter().enumerate() {
            for (b, acc) in acc[..group].iter_mut().enumerate() {
                let wt = _mm512_set1_ps(w[channel[b] * s.taps + t]);
                let bits = s.lane_bits[masks[b] + t].to_bits() as u16;
                let at = x_at.wrapping_add(b * BLOCK).wrapping_offset(offset);
                // SAFETY: the lanes in `bits` read inside their plane, which lies in `x`
                // (asserted above); the load reads no other lane.
                let v = unsafe { _mm512_maskz_loadu_ps(bits, at) };
                *acc = _mm512_mask3_fmadd_ps(wt, v, *acc, bits);
            }
        }
        for (b, acc) in acc[..group].iter().enumerate() {
            let out = &mut y[(m + b) * BLOCK..][..BLOCK];
            // SAFETY: `out` holds one block.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), *acc) };
            rows.map_row(channel[b], out);
        }
        m += group;
    }
}

multiversion!(planes = avx512 planes_avx512, fused planes_generic(s: &Shape, bias: Option<&[f32]>, w: &[f32], x: &[f32], first: usize, y: &mut [f32], rows: &impl RowMap));
multiversion!(correlate = fused correlate_generic(s: &Shape, dy: &[f32], x: &[f32], p0: usize, sums: &mut [[f32; BLOCK]]));

/// Every output plane of `src` through its channel's filter in `w` (`taps` weights per
/// channel, plus `bias`), then through `then`, if any; planes split over threads.
#[allow(clippy::too_many_arguments)]
fn convolve(
    pool: &Pool,
    s: &Shape,
    src: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    then: Option<&Epilogue<'_>>,
    out: &mut [f32],
    g: &Conv2dGeometry,
) {
    let workers = workers(pool, g.n * g.c_out, g.macs());
    with_row_map!(then, |rows| {
        for_each_chunk(pool, workers, out, s.plane, &mut [], 0, |first, y, _| {
            planes(s, bias, w, src, first, y, rows)
        })
    })
}

/// Forward pass, each output plane then put through `then`, if any; `scratch` holds
/// [`scratch_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    pool: &Pool,
    scratch: &mut [f32],
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    then: Option<&Epilogue<'_>>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    let s = Shape::new(g, scratch);
    convolve(pool, &s, x, w, b, then, y, g)
}

/// Input gradient: the output gradient through the filters turned 180 degrees; `scratch`
/// as for [`conv2d`].
pub fn conv2d_grad_input(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (scratch, flipped) = scratch.split_at_mut(scratch.len() - w.len());
    let taps = g.kh * g.kw;
    for (f, w) in flipped.chunks_exact_mut(taps).zip(w.chunks_exact(taps)) {
        f.iter_mut().zip(w.iter().rev()).for_each(|(f, &w)| *f = w);
    }
    let s = Shape::new(g, scratch);
    convolve(pool, &s, dy, flipped, None, None, dx, g)
}

/// Weight gradient, one filter per channel summed over the batch in vector lanes and added
/// up once, the batch split over threads (see [`sum_over_batch`]); `scratch` as for
/// [`conv2d`], `partials` of [`crate::parallel::partials_len`] values for the filters.
pub fn conv2d_grad_weight(
    pool: &Pool,
    scratch: &mut [f32],
    partials: &mut [f32],
    dy: &[f32],
    x: &[f32],
    dw: &mut [f32],
    g: &Conv2dGeometry,
) {
    let s = Shape::new(g, scratch);
    let scratch = Scratch { partials, pieces: &mut [], piece_len: 0 };
    sum_over_batch(pool, g.n, g.macs(), dw, s.taps, scratch, |first, samples, filters, _| {
        let mut sums = [[0.0; BLOCK]; MAX_TAPS];
        let sums = &mut sums[..s.taps];
        for (i, dw_c) in filters.chunks_exact_mut(s.taps).enumerate() {
            sums.fill([0.0; BLOCK]);
            for n in samples.clone() {
                let p0 = (n * g.c_in + first + i) * s.plane;
                correlate(&s, dy, x, p0, sums);
            }
            for (dw, sum) in dw_c.iter_mut().zip(&*sums) {
                *dw = sum.iter().sum();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::depthwise::tests::{assert_close, random};
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    /// Three samples of two 4x4 planes: every block reads across a plane's border and the
    /// first and last ones past the tensor's ends (small enough for Miri, which checks
    /// the unchecked reads of the blocks inside).
    #[test]
    fn planes_of_one_block_match_the_reference() {
        let mut rng = SplitMix::new(3);
        let (n, c, size) = (3, 2, 4);
        let g = Conv2dGeometry {
            n,
            c_in: c,
            h: size,
            w: size,
            c_out: c,
            kh: 3,
            kw: 3,
            stride: (1, 1),
            padding: (1, 1),
            groups: c,
            out_h: size,
            out_w: size,
        };
        assert!(runs_in_place(&g));
        let (x, w) = (random(g.input_len(), &mut rng), random(g.weight_len(), &mut rng));
        let (b, dy) = (random(c, &mut rng), random(g.output_len(), &mut rng));
        let (pool, mut scratch) = (Pool::eager(2), vec![f32::NAN; scratch_len(&g)]);
        let (mut want, mut got) = (vec![0.0; dy.len()], vec![f32::NAN; dy.len()]);
        r::conv2d(&x, &w, Some(&b), &mut want, &g);
        conv2d(&pool, &mut scratch, &x, &w, Some(&b), None, &mut got, &g);
        assert_close(&got, &want, "y");
        let (mut want, mut got) = (vec![0.0; x.len()], vec![f32::NAN; x.len()]);
        r::conv2d_grad_input(&dy, &w, &mut want, &g);
        conv2d_grad_input(&pool, &mut scratch, &dy, &w, &mut got, &g);
        assert_close(&got, &want, "dx");
        let (mut want, mut got) = (vec![0.0; w.len()], vec![f32::NAN; w.len()]);
        r::conv2d_grad_weight(&dy, &x, &mut want, &g);
        let mut partials = vec![f32::NAN; crate::parallel::partials_len(2, got.len())];
        conv2d_grad_weight(&pool, &mut scratch, &mut partials, &dy, &x, &mut got, &g);
        assert_close(&got, &want, "dw");
    }
}
