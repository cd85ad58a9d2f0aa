//! Depthwise convolution (one input and one output channel per group) as direct vector
//! loops over whole planes, compiled for the widest vector extension the CPU has
//! (`multiversion!`): im2col would build a `kh·kw`-row matrix per channel for a tiny
//! product, and loops over rows of taps spend more on bookkeeping than on arithmetic in
//! the small planes of a MobileNet.
//!
//! Each plane is first split into its `stride_h · stride_w` *phases*, zero-padded planes
//! of every `stride`-th input (`phase[a, b][r, c] = x_padded[r·stride_h + a, c·stride_w +
//! b]`) sharing one row pitch `pitch`. Kernel tap `(ky, kx)` then reads phase `(ky %
//! stride_h, kx % stride_w)` at the fixed offset `(ky / stride_h)·pitch + kx / stride_w`
//! from output `(oy, ox)`'s flat index `oy·pitch + ox`, so a whole plane of outputs is one
//! flat run, cut into [`BLOCK`]-wide register accumulators that sum every tap before they
//! are stored (the columns `ox >= out_w` of each row are computed and dropped). The input
//! gradient is the same sum read backwards: each phase of `dx` gathers the output gradient
//! (laid out at the same pitch, its dropped columns zero) through the taps of that phase;
//! the weight gradient correlates that output gradient with each tap's phase, summed over
//! the whole batch in vector lanes and added up once per channel. Tap offsets are worked
//! out once per call; the padding of the phases and of the laid-out gradient is zeroed once
//! per worker, not per plane.
//!
//! Stride-1 layers that keep the plane's size, on planes of whole blocks, skip the phases
//! and run in place (`same_depthwise`); on AVX-512 CPUs the forward pass of stride-2 layers
//! on planes of 8, 16 or 32 columns reads its input directly (`strided_depthwise`).

use crate::epilogue::{map_plane, with_row_map, Epilogue};
use crate::parallel::{for_each_chunk, partials_len, sum_over_batch, workers, Scratch};
use crate::pool::Pool;
use crate::same_depthwise as same;
#[cfg(target_arch = "x86_64")]
use crate::strided_depthwise as strided;
use sprout_core::geometry::Conv2dGeometry;

/// Outputs per accumulator block: one AVX-512 register, two AVX2 ones.
pub(crate) const BLOCK: usize = 16;

/// Whether `g` is depthwise: every group holds one input and one output channel.
pub fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.c_in_per_group() == 1 && g.c_out_per_group() == 1
}

/// Where one plane's phases, output gradient and results lie in a worker's scratch.
#[derive(Clone, Copy, Debug)]
struct Layout {
    stride: (usize, usize),
    padding: (usize, usize),
    kernel: (usize, usize),
    /// Input plane height and width.
    size: (usize, usize),
    /// Output plane height and width.
    out: (usize, usize),
    /// Row pitch of every phase and of the laid-out output gradient.
    pitch: usize,
    /// The largest tap offset, `((kh - 1) / stride_h)·pitch + (kw - 1) / stride_w`.
    reach: usize,
    /// Flat outputs computed, `out_h · pitch` rounded up to whole blocks.
    outputs: usize,
    /// Flat values of one phase, `phase rows · pitch` rounded up to whole blocks.
    inputs: usize,
    /// Values from one phase to the next: room for every read of either pass.
    phase_len: usize,
}

impl Layout {
    fn new(g: &Conv2dGeometry) -> Self {
        let (sy, sx) = (g.stride.0.max(1), g.stride.1.max(1));
        // The padded plane every output's window lies in (a geometry whose outputs reach
        // past the padding reads more zeros).
        let padded = |size: usize, pad: usize, out: usize, k: usize, s: usize| {
            (size + 2 * pad).max(out.saturating_sub(1) * s + k)
        };
        let rows = padded(g.h, g.padding.0, g.out_h, g.kh, sy).div_ceil(sy);
        let pitch = padded(g.w, g.padding.1, g.out_w, g.kw, sx).div_ceil(sx);
        let reach = (g.kh.saturating_sub(1) / sy) * pitch + g.kw.saturating_sub(1) / sx;
        let outputs = (g.out_h * pitch).next_multiple_of(BLOCK);
        let inputs = (rows * pitch).next_multiple_of(BLOCK);
        Self {
            stride: (sy, sx),
            padding: g.padding,
            kernel: (g.kh, g.kw),
            size: (g.h, g.w),
            out: (g.out_h, g.out_w),
            pitch,
            reach,
            outputs,
            inputs,
            phase_len: inputs.max(outputs + reach),
        }
    }

