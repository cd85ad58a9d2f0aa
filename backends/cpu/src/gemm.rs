//! Matrix products: strided matrix views and `C = A·B + β·C`, with the rows of `C` split
//! over threads. When the rows of `A` and of `B` are contiguous (a convolution's weights and
//! its input's column matrix), blocks of [`MR`]` x `[`NR`] outputs are accumulated in registers straight
//! from `A` and `B` ([`broadcast_rows`]): the small, skinny products of a MobileNet spend
//! more on the packing of a general GEMM than on its arithmetic. Other products go to
//! `matrixmultiply`'s `sgemm`. A [`RowMap`] (a frozen batch norm and its rectifier) maps
//! each output row's values as they are stored, while they are still in registers.

use crate::parallel::{for_each_chunk, partials_len, sum_over_batch, workers, Scratch};
use crate::pool::Pool;

/// A read-only strided matrix over a slice: element `(i, j)` is `data[i·row_stride +
/// j·col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// The row-major `rows x cols` matrix at the start of `data`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        let m = Self { data, rows, cols, row_stride: cols, col_stride: 1 };
        m.assert_in_bounds();
        m
    }

    /// The transpose, as a view of the same data.
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// `count` rows starting at row `first`.
    fn rows(self, first: usize, count: usize) -> Self {
        assert!(first + count <= self.rows, "rows {first}..+{count} of {}", self.rows);
        let start = (first * self.row_stride).min(self.data.len());
        Self { data: &self.data[start..], rows: count, ..self }
    }

    /// Every element's index lies inside `data`.
    fn assert_in_bounds(&self) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride;
            assert!(last < self.data.len(), "matrix reaches {last}, slice has {}", self.data.len());
        }
    }
}

/// What happens to each value of row `i` of a product as it is stored: `row(i)`'s map.
pub trait RowMap: Sync {
    /// Whether every row's map returns its value as it is.
    const IDENTITY: bool = false;
    fn row(&self, i: usize) -> impl Fn(f32) -> f32;

    /// `values` through row `i`'s map, in place.
    #[inline(always)]
    fn map_row(&self, i: usize, values: &mut [f32]) {
        if !Self::IDENTITY {
            let map = self.row(i);
            values.iter_mut().for_each(|v| *v = map(*v));
        }
    }
}

/// The product's values as they are.
pub struct Unmapped;

impl RowMap for Unmapped {
    const IDENTITY: bool = true;
    #[inline(always)]
    fn row(&self, _: usize) -> impl Fn(f32) -> f32 {
        |v| v
    }
}

/// `map`'s rows from row `first` on: the rows of a product of part of `map`'s rows.
pub struct RowsFrom<'a, M> {
    pub map: &'a M,
    pub first: usize,
}

impl<M: RowMap> RowMap for RowsFrom<'_, M> {
    const IDENTITY: bool = M::IDENTITY;
    #[inline(always)]
    fn row(&self, i: usize) -> impl Fn(f32) -> f32 {
        self.map.row(self.first + i)
    }
}

/// `c = a·b + beta·c` for a row-major `c[a.rows, b.cols]`, with `c`'s rows split over up
/// to `pool`'s threads. With `beta == 0` the old contents of `c` are ignored (NaN too).
pub fn gemm(pool: &Pool, a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32]) {
    gemm_mapped(pool, a, b, beta, c, &Unmapped)
}

/// [`gemm`] with every value of row `i` of `c` put through `rows.row(i)` as it is stored.
pub fn gemm_mapped(
    pool: &Pool,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    rows: &impl RowMap,
) {
    assert_eq!(a.cols, b.rows, "inner dimensions");
    assert_eq!(c.len(), a.rows * b.cols, "output length");
    // Whole register blocks of rows per run; `matrixmultiply` packs `b` again for every
    // call, so its products get one run of rows per thread.
    let workers = workers(pool, a.rows.div_ceil(MR), a.rows * a.cols * b.cols);
    let rows_per_item = match a.col_stride == 1 && b.col_stride == 1 {
        true => MR,
        false => a.rows.div_ceil(workers),
    };
    let rows_map = rows;
    for_each_chunk(pool, workers, c, rows_per_item * b.cols, &mut [], 0, |first, c_rows, _| {
        let rows = c_rows.len().checked_div(b.cols).unwrap_or(0);
        let first = first * rows_per_item;
        sgemm(a.rows(first, rows), b, beta, c_rows, &RowsFrom { map: rows_map, first });
    });
}

