//! Column blocks: the operand layout of the int8 product. A block holds panels of up to
//! [`WIDE`] columns (conv output positions or dense input rows) of up to [`CHUNK`]
//! reduction indices each, as `i16` values with the input zero point already subtracted
//! (padding is 0), in the order `SXTB16` unpacks four int8 weights: `[x0, x2, x1, x3]` per
//! group of four. [`ConvPatch`] fills conv columns.
//!
//! Building a column costs a few instructions per value, paid once per block and shared by
//! every output channel; the multiply-accumulate loop then reads each value with no sign
//! extension, no zero-point correction and no bounds decision.

use core::ops::Range;

use sprout_core::geometry::Conv2dGeometry;

use super::product::Engine;

/// Reduction indices per block: longer reductions are split into chunks of this size.
pub const CHUNK: usize = 256;
/// Columns in a wide block.
pub const WIDE: usize = 4;

/// Where a natural-order index `k % 4` of a group of four goes: `SXTB16` yields weights
/// `[w0, w2]` and, rotated by 8, `[w1, w3]`.
const LANE: [usize; 4] = [0, 2, 1, 3];

/// One block: `panels` panels, each `groups` groups of `width` columns of four values
/// (`[panel][group][column][lane]`), word-aligned so the DSP loop can load two lanes per
/// register with `LDRD`. Short reductions fit several panels of [`WIDE`] columns, so one
/// visit of a weight row serves more columns.
#[repr(C, align(8))]
pub struct ColumnBlock {
    values: [i16; CHUNK * WIDE],
    width: usize,
    panels: usize,
    groups: usize,
}

impl ColumnBlock {
    pub const fn new() -> Self {
        Self { values: [0; CHUNK * WIDE], width: 0, panels: 0, groups: 0 }
    }

    /// How many panels of `width` columns of `depth ≤ CHUNK` values fit a block.
    pub fn panels_for(width: usize, depth: usize) -> usize {
        (CHUNK * WIDE / (width * (depth.div_ceil(4) * 4).max(4))).max(1)
    }

    /// Empties the block for `panels` panels of `width` columns of `depth` values each
    /// (`width ≤ WIDE`, `depth ≤ CHUNK`, `panels ≤ panels_for(depth)`).
    pub fn reset(&mut self, width: usize, panels: usize, depth: usize) {
        debug_assert!(width <= WIDE && depth <= CHUNK && panels <= Self::panels_for(width, depth));
        self.width = width;
        self.panels = panels;
        self.groups = depth.div_ceil(4);
        // A short last group multiplies its missing lanes by zero; `set_column` writes
        // every other value.
        if !depth.is_multiple_of(4) {
            for panel in 0..panels {
                let panel = &mut self.values[panel * self.groups * 4 * width..];
                panel[(depth / 4) * 4 * width..self.groups * 4 * width].fill(0);
            }
        }
    }

    /// Stores column `column` (`panel · width + column in the panel`) from natural-order
    /// values.
    pub fn set_column(&mut self, column: usize, natural: &[i16]) {
        let width = self.width;
        let (panel, column) = (column / width, column % width);
        let first = panel * self.groups * 4 * width + column * 4;
        let mut groups = self.values[first..].chunks_mut(4 * width);
        let quads = natural.chunks_exact(4);
        let short = quads.remainder();
        // `quads` first: the zip stops without taking the short group's lanes.
        for (quad, lanes) in quads.zip(&mut groups) {
            lanes[..4].copy_from_slice(&[quad[0], quad[2], quad[1], quad[3]]);
        }
        if let Some(lanes) = groups.next().filter(|_| !short.is_empty()) {
            for (lane, &value) in LANE.iter().zip(short) {
                lanes[*lane] = value;
            }
        }
    }

    /// The block's values: `panels · groups · width · 4` of them.
    #[cfg(test)]
    fn values(&self) -> &[i16] {
        self.panels(self.panels)
    }

    /// The values of panel `panel`, to write in block order.
    pub fn panel_mut(&mut self, panel: usize) -> &mut [i16] {
        let size = self.groups * self.width * 4;
        &mut self.values[panel * size..][..size]
    }

