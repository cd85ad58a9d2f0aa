//! The entry point: [`plan_memory`] turns buffers into a [`Placement`] with the chosen
//! [`Strategy`], honouring every in-place reuse.

use alloc::vec::Vec;

use crate::block::{arena, blocks, buffer_offsets, uniform};
use crate::bound::lower_bound;
use crate::buffer::Buffer;
use crate::exact::exact;
use crate::first_fit::first_fit_in_time;
use crate::greedy::greedy_by_size;
use crate::validate::{validate, PlanError};
use crate::verify::verify;

/// How [`plan_memory`] chooses offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Default: place buffers largest first (ties: longer lifetime first, then index), each at
    /// the best-fitting gap (the smallest gap that fits among the buffers already placed that
    /// are live at an overlapping step; ties: lowest offset): TensorFlow Lite Micro's greedy
    /// planner with best fit. Two more orders (largest bytes × steps first, longest-lived
    /// first) are tried too and the smallest arena kept. O(n²).
    #[default]
    GreedyBySize,
    /// Baseline: buffers in order of `first` (ties: index), each at the lowest offset where it
    /// fits (what MIT's Tiny Training Engine and most runtimes do). O(n²).
    FirstFitInTime,
    /// Branch and bound over canonical placements (MiniMalloc, Moffitt 2023: each buffer at
    /// offset 0 or directly on top of a placed buffer that overlaps it in time), seeded with
    /// the `GreedyBySize` result, pruned with a lower bound, exploring at most `max_nodes`
    /// search nodes; returns the best found, never worse than greedy. For more than
    /// `max_buffers` buffers it returns the greedy result directly.
    Exact {
        /// The most search nodes (placements tried) to explore.
        max_nodes: u64,
        /// The most buffers to search over; more get the greedy result.
        max_buffers: usize,
    },
}

impl Strategy {
    /// `Exact` with limits that keep a search to a fraction of a second on a desktop
    /// (optimised build): 200 000 search nodes, 100 buffers.
    pub const fn exact() -> Self {
        Self::Exact { max_nodes: 200_000, max_buffers: 100 }
    }
}

/// Where every buffer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Each buffer's offset in the arena, by buffer index.
    pub offsets: Vec<usize>,
    /// The arena's size: the highest end of any buffer (0 when there is none).
    pub arena_bytes: usize,
    /// The strategy that produced `offsets`: the one asked for, or `GreedyBySize` when `Exact`
    /// was given more than `max_buffers` buffers.
    pub strategy: Strategy,
    /// Whether `arena_bytes` is known to be the least possible for placements that honour
    /// every in-place reuse: it equals [`lower_bound`], or `Exact` finished its search over
    /// in-place chains whose members all have one size.
    pub proven_optimal: bool,
}