    fn phases(&self) -> usize {
        self.stride.0 * self.stride.1
    }

    /// Longest flat run either pass computes.
    fn run(&self) -> usize {
        self.outputs.max(self.inputs)
    }

    /// Scratch values one worker needs: the phases, the laid-out output gradient (after
    /// `reach` leading zeros) and one run of results.
    fn scratch(&self) -> usize {
        self.phases() * self.phase_len + self.reach + 2 * self.run()
    }

    /// A worker's scratch as (phases, laid-out output gradient, results).
    fn split<'a>(&self, scratch: &'a mut [f32]) -> (&'a mut [f32], &'a mut [f32], &'a mut [f32]) {
        let (phases, rest) = scratch.split_at_mut(self.phases() * self.phase_len);
        let (d, rest) = rest.split_at_mut(self.reach + self.run());
        (phases, d, &mut rest[..self.run()])
    }

    /// Where each input row's first phase row starts, in order (counters, no divisions).
    fn row_starts(&self) -> impl Iterator<Item = usize> + use<> {
        let (sy, sx, pitch, phase_len) = (self.stride.0, self.stride.1, self.pitch, self.phase_len);
        let (a, r) = (self.padding.0 % sy, self.padding.0 / sy);
        (0..self.size.0).scan((a, r), move |(a, r), _| {
            let start = *a * sx * phase_len + *r * pitch;
            *a += 1;
            if *a == sy {
                *a = 0;
                *r += 1;
            }
            Some(start)
        })
    }

    /// At column stride 2, the runs of a row's even and of its odd columns: `(first_ix,
    /// count, offset)` as [`Self::column_run`] gives them, the even one first.
    fn column_pair(&self) -> [(usize, usize, usize); 2] {
        let px = self.padding.1;
        [self.column_run(px % 2), self.column_run((px + 1) % 2)]
    }

    /// The inputs of a row in column phase `b`: `(first_ix, count, offset)`, inputs
    /// `first_ix + i·stride_w` lying at `offset + i` from the phase row's start.
    fn column_run(&self, b: usize) -> (usize, usize, usize) {
        let (sx, px, w) = (self.stride.1, self.padding.1, self.size.1);
        let first = (b + sx - px % sx) % sx;
        let count = w.saturating_sub(first).div_ceil(sx);
        (first, count, b * self.phase_len + (first + px) / sx)
    }
}

/// `even[i] = src[2i]` and `odd[i] = src[2i + 1]` for every such `i`, in one pass.
#[inline(always)]
fn deinterleave(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let pairs = src.chunks_exact(2);
    let last = pairs.remainder().first();
    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
        (*e, *o) = (pair[0], pair[1]);
    }
    if let (Some(&v), Some(e)) = (last, even.get_mut(src.len() / 2)) {
        *e = v;
    }
}

/// `dest[2i] = even[i]` and `dest[2i + 1] = odd[i]` for every such `i`, in one pass.
#[inline(always)]
fn interleave(even: &[f32], odd: &[f32], dest: &mut [f32]) {
    let half = dest.len() / 2;
    let mut pairs = dest.chunks_exact_mut(2);
    for ((&e, &o), pair) in even.iter().zip(odd).zip(&mut pairs) {
        (pair[0], pair[1]) = (e, o);
    }
    if let (Some(d), Some(&e)) = (pairs.into_remainder().first_mut(), even.get(half)) {
        *d = e;
    }
}

