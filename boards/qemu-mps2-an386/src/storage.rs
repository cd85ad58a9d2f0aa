//! Emulated NOR flash for QEMU, through the `embedded-storage` traits: the 64 KiB `STORAGE`
//! region of the board's SSRAM1 (see `memory.x`), outside the firmware image and its RAM
//! budget. It behaves like NOR flash: erase sets whole 4 KiB sectors to `0xFF`, a write can
//! only clear bits (the stored value becomes `old & new`), writes are 4-byte aligned words.
//! Its contents survive a system reset inside one QEMU run, not a new QEMU process.

use core::ptr::{read_volatile, write_volatile};

use embedded_storage::nor_flash::{
    check_erase, check_read, check_write, ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash,
};

extern "C" {
    /// The storage region, from `memory.x`.
    static _storage_start: u8;
    static _storage_length: u8;
}

/// The emulated flash.
pub struct Storage {
    base: *mut u8,
    capacity: usize,
}

impl Storage {
    /// The region reserved in `memory.x`.
    ///
    /// # Safety
    /// Only one `Storage` may exist: it owns the region.
    pub unsafe fn take() -> Self {
        // Linker symbols: only their addresses mean something (the length is the address
        // of `_storage_length`).
        let base = &raw const _storage_start as *mut u8;
        let capacity = &raw const _storage_length as usize;
        Self { base, capacity }
    }
}

impl ErrorType for Storage {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for Storage {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len())?;
        for (i, byte) in bytes.iter_mut().enumerate() {
            // SAFETY: `check_read` put `offset + i` inside the region this value owns.
            *byte = unsafe { read_volatile(self.base.add(offset as usize + i)) };
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

impl NorFlash for Storage {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 4096;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        check_erase(self, from, to)?;
        for offset in from as usize..to as usize {
            // SAFETY: `check_erase` put the range inside the region this value owns.
            unsafe { write_volatile(self.base.add(offset), 0xFF) };
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        check_write(self, offset, bytes.len())?;
        for (i, &byte) in bytes.iter().enumerate() {
            // SAFETY: `check_write` put `offset + i` inside the region this value owns.
            unsafe {
                let cell = self.base.add(offset as usize + i);
                write_volatile(cell, read_volatile(cell) & byte);
            }
        }
        Ok(())
    }
}
