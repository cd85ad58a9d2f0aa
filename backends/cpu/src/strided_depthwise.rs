//! Stride-2 depthwise convolution straight from the input planes, in AVX-512 registers (an
//! x86-64 module; elsewhere the phase planes of `depthwise` serve every stride), for
//! the shapes of a MobileNet's downsampling layers: input rows twice as wide as the output
//! rows, output rows of 4, 8 or 16 values (planes of 8, 16 or 32 columns).
//!
//! A block of 16 outputs is one output row of 16, or two of 8, or four of 4. For each
//! kernel row, the input rows those outputs read (one of 32 values, two of 16 or four of 8)
//! are loaded into a window of two registers; each tap of that kernel row then picks its
//! 16 inputs out of the window with one two-register permutation, whose mask zeroes the
//! columns in the padding (rows in the padding are never loaded: their window stays zero).
//! So no phase planes are copied and no column is computed only to be dropped.
//!
//! Each output adds its taps in filter order, the first onto the bias and every product
//! rounded before it is added, as the phase-plane loops of `depthwise` do: the results are
//! theirs bit for bit.

use crate::depthwise::BLOCK;
use crate::epilogue::{with_row_map, Epilogue};
use crate::gemm::RowMap;
use crate::parallel::{for_each_chunk, workers};
use crate::pool::Pool;
use sprout_core::geometry::Conv2dGeometry;

/// Widest filter run here: one permutation index and mask per filter column.
const MAX_KW: usize = 8;
/// Tallest filter run here: one window per filter row.
const MAX_KH: usize = 8;

/// Whether `g` (depthwise) runs here: stride 2, input rows twice as wide as output rows of
/// 4, 8 or 16, output planes of whole blocks, a filter of at most 8 x 8, and a CPU with
/// AVX-512F.
pub fn runs_here(g: &Conv2dGeometry) -> bool {
    let shape = g.stride == (2, 2)
        && g.w == 2 * g.out_w
        && matches!(g.out_w, 4 | 8 | 16)
        && (g.out_h * g.out_w).is_multiple_of(BLOCK)
        && g.kh <= MAX_KH
        && g.kw <= MAX_KW;
    shape && std::arch::is_x86_feature_detected!("avx512f")
}

/// Forward pass, each output plane then put through `then`, if any; planes split over
/// threads. `g` must [`runs_here`].
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    pool: &Pool,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    then: Option<&Epilogue<'_>>,
    y: &mut [f32],
    g: &Conv2dGeometry,
) {
    assert!(runs_here(g), "a stride-2 shape this kernel takes, on an AVX-512 CPU");
    let (in_len, out_len, taps) = (g.h * g.w, g.out_h * g.out_w, g.kh * g.kw);
    let columns = Columns::new(g);
    let workers = workers(pool, g.n * g.c_out, g.macs());
    with_row_map!(then, |rows| {
        for_each_chunk(pool, workers, y, out_len, &mut [], 0, |first, planes, _| {
            for (i, y) in planes.chunks_exact_mut(out_len).enumerate() {
                let (plane, c) = (first + i, (first + i) % g.c_out);
                let (x, filter) = (&x[plane * in_len..][..in_len], &w[c * taps..][..taps]);
                let start = b.map_or(0.0, |b| b[c]);
                // SAFETY: `runs_here` (asserted above) checked that the CPU has AVX-512F and
                // that the rows are 8, 16 or 32 values wide.
                unsafe {
                    match g.w {
                        8 => plane_avx512::<8>(&columns, g, start, filter, x, y),
                        16 => plane_avx512::<16>(&columns, g, start, filter, x, y),
                        _ => plane_avx512::<32>(&columns, g, start, filter, x, y),
                    }
                };
                rows.map_row(c, y);
            }
        })
    })
}

