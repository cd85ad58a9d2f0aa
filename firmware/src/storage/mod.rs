//! Checkpoints in flash that survive power loss: two slots, each erased and then programmed
//! header, payload and finally a commit marker. A save always goes to the slot that does not
//! hold the newest valid checkpoint, so a cut at any moment leaves that one intact.
//!
//! Slot layout (each part starts on a multiple of the flash's write and read size):
//! [`header::Header`] (24 bytes), the commit marker (4 bytes), the payload. A slot is valid
//! when its header checks, its marker reads [`header::COMMITTED`] and its payload matches
//! the header's CRC-32; recovery takes the valid slot with the highest generation.

mod header;
#[cfg(test)]
mod sim;

use core::fmt;
use embedded_storage::nor_flash::NorFlash;
use header::{Header, COMMITTED, HEADER_BYTES};
use sprout_core::format::container::CRC32;

/// Bytes moved per flash call when a part needs padding or streaming; the flash's write and
/// read sizes must divide it.
const CHUNK: usize = 64;

/// Why the store could not be opened, read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError<E> {
    /// The flash driver failed (or power failed during the operation).
    Flash(E),
    /// The slots do not start and end on erase-sector boundaries.
    Misaligned { base: u32, slot_bytes: u32, erase_size: usize },
    /// The two slots reach past the end of the flash.
    OutOfFlash { end: u64, capacity: usize },
    /// A slot has no room for a payload after its header and commit marker.
    SlotTooSmall { slot_bytes: u32, overhead: usize },
    /// The flash's write or read size does not divide the store's 64-byte transfer unit.
    UnsupportedGranularity { write_size: usize, read_size: usize },
    /// The payload does not fit in a slot.
    TooLarge { len: usize, capacity: usize },
    /// The caller's buffer is smaller than the stored payload.
    BufferTooSmall { needed: usize, available: usize },
    /// The generation counter reached its maximum.
    GenerationsExhausted,
}

impl<E: fmt::Debug> fmt::Display for StoreError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Flash(e) => write!(f, "checkpoint flash failed: {e:?}"),
            StoreError::Misaligned { base, slot_bytes, erase_size } => write!(
                f,
                "checkpoint slots at {base:#x} of {slot_bytes} bytes are not aligned to the \
                 {erase_size}-byte erase sectors"
            ),
            StoreError::OutOfFlash { end, capacity } => {
                write!(f, "checkpoint slots end at byte {end}, the flash holds {capacity}")
            }
            StoreError::SlotTooSmall { slot_bytes, overhead } => write!(
                f,
                "a {slot_bytes}-byte checkpoint slot has no room after its {overhead}-byte header"
            ),
            StoreError::UnsupportedGranularity { write_size, read_size } => write!(
                f,
                "flash write size {write_size} / read size {read_size} must divide {CHUNK}"
            ),
            StoreError::TooLarge { len, capacity } => {
                write!(f, "a {len}-byte checkpoint exceeds the slot's {capacity} bytes")
            }
            StoreError::BufferTooSmall { needed, available } => {
                write!(f, "the stored checkpoint has {needed} bytes, the buffer holds {available}")
            }
            StoreError::GenerationsExhausted => {
                f.write_str("the checkpoint generation counter is exhausted")
            }
        }
    }
}

impl<E: fmt::Debug> core::error::Error for StoreError<E> {}

/// A checkpoint found in (or written to) the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Counts saves: the newest checkpoint has the highest generation.
    pub generation: u32,
    /// Payload bytes.
    pub len: usize,
}

/// Two checkpoint slots of `slot_bytes` each, starting at `base` in `flash`.
pub struct CheckpointStore<F> {
    flash: F,
    base: u32,
    slot_bytes: u32,
}

/// A store operation's result, with the flash driver's error type.
type StoreResult<T, F> =
    Result<T, StoreError<<F as embedded_storage::nor_flash::ErrorType>::Error>>;

impl<F: NorFlash> CheckpointStore<F> {
    /// Checks the layout; reads nothing yet.
    pub fn new(flash: F, base: u32, slot_bytes: u32) -> StoreResult<Self, F> {
        if !CHUNK.is_multiple_of(F::WRITE_SIZE) || !CHUNK.is_multiple_of(F::READ_SIZE) {
            return Err(StoreError::UnsupportedGranularity {
                write_size: F::WRITE_SIZE,
                read_size: F::READ_SIZE,
            });
        }
        let erase = F::ERASE_SIZE;
        let aligned = |n: u32| (n as usize).is_multiple_of(erase);
        let whole_granules = (slot_bytes as usize).is_multiple_of(Self::granule());
        if !aligned(base) || !aligned(slot_bytes) || !whole_granules {
            return Err(StoreError::Misaligned { base, slot_bytes, erase_size: erase });
        }
        let end = u64::from(base) + 2 * u64::from(slot_bytes);
        if end > flash.capacity() as u64 {
            return Err(StoreError::OutOfFlash { end, capacity: flash.capacity() });
        }
        let overhead = Self::payload_offset();
        if slot_bytes as usize <= overhead {
            return Err(StoreError::SlotTooSmall { slot_bytes, overhead });
        }
        Ok(Self { flash, base, slot_bytes })
    }

    /// The largest payload a slot holds.
    pub fn capacity(&self) -> usize {
        self.slot_bytes as usize - Self::payload_offset()
    }

    /// Gives the flash back.
    pub fn release(self) -> F {
        self.flash
    }