/// Rows of `C` one register block accumulates.
const MR: usize = 4;
/// Columns of `C` one register block accumulates: one AVX-512 register, two AVX2 ones.
const NR: usize = 16;

/// `c = a·b + beta·c` for `a` and `b` with contiguous rows (`col_stride` 1), every [`NR`]-column
/// block of `c` by [`MR`]-row register blocks that broadcast an element of `a` over a row
/// of `b`; columns past the last whole block are plain dot products. The caller has
/// checked the shapes and that `a` and `b` lie inside their slices.
#[inline(always)]
fn broadcast_rows_generic<const FUSED: bool>(
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    rows: &impl RowMap,
) {
    let (m, n) = (a.rows, b.cols);
    let body = n - n % NR;
    for j in (0..body).step_by(NR) {
        let mut i = 0;
        while i + MR <= m {
            broadcast_block::<MR, FUSED>(a, b, i, j, beta, c, rows);
            i += MR;
        }
        for i in i..m {
            broadcast_block::<1, FUSED>(a, b, i, j, beta, c, rows);
        }
    }
    scalar_columns::<FUSED>(a, b, beta, c, rows, body);
}

/// Columns `first..` of [`broadcast_rows_generic`]'s product, each value a plain dot
/// product stored through its row's map.
#[inline(always)]
fn scalar_columns<const FUSED: bool>(
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    rows: &impl RowMap,
    first: usize,
) {
    let (m, n) = (a.rows, b.cols);
    for i in 0..m {
        let map = rows.row(i);
        for j in first..n {
            let mut sum = 0.0f32;
            for k in 0..a.cols {
                // SAFETY: `i < m`, `k < a.cols == b.rows`, `j < n`; both views were checked.
                let (x, y) = unsafe { (a.at(i, k), b.at(k, j)) };
                sum = fma::<FUSED>(x, y, sum);
            }
            let out = &mut c[i * n + j];
            *out = map(if beta == 0.0 { sum } else { sum + beta * *out });
        }
    }
}

/// [`broadcast_rows_generic`] in AVX-512 registers: blocks of up to 8 rows by 32 columns
/// (16 accumulators) where they fit, 16 columns and fewer rows at the edges, each output
/// the same chain of fused multiply-adds over the inner dimension as the generic blocks'.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn broadcast_rows_avx512(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32], rows: &impl RowMap) {
    let (m, n) = (a.rows, b.cols);
    let mut j = 0;
    while j + LANES_512 <= n {
        let wide = j + 2 * LANES_512 <= n;
        let mut i = 0;
        while i < m {
            let r = match m - i {
                8.. => 8,
                4..=7 => 4,
                _ => 1,
            };
            // SAFETY: `i + r <= m` and `j + 16·V <= n` (see `wide`); the caller checked the
            // views and the output's length.
            let width = unsafe {
                match (r, wide) {
                    (8, true) => zmm_block::<8, 2>(a, b, i, j, beta, c),
                    (8, false) => zmm_block::<8, 1>(a, b, i, j, beta, c),
                    (4, true) => zmm_block::<4, 2>(a, b, i, j, beta, c),
                    (4, false) => zmm_block::<4, 1>(a, b, i, j, beta, c),
                    (_, true) => zmm_block::<1, 2>(a, b, i, j, beta, c),
                    (_, false) => zmm_block::<1, 1>(a, b, i, j, beta, c),
                }
            };
            map_rows(rows, i, &mut c[i * n + j..], n, width, r);
            i += r;
        }
        j += if wide { 2 * LANES_512 } else { LANES_512 };
    }
    scalar_columns::<true>(a, b, beta, c, rows, j);
}

/// Lanes of an AVX-512 register of `f32`.
#[cfg(target_arch = "x86_64")]
const LANES_512: usize = 16;