/// `dest[i] = src[i·S]` for every `i < dest.len()`.
#[inline(always)]
fn gather_by<const S: usize>(dest: &mut [f32], src: &[f32]) {
    let whole = (src.len() / S).min(dest.len());
    let (body, tail) = dest.split_at_mut(whole);
    body.iter_mut().zip(src.chunks_exact(S)).for_each(|(d, s)| *d = s[0]);
    tail.iter_mut().zip(src[whole * S..].iter().step_by(S)).for_each(|(d, &s)| *d = s);
}

/// `dest[i·S] = src[i]` for every `i < src.len()`.
#[inline(always)]
fn scatter_by<const S: usize>(dest: &mut [f32], src: &[f32]) {
    let whole = (dest.len() / S).min(src.len());
    let (body, tail) = src.split_at(whole);
    dest.chunks_exact_mut(S).zip(body).for_each(|(d, &s)| d[0] = s);
    dest[whole * S..].iter_mut().step_by(S).zip(tail).for_each(|(d, &s)| *d = s);
}

/// Splits input plane `x` into phases whose padding is already zero (it is never written):
/// row copies at stride 1, one deinterleaving pass per row at column stride 2.
#[inline(always)]
fn split_phases_generic(l: &Layout, x: &[f32], phases: &mut [f32]) {
    let w = l.size.1;
    match l.stride {
        (1, 1) => {
            let start = l.padding.0 * l.pitch + l.padding.1;
            for (row, dest) in x.chunks_exact(w).zip(phases[start..].chunks_mut(l.pitch)) {
                dest[..w].copy_from_slice(row);
            }
        }
        (_, 2) => {
            let [(_, even, at_even), (_, odd, at_odd)] = l.column_pair();
            for (row, start) in x.chunks_exact(w).zip(l.row_starts()) {
                let (lo, hi) = phases.split_at_mut(start + at_even.max(at_odd));
                let (e, o) = match at_even < at_odd {
                    true => (&mut lo[start + at_even..][..even], &mut hi[..odd]),
                    false => (&mut hi[..even], &mut lo[start + at_odd..][..odd]),
                };
                deinterleave(row, e, o);
            }
        }
        _ => {
            for b in 0..l.stride.1 {
                let (first, count, offset) = l.column_run(b);
                for (row, start) in x.chunks_exact(w).zip(l.row_starts()) {
                    let dest = &mut phases[start + offset..][..count];
                    let src = &row[first.min(w)..];
                    match l.stride.1 {
                        1 => dest.copy_from_slice(src),
                        3 => gather_by::<3>(dest, src),
                        s => dest.iter_mut().zip(src.iter().step_by(s)).for_each(|(d, &v)| *d = v),
                    }
                }
            }
        }
    }
}

/// Gathers input plane `dx` back from its phases (padding dropped), the inverse of
/// [`split_phases_generic`].
#[inline(always)]
fn join_phases_generic(l: &Layout, phases: &[f32], dx: &mut [f32]) {
    let w = l.size.1;
    match l.stride {
        (1, 1) => {
            let start = l.padding.0 * l.pitch + l.padding.1;
            for (row, src) in dx.chunks_exact_mut(w).zip(phases[start..].chunks(l.pitch)) {
                row.copy_from_slice(&src[..w]);
            }
        }
        (_, 2) => {
            let [(_, even, at_even), (_, odd, at_odd)] = l.column_pair();
            for (row, start) in dx.chunks_exact_mut(w).zip(l.row_starts()) {
                let e = &phases[start + at_even..][..even];
                interleave(e, &phases[start + at_odd..][..odd], row);
            }
        }
        _ => {
            for b in 0..l.stride.1 {
                let (first, count, offset) = l.column_run(b);
                for (row, start) in dx.chunks_exact_mut(w).zip(l.row_starts()) {
                    let src = &phases[start + offset..][..count];
                    let dest = &mut row[first.min(w)..];
                    match l.stride.1 {
                        1 => dest.copy_from_slice(src),
                        3 => scatter_by::<3>(dest, src),
                        s => dest.iter_mut().step_by(s).zip(src).for_each(|(d, &v)| *d = v),
                    }
                }
            }
        }
    }
}

