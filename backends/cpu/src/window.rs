//! Sliding-window index arithmetic shared by im2col and the depthwise loops: which outputs
//! of one axis read an in-bounds input for a given kernel offset.

use core::ops::Range;

/// The outputs `o < out_len` whose input coordinate `o·stride + k − padding` lies in
/// `0..size` (all others read padding). The input coordinate of `o` is `o·stride + k −
/// padding`, which is at least zero inside the range.
pub fn valid_outputs(
    out_len: usize,
    k: usize,
    stride: usize,
    padding: usize,
    size: usize,
) -> Range<usize> {
    let first = padding.saturating_sub(k).div_ceil(stride);
    let end = match (size + padding).checked_sub(k + 1) {
        Some(last_reach) => (last_reach / stride + 1).min(out_len),
        None => 0,
    };
    first.min(end)..end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The range agrees with testing every output one by one.
    #[test]
    fn matches_a_brute_force_scan() {
        for (out_len, stride, padding, size) in
            [(5usize, 1usize, 1usize, 5usize), (3, 2, 1, 5), (4, 3, 2, 7), (6, 1, 3, 2)]
        {
            for k in 0usize..4 {
                let expected: Vec<usize> = (0..out_len)
                    .filter(|&o| (o * stride + k).checked_sub(padding).is_some_and(|i| i < size))
                    .collect();
                let got: Vec<usize> = valid_outputs(out_len, k, stride, padding, size).collect();
                assert_eq!(got, expected, "out {out_len} k {k} stride {stride} pad {padding}");
            }
        }
    }
}