    /// The values of the first `panels` panels, one after the other.
    pub fn panels(&self, panels: usize) -> &[i16] {
        &self.values[..panels * self.groups * self.width * 4]
    }

    /// Values of panel `panel`'s full groups (for the multiply-accumulate loop) and of its
    /// short last group.
    pub fn split_at_group(&self, panel: usize, full_groups: usize) -> (&[i16], &[i16]) {
        let size = self.groups * self.width * 4;
        self.values[panel * size..][..size].split_at(full_groups * self.width * 4)
    }
}

/// The natural-order values `[x0, x1, x2, x3]` of one column's lanes (the lane order is
/// its own inverse).
pub fn natural_order(lanes: &[i16]) -> [i16; 4] {
    core::array::from_fn(|k| lanes[LANE[k]])
}

/// The whole groups `lanes` of a pointwise panel (see [`ConvPatch::fill_pointwise_panel`])
/// in portable Rust: channel `k`'s four inputs are `x[k · plane..][..4]`.
pub fn pointwise_groups(x: &[i8], plane: usize, zero_point: i32, lanes: &mut [i16]) {
    for (group, lanes) in lanes.chunks_exact_mut(4 * WIDE).enumerate() {
        for (index, &lane) in LANE.iter().enumerate() {
            let inputs = centered_four(&x[(group * 4 + index) * plane..], zero_point);
            for (column, value) in inputs.into_iter().enumerate() {
                lanes[column * 4 + lane] = value;
            }
        }
    }
}

/// The first four int8 inputs of `q`, centered.
fn centered_four(q: &[i8], zero_point: i32) -> [i16; WIDE] {
    [q[0], q[1], q[2], q[3]].map(|q| centered(q, zero_point))
}

/// The largest magnitude [`centered`] returns for `zero_point`: 255 for an int8 zero
/// point, else (the `i16` wraps) 32768.
pub fn largest_centered(zero_point: i32) -> u64 {
    match (-128..=127).contains(&zero_point) {
        true => 255,
        false => 32768,
    }
}

/// `(q − zero point)` of one int8 input: at most 255 in magnitude, so it fits `i16`.
pub fn centered(q: i8, zero_point: i32) -> i16 {
    (i32::from(q) - zero_point) as i16
}

/// Natural-order values of one conv output position's receptive field (the reduction
/// indices `k = (icg · kh + ky) · kw + kx` in `range`), padding as 0.
pub struct ConvPatch<'a> {
    pub x: &'a [i8],
    pub zero_point: i32,
    pub g: &'a Conv2dGeometry,
    /// Flat index of the first input plane of the group (`(n · c_in + first channel)`).
    pub first_plane: usize,
}

