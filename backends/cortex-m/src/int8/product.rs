//! The blocked int8 product both int8 kernels reduce to: for every row `r` (an output
//! channel, with its int8 weight row) and column `c` (a conv output position or a dense
//! input row, see [`super::columns`]), `acc = bias[r] + Σ_k w[r, k] · column_c[k]`,
//! requantized per output channel. An [`Engine`] supplies the multiply-accumulate loop.
//!
//! Columns are built in panels of [`WIDE`] and reused by every row: a reduction of at
//! most [`CHUNK`] builds as many panels as a block holds, runs them all per row in one
//! engine call (a reduction of two groups streams single columns past the row's weights
//! instead) and requantizes the row's outputs at once; a longer one is cut into chunks,
//! rows then go in blocks of [`ROW_BLOCK`] whose accumulators live on the stack between
//! chunks. Stack use: about 3.3 KiB.

use core::ops::Range;

use sprout_core::quant::OutputQuant;

use super::columns::{ColumnBlock, CHUNK, WIDE};
use super::requantize::ChannelQuant;

/// Rows whose accumulators are kept across the chunks of a long reduction.
const ROW_BLOCK: usize = 16;
/// Panels of one block of a short reduction, whose outputs are requantized together.
const MAX_PANELS: usize = 16;

/// The multiply-accumulate loop over whole groups of four reduction indices.
pub trait Engine {
    /// `acc[c] += Σ_k w[k] · column_c[k]` for the [`WIDE`] columns of a block's values.
    fn dot_wide(w: &[i8], values: &[i16], acc: &mut [i32; WIDE]);
    /// `acc += Σ_k w[k] · column[k]` for the values of a one-column block.
    fn dot_one(w: &[i8], values: &[i16], acc: &mut i32);
    /// `acc[4p + c] = start + Σ_k w[k] · column_{p,c}[k]` for the panels of [`WIDE`]
    /// columns that follow one another in `values` (`w.len() / 4` whole groups each;
    /// `acc.len() / 4` panels).
    fn dot_panels(w: &[i8], start: i32, values: &[i16], acc: &mut [i32]) {
        let panel = w.len() * WIDE;
        for (acc, values) in acc.as_chunks_mut::<WIDE>().0.iter_mut().zip(values.chunks(panel)) {
            *acc = [start; WIDE];
            Self::dot_wide(w, values, acc);
        }
    }
    /// `acc[c] = start + Σ_k w[k] · column_c[k]` for the columns of one-column panels of
    /// two groups each (8 values per column, one after the other in `values`).
    fn dot_columns_8(w: &[i8; 8], start: i32, values: &[i16], acc: &mut [i32]) {
        for (acc, column) in acc.iter_mut().zip(values.chunks_exact(8)) {
            *acc = start;
            Self::dot_one(w, column, acc);
        }
    }
    /// Depthwise 3x3 windows of a padded plane: `sums[i] = Σ x·taps` over the window
    /// whose kernel rows start at `i · stride`, `pitch + i · stride` and
    /// `2 · pitch + i · stride` of `rows` (wrapping).
    fn sums_3x3(rows: &[i8], pitch: usize, taps: &[i8; 9], stride: usize, sums: &mut [i32]) {
        super::depthwise::sums_3x3(rows, pitch, taps, stride, sums)
    }
    /// [`Engine::sums_3x3`] for whole output rows of `width` outputs at `stride` (`shape`;
    /// `sums.len() / width` rows), whose first windows start `row_step` apart in `rows`
    /// (kernel rows `pitch` apart; `steps` is `(pitch, row_step)`): the sums of row `r` go
    /// to `sums[r · width..][..width]`.
    fn sums_3x3_rows(
        rows: &[i8],
        (pitch, row_step): (usize, usize),
        taps: &[i8; 9],
        (stride, width): (usize, usize),
        sums: &mut [i32],
    ) {
        for (row, sums) in sums.chunks_mut(width.max(1)).enumerate() {
            Self::sums_3x3(&rows[row * row_step..], pitch, taps, stride, sums);
        }
    }
    /// The whole groups of a pointwise panel: `lanes` in block order from channel `k`'s
    /// four inputs `x[k · plane..][..4]`, centered on `zero_point`.
    fn pointwise_groups(x: &[i8], plane: usize, zero_point: i32, lanes: &mut [i16]) {
        super::columns::pointwise_groups(x, plane, zero_point, lanes)
    }
    /// `dst.copy_from_slice(src)` for a short row at any alignment.
    fn copy_row(dst: &mut [i8], src: &[i8]) {
        dst.copy_from_slice(src)
    }
    /// `out[i] = quant.finish(start + accs[i])` (wrapping), where `most` bounds every
    /// `|start + accs[i]|` (or is `u64::MAX`), which lets an engine skip range checks.
    fn finish_run(quant: &ChannelQuant, start: i32, accs: &[i32], out: &mut [i8], most: u64) {
        let _ = most;
        quant.finish_run(start, accs, out)
    }
}