    /// The newest valid checkpoint, if any, without reading it out.
    pub fn latest(&mut self) -> StoreResult<Option<Stored>, F> {
        Ok(self.newest()?.map(|(_, h)| stored(h)))
    }

    /// Copies the newest valid checkpoint into the front of `buf`.
    pub fn load(&mut self, buf: &mut [u8]) -> StoreResult<Option<Stored>, F> {
        let Some((slot, header)) = self.newest()? else { return Ok(None) };
        let len = header.len as usize;
        let available = buf.len();
        let out =
            buf.get_mut(..len).ok_or(StoreError::BufferTooSmall { needed: len, available })?;
        self.read(self.slot_start(slot) + Self::payload_offset() as u32, out)?;
        Ok(Some(stored(header)))
    }

    /// Saves `payload` as the newest checkpoint, over the slot that does not hold the
    /// current newest one: erase, header, payload, then the commit marker.
    pub fn save(&mut self, payload: &[u8]) -> StoreResult<Stored, F> {
        if payload.len() > self.capacity() {
            return Err(StoreError::TooLarge { len: payload.len(), capacity: self.capacity() });
        }
        let (slot, generation) = match self.newest()? {
            Some((newest, h)) => {
                (1 - newest, h.generation.checked_add(1).ok_or(StoreError::GenerationsExhausted)?)
            }
            None => (0, 1),
        };
        let header = Header {
            generation,
            // A slot is far smaller than 4 GiB, so the length fits.
            len: payload.len() as u32,
            payload_crc: CRC32.checksum(payload),
        };
        let start = self.slot_start(slot);
        self.flash.erase(start, start + self.slot_bytes).map_err(StoreError::Flash)?;
        self.write(start, &header.encode())?;
        self.write(start + Self::payload_offset() as u32, payload)?;
        self.write(start + Self::marker_offset() as u32, &COMMITTED)?;
        Ok(stored(header))
    }

    /// The slot holding the newest valid checkpoint and its header.
    fn newest(&mut self) -> StoreResult<Option<(usize, Header)>, F> {
        let mut best: Option<(usize, Header)> = None;
        for slot in 0..2 {
            if let Some(header) = self.valid_header(slot)? {
                if best.is_none_or(|(_, b)| header.generation > b.generation) {
                    best = Some((slot, header));
                }
            }
        }
        Ok(best)
    }

    /// The slot's header when the slot is valid: header intact, committed, payload matching.
    fn valid_header(&mut self, slot: usize) -> StoreResult<Option<Header>, F> {
        let start = self.slot_start(slot);
        let mut bytes = [0u8; HEADER_BYTES];
        self.read(start, &mut bytes)?;
        let Some(header) = Header::decode(&bytes) else { return Ok(None) };
        if header.len as usize > self.capacity() {
            return Ok(None);
        }
        let mut marker = [0u8; 4];
        self.read(start + Self::marker_offset() as u32, &mut marker)?;
        if marker != COMMITTED {
            return Ok(None);
        }
        let mut digest = CRC32.digest();
        let mut chunk = [0u8; CHUNK];
        let mut at = start + Self::payload_offset() as u32;
        let mut left = header.len as usize;
        while left > 0 {
            let n = left.min(CHUNK);
            self.read(at, &mut chunk[..n])?;
            digest.update(&chunk[..n]);
            at += n as u32;
            left -= n;
        }
        Ok((digest.finalize() == header.payload_crc).then_some(header))
    }

    /// Reads `out.len()` bytes at `offset` (a multiple of the read size), through a padded
    /// chunk for the unaligned tail.
    fn read(&mut self, offset: u32, out: &mut [u8]) -> StoreResult<(), F> {
        let aligned = out.len() - out.len() % F::READ_SIZE;
        let (head, tail) = out.split_at_mut(aligned);
        self.flash.read(offset, head).map_err(StoreError::Flash)?;
        if !tail.is_empty() {
            let mut chunk = [0u8; CHUNK];
            let padded = &mut chunk[..F::READ_SIZE];
            self.flash.read(offset + aligned as u32, padded).map_err(StoreError::Flash)?;
            tail.copy_from_slice(&padded[..tail.len()]);
        }
        Ok(())
    }

    /// Programs `data` at `offset` (a multiple of the write size), the unaligned tail padded
    /// with erased bytes.
    fn write(&mut self, offset: u32, data: &[u8]) -> StoreResult<(), F> {
        let aligned = data.len() - data.len() % F::WRITE_SIZE;
        let (head, tail) = data.split_at(aligned);
        self.flash.write(offset, head).map_err(StoreError::Flash)?;
        if !tail.is_empty() {
            let mut chunk = [0xffu8; CHUNK];
            chunk[..tail.len()].copy_from_slice(tail);
            let padded = &chunk[..F::WRITE_SIZE];
            self.flash.write(offset + aligned as u32, padded).map_err(StoreError::Flash)?;
        }
        Ok(())
    }

    fn slot_start(&self, slot: usize) -> u32 {
        self.base + slot as u32 * self.slot_bytes
    }

    /// Every part starts on a multiple of both the write and the read size.
    fn granule() -> usize {
        F::WRITE_SIZE.max(F::READ_SIZE)
    }

    fn marker_offset() -> usize {
        HEADER_BYTES.next_multiple_of(Self::granule())
    }

    fn payload_offset() -> usize {
        Self::marker_offset() + COMMITTED.len().next_multiple_of(Self::granule())
    }
}

fn stored(header: Header) -> Stored {
    Stored { generation: header.generation, len: header.len as usize }
}

#[cfg(test)]
mod tests;