impl ConvPatch<'_> {
    /// Writes the values of output position `(oy, ox)` for reduction indices `range` into
    /// `out` (`range.len()` values). Windows wholly inside the image copy whole kernel
    /// rows (or, for 1x1 kernels, one value per channel) without bounds decisions.
    pub fn fill(&self, (oy, ox): (usize, usize), range: Range<usize>, out: &mut [i16]) {
        let g = self.g;
        // The window's inputs start at (oy·s − p, ox·s − p), possibly in the padding.
        let top = (oy * g.stride.0) as isize - g.padding.0 as isize;
        let left = (ox * g.stride.1) as isize - g.padding.1 as isize;
        let inside =
            top >= 0 && left >= 0 && top as usize + g.kh <= g.h && left as usize + g.kw <= g.w;
        match (inside, (g.kh, g.kw)) {
            (true, (1, 1)) => self.fill_pointwise(top as usize * g.w + left as usize, range, out),
            (true, (_, kw)) if range.start.is_multiple_of(kw) && range.len().is_multiple_of(kw) => {
                let origin = (top as usize, left as usize);
                match kw {
                    3 => self.fill_rows::<3>(origin, range, out),
                    _ => self.fill_rows::<0>(origin, range, out),
                }
            }
            _ => self.fill_clipped((top, left), range, out),
        }
    }

    /// The [`WIDE`] consecutive output positions from `first` of a 1x1 convolution at
    /// stride 1 without padding, in block order: each channel's four inputs are one
    /// run of the plane, spread over the four columns. `false` for other convolutions.
    pub fn fill_pointwise_panel<E: Engine>(
        &self,
        first: usize,
        range: Range<usize>,
        panel: &mut [i16],
    ) -> bool {
        let g = self.g;
        let plane = g.h * g.w;
        let dense = (g.kh, g.kw, g.stride, g.padding) == (1, 1, (1, 1), (0, 0));
        if !dense || first + WIDE > plane {
            return false;
        }
        let x = &self.x[(self.first_plane + range.start) * plane + first..];
        let full = range.len() / 4;
        let (whole, short) = panel.split_at_mut(full * 4 * WIDE);
        E::pointwise_groups(x, plane, self.zero_point, whole);
        if let Some(lanes) = short.chunks_exact_mut(4 * WIDE).next() {
            for (index, &lane) in LANE.iter().enumerate() {
                let k = full * 4 + index;
                let inputs = match k < range.len() {
                    true => centered_four(&x[k * plane..], self.zero_point),
                    false => [0; WIDE],
                };
                for (column, value) in inputs.into_iter().enumerate() {
                    lanes[column * 4 + lane] = value;
                }
            }
        }
        true
    }

    /// A 1x1 window at `offset` in each plane: one value per input channel.
    fn fill_pointwise(&self, offset: usize, range: Range<usize>, out: &mut [i16]) {
        let plane = self.g.h * self.g.w;
        let first = (self.first_plane + range.start) * plane + offset;
        let inputs = self.x[first..].iter().step_by(plane);
        for (value, &q) in out.iter_mut().zip(inputs) {
            *value = centered(q, self.zero_point);
        }
    }

    /// An in-bounds window at `(top, left)`, for a `range` of whole kernel rows; `KW` is
    /// the kernel width when known at compile time (so short rows unroll), or 0.
    fn fill_rows<const KW: usize>(
        &self,
        (top, left): (usize, usize),
        range: Range<usize>,
        out: &mut [i16],
    ) {
        let g = self.g;
        let kw = if KW > 0 { KW } else { g.kw };
        let first_row = range.start / kw;
        let (mut icg, mut ky) = (first_row / g.kh, first_row % g.kh);
        let plane = g.h * g.w;
        let mut line = ((self.first_plane + icg) * g.h + top + ky) * g.w + left;
        for values in out.chunks_exact_mut(kw) {
            for (value, &q) in values.iter_mut().zip(&self.x[line..line + kw]) {
                *value = centered(q, self.zero_point);
            }
            ky += 1;
            line += g.w;
            if ky == g.kh {
                (ky, icg) = (0, icg + 1);
                line += plane - g.kh * g.w;
            }
        }
    }

    /// Any window, one kernel row at a time, padding as 0.
    fn fill_clipped(&self, (top, left): (isize, isize), range: Range<usize>, out: &mut [i16]) {
        let g = self.g;
        let window = g.kh * g.kw;
        let (mut icg, mut ky, mut kx) =
            (range.start / window, range.start % window / g.kw, range.start % g.kw);
        let mut rest = out;
        while !rest.is_empty() {
            let run = (g.kw - kx).min(rest.len());
            let (row, tail) = rest.split_at_mut(run);
            let iy = top + ky as isize;
            row.fill(0);
            if (0..g.h as isize).contains(&iy) {
                let line = &self.x[((self.first_plane + icg) * g.h + iy as usize) * g.w..][..g.w];
                // Run index `i` reads column `ix0 + i`: those in `0..w` are `lo..hi`.
                let ix0 = left + kx as isize;
                let lo = (-ix0).clamp(0, run as isize) as usize;
                let hi = (g.w as isize - ix0).clamp(lo as isize, run as isize) as usize;
                let inputs = &line[(ix0 + lo as isize) as usize..][..hi - lo];
                for (value, &q) in row[lo..hi].iter_mut().zip(inputs) {
                    *value = centered(q, self.zero_point);
                }
            }
            rest = tail;
            kx = 0;
            ky += 1;
            if ky == g.kh {
                ky = 0;
                icg += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::scalar::Scalar;
    use super::*;

    #[test]
    fn columns_interleave_in_sxtb16_order() {
        let mut block = ColumnBlock::new();
        block.reset(2, 1, 6);
        block.set_column(0, &[1, 2, 3, 4, 5, 6]);
        block.set_column(1, &[-1, -2, -3, -4, -5, -6]);
        assert_eq!(block.values(), [1, 3, 2, 4, -1, -3, -2, -4, 5, 0, 6, 0, -5, 0, -6, 0]);
        let (full, short) = block.split_at_group(0, 1);
        assert_eq!((full.len(), short.len()), (8, 8));
        // Two panels of one column: each panel holds its column's groups.
        block.reset(1, 2, 5);
        block.set_column(0, &[1, 2, 3, 4, 5]);
        block.set_column(1, &[6, 7, 8, 9, 10]);
        assert_eq!(block.values(), [1, 3, 2, 4, 5, 0, 0, 0, 6, 8, 7, 9, 10, 0, 0, 0]);
        assert_eq!(block.split_at_group(1, 1), (&[6, 8, 7, 9][..], &[10, 0, 0, 0][..]));
    }

    #[test]
    fn patches_read_padding_as_zero_and_walk_chunks() {
        // One 3x3 plane, 2x2 kernel, padding 1: output (0, 0) sees (−1,−1)..(0,0).
        let g = Conv2dGeometry {
            n: 1,
            c_in: 2,
            h: 3,
            w: 3,
            c_out: 1,
            kh: 2,
            kw: 2,
            stride: (1, 1),
            padding: (1, 1),
            groups: 1,
            out_h: 4,
            out_w: 4,
        };
        let x: [i8; 18] = core::array::from_fn(|i| i as i8);
        let patch = ConvPatch { x: &x, zero_point: -1, g: &g, first_plane: 0 };
        let mut out = [9i16; 8];
        patch.fill((0, 0), 0..8, &mut out);
        assert_eq!(out, [0, 0, 0, 1, 0, 0, 0, 10]);
        patch.fill((1, 2), 0..8, &mut out);
        assert_eq!(out, [2, 3, 5, 6, 11, 12, 14, 15]);
        let mut part = [9i16; 3];
        patch.fill((1, 2), 3..6, &mut part);
        assert_eq!(part, [6, 11, 12]);
    }

    #[test]
    fn pointwise_panels_match_columns_built_one_at_a_time() {
        // 11 channels of 3x3, 1x1 kernel: a short last group, and a range that starts
        // inside the reduction as a chunk would.
        let g = Conv2dGeometry {
            n: 1,
            c_in: 11,
            h: 3,
            w: 3,
            c_out: 2,
            kh: 1,
            kw: 1,
            stride: (1, 1),
            padding: (0, 0),
            groups: 1,
            out_h: 3,
            out_w: 3,
        };
        let x: [i8; 99] = core::array::from_fn(|i| (i as i8).wrapping_mul(37));
        let patch = ConvPatch { x: &x, zero_point: 3, g: &g, first_plane: 0 };
        for (first, range) in [(0, 0..11), (5, 0..11), (2, 3..11), (1, 4..8)] {
            let mut by_column = ColumnBlock::new();
            by_column.reset(WIDE, 1, range.len());
            for column in 0..WIDE {
                let mut natural = [0i16; 11];
                let natural = &mut natural[..range.len()];
                patch.fill(((first + column) / 3, (first + column) % 3), range.clone(), natural);
                by_column.set_column(column, natural);
            }
            let mut by_panel = ColumnBlock::new();
            by_panel.reset(WIDE, 1, range.len());
            assert!(patch.fill_pointwise_panel::<Scalar>(
                first,
                range.clone(),
                by_panel.panel_mut(0)
            ));
            assert_eq!(by_panel.values(), by_column.values(), "{first} {range:?}");
        }
        // Not 1x1 at stride 1 without padding, or past the plane: no panel.
        let mut block = ColumnBlock::new();
        block.reset(WIDE, 1, 11);
        assert!(!patch.fill_pointwise_panel::<Scalar>(6, 0..11, block.panel_mut(0)));
    }
}