/// The columns of a product: how many, and the natural-order values of one of them.
pub trait Columns {
    fn count(&self) -> usize;
    /// The largest magnitude of any column value.
    fn largest(&self) -> u64;
    /// Writes column `column`'s values at reduction indices `range` into `out`.
    fn fill(&self, column: usize, range: Range<usize>, out: &mut [i16]);
    /// Writes the [`WIDE`] columns from `first` at reduction indices `range` straight into
    /// `panel` in block order (`[group][column][lane]`, a short last group zero-padded)
    /// where these columns have a faster way than one at a time; returns whether it did.
    fn fill_panel<E: Engine>(
        &self,
        _first: usize,
        _range: Range<usize>,
        _panel: &mut [i16],
    ) -> bool {
        false
    }
}

/// The rows of a product: `count` int8 weight rows of `depth` values, their bias and output
/// quantization, for output channels `first..first + count` of `out`.
pub struct Rows<'a, 'q> {
    pub w: &'a [i8],
    pub count: usize,
    pub depth: usize,
    pub bias: Option<&'a [i32]>,
    pub first: usize,
    pub out: &'a OutputQuant<'q>,
}

/// The most outputs of one row that a product finishes at once.
pub const MOST_OUTPUTS: usize = WIDE * MAX_PANELS;

/// Where a product's outputs go.
pub trait Sink {
    /// Has `finish` write the outputs of row `row` for the `len ≤ MOST_OUTPUTS`
    /// consecutive columns from `first`, straight into the output where they lie together
    /// there.
    fn put(&mut self, first: usize, row: usize, len: usize, finish: impl FnOnce(&mut [i8]));
}

/// Runs the product and hands the outputs of each row, for consecutive columns, to `sink`.
pub fn product<E: Engine>(columns: &impl Columns, rows: &Rows<'_, '_>, sink: &mut impl Sink) {
    let mut block = ColumnBlock::new();
    let mut natural = [0i16; CHUNK];
    match rows.depth <= CHUNK {
        true => one_chunk::<E>(columns, rows, &mut block, &mut natural, sink),
        false => chunked::<E>(columns, rows, &mut block, &mut natural, sink),
    }
}

/// Builds columns `start..start + width · panels` into `block` for reduction indices
/// `range`.
fn build<E: Engine>(
    columns: &impl Columns,
    block: &mut ColumnBlock,
    natural: &mut [i16; CHUNK],
    (start, width, panels): (usize, usize, usize),
    range: Range<usize>,
) {
    block.reset(width, panels, range.len());
    let natural = &mut natural[..range.len()];
    for panel in 0..panels {
        let first = start + panel * width;
        if width == WIDE && columns.fill_panel::<E>(first, range.clone(), block.panel_mut(panel)) {
            continue;
        }
        for column in panel * width..(panel + 1) * width {
            columns.fill(start + column, range.clone(), natural);
            block.set_column(column, natural);
        }
    }
}

/// A reduction of at most [`CHUNK`]: as many panels of [`WIDE`] columns as one block holds
/// are built at once, and each row is visited once per block, its accumulators going
/// straight from bias to output.
fn one_chunk<E: Engine>(
    columns: &impl Columns,
    rows: &Rows<'_, '_>,
    block: &mut ColumnBlock,
    natural: &mut [i16; CHUNK],
    sink: &mut impl Sink,
) {
    let (depth, count, largest) = (rows.depth, columns.count(), columns.largest());
    // Two groups per column: the row's weights stay in registers while single columns
    // stream past them.
    let two_groups = depth.div_ceil(4) == 2;
    let most_panels = ColumnBlock::panels_for(WIDE, depth).min(MAX_PANELS);
    let mut acc = [0i32; MOST_OUTPUTS];
    let mut padded = [0i8; CHUNK];
    let mut start = 0;
    while start < count {
        let (width, panels) = match count - start {
            left if two_groups => (1, left.min(WIDE * MAX_PANELS)),
            left if left >= WIDE => (WIDE, (left / WIDE).min(most_panels)),
            _ => (1, 1),
        };
        build::<E>(columns, block, natural, (start, width, panels), 0..depth);
        let outputs = width * panels;
        for r in 0..rows.count {
            let w = &rows.w[r * depth..][..depth];
            let bias = rows.bias.map_or(0, |b| b[rows.first + r]);
            // A short last group runs with its weights zero-padded to a whole group (the
            // columns' missing values are zero).
            let w = match depth % 4 {
                0 => w,
                _ => {
                    padded[..depth].copy_from_slice(w);
                    &padded[..depth.div_ceil(4) * 4]
                }
            };
            let columns = block.panels(panels);
            match <&[i8; 8]>::try_from(w) {
                Ok(w) if two_groups => E::dot_columns_8(w, bias, columns, &mut acc[..outputs]),
                _ if width == WIDE => E::dot_panels(w, bias, columns, &mut acc[..outputs]),
                _ => {
                    acc[0] = bias;
                    E::dot_one(w, columns, &mut acc[0]);
                }
            }
            let quant = ChannelQuant::new(rows.out, rows.first + r);
            let most = bias_most(bias, depth, largest);
            let acc = &acc[..outputs];
            sink.put(start, r, outputs, |out| E::finish_run(&quant, 0, acc, out, most));
        }
        start += width * panels;
    }
}