multiversion!(split_phases = split_phases_generic(l: &Layout, x: &[f32], phases: &mut [f32]));
multiversion!(join_phases = join_phases_generic(l: &Layout, phases: &[f32], dx: &mut [f32]));

impl Layout {
    /// Lays output plane `dy` out at the phases' pitch after `reach` values, leaving every
    /// other value (zero) as it is.
    fn lay_out(&self, dy: &[f32], d: &mut [f32]) {
        let w = self.out.1;
        for (oy, row) in dy.chunks_exact(w).take(self.out.0).enumerate() {
            d[self.reach + oy * self.pitch..][..w].copy_from_slice(row);
        }
    }

    /// Copies the computed flat outputs' kept columns into output plane `y`.
    fn keep_outputs(&self, flat: &[f32], y: &mut [f32]) {
        let w = self.out.1;
        for (oy, row) in y.chunks_exact_mut(w).take(self.out.0).enumerate() {
            row.copy_from_slice(&flat[oy * self.pitch..][..w]);
        }
    }
}

/// Scratch values any pass needs on `threads` threads: the in-place kernels' masks, or
/// one worker's phases per thread.
pub fn scratch_len(g: &Conv2dGeometry, threads: usize) -> usize {
    if same::runs_in_place(g) {
        same::scratch_len(g)
    } else {
        threads * Layout::new(g).scratch()
    }
}

/// Taps of the largest filter run here (an 8x8 kernel); larger depthwise filters run as
/// grouped im2col convolutions.
const MAX_TAPS: usize = 64;

/// Whether `g` runs here: depthwise, with at most [`MAX_TAPS`] taps.
pub fn runs_direct(g: &Conv2dGeometry) -> bool {
    is_depthwise(g) && g.kh * g.kw <= MAX_TAPS
}

/// A filter's taps in the order a pass visits them, with where each reads its source,
/// worked out once per call (no divisions per plane).
struct Taps {
    /// Filter index of each visited tap.
    order: [usize; MAX_TAPS],
    /// The phase it reads (forward) or feeds (input gradient), `a·stride_w + b`.
    phase: [usize; MAX_TAPS],
    /// Its offset into the source from the output it feeds.
    offsets: [usize; MAX_TAPS],
    len: usize,
}

impl Taps {
    /// Every tap in filter order, reading the input's phases from an output's flat index.
    fn forward(l: &Layout) -> Self {
        Self::visiting(l, |k| {
            let (phase, offset) = l.tap(k);
            (0, k, l.phase_start(phase) + offset)
        })
    }

    /// Every tap grouped by the phase it feeds, in filter order within a phase, reading the
    /// laid-out output gradient from an input phase's flat index.
    fn backward(l: &Layout) -> Self {
        Self::visiting(l, |k| {
            let ((a, b), offset) = l.tap(k);
            (a * l.stride.1 + b, k, l.reach - offset)
        })
    }

    /// The taps in the order of their `(phase, k, offset)` visits.
    fn visiting(l: &Layout, visit: impl Fn(usize) -> (usize, usize, usize)) -> Self {
        let taps = l.kernel.0 * l.kernel.1;
        let mut visits = [(0, 0, 0); MAX_TAPS];
        for (k, v) in visits[..taps].iter_mut().enumerate() {
            *v = visit(k);
        }
        visits[..taps].sort_unstable();
        let mut t =
            Self { order: [0; MAX_TAPS], phase: [0; MAX_TAPS], offsets: [0; MAX_TAPS], len: taps };
        for (i, &(q, k, offset)) in visits[..taps].iter().enumerate() {
            (t.phase[i], t.order[i], t.offsets[i]) = (q, k, offset);
        }
        t
    }

    /// How many taps from `start` on belong to phase `q`.
    fn in_phase(&self, start: usize, q: usize) -> usize {
        self.phase[start..self.len].iter().take_while(|&&p| p == q).count()
    }