/// Where each filter column's tap finds its 16 inputs in a window: lane `j` (output row
/// `j / out_w` of the block, column `j % out_w`) reads window value `index[kx][j]` unless its
/// input column lies in the padding (bit `j` of `mask[kx]` clear).
struct Columns {
    index: [[i32; BLOCK]; MAX_KW],
    mask: [u16; MAX_KW],
}

impl Columns {
    fn new(g: &Conv2dGeometry) -> Self {
        let mut columns = Self { index: [[0; BLOCK]; MAX_KW], mask: [0; MAX_KW] };
        for kx in 0..g.kw {
            for j in 0..BLOCK {
                let (row, ox) = (j / g.out_w, j % g.out_w);
                let col = (2 * ox + kx) as isize - g.padding.1 as isize;
                if (0..g.w as isize).contains(&col) {
                    columns.index[kx][j] = (row * g.w) as i32 + col as i32;
                    columns.mask[kx] |= 1 << j;
                }
            }
        }
        columns
    }
}

/// One output plane `y` of input plane `x` through `filter`, from `start` (the bias), for
/// input rows of `W` (8, 16 or 32) values.
///
/// # Safety
/// The CPU has AVX-512F; `g` [`runs_here`] with `g.w == W`, `x` holds one input plane and
/// `y` one output plane.
#[target_feature(enable = "avx512f")]
unsafe fn plane_avx512<const W: usize>(
    columns: &Columns,
    g: &Conv2dGeometry,
    start: f32,
    filter: &[f32],
    x: &[f32],
    y: &mut [f32],
) {
    use std::arch::x86_64::{
        __m512, _mm512_add_ps, _mm512_loadu_si512, _mm512_maskz_permutex2var_ps, _mm512_mul_ps,
        _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    assert!(g.w == W && x.len() == g.h * W && y.len() == g.out_h * g.out_w, "one plane each");
    let rows_per_block = 2 * BLOCK / W;
    // SAFETY (all index loads): each row of `index` holds 16 `i32`s.
    let index: [_; MAX_KW] =
        core::array::from_fn(|kx| unsafe { _mm512_loadu_si512(columns.index[kx].as_ptr().cast()) });
    for (block, out) in y.chunks_exact_mut(BLOCK).enumerate() {
        let first_row = block * rows_per_block;
        let mut acc: __m512 = _mm512_set1_ps(start);
        for (ky, filter_row) in filter.chunks_exact(g.kw).enumerate() {
            let mut window = [_mm512_setzero_ps(); 2];
            for r in 0..rows_per_block {
                let iy = (2 * (first_row + r) + ky).wrapping_sub(g.padding.0);
                if iy < g.h {
                    load_row::<W>(&mut window, &x[iy * W..][..W], r);
                }
            }
            for (kx, &wk) in filter_row.iter().enumerate() {
                let v =
                    _mm512_maskz_permutex2var_ps(columns.mask[kx], window[0], index[kx], window[1]);
                acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(wk), v));
            }
        }
        // SAFETY: `out` holds one block.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
    }
}

/// Loads `row`, input row `r` of a block's window of rows of `W` values, into `window`.
#[target_feature(enable = "avx512f")]
#[inline]
fn load_row<const W: usize>(window: &mut [std::arch::x86_64::__m512; 2], row: &[f32], r: usize) {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_mask_loadu_ps};
    assert_eq!(row.len(), W, "one row");
    let at = row.as_ptr();
    // SAFETY (every load): the lanes read lie in `row`: all 32 values when `W == 32`, the
    // 16 of the row when 16, and when 8 the mask's half, whose lane `j` reads `row[j]` or
    // `row[j - 8]`.
    unsafe {
        match W {
            32 => *window = [_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(BLOCK))],
            16 => window[r] = _mm512_loadu_ps(at),
            _ => {
                let (half, mask) = if r.is_multiple_of(2) { (0, 0x00ff) } else { (8, 0xff00) };
                let register = &mut window[r / 2];
                *register = _mm512_mask_loadu_ps(*register, mask, at.wrapping_sub(half));
            }
        }
    }
}
