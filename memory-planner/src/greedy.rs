//! GreedyBySize: blocks largest first, each in the smallest gap that fits among the placed
//! blocks live with it (TensorFlow Lite Micro's greedy planner, with best fit).

use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::block::{arena, Block};
use crate::gap::Placed;

/// A sort key: blocks are placed in ascending key order.
type OrderKey = fn(&Block) -> (Reverse<usize>, Reverse<usize>);

/// The orders tried. Largest first is TensorFlow Lite Micro's; largest area (bytes × steps)
/// first and longest-lived first rescue cases where long-lived mid-sized buffers fragment
/// the arena.
const ORDERS: [OrderKey; 3] = [
    |b| (Reverse(b.size), Reverse(b.last - b.first)),
    |b| (Reverse(b.size.saturating_mul(b.last - b.first + 1)), Reverse(b.size)),
    |b| (Reverse(b.last - b.first), Reverse(b.size)),
];

/// Each block's offset: best fit in each of [`ORDERS`] (ties within an order: index), and
/// the smallest arena wins (ties: the earlier order). O(n²).
pub(crate) fn greedy_by_size(blocks: &[Block]) -> Vec<usize> {
    let mut best: Option<(usize, Vec<usize>)> = None;
    for key in ORDERS {
        let offsets = best_fit_in_order(blocks, key);
        let bytes = arena(blocks, &offsets);
        if best.as_ref().is_none_or(|(smallest, _)| bytes < *smallest) {
            best = Some((bytes, offsets));
        }
    }
    best.map(|(_, offsets)| offsets).unwrap_or_default()
}

/// Best fit with blocks taken in the order of `key`.
fn best_fit_in_order(blocks: &[Block], key: OrderKey) -> Vec<usize> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&b| (key(&blocks[b]), b));
    let mut placed = Placed::new(blocks);
    for block in order {
        // Bounded gaps by room, then the open top; ties go to the lowest offset.
        let best = placed.gaps(block).min_by_key(|gap| (gap.room.is_none(), gap.room, gap.offset));
        placed.insert(block, best.expect("the open top is always a gap").offset);
    }
    placed.into_offsets()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blocks;
    use crate::buffer::Buffer;

    #[test]
    fn takes_the_tightest_gap_not_the_lowest() {
        let buffers = [
            Buffer::new(100, 0, 4),
            Buffer::new(60, 4, 5), // on top of 0: 100..160
            Buffer::new(50, 6, 9),
            Buffer::new(40, 5, 6), // between 2 (0..50) and 1: 50..90
            Buffer::new(8, 5, 5),  // gaps 0..50 (room 50) and 90..100 (room 10)
        ];
        assert_eq!(greedy_by_size(&blocks(&buffers)), [0, 100, 0, 50, 90]);
    }
}