    fn offsets(&self) -> &[usize] {
        &self.offsets[..self.len]
    }

    /// `filter`'s weights in visiting order.
    fn weights(&self, filter: &[f32]) -> [f32; MAX_TAPS] {
        let mut w = [0.0; MAX_TAPS];
        for (w, &k) in w.iter_mut().zip(&self.order[..self.len]) {
            *w = filter[k];
        }
        w
    }
}

/// Blocks of outputs [`accumulate`] keeps in registers at once: independent sums for the
/// vector units to overlap.
const TILE: usize = 4;

/// `flat[i] = start + Σ_t w[t] · src[i + offsets[t]]` over whole [`BLOCK`]s, the first tap
/// overwriting `flat`: [`TILE`] blocks at a time summed over every tap in registers and
/// stored once (a pass per tap stored and reloaded the run for each tap), then the blocks
/// left one at a time. Every output adds its taps in filter order, as one pass per tap did.
#[inline(always)]
fn accumulate_generic(start: f32, w: &[f32], offsets: &[usize], src: &[f32], flat: &mut [f32]) {
    let Some((&w0, w)) = w.split_first() else {
        return flat.fill(start);
    };
    let taps = Tile { start, w0, first: offsets[0], w, offsets: &offsets[1..], src };
    let mut tiles = flat.chunks_exact_mut(TILE * BLOCK);
    let mut at = 0;
    for out in &mut tiles {
        taps.sum::<TILE>(at, out);
        at += TILE * BLOCK;
    }
    for out in tiles.into_remainder().chunks_exact_mut(BLOCK) {
        taps.sum::<1>(at, out);
        at += BLOCK;
    }
}

/// What [`accumulate_generic`] sums: the first tap's weight and offset apart.
struct Tile<'a> {
    start: f32,
    w0: f32,
    first: usize,
    w: &'a [f32],
    offsets: &'a [usize],
    src: &'a [f32],
}

impl Tile<'_> {
    /// The `R` blocks of outputs from flat index `at` into `out`.
    #[inline(always)]
    fn sum<const R: usize>(&self, at: usize, out: &mut [f32]) {
        let read = |offset: usize| -> &[[f32; BLOCK]] {
            self.src[offset + at..][..R * BLOCK].as_chunks::<BLOCK>().0
        };
        let mut acc = [[0.0f32; BLOCK]; R];
        for (acc, s) in acc.iter_mut().zip(read(self.first)) {
            for j in 0..BLOCK {
                acc[j] = self.start + self.w0 * s[j];
            }
        }
        for (&wk, &offset) in self.w.iter().zip(self.offsets) {
            for (acc, s) in acc.iter_mut().zip(read(offset)) {
                for j in 0..BLOCK {
                    acc[j] += wk * s[j];
                }
            }
        }
        for (out, acc) in out.chunks_exact_mut(BLOCK).zip(&acc) {
            out.copy_from_slice(acc);
        }
    }
}

/// `sums[t][j] += Σ_blocks d[block·BLOCK + j] · src[block·BLOCK + j + offsets[t]]`: every
/// tap's weight-gradient partial sums, lane by lane, one tap at a time in registers, over
/// zipped slices (no index arithmetic or bounds checks per block).
#[inline(always)]
fn correlate_generic(offsets: &[usize], d: &[f32], src: &[f32], sums: &mut [[f32; BLOCK]]) {
    for (&offset, sum) in offsets.iter().zip(sums) {
        let mut acc = *sum;
        for (dv, s) in d.chunks_exact(BLOCK).zip(src[offset..].chunks_exact(BLOCK)) {
            let (dv, s): (&[f32; BLOCK], &[f32; BLOCK]) =
                (dv.try_into().expect("BLOCK values"), s.try_into().expect("BLOCK values"));
            for j in 0..BLOCK {
                acc[j] += dv[j] * s[j];
            }
        }
        *sum = acc;
    }
}

multiversion!(accumulate = accumulate_generic(start: f32, w: &[f32], offsets: &[usize], src: &[f32], flat: &mut [f32]));
multiversion!(correlate = correlate_generic(offsets: &[usize], d: &[f32], src: &[f32], sums: &mut [[f32; BLOCK]]));

