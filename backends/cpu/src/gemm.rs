//! Matrix products: strided matrix views and `C = A·B + β·C` through `matrixmultiply`'s
//! `sgemm`, with the rows of `C` split over threads.

use crate::parallel::{for_each_chunk, workers};
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

/// `c = a·b + beta·c` for a row-major `c[a.rows, b.cols]`, with `c`'s rows split over up
/// to `pool`'s threads. With `beta == 0` the old contents of `c` are ignored (NaN too).
pub fn gemm(pool: &Pool, a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32]) {
    assert_eq!(a.cols, b.rows, "inner dimensions");
    assert_eq!(c.len(), a.rows * b.cols, "output length");
    let workers = workers(pool.threads(), a.rows, a.rows * a.cols * b.cols);
    for_each_chunk(pool, workers, c, b.cols, &mut [], 0, |first, c_rows, _| {
        let rows = c_rows.len().checked_div(b.cols).unwrap_or(0);
        sgemm(a.rows(first, rows), b, beta, c_rows);
    });
}

/// One single-threaded `c = a·b + beta·c`, `c` row-major `[a.rows, b.cols]`.
fn sgemm(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32]) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions");
    assert_eq!(c.len(), m * n, "output length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.iter_mut().for_each(|v| *v = if beta == 0.0 { 0.0 } else { beta * *v });
        return;
    }
    a.assert_in_bounds();
    b.assert_in_bounds();
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