/// Rows `i..i + R`, columns `j..j + 16·V` of `c = a·b + beta·c` in `R·V` AVX-512
/// accumulators; returns the columns written.
///
/// # Safety
/// The CPU has AVX-512F; `i + R <= a.rows`, `j + 16·V <= b.cols`, `a` and `b` have
/// contiguous rows and passed `assert_in_bounds`, and `c` holds `a.rows · b.cols` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[inline]
unsafe fn zmm_block<const R: usize, const V: usize>(
    a: Mat<'_>,
    b: Mat<'_>,
    i: usize,
    j: usize,
    beta: f32,
    c: &mut [f32],
) -> usize {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    for k in 0..a.cols {
        // SAFETY: row `k < b.rows` of `b` holds columns `j..j + 16·V` (caller's promise).
        let row = unsafe { b.data.as_ptr().add(k * b.row_stride + j) };
        let y: [_; V] =
            core::array::from_fn(|v| unsafe { _mm512_loadu_ps(row.add(v * LANES_512)) });
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `i + r < a.rows`, `k < a.cols`.
            let x = _mm512_set1_ps(unsafe { a.at(i + r, k) });
            for (acc, &y) in acc.iter_mut().zip(&y) {
                *acc = _mm512_fmadd_ps(x, y, *acc);
            }
        }
    }
    let n = b.cols;
    for (r, acc) in acc.iter().enumerate() {
        let out = &mut c[(i + r) * n + j..][..V * LANES_512];
        for (v, &sum) in acc.iter().enumerate() {
            // SAFETY: `out` holds `16·V` values.
            unsafe {
                let at = out.as_mut_ptr().add(v * LANES_512);
                let value = if beta == 0.0 {
                    sum
                } else {
                    _mm512_add_ps(sum, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(at)))
                };
                _mm512_storeu_ps(at, value);
            }
        }
    }
    V * LANES_512
}

// [`broadcast_rows_generic`], in AVX-512 registers on CPUs that have them.
multiversion!(broadcast_rows = avx512 broadcast_rows_avx512, fused broadcast_rows_generic(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32], rows: &impl RowMap));

/// `x·y + acc`, fused (one rounding) where the code has the instruction.
#[inline(always)]
pub(crate) fn fma<const FUSED: bool>(x: f32, y: f32, acc: f32) -> f32 {
    if FUSED {
        x.mul_add(y, acc)
    } else {
        x * y + acc
    }
}

/// Rows `i..i + R`, columns `j..j + NR` of `c = a·b + beta·c`, accumulated in registers
/// and stored through `rows`' maps.
#[inline(always)]
fn broadcast_block<const R: usize, const FUSED: bool>(
    a: Mat<'_>,
    b: Mat<'_>,
    i: usize,
    j: usize,
    beta: f32,
    c: &mut [f32],
    rows: &impl RowMap,
) {
    let mut acc = [[0.0f32; NR]; R];
    for k in 0..a.cols {
        // SAFETY: `k < a.cols == b.rows` and `j + NR <= b.cols` with `b.col_stride == 1`,
        // so the row lies inside `b.data` (checked by `assert_in_bounds`).
        let row: &[f32; NR] = unsafe { &*b.data.as_ptr().add(k * b.row_stride + j).cast() };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the caller passes `i + R <= a.rows`; `k < a.cols`.
            let x = unsafe { a.at(i + r, k) };
            for (acc, &y) in acc.iter_mut().zip(row) {
                *acc = fma::<FUSED>(x, y, *acc);
            }
        }
    }
    let n = b.cols;
    for (r, acc) in acc.iter().enumerate() {
        let out = &mut c[(i + r) * n + j..][..NR];
        for (out, &v) in out.iter_mut().zip(acc) {
            *out = if beta == 0.0 { v } else { v + beta * *out };
        }
    }
    map_rows(rows, i, &mut c[i * n + j..], n, NR, R);
}

/// Puts the `len` values from the start of each of `count` rows of `c`, `stride` apart,
/// through the maps of rows `first..first + count` of `rows`: in place, while they are in
/// the cache the product stored them to.
#[inline(always)]
fn map_rows<M: RowMap>(
    rows: &M,
    first: usize,
    c: &mut [f32],
    stride: usize,
    len: usize,
    count: usize,
) {
    for r in 0..count {
        rows.map_row(first + r, &mut c[r * stride..][..len]);
    }
}

impl Mat<'_> {
    /// Element `(i, j)`.
    ///
    /// # Safety
    /// `i < rows`, `j < cols`, and the view passed `assert_in_bounds`.
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> f32 {
        debug_assert!(i < self.rows && j < self.cols);
        // SAFETY: the caller's promise puts the index inside `data`.
        unsafe { *self.data.get_unchecked(i * self.row_stride + j * self.col_stride) }
    }
}

/// A batch of `count` row-major `rows x len` matrices in one slice, the `n`-th starting at
/// `n·stride`: one sample's planes of a convolution's input or output gradient.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub len: usize,
    pub stride: usize,
    pub count: usize,
}