impl Layout {
    /// Kernel tap `k`'s phase `(a, b)` and its offset in that phase from the output it
    /// feeds.
    fn tap(&self, k: usize) -> ((usize, usize), usize) {
        let (ky, kx) = (k / self.kernel.1, k % self.kernel.1);
        let (sy, sx) = self.stride;
        ((ky % sy, kx % sx), (ky / sy) * self.pitch + kx / sx)
    }

    /// Where phase `(a, b)` starts.
    fn phase_start(&self, (a, b): (usize, usize)) -> usize {
        (a * self.stride.1 + b) * self.phase_len
    }
}

/// Forward pass, one output plane per (sample, channel), planes split over threads;
/// `scratch` holds `pool.threads()` times [`scratch_per_worker`] values.
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
    if same::runs_in_place(g) {
        return same::conv2d(pool, scratch, x, w, b, then, y, g);
    }
    #[cfg(target_arch = "x86_64")]
    if strided::runs_here(g) {
        return strided::conv2d(pool, x, w, b, then, y, g);
    }
    let l = Layout::new(g);
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let order = Taps::forward(&l);
    let workers = workers(pool, g.n * g.c_out, g.macs());
    with_row_map!(then, |rows| {
        for_each_chunk(pool, workers, y, out_len, scratch, l.scratch(), |first, planes, scratch| {
            let (phases, _, flat) = l.split(scratch);
            let flat = &mut flat[..l.outputs];
            // Every plane writes the same places of the phases: the padding stays zero.
            phases.fill(0.0);
            for (i, y_plane) in planes.chunks_mut(out_len).enumerate() {
                let plane = first + i;
                let c = plane % g.c_out;
                split_phases(&l, &x[plane * in_len..][..in_len], phases);
                let start = b.map_or(0.0, |b| b[c]);
                accumulate(start, &w[c * taps..][..taps], order.offsets(), phases, flat);
                l.keep_outputs(flat, y_plane);
                map_plane(rows, c, y_plane);
            }
        })
    });
}

/// Input gradient, one input plane per (sample, channel), planes split over threads;
/// `scratch` as for [`conv2d`].
pub fn conv2d_grad_input(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    g: &Conv2dGeometry,
) {
    if same::runs_in_place(g) {
        return same::conv2d_grad_input(pool, scratch, dy, w, dx, g);
    }
    let l = Layout::new(g);
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let order = Taps::backward(&l);
    let workers = workers(pool, g.n * g.c_in, g.macs());
    for_each_chunk(pool, workers, dx, in_len, scratch, l.scratch(), |first, planes, scratch| {
        let (phases, d, _) = l.split(scratch);
        // Every plane writes the same places of `d`: the rest stays zero.
        d.fill(0.0);
        for (i, dx_plane) in planes.chunks_mut(in_len).enumerate() {
            let plane = first + i;
            let c = plane % g.c_in;
            l.lay_out(&dy[plane * out_len..][..out_len], d);
            let wk = order.weights(&w[c * taps..][..taps]);
            let mut start = 0;
            for q in 0..l.phases() {
                let end = start + order.in_phase(start, q);
                let out = &mut phases[q * l.phase_len..][..l.inputs];
                accumulate(0.0, &wk[start..end], &order.offsets[start..end], d, out);
                start = end;
            }
            join_phases(&l, phases, dx_plane);
        }
    });
}

/// Scratch values the weight gradient needs on `threads` threads: [`scratch_len`]'s, and
/// partial sums of the filters.
pub fn grad_weight_scratch_len(g: &Conv2dGeometry, threads: usize) -> usize {
    scratch_len(g, threads) + partials_len(threads, g.c_out * g.kh * g.kw)
}

