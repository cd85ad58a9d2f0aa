//! A simulated NOR flash for the storage tests: erase sets whole sectors to `0xFF`, program
//! only clears bits and refuses unerased words, alignment is checked as declared, and power
//! can be cut after any number of elementary operations (a sector erase, one byte
//! programmed), leaving the interrupted one half done.

use embedded_storage::nor_flash::{
    check_erase, check_read, check_write, ErrorType, NorFlash, NorFlashError, NorFlashErrorKind,
    ReadNorFlash,
};
use std::vec;
use std::vec::Vec;

/// What the simulated flash refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimError {
    /// Misaligned or out-of-bounds arguments.
    Bad(NorFlashErrorKind),
    /// Programming a word that is not erased.
    NotErased { offset: usize },
    /// Power is off: the operation was cut or never started.
    PowerCut,
}

impl NorFlashError for SimError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            SimError::Bad(kind) => *kind,
            _ => NorFlashErrorKind::Other,
        }
    }
}

/// `W`-byte write granularity, `E`-byte erase sectors.
#[derive(Clone)]
pub struct SimFlash<const W: usize, const E: usize> {
    pub bytes: Vec<u8>,
    /// Elementary operations left before power fails; `None`: power stays on.
    pub power: Option<usize>,
    /// Elementary operations done so far.
    pub operations: usize,
}

impl<const W: usize, const E: usize> SimFlash<W, E> {
    /// An erased flash of `sectors` sectors.
    pub fn new(sectors: usize) -> Self {
        Self { bytes: vec![0xff; sectors * E], power: None, operations: 0 }
    }

    /// Spends one elementary operation; `false` when power fails before it completes.
    fn spend(&mut self) -> bool {
        match &mut self.power {
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                self.operations += 1;
                true
            }
            None => {
                self.operations += 1;
                true
            }
        }
    }

    /// Power is back: the flash keeps what it holds.
    pub fn restore_power(&mut self) {
        self.power = None;
    }
}

impl<const W: usize, const E: usize> ErrorType for SimFlash<W, E> {
    type Error = SimError;
}

impl<const W: usize, const E: usize> ReadNorFlash for SimFlash<W, E> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), SimError> {
        check_read(self, offset, bytes.len()).map_err(SimError::Bad)?;
        if self.power == Some(0) {
            return Err(SimError::PowerCut);
        }
        let at = offset as usize;
        bytes.copy_from_slice(&self.bytes[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.bytes.len()
    }
}

impl<const W: usize, const E: usize> NorFlash for SimFlash<W, E> {
    const WRITE_SIZE: usize = W;
    const ERASE_SIZE: usize = E;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), SimError> {
        check_erase(self, from, to).map_err(SimError::Bad)?;
        for sector in (from as usize..to as usize).step_by(E) {
            if !self.spend() {
                // Cut mid-erase: the first half of the sector is erased, the rest is not.
                self.bytes[sector..sector + E / 2].fill(0xff);
                return Err(SimError::PowerCut);
            }
            self.bytes[sector..sector + E].fill(0xff);
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), SimError> {
        check_write(self, offset, bytes.len()).map_err(SimError::Bad)?;
        let at = offset as usize;
        if let Some(word) = (at..at + bytes.len())
            .step_by(W)
            .find(|&w| self.bytes[w..w + W].iter().any(|&b| b != 0xff))
        {
            return Err(SimError::NotErased { offset: word });
        }
        for (i, &value) in bytes.iter().enumerate() {
            let took = self.spend();
            let cell = &mut self.bytes[at + i];
            if !took {
                // Cut mid-program: only the low four bits of this byte took.
                *cell &= value | 0xf0;
                return Err(SimError::PowerCut);
            }
            *cell &= value;
        }
        Ok(())
    }
}