impl Batch<'_> {
    /// Row `i` of matrix `n`, checked against the slice.
    #[inline(always)]
    fn row(&self, n: usize, i: usize) -> &[f32] {
        &self.data[n * self.stride + i * self.len..][..self.len]
    }

    /// Where rows `first..first + rows` of matrix 0 start, after checking that those rows
    /// of every matrix lie inside the slice: matrix `n`'s are `n·stride` values on.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn rows_at(&self, first: usize, rows: usize) -> *const f32 {
        let end =
            self.count.checked_sub(1).map_or(0, |n| n * self.stride + (first + rows) * self.len);
        assert!(end <= self.data.len(), "rows {first}..+{rows} of {} matrices", self.count);
        self.data.as_ptr().wrapping_add(first * self.len)
    }

    /// The `count` matrices from matrix `first` on.
    fn samples(self, first: usize, count: usize) -> Self {
        assert!(first + count <= self.count, "matrices {first}..+{count} of {}", self.count);
        Self { data: &self.data[(first * self.stride).min(self.data.len())..], count, ..self }
    }
}

/// Lanes of each partial sum of [`sum_of_products_nt`]: one AVX2 register.
const LANES: usize = 8;
/// Rows of `a` and of `b` one register block of [`sum_of_products_nt`] pairs (channel
/// counts are mostly multiples of 8, so the edges of one row or column are rare).
const DOT_ROWS: (usize, usize) = (4, 2);
/// Values of each row that one pass over the register blocks reads: samples are taken in
/// chunks of about this many values per row, so that the rows of a chunk stay in cache while
/// every block of outputs reads them.
const CHUNK: usize = 1024;

/// Scratch values [`sum_of_products_nt`] takes for a `c` of `len` values on `pool`.
pub fn sum_of_products_scratch(pool: &Pool, len: usize) -> usize {
    partials_len(pool.threads(), len)
}

/// `c[i, j] = Σₙ Σₚ a_n[i, p]·b_n[j, p]`, the sum over the batch of `a_n·b_nᵀ` (a pointwise
/// convolution's weight gradient), `c` row-major `[a.rows, b.rows]` and overwritten. Blocks
/// of outputs keep partial sums in vector registers over a chunk of samples and add them to
/// `c` once per chunk; the batch is split over threads, or the rows of `c` when the batch
/// is too small (see [`sum_over_batch`]), with `scratch` of [`sum_of_products_scratch`]
/// values.
pub fn sum_of_products_nt(
    pool: &Pool,
    a: Batch<'_>,
    b: Batch<'_>,
    c: &mut [f32],
    scratch: &mut [f32],
) {
    assert_eq!((a.len, a.count), (b.len, b.count), "batch and inner dimensions");
    assert_eq!(c.len(), a.rows * b.rows, "output length");
    let work = a.count * a.rows * b.rows * a.len;
    let scratch = Scratch { partials: scratch, pieces: &mut [], piece_len: 0 };
    // Whole register blocks of rows per item.
    let (mr, _) = DOT_ROWS;
    sum_over_batch(pool, a.count, work, c, mr * b.rows, scratch, |first, samples, c_rows, _| {
        let (a, b) =
            (a.samples(samples.start, samples.len()), b.samples(samples.start, samples.len()));
        summed_rows(a, b, first * mr, c_rows)
    });
}

/// [`summed_rows`] by [`DOT_ROWS`] blocks, `FUSED` as in `multiversion!`.
#[inline(always)]
fn summed_rows_narrow<const FUSED: bool>(
    a: Batch<'_>,
    b: Batch<'_>,
    first: usize,
    c_rows: &mut [f32],
) {
    const MR: usize = DOT_ROWS.0;
    const NR: usize = DOT_ROWS.1;
    add_summed_rows::<MR, NR, FUSED>(a, b, first, c_rows, block_4x2::<FUSED>);
}

/// [`summed_rows`] with AVX-512's 32 registers: 4 x 4 blocks of 16-lane sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn summed_rows_avx512(a: Batch<'_>, b: Batch<'_>, first: usize, c_rows: &mut [f32]) {
    add_summed_rows::<4, 4, true>(a, b, first, c_rows, |a, b, ai, j| block_4x4_avx512(a, b, ai, j));
}

// Rows `first..` of [`sum_of_products_nt`] into `c_rows`: by AVX-512 blocks of 4 x 4 where
// the CPU has them, else by [`DOT_ROWS`] blocks (AVX2 ones where it has AVX2 and FMA).
multiversion!(summed_rows = avx512 summed_rows_avx512, fused summed_rows_narrow(a: Batch<'_>, b: Batch<'_>, first: usize, c_rows: &mut [f32]));

