//! Free gaps for a block among the placed blocks live with it: the search that the first-fit
//! and best-fit strategies share, over placed blocks kept sorted by offset.

use alloc::vec::Vec;

use crate::block::Block;

/// A place a block fits: it may start at `offset` (already aligned), with `room` bytes up to
/// the next placed block above it, or `None` above every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gap {
    pub offset: usize,
    pub room: Option<usize>,
}

/// Blocks placed so far, sorted by offset.
pub(crate) struct Placed<'a> {
    blocks: &'a [Block],
    /// Indices of the placed blocks, by offset.
    order: Vec<usize>,
    /// Each block's offset, meaningful once it is placed.
    offsets: Vec<usize>,
}

impl<'a> Placed<'a> {
    /// Nothing placed yet.
    pub fn new(blocks: &'a [Block]) -> Self {
        Self {
            blocks,
            order: Vec::with_capacity(blocks.len()),
            offsets: alloc::vec![0; blocks.len()],
        }
    }

    /// Every gap where `block` fits, lowest first; the last is the unbounded one on top. O(n).
    pub fn gaps(&self, block: usize) -> impl Iterator<Item = Gap> + '_ {
        let wanted = &self.blocks[block];
        let mut below = self
            .order
            .iter()
            .map(|&p| (&self.blocks[p], self.offsets[p]))
            .filter(move |(placed, _)| placed.overlaps_in_time(wanted))
            .map(|(placed, offset)| (offset, offset + placed.size));
        // The lowest free byte above every neighbour seen so far.
        let mut floor = 0usize;
        let mut done = false;
        core::iter::from_fn(move || {
            if done {
                return None;
            }
            for (start, end) in below.by_ref() {
                let offset = floor.next_multiple_of(wanted.align);
                floor = floor.max(end);
                if offset <= start && start - offset >= wanted.size {
                    return Some(Gap { offset, room: Some(start - offset) });
                }
            }
            done = true;
            Some(Gap { offset: floor.next_multiple_of(wanted.align), room: None })
        })
    }

    /// Places `block` at `offset`. O(n).
    pub fn insert(&mut self, block: usize, offset: usize) {
        self.offsets[block] = offset;
        let at = self.order.partition_point(|&p| self.offsets[p] <= offset);
        self.order.insert(at, block);
    }

    /// Each block's offset, once all are placed.
    pub fn into_offsets(self) -> Vec<usize> {
        self.offsets
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    fn block(size: usize, align: usize, first: usize, last: usize) -> Block {
        Block { size, align, first, last, members: Vec::new() }
    }

    #[test]
    fn lists_the_gaps_between_neighbours_that_fit_then_the_top() {
        let blocks = [
            block(4, 1, 0, 9),    // at 10..14
            block(3, 1, 0, 9),    // at 0..3
            block(8, 1, 0, 9),    // at 20..28
            block(50, 1, 20, 29), // never live with the others: ignored
            block(5, 4, 5, 5),
        ];
        let mut placed = Placed::new(&blocks);
        placed.insert(0, 10);
        placed.insert(1, 0);
        placed.insert(2, 20);
        placed.insert(3, 0);
        let gaps: Vec<Gap> = placed.gaps(4).collect();
        // 3..10 aligned to 4 leaves 4..10 (6 bytes); 14..20 aligned leaves 16..20, too small.
        assert_eq!(gaps, [Gap { offset: 4, room: Some(6) }, Gap { offset: 28, room: None }]);
        // Nothing placed: the whole arena is one open gap.
        assert_eq!(
            Placed::new(&blocks).gaps(4).collect::<Vec<_>>(),
            [Gap { offset: 0, room: None }]
        );
        assert_eq!(placed.into_offsets(), [10, 0, 20, 0, 0]);
    }
}