/// Gives every buffer an offset so that no two buffers live at a common step share a byte.
///
/// Every in-place reuse is honoured: the buffers of a reuse chain all get one offset, and the
/// chain is placed as one block (its union lifetime, its largest size and alignment).
/// Zero-size buffers get offset 0. In debug builds the result is checked with [`verify`].
pub fn plan_memory(buffers: &[Buffer], strategy: Strategy) -> Result<Placement, PlanError> {
    validate(buffers)?;
    let blocks = blocks(buffers);
    let (block_offsets, strategy, searched) = match strategy {
        Strategy::GreedyBySize => (greedy_by_size(&blocks), strategy, false),
        Strategy::FirstFitInTime => (first_fit_in_time(&blocks), strategy, false),
        Strategy::Exact { max_buffers, .. } if buffers.len() > max_buffers => {
            (greedy_by_size(&blocks), Strategy::GreedyBySize, false)
        }
        Strategy::Exact { max_nodes, .. } => {
            let found = exact(&blocks, greedy_by_size(&blocks), max_nodes);
            (found.offsets, strategy, found.complete && uniform(buffers, &blocks))
        }
    };
    let offsets = buffer_offsets(buffers.len(), &blocks, &block_offsets);
    let arena_bytes = arena(&blocks, &block_offsets);
    let proven_optimal = searched || arena_bytes == lower_bound(buffers);
    let placement = Placement { offsets, arena_bytes, strategy, proven_optimal };
    debug_assert_eq!(verify(buffers, &placement), Ok(()));
    Ok(placement)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(buffers: &[Buffer], strategy: Strategy) -> Placement {
        let placement = plan_memory(buffers, strategy).expect("valid buffers");
        assert_eq!(verify(buffers, &placement), Ok(()));
        placement
    }

    #[test]
    fn first_fit_in_time_can_be_worse_than_greedy_by_size() {
        // First fit puts the short buffer 0 at the bottom; 1 goes on it, 2 cannot fit under 1.
        let buffers = [Buffer::new(1, 0, 0), Buffer::new(1, 0, 2), Buffer::new(2, 1, 2)];
        assert_eq!(lower_bound(&buffers), 3);
        let first_fit = plan(&buffers, Strategy::FirstFitInTime);
        assert_eq!(
            (first_fit.offsets.as_slice(), first_fit.arena_bytes),
            ([0, 1, 2].as_slice(), 4)
        );
        assert!(!first_fit.proven_optimal);
        let greedy = plan(&buffers, Strategy::GreedyBySize);
        assert_eq!((greedy.offsets.as_slice(), greedy.arena_bytes), ([0, 2, 0].as_slice(), 3));
        assert!(greedy.proven_optimal);
    }

    #[test]
    fn exact_beats_greedy_and_proves_it() {
        // Every greedy order leaves a hole that the 3-byte buffer cannot use; the search
        // stacks the long-lived 3 between the 4 and the 5 instead.
        let buffers = [
            Buffer::new(4, 0, 1),
            Buffer::new(3, 1, 3),
            Buffer::new(5, 3, 5),
            Buffer::new(2, 0, 2),
        ];
        assert_eq!(lower_bound(&buffers), 9);
        let greedy = plan(&buffers, Strategy::GreedyBySize);
        assert_eq!((greedy.arena_bytes, greedy.proven_optimal), (10, false));
        let exact = plan(&buffers, Strategy::exact());
        assert_eq!((exact.arena_bytes, exact.proven_optimal), (9, true));
        assert_eq!(exact.strategy, Strategy::exact());
        // With no search budget, Exact returns greedy's answer unproven.
        let unsearched = plan(&buffers, Strategy::Exact { max_nodes: 0, max_buffers: 100 });
        assert_eq!((unsearched.offsets, unsearched.proven_optimal), (greedy.offsets, false));
    }

    #[test]
    fn exact_proves_optimality_above_the_lower_bound() {
        // At most 17 bytes are live at once, yet no placement fits in 17 or 18 (checked by
        // exhaustive search outside this crate); greedy needs 21.
        let buffers = [
            Buffer::new(8, 6, 10),
            Buffer::new(5, 1, 5),
            Buffer::new(3, 1, 2),
            Buffer::new(4, 2, 5),
            Buffer::new(7, 0, 0),
            Buffer::new(8, 4, 6),
            Buffer::new(7, 0, 1),
            Buffer::new(2, 0, 3),
        ];
        assert_eq!(lower_bound(&buffers), 17);
        assert_eq!(plan(&buffers, Strategy::GreedyBySize).arena_bytes, 21);
        let exact = plan(&buffers, Strategy::exact());
        assert_eq!((exact.arena_bytes, exact.proven_optimal), (19, true));
        // A budget too small to finish still improves on greedy or keeps it, unproven.
        let cut = plan(&buffers, Strategy::Exact { max_nodes: 3, max_buffers: 100 });
        assert!(cut.arena_bytes <= 21 && !cut.proven_optimal);
    }

    #[test]
    fn exact_hands_large_inputs_to_greedy() {
        let buffers: Vec<Buffer> = (0..5).map(|i| Buffer::new(10 - i, i, i + 2)).collect();
        let capped = plan(&buffers, Strategy::Exact { max_nodes: 1_000, max_buffers: 4 });
        let greedy = plan(&buffers, Strategy::GreedyBySize);
        assert_eq!(capped, greedy);
        assert_eq!(capped.strategy, Strategy::GreedyBySize);
    }

    #[test]
    fn an_in_place_chain_shares_one_offset() {
        let buffers = [
            Buffer::new(8, 0, 2).aligned(4),
            Buffer::new(16, 1, 3),
            // 3 outlives 2, so largest-first alone would place 3 before 2: the chain moves as one.
            Buffer::new(8, 3, 7).aligned(16).reusing(3),
            Buffer::new(8, 2, 3).reusing(0),
            Buffer::new(6, 7, 9).reusing(2),
            Buffer::new(12, 8, 9),
        ];
        for strategy in [Strategy::GreedyBySize, Strategy::FirstFitInTime, Strategy::exact()] {
            let placement = plan(&buffers, strategy);
            let chain = [0, 3, 2, 4].map(|i| placement.offsets[i]);
            assert_eq!(chain, [chain[0]; 4], "{strategy:?}");
            assert_eq!(chain[0] % 16, 0);
            // The chain (8 bytes, 16-aligned) and the 16 or 12 bytes beside it.
            assert_eq!(placement.arena_bytes, 24, "{strategy:?}");
        }
    }

    #[test]
    fn zero_size_buffers_go_at_zero_and_take_no_room() {
        let buffers = [
            Buffer::new(0, 0, 9).aligned(64),
            Buffer::new(12, 0, 3),
            Buffer::new(0, 3, 4).reusing(1),
            Buffer::new(4, 2, 2),
        ];
        for strategy in [Strategy::GreedyBySize, Strategy::FirstFitInTime, Strategy::exact()] {
            let placement = plan(&buffers, strategy);
            assert_eq!((placement.offsets[0], placement.offsets[2]), (0, 0));
            assert_eq!(placement.arena_bytes, 16);
        }
        let empty = plan(&[], Strategy::default());
        assert_eq!((empty.offsets.len(), empty.arena_bytes, empty.proven_optimal), (0, 0, true));
        let nothing = plan(&[Buffer::new(0, 0, 0)], Strategy::default());
        assert_eq!((nothing.offsets, nothing.arena_bytes), ([0].to_vec(), 0));
    }

    #[test]
    fn refuses_invalid_buffers_by_name() {
        let error = plan_memory(&[Buffer::new(4, 2, 1)], Strategy::default()).unwrap_err();
        assert_eq!(error, PlanError::BadLifetime { buffer: 0, first: 2, last: 1 });
    }

    #[test]
    fn defaults() {
        assert_eq!(Strategy::default(), Strategy::GreedyBySize);
        assert_eq!(Strategy::exact(), Strategy::Exact { max_nodes: 200_000, max_buffers: 100 });
    }
}