/// Rows `first..` of [`sum_of_products_nt`] into `c_rows` (overwritten): per chunk of samples
/// (see [`CHUNK`]), every `MR x NR` block of outputs from `block`, the edges one row or
/// column at a time, added to `c_rows`.
#[inline(always)]
fn add_summed_rows<const MR: usize, const NR: usize, const FUSED: bool>(
    a: Batch<'_>,
    b: Batch<'_>,
    first: usize,
    c_rows: &mut [f32],
    block: impl Fn(Batch<'_>, Batch<'_>, usize, usize) -> [[f32; NR]; MR],
) {
    let (rows, cols) = (c_rows.len().checked_div(b.rows).unwrap_or(0), b.rows);
    c_rows.fill(0.0);
    let per_chunk = (CHUNK / a.len.max(1)).max(1);
    for start in (0..a.count).step_by(per_chunk) {
        let count = per_chunk.min(a.count - start);
        let (a, b) = (a.samples(start, count), b.samples(start, count));
        let mut i = 0;
        while i < rows {
            let r = if i + MR <= rows { MR } else { 1 };
            let mut j = 0;
            while j < cols {
                let c = if j + NR <= cols { NR } else { 1 };
                let out = &mut c_rows[i * cols + j..];
                match (r == MR, c == NR) {
                    (true, true) => add(out, cols, block(a, b, first + i, j)),
                    (true, false) => {
                        add(out, cols, summed_block::<MR, 1, FUSED>(a, b, first + i, j))
                    }
                    (false, true) => {
                        add(out, cols, summed_block::<1, NR, FUSED>(a, b, first + i, j))
                    }
                    (false, false) => {
                        add(out, cols, summed_block::<1, 1, FUSED>(a, b, first + i, j))
                    }
                }
                j += c;
            }
            i += r;
        }
    }
}

/// Adds block `sums` to the start of `out`, whose rows are `pitch` apart.
#[inline(always)]
fn add<const R: usize, const C: usize>(out: &mut [f32], pitch: usize, sums: [[f32; C]; R]) {
    for (r, sums) in sums.iter().enumerate() {
        out[r * pitch..][..C].iter_mut().zip(sums).for_each(|(out, &s)| *out += s);
    }
}

/// The 4 x 2 block at `(ai, j)`: in AVX2 registers on x86-64 code with FMA, else
/// [`summed_block`].
#[inline(always)]
fn block_4x2<const FUSED: bool>(a: Batch<'_>, b: Batch<'_>, ai: usize, j: usize) -> [[f32; 2]; 4] {
    #[cfg(target_arch = "x86_64")]
    if FUSED {
        // SAFETY: on x86-64, `multiversion!` compiles `FUSED` code only into the variants it
        // runs after detecting AVX-512F or AVX2 with FMA.
        return unsafe { block_4x2_avx2(a, b, ai, j) };
    }
    summed_block::<4, 2, FUSED>(a, b, ai, j)
}

/// Sums of 8 lanes, added up in halves (the order of [`summed_block`]).
#[inline(always)]
fn add_lanes(mut lanes: [f32; LANES]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}

/// [`summed_block`] for 4 x 2 outputs with eight AVX2 accumulators, six loads per eight
/// steps of the inner dimension.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_4x2_avx2(a: Batch<'_>, b: Batch<'_>, ai: usize, j: usize) -> [[f32; 2]; 4] {
    use std::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    let mut acc: [[__m256; 2]; 4] = [[_mm256_setzero_ps(); 2]; 4];
    let mut tail = [[0.0f32; 2]; 4];
    let (len, body) = (a.len, a.len - a.len % LANES);
    let (a_rows, b_rows) = (a.rows_at(ai, 4), b.rows_at(j, 2));
    for n in 0..a.count {
        // SAFETY: `rows_at` checked that rows `ai..ai + 4` of `a` and `j..j + 2` of `b` lie
        // inside their slices in every matrix `n < count`; `p + 8 <= body <= len`.
        unsafe {
            let (pa, pb) = (a_rows.add(n * a.stride), b_rows.add(n * b.stride));
            let mut p = 0;
            while p < body {
                let at = |row: *const f32| _mm256_loadu_ps(row.add(p));
                let x = [at(pa), at(pa.add(len)), at(pa.add(2 * len)), at(pa.add(3 * len))];
                let y = [at(pb), at(pb.add(len))];
                for (acc, x) in acc.iter_mut().zip(x) {
                    for (acc, y) in acc.iter_mut().zip(y) {
                        *acc = _mm256_fmadd_ps(x, y, *acc);
                    }
                }
                p += LANES;
            }
        }
        if body != len {
            let a_rows = [a.row(n, ai), a.row(n, ai + 1), a.row(n, ai + 2), a.row(n, ai + 3)];
            add_tail_products::<4, 2, true>(
                &mut tail,
                a_rows,
                [b.row(n, j), b.row(n, j + 1)],
                body,
            );
        }
    }
    // SAFETY: `__m256` and `[f32; 8]` have the same size, and every bit pattern is valid.
    let lanes = |v: __m256| unsafe { core::mem::transmute::<__m256, [f32; LANES]>(v) };
    core::array::from_fn(|r| core::array::from_fn(|s| add_lanes(lanes(acc[r][s])) + tail[r][s]))
}

