//! Index helpers shared by the reference kernels: rows of row-major matrices, channels of
//! `[outer, channels, inner]` tensors and the input coordinates a sliding window reads.

use crate::geometry::ChannelDims;

/// Row `index` of a row-major matrix whose rows hold `len` values.
pub(super) fn row(data: &[f32], index: usize, len: usize) -> &[f32] {
    &data[index * len..(index + 1) * len]
}

/// Mutable row `index` of a row-major matrix whose rows hold `len` values.
pub(super) fn row_mut(data: &mut [f32], index: usize, len: usize) -> &mut [f32] {
    &mut data[index * len..(index + 1) * len]
}

/// Flat indices of every element of channel `c` of a `[outer, channels, inner]` tensor,
/// in memory order.
pub(super) fn channel_indices(d: ChannelDims, c: usize) -> impl Iterator<Item = usize> {
    (0..d.outer).flat_map(move |o| {
        let start = (o * d.channels + c) * d.inner;
        start..start + d.inner
    })
}

/// The input coordinate read by kernel offset `k` of output coordinate `out` along one axis
/// (`out · stride + k − padding`), or `None` when it falls in the padding.
pub(crate) fn input_coord(
    out: usize,
    k: usize,
    stride: usize,
    padding: usize,
    size: usize,
) -> Option<usize> {
    (out * stride + k).checked_sub(padding).filter(|&i| i < size)
}
