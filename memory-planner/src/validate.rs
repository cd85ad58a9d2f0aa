//! The planner's input check: alignments, lifetimes and in-place reuse, each failure named by
//! buffer and value in a [`PlanError`].

use core::fmt;

use crate::buffer::Buffer;

/// Why [`plan_memory`](crate::plan_memory) refused its buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// `align` is not a power of two (zero included).
    BadAlignment {
        /// Index of the buffer.
        buffer: usize,
        /// Its alignment.
        align: usize,
    },
    /// The buffer's lifetime ends before it starts.
    BadLifetime {
        /// Index of the buffer.
        buffer: usize,
        /// Its first step.
        first: usize,
        /// Its last step, smaller than `first`.
        last: usize,
    },
    /// The buffer's in-place reuse of `target` cannot be honoured.
    BadReuse {
        /// Index of the reusing buffer.
        buffer: usize,
        /// Index of the buffer it asks to take over.
        target: usize,
        /// What is wrong with the pair.
        reason: &'static str,
    },
    /// The sizes plus worst-case alignment padding of the buffers up to this one exceed
    /// `usize::MAX`, so offsets could overflow.
    TooLarge {
        /// Index of the buffer at which the total overflows.
        buffer: usize,
        /// Its size in bytes.
        size: usize,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadAlignment { buffer, align } => {
                write!(f, "buffer {buffer}: alignment {align} is not a power of two")
            }
            Self::BadLifetime { buffer, first, last } => {
                write!(
                    f,
                    "buffer {buffer}: lifetime ends at step {last}, before its first step {first}"
                )
            }
            Self::BadReuse { buffer, target, reason } => {
                write!(f, "buffer {buffer} cannot reuse buffer {target} in place: {reason}")
            }
            Self::TooLarge { buffer, size } => write!(
                f,
                "buffer {buffer} ({size} bytes) takes the total size with alignment padding \
                 past usize::MAX ({})",
                usize::MAX
            ),
        }
    }
}

impl core::error::Error for PlanError {}

/// Checks every buffer, then every in-place reuse, returning the first problem found.
///
/// Beyond [`Buffer::reuse`]'s own conditions, a target may be taken over by one buffer only,
/// and not when it lives a single step while reusing another buffer itself (two in-place
/// writes at one step, which would put three buffers at one offset at once). This keeps every
/// chain of in-place reuse a simple path in time.
pub(crate) fn validate(buffers: &[Buffer]) -> Result<(), PlanError> {
    let mut total = 0usize;
    for (buffer, b) in buffers.iter().enumerate() {
        if !b.align.is_power_of_two() {
            return Err(PlanError::BadAlignment { buffer, align: b.align });
        }
        if b.first > b.last {
            return Err(PlanError::BadLifetime { buffer, first: b.first, last: b.last });
        }
        if b.size > 0 {
            total = total
                .checked_add(b.size)
                .and_then(|total| total.checked_add(b.align - 1))
                .ok_or(PlanError::TooLarge { buffer, size: b.size })?;
        }
    }
    let mut taken = alloc::vec![false; buffers.len()];
    for (buffer, b) in buffers.iter().enumerate() {
        let Some(target) = b.reuse else { continue };
        let bad = |reason| Err(PlanError::BadReuse { buffer, target, reason });
        let Some(reused) = buffers.get(target) else {
            return bad("there is no such buffer");
        };
        if target == buffer {
            return bad("a buffer cannot reuse itself");
        }
        if reused.last != b.first {
            return bad("the target's last step is not this buffer's first step");
        }
        if b.size > reused.size {
            return bad("this buffer is larger than its target");
        }
        if reused.first == reused.last && reused.reuse.is_some() {
            return bad("the target lives one step and reuses another buffer at that step");
        }
        if core::mem::replace(&mut taken[target], true) {
            return bad("another buffer already reuses the target");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    fn reuse_error(buffers: &[Buffer]) -> &'static str {
        match validate(buffers) {
            Err(PlanError::BadReuse { reason, .. }) => reason,
            other => panic!("expected a reuse error, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_chain_of_in_place_buffers() {
        let chain = [
            Buffer::new(8, 0, 2),
            Buffer::new(8, 2, 4).reusing(0),
            Buffer::new(4, 4, 4).reusing(1),
        ];
        assert_eq!(validate(&chain), Ok(()));
        assert_eq!(validate(&[]), Ok(()));
    }

    #[test]
    fn names_the_buffer_and_value_of_a_bad_alignment_or_lifetime() {
        let error = validate(&[Buffer::new(4, 0, 1), Buffer::new(4, 0, 1).aligned(12)]);
        assert_eq!(error, Err(PlanError::BadAlignment { buffer: 1, align: 12 }));
        assert_eq!(error.unwrap_err().to_string(), "buffer 1: alignment 12 is not a power of two");
        let zero = validate(&[Buffer::new(4, 0, 1).aligned(0)]);
        assert_eq!(zero, Err(PlanError::BadAlignment { buffer: 0, align: 0 }));
        let error = validate(&[Buffer::new(4, 3, 1)]).unwrap_err();
        assert_eq!(error, PlanError::BadLifetime { buffer: 0, first: 3, last: 1 });
        assert_eq!(error.to_string(), "buffer 0: lifetime ends at step 1, before its first step 3");
    }

    #[test]
    fn refuses_each_kind_of_bad_reuse() {
        let input = Buffer::new(8, 0, 2);
        let error = validate(&[input, Buffer::new(8, 2, 3).reusing(5)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "buffer 1 cannot reuse buffer 5 in place: there is no such buffer"
        );
        assert_eq!(reuse_error(&[Buffer::new(8, 2, 2).reusing(0)]), "a buffer cannot reuse itself");
        assert_eq!(
            reuse_error(&[input, Buffer::new(8, 1, 3).reusing(0)]),
            "the target's last step is not this buffer's first step"
        );
        assert_eq!(
            reuse_error(&[input, Buffer::new(9, 2, 3).reusing(0)]),
            "this buffer is larger than its target"
        );
        assert_eq!(
            reuse_error(&[input, Buffer::new(8, 2, 2).reusing(0), Buffer::new(8, 2, 3).reusing(1)]),
            "the target lives one step and reuses another buffer at that step"
        );
        assert_eq!(
            reuse_error(&[Buffer::new(8, 2, 2).reusing(1), Buffer::new(8, 2, 2).reusing(0)]),
            "the target lives one step and reuses another buffer at that step"
        );
        assert_eq!(
            reuse_error(&[input, Buffer::new(8, 2, 3).reusing(0), Buffer::new(4, 2, 3).reusing(0)]),
            "another buffer already reuses the target"
        );
    }

    #[test]
    fn refuses_sizes_whose_padded_total_overflows() {
        let huge = Buffer::new(usize::MAX / 2, 0, 1).aligned(4);
        assert_eq!(validate(&[huge]), Ok(()));
        assert_eq!(
            validate(&[huge, huge]),
            Err(PlanError::TooLarge { buffer: 1, size: huge.size })
        );
        // Zero-size buffers take no memory, so their alignment adds no padding.
        let empty = Buffer::new(0, 0, 1).aligned(1 << (usize::BITS - 1));
        assert_eq!(validate(&[huge, empty, empty]), Ok(()));
    }
}
