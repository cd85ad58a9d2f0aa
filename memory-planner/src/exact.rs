//! Exact: branch and bound over canonical placements (MiniMalloc, Moffitt 2023), seeded with
//! an incumbent and pruned with a per-step lower bound, within a budget of search nodes.
//!
//! A placement is canonical when, taken in order of (offset, index), each block sits at the
//! lowest aligned offset above every earlier block it is live with. Lowering blocks while any
//! can go lower never grows the arena and ends in a canonical placement, so some best
//! placement is canonical: the search only has to choose which block comes next.

use alloc::vec::Vec;
use core::cmp::Reverse;
use core::ops::Range;

use crate::block::{arena, Block};

/// What the search found.
pub(crate) struct Found {
    /// Each block's offset: the best placement seen (the incumbent if nothing beat it).
    pub offsets: Vec<usize>,
    /// Whether the search finished, proving `offsets` optimal.
    pub complete: bool,
}

/// The best placement of `blocks` within `max_nodes` search nodes, starting from `incumbent`.
pub(crate) fn exact(blocks: &[Block], incumbent: Vec<usize>, max_nodes: u64) -> Found {
    let mut search = Search::new(blocks, incumbent, max_nodes);
    if search.best_arena > search.root_bound {
        search.descend(None, 0);
    }
    Found { offsets: search.best, complete: !search.stopped }
}

struct Search<'a> {
    blocks: &'a [Block],
    /// For each block, the blocks live with it.
    neighbours: Vec<Vec<usize>>,
    /// For each block, the range of `points` (distinct first steps, sorted) in its lifetime.
    /// Live bytes only rise where a block starts, so these steps are the ones to bound.
    spans: Vec<Range<usize>>,
    /// At each point, the bytes of the blocks live there that are not placed yet.
    unplaced_bytes: Vec<usize>,
    /// `level[k]` for point k: the highest end of a placed block live there. `level[points + b]`
    /// for block b: the highest end of a placed neighbour of b, where b would go next.
    level: Vec<usize>,
    /// Old values of `level`, to undo placements: (slot, value).
    undo: Vec<(usize, usize)>,
    offsets: Vec<Option<usize>>,
    root_bound: usize,
    best: Vec<usize>,
    best_arena: usize,
    nodes: u64,
    max_nodes: u64,
    stopped: bool,
}

impl<'a> Search<'a> {
    fn new(blocks: &'a [Block], best: Vec<usize>, max_nodes: u64) -> Self {
        let neighbours = (0..blocks.len())
            .map(|b| {
                let live_with = |&c: &usize| c != b && blocks[c].overlaps_in_time(&blocks[b]);
                (0..blocks.len()).filter(live_with).collect()
            })
            .collect();
        let mut points: Vec<usize> = blocks.iter().map(|block| block.first).collect();
        points.sort_unstable();
        points.dedup();
        let spans: Vec<Range<usize>> = blocks
            .iter()
            .map(|block| {
                points.partition_point(|&p| p < block.first)
                    ..points.partition_point(|&p| p <= block.last)
            })
            .collect();
        let mut unplaced_bytes = alloc::vec![0; points.len()];
        for (block, span) in blocks.iter().zip(&spans) {
            for k in span.clone() {
                unplaced_bytes[k] += block.size;
            }
        }
        let root_bound = unplaced_bytes.iter().copied().max().unwrap_or(0);
        let best_arena = arena(blocks, &best);
        Search {
            blocks,
            neighbours,
            spans,
            unplaced_bytes,
            level: alloc::vec![0; points.len() + blocks.len()],
            undo: Vec::new(),
            offsets: alloc::vec![None; blocks.len()],
            root_bound,
            best,
            best_arena,
            nodes: 0,
            max_nodes,
            stopped: false,
        }
    }

    /// Tries every block that can come next after `last` (offset, index), then recurses.
    fn descend(&mut self, last: Option<(usize, usize)>, placed: usize) {
        if placed == self.blocks.len() {
            // The bound rejected every placement that would not beat the incumbent.
            self.best = self.offsets.iter().map(|o| o.expect("all blocks are placed")).collect();
            self.best_arena = arena(self.blocks, &self.best);
            return;
        }
        let points = self.unplaced_bytes.len();
        let lowest = |b: usize| self.level[points + b].next_multiple_of(self.blocks[b].align);
        let unplaced = (0..self.blocks.len()).filter(|&b| self.offsets[b].is_none());
        // A block going at or above where another could end leaves that one a gap to drop
        // into: such a placement is not canonical (MiniMalloc's dominance check).
        let lowest_end = unplaced.clone().map(|b| lowest(b) + self.blocks[b].size).min();
        let lowest_end = lowest_end.expect("some block is unplaced");
        let mut next: Vec<(usize, usize)> = unplaced
            .map(|b| (lowest(b), b))
            .filter(|&(offset, _)| offset < lowest_end)
            .filter(|&next| last.is_none_or(|last| next > last))
            .collect();
        next.sort_unstable_by_key(|&(offset, b)| (offset, Reverse(self.blocks[b].size), b));
        for (offset, block) in next {
            if self.stopped || self.best_arena <= self.root_bound {
                return;
            }
            if self.nodes == self.max_nodes {
                self.stopped = true;
                return;
            }
            self.nodes += 1;
            let mark = self.place(block, offset);
            if self.bound(offset) < self.best_arena {
                self.descend(Some((offset, block)), placed + 1);
            }
            self.unplace(block, mark);
        }
    }

    /// Places `block` at `offset`; returns the undo mark for [`Self::unplace`].
    fn place(&mut self, block: usize, offset: usize) -> usize {
        let mark = self.undo.len();
        let (size, points) = (self.blocks[block].size, self.unplaced_bytes.len());
        self.offsets[block] = Some(offset);
        for k in self.spans[block].clone() {
            self.unplaced_bytes[k] -= size;
            self.raise(k, offset + size);
        }
        for i in 0..self.neighbours[block].len() {
            let neighbour = self.neighbours[block][i];
            if self.offsets[neighbour].is_none() {
                self.raise(points + neighbour, offset + size);
            }
        }
        mark
    }

    fn raise(&mut self, slot: usize, to: usize) {
        if self.level[slot] < to {
            self.undo.push((slot, self.level[slot]));
            self.level[slot] = to;
        }
    }

    fn unplace(&mut self, block: usize, mark: usize) {
        self.offsets[block] = None;
        for k in self.spans[block].clone() {
            self.unplaced_bytes[k] += self.blocks[block].size;
        }
        for (slot, value) in self.undo.drain(mark..).rev() {
            self.level[slot] = value;
        }
    }

    /// No completion fits in less: the blocks still to place that are live at a point all go
    /// above the last placed offset and above every placed block live there, one on another.
    fn bound(&self, last_offset: usize) -> usize {
        let points = self.unplaced_bytes.len();
        (0..points)
            .map(|k| self.level[k].max(last_offset) + self.unplaced_bytes[k])
            .max()
            .unwrap_or(0)
    }
}
