//! The overlap verifier: proves a placement safe (aligned, inside the arena, no two buffers
//! live at a common step sharing a byte) or names the first [`Conflict`].

use core::fmt;

use crate::buffer::{in_place_target, Buffer};
use crate::plan::Placement;

/// Why a placement is unsafe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The placement has a different number of offsets than there are buffers.
    WrongLength {
        /// Number of buffers.
        buffers: usize,
        /// Number of offsets.
        offsets: usize,
    },
    /// The buffer's offset is not a multiple of its alignment.
    Misaligned {
        /// Index of the buffer.
        buffer: usize,
        /// Its offset.
        offset: usize,
        /// Its alignment.
        align: usize,
    },
    /// The buffer ends past the arena.
    OutsideArena {
        /// Index of the buffer.
        buffer: usize,
        /// Its end (offset + size, saturated at `usize::MAX`).
        end: usize,
        /// The arena's size.
        arena: usize,
    },
    /// Buffers `a < b`, both live at `step`, share at least one byte.
    Overlap {
        /// Index of the first buffer.
        a: usize,
        /// Index of the second buffer.
        b: usize,
        /// The first step at which both are live.
        step: usize,
    },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::WrongLength { buffers, offsets } => {
                write!(f, "{offsets} offsets for {buffers} buffers")
            }
            Self::Misaligned { buffer, offset, align } => {
                write!(
                    f,
                    "buffer {buffer}: offset {offset} is not a multiple of its alignment {align}"
                )
            }
            Self::OutsideArena { buffer, end, arena } => {
                write!(f, "buffer {buffer}: ends at byte {end}, past the {arena}-byte arena")
            }
            Self::Overlap { a, b, step } => {
                write!(f, "buffers {a} and {b} share memory while both live at step {step}")
            }
        }
    }
}

impl core::error::Error for Conflict {}

