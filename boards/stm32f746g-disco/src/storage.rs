//! Checkpoint storage in the F746's own flash, as an `embedded-storage` NOR flash for
//! `sprout_firmware::storage::CheckpointStore`: its last two sectors (6 and 7, 256 KiB
//! each, from 0x0808_0000), which `memory.x` keeps out of the firmware image, one
//! checkpoint slot per sector. The lower sectors have other sizes (4 × 32 KiB, 128 KiB,
//! 256 KiB), so only these two form a region of equal erase units.

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use stm32f7xx_hal::flash::{self, Flash};
use stm32f7xx_hal::pac::FLASH;

/// The region's offset from the start of flash (sector 6).
const REGION_OFFSET: u32 = 0x8_0000;
/// Where flash is mapped on the AXIM bus.
const FLASH_BASE: usize = 0x0800_0000;
/// Sector size in the region, the erase unit.
const SECTOR_BYTES: u32 = 256 * 1024;
/// The region's first sector number and its sector count.
const FIRST_SECTOR: u8 = 6;
const SECTORS: u32 = 2;

/// Sectors 6 and 7 of the internal flash.
pub struct Storage {
    flash: Flash,
}

/// Why a storage operation failed.
#[derive(Debug)]
pub enum StorageError {
    /// The range leaves the two sectors.
    OutOfBounds,
    /// An erase range that does not start and end on a sector boundary.
    NotAligned,
    /// The flash controller reported an error.
    Flash(flash::Error),
}

impl Storage {
    /// The flash controller, to erase and program the region.
    pub fn new(flash: FLASH) -> Self {
        Self { flash: Flash::new(flash) }
    }

    /// `offset..offset + len` if it lies inside the region.
    fn check(offset: u32, len: usize) -> Result<(), StorageError> {
        let end = u64::from(offset) + len as u64;
        match end <= u64::from(SECTORS * SECTOR_BYTES) {
            true => Ok(()),
            false => Err(StorageError::OutOfBounds),
        }
    }

    /// Runs `operation` with the controller unlocked, locking it again afterwards.
    fn unlocked(
        &mut self,
        operation: impl FnOnce(&mut Flash) -> Result<(), flash::Error>,
    ) -> Result<(), StorageError> {
        self.flash.unlock();
        let result = operation(&mut self.flash);
        self.flash.lock();
        result.map_err(StorageError::Flash)
    }
}

impl NorFlashError for StorageError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            StorageError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            StorageError::NotAligned => NorFlashErrorKind::NotAligned,
            StorageError::Flash(_) => NorFlashErrorKind::Other,
        }
    }
}

impl ErrorType for Storage {
    type Error = StorageError;
}

impl ReadNorFlash for Storage {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), StorageError> {
        Self::check(offset, bytes.len())?;
        let start = FLASH_BASE + (REGION_OFFSET + offset) as usize;
        for (i, byte) in bytes.iter_mut().enumerate() {
            // SAFETY: the address lies in sectors 6 and 7 (checked above), which are
            // memory-mapped flash that no Rust object owns.
            *byte = unsafe { core::ptr::read_volatile((start + i) as *const u8) };
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        (SECTORS * SECTOR_BYTES) as usize
    }
}

impl NorFlash for Storage {
    const WRITE_SIZE: usize = 1;
    const ERASE_SIZE: usize = SECTOR_BYTES as usize;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), StorageError> {
        if from > to || !from.is_multiple_of(SECTOR_BYTES) || !to.is_multiple_of(SECTOR_BYTES) {
            return Err(StorageError::NotAligned);
        }
        Self::check(from, (to - from) as usize)?;
        for sector in from / SECTOR_BYTES..to / SECTOR_BYTES {
            let number = FIRST_SECTOR + sector as u8;
            self.unlocked(|flash| flash.blocking_erase_sector(number))?;
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), StorageError> {
        Self::check(offset, bytes.len())?;
        let at = (REGION_OFFSET + offset) as usize;
        self.unlocked(|flash| flash.blocking_program(at, bytes))
    }
}
