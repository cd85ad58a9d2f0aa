//! The device's view of one chunked transfer coming in (a sample, a checkpoint): which one it
//! is and how many bytes arrived, so a repeated chunk is acknowledged without being applied
//! twice and a reconnecting host learns where to resume.

/// What to do with an arriving chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The first chunk of a new transfer (any unfinished one is abandoned).
    Start,
    /// The next chunk of the current transfer.
    Append,
    /// Bytes the device already has, or a gap: answer with where the transfer stands.
    Resume { next: u32 },
}

/// An incoming transfer identified by `K`.
#[derive(Clone, Copy, Debug)]
pub struct Inbound<K> {
    current: Option<(K, u32)>,
}

impl<K> Default for Inbound<K> {
    fn default() -> Self {
        Self { current: None }
    }
}

impl<K: PartialEq + Copy> Inbound<K> {
    /// Where a chunk at `offset` of transfer `key` belongs.
    pub fn place(&self, key: K, offset: u32) -> Placement {
        match self.current {
            Some((current, received)) if current == key => match offset == received {
                true => Placement::Append,
                false => Placement::Resume { next: received },
            },
            _ if offset == 0 => Placement::Start,
            _ => Placement::Resume { next: 0 },
        }
    }

    /// Records `len` more bytes of `key` (after [`Placement::Start`] or [`Placement::Append`]);
    /// returns how many have arrived.
    pub fn advance(&mut self, key: K, len: u32) -> u32 {
        let received = match self.current {
            Some((current, received)) if current == key => received.saturating_add(len),
            _ => len,
        };
        self.current = Some((key, received));
        received
    }

    /// Forgets the transfer: the next chunk must start it again.
    pub fn reset(&mut self) {
        self.current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_append_in_order_and_repeats_resume_at_the_received_count() {
        let mut inbound = Inbound::<u32>::default();
        assert_eq!(inbound.place(7, 100), Placement::Resume { next: 0 });
        assert_eq!(inbound.place(7, 0), Placement::Start);
        assert_eq!(inbound.advance(7, 100), 100);
        assert_eq!(inbound.place(7, 100), Placement::Append);
        assert_eq!(inbound.advance(7, 50), 150);
        // A repeat of the first chunk, and a gap.
        assert_eq!(inbound.place(7, 0), Placement::Resume { next: 150 });
        assert_eq!(inbound.place(7, 400), Placement::Resume { next: 150 });
        // Another transfer starts over.
        assert_eq!(inbound.place(8, 0), Placement::Start);
        assert_eq!(inbound.advance(8, 10), 10);
        inbound.reset();
        assert_eq!(inbound.place(8, 10), Placement::Resume { next: 0 });
    }
}