/// [`summed_block`] for 4 x 4 outputs with sixteen AVX-512 accumulators, eight loads per
/// sixteen steps of the inner dimension.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[inline(never)]
fn block_4x4_avx512(a: Batch<'_>, b: Batch<'_>, ai: usize, j: usize) -> [[f32; 4]; 4] {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_reduce_add_ps, _mm512_setzero_ps,
    };
    const WIDE: usize = 16;
    let mut acc: [[__m512; 4]; 4] = [[_mm512_setzero_ps(); 4]; 4];
    let mut sums = [[0.0f32; 4]; 4];
    let body = a.len - a.len % WIDE;
    for n in 0..a.count {
        let a_rows = [a.row(n, ai), a.row(n, ai + 1), a.row(n, ai + 2), a.row(n, ai + 3)];
        let b_rows = [b.row(n, j), b.row(n, j + 1), b.row(n, j + 2), b.row(n, j + 3)];
        let mut p = 0;
        while p < body {
            // SAFETY (all loads): every row holds `len >= body >= p + 16` values.
            let mut y = [_mm512_setzero_ps(); 4];
            for s in 0..4 {
                y[s] = unsafe { _mm512_loadu_ps(b_rows[s].as_ptr().add(p)) };
            }
            for r in 0..4 {
                let x = unsafe { _mm512_loadu_ps(a_rows[r].as_ptr().add(p)) };
                for s in 0..4 {
                    acc[r][s] = _mm512_fmadd_ps(x, y[s], acc[r][s]);
                }
            }
            p += WIDE;
        }
    }
    for r in 0..4 {
        for s in 0..4 {
            sums[r][s] = _mm512_reduce_add_ps(acc[r][s]);
        }
    }
    // After the sums leave the registers: a call across which they lived would spill them.
    if body != a.len {
        tail_sums_avx512(a, b, ai, j, body, &mut sums);
    }
    sums
}

/// Adds to `sums` the products of [`block_4x4_avx512`]'s rows at the positions from `body`
/// on, over the batch: apart from its loop, whose vector registers it would take.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[inline(never)]
fn tail_sums_avx512(
    a: Batch<'_>,
    b: Batch<'_>,
    ai: usize,
    j: usize,
    body: usize,
    sums: &mut [[f32; 4]; 4],
) {
    for n in 0..a.count {
        let a_rows = [a.row(n, ai), a.row(n, ai + 1), a.row(n, ai + 2), a.row(n, ai + 3)];
        let b_rows = [b.row(n, j), b.row(n, j + 1), b.row(n, j + 2), b.row(n, j + 3)];
        add_tail_products::<4, 4, true>(sums, a_rows, b_rows, body);
    }
}

/// Outputs `(ai + r, j + s)` for `r < R`, `s < C` of [`sum_of_products_nt`]: partial sums in
/// [`LANES`] lanes over the whole batch, added up once.
#[inline(always)]
fn summed_block<const R: usize, const C: usize, const FUSED: bool>(
    a: Batch<'_>,
    b: Batch<'_>,
    ai: usize,
    j: usize,
) -> [[f32; C]; R] {
    let mut acc = [[[0.0f32; LANES]; C]; R];
    let mut tail = [[0.0f32; C]; R];
    let body = a.len - a.len % LANES;
    for n in 0..a.count {
        let a_rows: [&[f32]; R] = core::array::from_fn(|r| a.row(n, ai + r));
        let b_rows: [&[f32]; C] = core::array::from_fn(|s| b.row(n, j + s));
        let a_chunks = a_rows.map(|row| row.as_chunks::<LANES>().0);
        let b_chunks = b_rows.map(|row| row.as_chunks::<LANES>().0);
        for p in 0..body / LANES {
            for (acc, x) in acc.iter_mut().zip(a_chunks) {
                for (acc, y) in acc.iter_mut().zip(b_chunks) {
                    let (x, y) = (&x[p], &y[p]);
                    for l in 0..LANES {
                        acc[l] = fma::<FUSED>(x[l], y[l], acc[l]);
                    }
                }
            }
        }
        add_tail_products::<R, C, FUSED>(&mut tail, a_rows, b_rows, body);
    }
    core::array::from_fn(|r| core::array::from_fn(|s| add_lanes(acc[r][s]) + tail[r][s]))
}