/// A reduction longer than [`CHUNK`], cut into chunks: rows go in blocks of
/// [`ROW_BLOCK`] whose accumulators live on the stack between chunks.
fn chunked<E: Engine>(
    columns: &impl Columns,
    rows: &Rows<'_, '_>,
    block: &mut ColumnBlock,
    natural: &mut [i16; CHUNK],
    sink: &mut impl Sink,
) {
    let (depth, count, row_count) = (rows.depth, columns.count(), rows.count);
    let chunks = depth.div_ceil(CHUNK);
    let mut acc = [[0i32; WIDE]; ROW_BLOCK];
    let mut start = 0;
    while start < count {
        let width = if count - start >= WIDE { WIDE } else { 1 };
        let mut built = None;
        for row_start in (0..row_count).step_by(ROW_BLOCK) {
            let row_end = (row_start + ROW_BLOCK).min(row_count);
            for (r, acc) in (row_start..row_end).zip(&mut acc) {
                *acc = [rows.bias.map_or(0, |b| b[rows.first + r]); WIDE];
            }
            for chunk in 0..chunks {
                let range = chunk * CHUNK..((chunk + 1) * CHUNK).min(depth);
                if built != Some(chunk) {
                    build::<E>(columns, block, natural, (start, width, 1), range.clone());
                    built = Some(chunk);
                }
                for (r, acc) in (row_start..row_end).zip(&mut acc) {
                    let w = &rows.w[r * depth..][range.clone()];
                    accumulate::<E>(block, 0, w, width, acc);
                }
            }
            for (r, acc) in (row_start..row_end).zip(&acc) {
                let quant = ChannelQuant::new(rows.out, rows.first + r);
                let bias = rows.bias.map_or(0, |b| b[rows.first + r]);
                let most = bias_most(bias, depth, columns.largest());
                let acc = &acc[..width];
                sink.put(start, r, width, |out| E::finish_run(&quant, 0, acc, out, most));
            }
        }
        start += width;
    }
}

/// A bound on `|bias + Σ w · column|` over `depth` int8 weights (at most 128 in magnitude).
/// `largest` is the columns' largest value magnitude.
fn bias_most(bias: i32, depth: usize, largest: u64) -> u64 {
    u64::from(bias.unsigned_abs()) + depth as u64 * 128 * largest
}

/// `acc[c] += w · column_c` over the columns of one panel, all through the engine: a
/// short last group (whose missing column values are zero) runs with its weights
/// zero-padded to a whole group.
fn accumulate<E: Engine>(
    block: &ColumnBlock,
    panel: usize,
    w: &[i8],
    width: usize,
    acc: &mut [i32; WIDE],
) {
    let full = w.len() / 4;
    let (values, short) = block.split_at_group(panel, full);
    let (w_full, w_short) = w.split_at(full * 4);
    dot::<E>(w_full, values, width, acc);
    if !w_short.is_empty() {
        let mut padded = [0i8; 4];
        padded[..w_short.len()].copy_from_slice(w_short);
        dot::<E>(&padded, short, width, acc);
    }
}

/// The engine's loop for a panel of `width` columns.
fn dot<E: Engine>(w: &[i8], values: &[i16], width: usize, acc: &mut [i32; WIDE]) {
    match width {
        WIDE => E::dot_wide(w, values, acc),
        _ => E::dot_one(w, values, &mut acc[0]),
    }
}
