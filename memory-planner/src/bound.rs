//! The lower bound on every arena: the most bytes live at one program step, counting an
//! in-place pair once at the step it shares.

use alloc::vec::Vec;

use crate::buffer::{in_place_target, Buffer};

/// The most bytes live at any one step: no placement of `buffers` fits in less.
///
/// A buffer that takes over another in place ([`Buffer::reuse`], when meaningful) adds nothing
/// at the step the two share, since it fits inside the memory it reuses. Runs in
/// O(n log n); a total beyond `usize::MAX` saturates.
pub fn lower_bound(buffers: &[Buffer]) -> usize {
    // Each buffer's bytes count from `start` to `last` inclusive.
    let mut spans: Vec<(usize, usize, usize)> = (0..buffers.len())
        .filter_map(|i| {
            let b = &buffers[i];
            let start = match in_place_target(buffers, i) {
                Some(_) => b.first.checked_add(1)?,
                None => b.first,
            };
            (b.size > 0 && start <= b.last).then_some((start, b.last, b.size))
        })
        .collect();
    let mut ends: Vec<(usize, usize)> = spans.iter().map(|&(_, last, size)| (last, size)).collect();
    spans.sort_unstable();
    ends.sort_unstable();
    // Live bytes only grow when a span starts, so the peak is reached at some start.
    let (mut live, mut peak, mut ended) = (0u128, 0u128, 0);
    for &(start, _, size) in &spans {
        while ended < ends.len() && ends[ended].0 < start {
            live -= ends[ended].1 as u128;
            ended += 1;
        }
        live += size as u128;
        peak = peak.max(live);
    }
    usize::try_from(peak).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_peak_of_live_bytes() {
        assert_eq!(lower_bound(&[]), 0);
        // Disjoint lifetimes: the largest buffer alone.
        assert_eq!(lower_bound(&[Buffer::new(10, 0, 1), Buffer::new(7, 2, 3)]), 10);
        // Sharing step 1: both at once.
        assert_eq!(lower_bound(&[Buffer::new(10, 0, 1), Buffer::new(7, 1, 3)]), 17);
        // Peak at step 2 (3 + 5 + 6), not the sum of everything (3 + 5 + 6 + 9).
        let buffers = [
            Buffer::new(3, 0, 4),
            Buffer::new(5, 1, 2),
            Buffer::new(6, 2, 3),
            Buffer::new(9, 4, 5),
        ];
        assert_eq!(lower_bound(&buffers), 14);
    }

    #[test]
    fn an_in_place_pair_counts_once_at_its_shared_step() {
        let extra = Buffer::new(1, 0, 9);
        // 8 bytes rewritten in place into 6: at step 2 only the 8 (+1) are live.
        let pair = [extra, Buffer::new(8, 0, 2), Buffer::new(6, 2, 5).reusing(1)];
        assert_eq!(lower_bound(&pair), 9);
        // Without the reuse both count at step 2.
        let apart = [extra, Buffer::new(8, 0, 2), Buffer::new(6, 2, 5)];
        assert_eq!(lower_bound(&apart), 15);
        // A reuse that is not meaningful (the target is smaller) counts in full.
        let bad = [extra, Buffer::new(4, 0, 2), Buffer::new(6, 2, 5).reusing(1)];
        assert_eq!(lower_bound(&bad), 11);
        // A one-step reuser adds nothing at all.
        let short = [Buffer::new(8, 0, 2), Buffer::new(8, 2, 2).reusing(0)];
        assert_eq!(lower_bound(&short), 8);
    }

    #[test]
    fn zero_size_buffers_count_nothing() {
        let buffers = [Buffer::new(0, 0, 9), Buffer::new(4, 3, 3), Buffer::new(0, 3, 3)];
        assert_eq!(lower_bound(&buffers), 4);
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let huge = Buffer::new(usize::MAX, 0, 1);
        assert_eq!(lower_bound(&[huge, huge]), usize::MAX);
        assert_eq!(lower_bound(&[Buffer::new(3, usize::MAX, usize::MAX)]), 3);
    }
}
