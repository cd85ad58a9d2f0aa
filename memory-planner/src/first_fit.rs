//! FirstFitInTime: blocks in order of their first step, each at the lowest offset where it
//! fits (the baseline of MIT's Tiny Training Engine and most runtimes).

use alloc::vec::Vec;

use crate::block::Block;
use crate::gap::Placed;

/// Each block's offset. Order: first step, then index. O(n²).
pub(crate) fn first_fit_in_time(blocks: &[Block]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&b| (blocks[b].first, b));
    let mut placed = Placed::new(blocks);
    for block in order {
        let lowest = placed.gaps(block).next().expect("the open top is always a gap");
        placed.insert(block, lowest.offset);
    }
    placed.into_offsets()
}