/// Checks that every buffer is aligned and inside `placement.arena_bytes`, and that no two
/// buffers live at a common step share a byte, except an in-place pair ([`Buffer::reuse`],
/// when meaningful) at the same offset. Zero-size buffers share no bytes. O(n²).
pub fn verify(buffers: &[Buffer], placement: &Placement) -> Result<(), Conflict> {
    let offsets = &placement.offsets;
    if offsets.len() != buffers.len() {
        return Err(Conflict::WrongLength { buffers: buffers.len(), offsets: offsets.len() });
    }
    let arena = placement.arena_bytes;
    for (buffer, (b, &offset)) in buffers.iter().zip(offsets).enumerate() {
        if offset % b.align.max(1) != 0 {
            return Err(Conflict::Misaligned { buffer, offset, align: b.align });
        }
        match offset.checked_add(b.size) {
            Some(end) if end <= arena => {}
            _ => {
                let end = offset.saturating_add(b.size);
                return Err(Conflict::OutsideArena { buffer, end, arena });
            }
        }
    }
    // Every end is now at most `arena`, so `offset + size` cannot overflow below.
    for (a, (x, &at)) in buffers.iter().zip(offsets).enumerate() {
        for (b, (y, &bt)) in buffers.iter().zip(offsets).enumerate().skip(a + 1) {
            let share_bytes = x.size > 0 && y.size > 0 && at < bt + y.size && bt < at + x.size;
            if !share_bytes || !x.overlaps_in_time(y) {
                continue;
            }
            let in_place =
                in_place_target(buffers, b) == Some(a) || in_place_target(buffers, a) == Some(b);
            if !(in_place && at == bt) {
                return Err(Conflict::Overlap { a, b, step: x.first.max(y.first) });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use super::*;
    use crate::plan::Strategy;

    fn placed(offsets: &[usize], arena_bytes: usize) -> Placement {
        Placement {
            offsets: offsets.to_vec(),
            arena_bytes,
            strategy: Strategy::GreedyBySize,
            proven_optimal: false,
        }
    }

    fn buffers() -> Vec<Buffer> {
        [Buffer::new(8, 0, 2), Buffer::new(4, 2, 3).aligned(4), Buffer::new(8, 3, 5)].to_vec()
    }

    #[test]
    fn accepts_a_safe_placement() {
        // 0 and 2 never live together, so they share bytes 0..8; 1 sits above 0.
        assert_eq!(verify(&buffers(), &placed(&[0, 8, 0], 12)), Ok(()));
        assert_eq!(verify(&[], &placed(&[], 0)), Ok(()));
    }

    #[test]
    fn catches_an_overlap_at_the_first_shared_step() {
        let conflict = verify(&buffers(), &placed(&[0, 4, 8], 16)).unwrap_err();
        assert_eq!(conflict, Conflict::Overlap { a: 0, b: 1, step: 2 });
        assert_eq!(conflict.to_string(), "buffers 0 and 1 share memory while both live at step 2");
        // One shared byte is enough.
        let conflict = verify(&buffers(), &placed(&[0, 12, 9], 17)).unwrap_err();
        assert_eq!(conflict, Conflict::Overlap { a: 1, b: 2, step: 3 });
    }

    #[test]
    fn catches_misalignment_and_buffers_past_the_arena() {
        let conflict = verify(&buffers(), &placed(&[0, 10, 0], 14)).unwrap_err();
        assert_eq!(conflict, Conflict::Misaligned { buffer: 1, offset: 10, align: 4 });
        assert_eq!(
            conflict.to_string(),
            "buffer 1: offset 10 is not a multiple of its alignment 4"
        );
        let conflict = verify(&buffers(), &placed(&[0, 8, 0], 11)).unwrap_err();
        assert_eq!(conflict, Conflict::OutsideArena { buffer: 1, end: 12, arena: 11 });
        assert_eq!(conflict.to_string(), "buffer 1: ends at byte 12, past the 11-byte arena");
        let conflict = verify(&buffers(), &placed(&[0, 8, usize::MAX - 3], 16)).unwrap_err();
        assert_eq!(conflict, Conflict::OutsideArena { buffer: 2, end: usize::MAX, arena: 16 });
        let conflict = verify(&buffers(), &placed(&[0, 8], 16)).unwrap_err();
        assert_eq!(conflict, Conflict::WrongLength { buffers: 3, offsets: 2 });
        assert_eq!(conflict.to_string(), "2 offsets for 3 buffers");
    }

    #[test]
    fn an_in_place_pair_may_share_memory_only_at_the_same_offset() {
        let pair = [Buffer::new(8, 0, 2), Buffer::new(6, 2, 4).reusing(0)];
        assert_eq!(verify(&pair, &placed(&[0, 0], 8)), Ok(()));
        assert_eq!(
            verify(&pair, &placed(&[0, 2], 8)),
            Err(Conflict::Overlap { a: 0, b: 1, step: 2 })
        );
        // Disjoint memory is always safe.
        assert_eq!(verify(&pair, &placed(&[0, 8], 14)), Ok(()));
        // A reuse that is not meaningful grants nothing.
        let bigger = [Buffer::new(4, 0, 2), Buffer::new(6, 2, 4).reusing(0)];
        assert_eq!(
            verify(&bigger, &placed(&[0, 0], 6)),
            Err(Conflict::Overlap { a: 0, b: 1, step: 2 })
        );
    }

    #[test]
    fn zero_size_buffers_share_nothing() {
        let buffers = [Buffer::new(8, 0, 2), Buffer::new(0, 1, 1).aligned(4)];
        assert_eq!(verify(&buffers, &placed(&[0, 4], 8)), Ok(()));
        assert_eq!(verify(&buffers, &placed(&[0, 8], 8)), Ok(()));
        assert_eq!(
            verify(&buffers, &placed(&[0, 12], 8)),
            Err(Conflict::OutsideArena { buffer: 1, end: 12, arena: 8 })
        );
    }
}
