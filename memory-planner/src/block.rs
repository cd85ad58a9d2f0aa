//! Blocks: the units the strategies place. Each chain of in-place buffers becomes one block
//! (union lifetime, largest size and alignment); zero-size buffers belong to none.

use alloc::vec::Vec;

use crate::buffer::{live_together, Buffer};

/// Buffers that share one offset: an in-place chain, in time order, or a lone buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// The largest member's size (the first member's: a chain never grows).
    pub size: usize,
    /// The largest member alignment, so the block's offset suits every member.
    pub align: usize,
    /// The first member's first step.
    pub first: usize,
    /// The last member's last step.
    pub last: usize,
    /// Indices of the member buffers, in chain order.
    pub members: Vec<usize>,
}

impl Block {
    /// Whether the two blocks are live at a common step.
    pub fn overlaps_in_time(&self, other: &Block) -> bool {
        live_together((self.first, self.last), (other.first, other.last))
    }
}

/// The blocks of validated `buffers`, ordered by their first member's index.
pub(crate) fn blocks(buffers: &[Buffer]) -> Vec<Block> {
    // Validation makes every chain a path: one reuser per target, no cycles.
    let mut next = alloc::vec![None; buffers.len()];
    for (i, b) in buffers.iter().enumerate() {
        if let (Some(target), true) = (b.reuse, b.size > 0) {
            next[target] = Some(i);
        }
    }
    // A nonzero buffer reuses a nonzero one (it is no larger), so chains start where reuse is None.
    let heads = buffers.iter().enumerate().filter(|(_, b)| b.size > 0 && b.reuse.is_none());
    heads
        .map(|(head, b)| {
            let mut block = Block {
                size: b.size,
                align: b.align,
                first: b.first,
                last: b.last,
                members: Vec::new(),
            };
            let mut member = Some(head);
            while let Some(i) = member {
                block.align = block.align.max(buffers[i].align);
                block.last = buffers[i].last;
                block.members.push(i);
                member = next[i];
            }
            block
        })
        .collect()
}

/// The arena the blocks need at these offsets: the highest end of any block (0 for none).
pub(crate) fn arena(blocks: &[Block], offsets: &[usize]) -> usize {
    blocks.iter().zip(offsets).map(|(block, &offset)| offset + block.size).max().unwrap_or(0)
}

/// Each buffer's offset: its block's, or 0 for a zero-size buffer.
pub(crate) fn buffer_offsets(
    buffers: usize,
    blocks: &[Block],
    block_offsets: &[usize],
) -> Vec<usize> {
    let mut offsets = alloc::vec![0; buffers];
    for (block, &offset) in blocks.iter().zip(block_offsets) {
        for &member in &block.members {
            offsets[member] = offset;
        }
    }
    offsets
}

/// Whether every block's members have one size, so that a block occupies exactly what its
/// members do and a best placement of blocks is a best placement of buffers.
pub(crate) fn uniform(buffers: &[Buffer], blocks: &[Block]) -> bool {
    blocks.iter().all(|block| block.members.iter().all(|&m| buffers[m].size == block.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_in_place_chains_and_skips_zero_size_buffers() {
        let buffers = [
            Buffer::new(8, 3, 5).reusing(2),
            Buffer::new(5, 0, 9),
            Buffer::new(8, 0, 3).aligned(4),
            Buffer::new(0, 1, 2),
            Buffer::new(6, 5, 7).aligned(16).reusing(0),
            Buffer::new(0, 7, 8).reusing(4),
        ];
        let blocks = blocks(&buffers);
        let lone = Block { size: 5, align: 1, first: 0, last: 9, members: [1].to_vec() };
        let chain = Block { size: 8, align: 16, first: 0, last: 7, members: [2, 0, 4].to_vec() };
        assert_eq!(blocks, [lone, chain]);
        assert!(!uniform(&buffers, &blocks));
        assert_eq!(buffer_offsets(buffers.len(), &blocks, &[16, 0]), [0, 16, 0, 0, 0, 0]);
        assert_eq!(arena(&blocks, &[16, 0]), 21);
    }
}