/// Weight gradient, one `kh·kw` filter per channel summed over the batch in vector lanes
/// and added up once, the batch split over threads (see [`sum_over_batch`]); `scratch`
/// holds [`grad_weight_scratch_len`] values.
pub fn conv2d_grad_weight(
    pool: &Pool,
    scratch: &mut [f32],
    dy: &[f32],
    x: &[f32],
    dw: &mut [f32],
    g: &Conv2dGeometry,
) {
    let (scratch, partials) = scratch.split_at_mut(scratch_len(g, pool.threads()));
    if same::runs_in_place(g) {
        return same::conv2d_grad_weight(pool, scratch, partials, dy, x, dw, g);
    }
    let l = Layout::new(g);
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let order = Taps::forward(&l);
    let scratch = Scratch { partials, pieces: scratch, piece_len: l.scratch() };
    sum_over_batch(pool, g.n, g.macs(), dw, taps, scratch, |first, samples, filters, scratch| {
        let (phases, d, _) = l.split(scratch);
        phases.fill(0.0);
        d.fill(0.0);
        let mut sums = [[0.0; BLOCK]; MAX_TAPS];
        for (i, dw_c) in filters.chunks_mut(taps).enumerate() {
            let c = first + i;
            sums[..taps].fill([0.0; BLOCK]);
            for n in samples.clone() {
                let plane = n * g.c_in + c;
                split_phases(&l, &x[plane * in_len..][..in_len], phases);
                l.lay_out(&dy[plane * out_len..][..out_len], d);
                let d = &d[l.reach..][..l.outputs];
                correlate(order.offsets(), d, phases, &mut sums[..taps]);
            }
            for (dw, sum) in dw_c.iter_mut().zip(&sums) {
                *dw = sum.iter().sum();
            }
        }
    });
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sprout_core::reference as r;
    use sprout_core::rng::SplitMix;

    pub(crate) fn random(len: usize, rng: &mut SplitMix) -> Vec<f32> {
        (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    pub(crate) fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
        }
    }

    /// Planes from wider than a block to smaller than the kernel's reach, at strides 1, 2
    /// and 3, kernels 1, 3, 5 and 3x1, against the reference's loops, on one thread and two;
    /// the stride-1 "same" planes of whole blocks run in place (`same_depthwise`), their
    /// first and last blocks reading past the tensor's ends.
    #[test]
    fn every_stride_padding_and_plane_size_matches_the_reference() {
        let mut rng = SplitMix::new(7);
        let cases = [
            (1, (1, 1), 37, 5, (3, 3)),
            (2, (1, 1), 37, 5, (3, 3)),
            (2, (0, 0), 40, 5, (3, 3)),
            (3, (2, 2), 29, 5, (3, 3)),
            (1, (1, 1), 4, 4, (3, 3)),
            (2, (1, 1), 4, 4, (3, 3)),
            (1, (2, 2), 6, 3, (5, 5)),
            (2, (2, 2), 7, 9, (5, 5)),
            (2, (0, 0), 5, 5, (1, 1)),
            (1, (1, 1), 8, 8, (3, 3)),
            (1, (1, 1), 16, 3, (3, 3)),
            (1, (1, 1), 3, 16, (3, 3)),
            (1, (2, 2), 4, 8, (5, 5)),
            (1, (0, 0), 4, 4, (1, 1)),
            (1, (1, 0), 8, 2, (3, 1)),
            (1, (3, 3), 32, 2, (7, 7)),
            (1, (1, 1), 16, 5, (3, 3)),
            (2, (1, 1), 32, 4, (3, 3)),
            (2, (1, 1), 16, 8, (3, 3)),
            (2, (1, 1), 8, 8, (3, 3)),
            (2, (2, 2), 16, 8, (5, 5)),
            (2, (0, 0), 8, 8, (1, 1)),
        ];
        let mut in_place = 0;
        #[cfg(target_arch = "x86_64")]
        let mut strided = 0;
        for (stride, padding, w, h, (kh, kw)) in cases {
            let c = 3;
            let out = |size: usize, pad: usize, k: usize| (size + 2 * pad - k) / stride + 1;
            let g = Conv2dGeometry {
                n: 2,
                c_in: c,
                h,
                w,
                c_out: c,
                kh,
                kw,
                stride: (stride, stride),
                padding,
                groups: c,
                out_h: out(h, padding.0, kh),
                out_w: out(w, padding.1, kw),
            };
            in_place += usize::from(same::runs_in_place(&g));
            #[cfg(target_arch = "x86_64")]
            {
                strided += usize::from(strided::runs_here(&g));
            }
            let (x, wt) = (random(g.n * c * h * w, &mut rng), random(c * kh * kw, &mut rng));
            let (b, dy) = (random(c, &mut rng), random(g.n * c * g.out_h * g.out_w, &mut rng));
            let mut want_y = vec![0.0; dy.len()];
            r::conv2d(&x, &wt, Some(&b), &mut want_y, &g);
            let mut want_dx = vec![0.0; x.len()];
            r::conv2d_grad_input(&dy, &wt, &mut want_dx, &g);
            let mut want_dw = vec![0.0; wt.len()];
            r::conv2d_grad_weight(&dy, &x, &mut want_dw, &g);
            for threads in [1, 2] {
                let pool = Pool::eager(threads);
                let mut scratch = vec![f32::NAN; grad_weight_scratch_len(&g, threads)];
                let what = format!("stride {stride}, {h}x{w}, kernel {kh}x{kw}");
                let mut y = vec![f32::NAN; dy.len()];
                conv2d(&pool, &mut scratch, &x, &wt, Some(&b), None, &mut y, &g);
                assert_close(&y, &want_y, &format!("y, {what}"));
                let mut dx = vec![f32::NAN; x.len()];
                conv2d_grad_input(&pool, &mut scratch, &dy, &wt, &mut dx, &g);
                assert_close(&dx, &want_dx, &format!("dx, {what}"));
                let mut dw = vec![f32::NAN; wt.len()];
                conv2d_grad_weight(&pool, &mut scratch, &dy, &x, &mut dw, &g);
                assert_close(&dw, &want_dw, &format!("dw, {what}"));
            }
        }
        assert_eq!(in_place, 9, "the stride-1 same planes of whole blocks run in place");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert_eq!(strided, 5, "the stride-2 planes of 8, 16 and 32 columns run direct");
        }
    }

    /// A 9x9 filter has more taps than the direct loops take: it runs as a grouped im2col
    /// convolution and still matches the reference.
    #[test]
    fn filters_beyond_the_direct_loops_fall_back_and_match() {
        use sprout_core::backend::ConvKernels;
        let mut rng = SplitMix::new(11);
        let (c, size, k) = (2, 10, 9);
        let g = Conv2dGeometry {
            n: 2,
            c_in: c,
            h: size,
            w: size,
            c_out: c,
            kh: k,
            kw: k,
            stride: (1, 1),
            padding: (4, 4),
            groups: c,
            out_h: size,
            out_w: size,
        };
        assert!(is_depthwise(&g) && !runs_direct(&g));
        let (x, wt) = (random(g.input_len(), &mut rng), random(g.weight_len(), &mut rng));
        let dy = random(g.output_len(), &mut rng);
        let mut cpu = crate::Cpu::with_threads(2);
        let (mut want, mut got) = (vec![0.0; dy.len()], vec![f32::NAN; dy.len()]);
        r::conv2d(&x, &wt, None, &mut want, &g);
        cpu.conv2d(&x, &wt, None, &mut got, &g);
        assert_close(&got, &want, "y");
        let (mut want, mut got) = (vec![0.0; x.len()], vec![f32::NAN; x.len()]);
        r::conv2d_grad_input(&dy, &wt, &mut want, &g);
        cpu.conv2d_grad_input(&dy, &wt, &mut got, &g);
        assert_close(&got, &want, "dx");
        let (mut want, mut got) = (vec![0.0; wt.len()], vec![f32::NAN; wt.len()]);
        r::conv2d_grad_weight(&dy, &x, &mut want, &g);
        cpu.conv2d_grad_weight(&dy, &x, &mut got, &g);
        assert_close(&got, &want, "dw");
    }
}
