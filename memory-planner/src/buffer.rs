//! One buffer to place (size, alignment, lifetime in program steps, optional in-place reuse)
//! and the two relations between buffers the planner cares about: live together, in place.

/// One buffer to place. Steps are indices into the program; a buffer is live at every step `s`
/// with `first <= s <= last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// Bytes. A zero-size buffer gets offset 0 and conflicts with nothing.
    pub size: usize,
    /// A power of two >= 1; the buffer's offset must be a multiple of it.
    pub align: usize,
    /// The first step at which the buffer is live (the step that writes it).
    pub first: usize,
    /// The last step at which the buffer is live (its last reader), inclusive.
    pub last: usize,
    /// In-place reuse: this buffer may take over the memory of buffer `i` (an element-wise op
    /// writing its output over its input). Only meaningful when `buffers[i].last == self.first`
    /// and `self.size <= buffers[i].size`; then the two may share memory at that one step if
    /// and only if they have the same offset (the output starts exactly where the input did).
    pub reuse: Option<usize>,
}

impl Buffer {
    /// A buffer of `size` bytes live from step `first` to step `last` inclusive, with
    /// alignment 1 and no in-place reuse.
    pub const fn new(size: usize, first: usize, last: usize) -> Self {
        Self { size, align: 1, first, last, reuse: None }
    }

    /// The same buffer, with its offset aligned to `align` bytes.
    pub const fn aligned(self, align: usize) -> Self {
        Self { align, ..self }
    }

    /// The same buffer, taking over the memory of buffer `target` in place.
    pub const fn reusing(self, target: usize) -> Self {
        Self { reuse: Some(target), ..self }
    }

    /// Whether the two buffers are live at a common step.
    pub const fn overlaps_in_time(&self, other: &Buffer) -> bool {
        live_together((self.first, self.last), (other.first, other.last))
    }
}

/// Whether two lifetimes, each `(first, last)` inclusive, share a step.
pub(crate) const fn live_together(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// The buffer whose memory `buffers[index]` takes over in place, when that reuse is
/// meaningful: the target is another buffer that dies at the step this one is written and is
/// at least as large.
pub(crate) fn in_place_target(buffers: &[Buffer], index: usize) -> Option<usize> {
    let buffer = &buffers[index];
    let target = buffer.reuse.filter(|&target| target != index)?;
    let reused = buffers.get(target)?;
    (reused.last == buffer.first && buffer.size <= reused.size).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_overlap_when_they_share_a_step() {
        let a = Buffer::new(4, 2, 5);
        assert!(a.overlaps_in_time(&Buffer::new(4, 5, 9)));
        assert!(a.overlaps_in_time(&Buffer::new(4, 0, 2)));
        assert!(a.overlaps_in_time(&Buffer::new(4, 3, 3)));
        assert!(!a.overlaps_in_time(&Buffer::new(4, 6, 9)));
        assert!(!a.overlaps_in_time(&Buffer::new(4, 0, 1)));
    }

    #[test]
    fn in_place_reuse_needs_a_larger_target_that_dies_where_the_reuser_is_born() {
        let buffers = [
            Buffer::new(8, 0, 3),
            Buffer::new(8, 3, 5).reusing(0),
            Buffer::new(9, 3, 5).reusing(0), // larger than its target
            Buffer::new(4, 2, 5).reusing(0), // born before the target dies
            Buffer::new(4, 3, 5).reusing(7), // no such buffer
            Buffer::new(4, 3, 5).reusing(5), // itself
        ];
        let targets: [_; 6] = core::array::from_fn(|i| in_place_target(&buffers, i));
        assert_eq!(targets, [None, Some(0), None, None, None, None]);
    }
}
