//! Assertions shared by the reference kernels' unit tests.

/// Asserts that `actual` and `expected` have the same length and differ by at most `tol`
/// element by element.
pub(super) fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "length mismatch");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        assert!(libm::fabsf(a - e) <= tol, "element {i}: got {a}, expected {e} (tolerance {tol})");
    }
}
