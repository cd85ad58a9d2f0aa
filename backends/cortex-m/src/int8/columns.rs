//! Column blocks: the operand layout of the int8 product. A block holds up to [`WIDE`]
//! columns (conv output positions or dense input rows) of up to [`CHUNK`] reduction indices
//! each, as `i16` values with the input zero point already subtracted (padding is 0), in the
//! order `SXTB16` unpacks four int8 weights: `[x0, x2, x1, x3]` per group of four.
//!
//! Building a column costs a few instructions per value, paid once per block and shared by
//! every output channel; the multiply-accumulate loop then reads each value with no sign
//! extension, no zero-point correction and no bounds decision.

use core::ops::Range;

use sprout_core::geometry::Conv2dGeometry;

/// Reduction indices per block: longer reductions are split into chunks of this size.
pub const CHUNK: usize = 256;
/// Columns in a wide block.
pub const WIDE: usize = 4;

/// Where a natural-order index `k % 4` of a group of four goes: `SXTB16` yields weights
/// `[w0, w2]` and, rotated by 8, `[w1, w3]`.
const LANE: [usize; 4] = [0, 2, 1, 3];

/// One block: `groups` groups of `width` columns of four values (`[group][column][lane]`),
/// word-aligned so the DSP loop can load two lanes per register with `LDRD`.
#[repr(C, align(8))]
pub struct ColumnBlock {
    values: [i16; CHUNK * WIDE],
    width: usize,
    groups: usize,
}

impl ColumnBlock {
    pub const fn new() -> Self {
        Self { values: [0; CHUNK * WIDE], width: 0, groups: 0 }
    }

    /// Empties the block for `width` columns of `depth ≤ CHUNK` values each.
    pub fn reset(&mut self, width: usize, depth: usize) {
        debug_assert!(width <= WIDE && depth <= CHUNK);
        self.width = width;
        self.groups = depth.div_ceil(4);
        // A short last group multiplies its missing lanes by zero.
        self.values[..self.groups * 4 * width].fill(0);
    }

    /// Stores column `column` from natural-order values.
    pub fn set_column(&mut self, column: usize, natural: &[i16]) {
        let width = self.width;
        for (group, quad) in natural.chunks(4).enumerate() {
            let lanes = &mut self.values[(group * width + column) * 4..][..4];
            for (lane, &value) in LANE.iter().zip(quad) {
                lanes[*lane] = value;
            }
        }
    }

    /// The block's values: `groups · width · 4` of them.
    pub fn values(&self) -> &[i16] {
        &self.values[..self.groups * self.width * 4]
    }

    /// Values of full groups (for the multiply-accumulate loop) and of the short last group.
    pub fn split_at_group(&self, full_groups: usize) -> (&[i16], &[i16]) {
        self.values().split_at(full_groups * self.width * 4)
    }
}

/// The natural-order values `[x0, x1, x2, x3]` of one column's lanes (the lane order is
/// its own inverse).
pub fn natural_order(lanes: &[i16]) -> [i16; 4] {
    core::array::from_fn(|k| lanes[LANE[k]])
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
    /// `out` (`range.len()` values), one kernel row at a time.
    pub fn fill(&self, (oy, ox): (usize, usize), range: Range<usize>, out: &mut [i16]) {
        let g = self.g;
        let window = g.kh * g.kw;
        let (mut icg, mut ky, mut kx) =
            (range.start / window, range.start % window / g.kw, range.start % g.kw);
        let mut rest = out;
        // The window's inputs start at (oy·s − p, ox·s − p), possibly in the padding.
        let top = (oy * g.stride.0) as isize - g.padding.0 as isize;
        let left = (ox * g.stride.1) as isize - g.padding.1 as isize;
        while !rest.is_empty() {
            let run = (g.kw - kx).min(rest.len());
            let (row, tail) = rest.split_at_mut(run);
            let iy = top + ky as isize;
            match (0..g.h as isize).contains(&iy) {
                false => row.fill(0),
                true => {
                    let line =
                        &self.x[((self.first_plane + icg) * g.h + iy as usize) * g.w..][..g.w];
                    let ix0 = left + kx as isize;
                    for (i, value) in row.iter_mut().enumerate() {
                        let ix = ix0 + i as isize;
                        *value = match (0..g.w as isize).contains(&ix) {
                            true => centered(line[ix as usize], self.zero_point),
                            false => 0,
                        };
                    }
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
    use super::*;

    #[test]
    fn columns_interleave_in_sxtb16_order() {
        let mut block = ColumnBlock::new();
        block.reset(2, 6);
        block.set_column(0, &[1, 2, 3, 4, 5, 6]);
        block.set_column(1, &[-1, -2, -3, -4, -5, -6]);
        assert_eq!(block.values(), [1, 3, 2, 4, -1, -3, -2, -4, 5, 0, 6, 0, -5, 0, -6, 0]);
        let (full, short) = block.split_at_group(1);
        assert_eq!((full.len(), short.len()), (8, 8));
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
}