/// Adds to `tail[r][s]` the products of rows `a_rows[r]` and `b_rows[s]` at the positions
/// from `body` on, those past the last whole group of [`LANES`].
#[inline(always)]
fn add_tail_products<const R: usize, const C: usize, const FUSED: bool>(
    tail: &mut [[f32; C]; R],
    a_rows: [&[f32]; R],
    b_rows: [&[f32]; C],
    body: usize,
) {
    for (tail, x) in tail.iter_mut().zip(a_rows) {
        for (tail, y) in tail.iter_mut().zip(b_rows) {
            for (&x, &y) in x[body..].iter().zip(&y[body..]) {
                *tail = fma::<FUSED>(x, y, *tail);
            }
        }
    }
}

/// One single-threaded `c = a·b + beta·c`, `c` row-major `[a.rows, b.cols]`.
fn sgemm<M: RowMap>(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32], rows: &M) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions");
    assert_eq!(c.len(), m * n, "output length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for (i, row) in c.chunks_exact_mut(n).enumerate() {
            let map = rows.row(i);
            row.iter_mut().for_each(|v| *v = map(if beta == 0.0 { 0.0 } else { beta * *v }));
        }
        return;
    }
    a.assert_in_bounds();
    b.assert_in_bounds();
    if a.col_stride == 1 && b.col_stride == 1 {
        return broadcast_rows(a, b, beta, c, rows);
    }
    // SAFETY: the asserts above show that every index `sgemm` reads, `i·rs + j·cs` for
    // `i < rows`, `j < cols`, lies inside `a.data` and `b.data`, and that `c` holds exactly
    // `m·n` values, written at `i·n + j`. Strides are at most a slice length, which never
    // exceeds `isize::MAX`, so the casts are exact. `c` is borrowed mutably, so it does not
    // alias `a` or `b`.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            a.row_stride as isize,
            a.col_stride as isize,
            b.data.as_ptr(),
            b.row_stride as isize,
            b.col_stride as isize,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    if !M::IDENTITY {
        for (i, row) in c.chunks_exact_mut(n).enumerate() {
            let map = rows.row(i);
            row.iter_mut().for_each(|v| *v = map(*v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_of_views_and_transposes_match_hand_values() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
        let b = [1.0, 0.0, -1.0, 2.0, 0.5, 1.0]; // [3, 2]
        let mut c = [f32::NAN; 4];
        gemm(&Pool::new(1), Mat::new(&a, 2, 3), Mat::new(&b, 3, 2), 0.0, &mut c);
        assert_eq!(c, [0.5, 7.0, 2.0, 16.0]);
        // aᵀ·a is [3, 3]; accumulate onto ones with beta 1.
        let mut c = [1.0; 9];
        gemm(&Pool::new(2), Mat::new(&a, 2, 3).t(), Mat::new(&a, 2, 3), 1.0, &mut c);
        assert_eq!(c, [18.0, 23.0, 28.0, 23.0, 30.0, 37.0, 28.0, 37.0, 46.0]);
    }

    /// `a·b + beta·c` summed in f64, element by element.
    fn naive(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &[f32]) -> Vec<f32> {
        let n = b.cols;
        (0..a.rows * n)
            .map(|at| {
                let (i, j) = (at / n, at % n);
                // SAFETY: `i < a.rows`, `j < b.cols`, `k < a.cols`; both views are checked.
                let sum: f64 =
                    (0..a.cols).map(|k| unsafe { a.at(i, k) as f64 * b.at(k, j) as f64 }).sum();
                (sum + beta as f64 * c[at] as f64) as f32
            })
            .collect()
    }

    /// Register blocks with row and column tails, `a` plain and transposed, with and
    /// without accumulation, one and two threads, against sums in f64.
    #[test]
    fn register_blocks_match_plain_sums_on_every_tail() {
        let mut rng = sprout_core::rng::SplitMix::new(5);
        for (m, k, n) in [(4, 3, 16), (7, 9, 37), (1, 1, 15), (13, 40, 64), (9, 2, 33)] {
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect() };
            let (a, a_t, b, c0) = (random(m * k), random(k * m), random(k * n), random(m * n));
            let b = Mat::new(&b, k, n);
            for a in [Mat::new(&a, m, k), Mat::new(&a_t, k, m).t()] {
                for (beta, threads) in [(0.0, 1), (1.0, 2), (0.5, 1)] {
                    let mut c = c0.clone();
                    gemm(&Pool::eager(threads), a, b, beta, &mut c);
                    for (got, want) in c.iter().zip(naive(a, b, beta, &c0)) {
                        assert!((got - want).abs() <= 1e-5 * (1.0 + k as f32), "{m}x{k}x{n}");
                    }
                }
            }
        }
    }

    /// Batch-summed products with row, column and lane tails, samples spaced wider than
    /// their planes (one group of several) and batches of several chunks, against sums in
    /// f64.
    #[test]
    fn batch_summed_products_match_plain_sums() {
        let mut rng = sprout_core::rng::SplitMix::new(9);
        let shapes = [(4, 3, 8, 1), (9, 7, 21, 3), (1, 1, 5, 2), (12, 6, 64, 4), (8, 9, 200, 7)];
        for (m, k, len, count) in shapes {
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect() };
            let (a_stride, b_stride) = (m * len + 3, k * len + 5);
            let (a, b) = (random(count * a_stride), random(count * b_stride));
            let a = Batch { data: &a, rows: m, len, stride: a_stride, count };
            let b = Batch { data: &b, rows: k, len, stride: b_stride, count };
            for threads in [1, 2] {
                let (pool, mut c) = (Pool::eager(threads), vec![f32::NAN; m * k]);
                let mut scratch = vec![f32::NAN; sum_of_products_scratch(&pool, c.len())];
                sum_of_products_nt(&pool, a, b, &mut c, &mut scratch);
                for (at, got) in c.iter().enumerate() {
                    let (i, j) = (at / k, at % k);
                    let want: f64 = (0..count)
                        .flat_map(|n| a.row(n, i).iter().zip(b.row(n, j)))
                        .map(|(&x, &y)| x as f64 * y as f64)
                        .sum();
                    assert!((got - want as f32).abs() <= 1e-5 * (len * count) as f32, "{m}x{k}");
                }
            }
        }
    }

    /// A row map applied as the product stores its values gives, bit for bit, the product
    /// mapped afterwards: on every block size and column tail, one and two threads.
    #[test]
    fn row_maps_apply_to_every_stored_value() {
        struct Scaled;
        impl RowMap for Scaled {
            fn row(&self, i: usize) -> impl Fn(f32) -> f32 {
                move |v| (v * (i + 1) as f32 + 0.5).min(3.0)
            }
        }
        let mut rng = sprout_core::rng::SplitMix::new(3);
        for (m, k, n) in [(13, 8, 64), (9, 3, 37), (4, 16, 16), (3, 5, 7), (20, 1, 48), (6, 0, 5)] {
            let mut random =
                |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect() };
            let (a, b, c0) = (random(m * k), random(k * n), random(m * n));
            let (a, b) = (Mat::new(&a, m, k), Mat::new(&b, k, n));
            for (beta, threads) in [(0.0, 1), (1.0, 2)] {
                let pool = Pool::eager(threads);
                let (mut mapped, mut plain) = (c0.clone(), c0.clone());
                gemm_mapped(&pool, a, b, beta, &mut mapped, &Scaled);
                gemm(&pool, a, b, beta, &mut plain);
                for (at, (got, v)) in mapped.iter().zip(&plain).enumerate() {
                    let want = Scaled.row(at / n)(*v);
                    assert_eq!(got.to_bits(), want.to_bits(), "{m}x{k}x{n} at {at}");
                }
            }
        }
    }

    #[test]
    fn an_empty_inner_dimension_scales_the_output() {
        let mut c = [f32::NAN, f32::NAN];
        gemm(&Pool::new(1), Mat::new(&[], 2, 0), Mat::new(&[], 0, 1), 0.0, &mut c);
        assert_eq!(c, [0.0, 0.0]);
    }

    #[test]
    #[should_panic(expected = "matrix reaches")]
    fn a_view_past_its_slice_is_refused() {
        Mat::new(&[0.0; 5], 2, 3);
    }
}
