//! The MPS2 board's FPGA I/O block (QEMU's `mps2-fpgaio`): user LED 0 and user button 0 as
//! `embedded-hal` pins, each a bit of its register. QEMU keeps the LED register's bits and
//! reads every button as released.

use core::convert::Infallible;
use core::ptr::{read_volatile, write_volatile};

use embedded_hal::digital::{ErrorType, InputPin, OutputPin};

/// The register block.
const FPGAIO: usize = 0x4002_8000;
/// The user LEDs (bit n: LED n lit) and the user buttons (bit n: button n pressed).
const LED0: *mut u32 = FPGAIO as *mut u32;
const BUTTON: *const u32 = (FPGAIO + 0x08) as *const u32;

/// User LED 0, lit when its bit is set.
pub struct Led(());

/// User button 0, pressed when its bit is set.
pub struct Button(());

/// The LED and the button.
///
/// # Safety
/// Only one pair may exist: each owns its register bit, and the LED is written by
/// read-modify-write.
pub unsafe fn take() -> (Led, Button) {
    (Led(()), Button(()))
}

impl Led {
    /// Whether the LED register has the LED lit: what the board shows.
    pub fn is_lit(&self) -> bool {
        // SAFETY: LED0 is the FPGA I/O block's LED register, always mapped on this machine.
        unsafe { read_volatile(LED0) & 1 != 0 }
    }

    fn set(&mut self, lit: bool) {
        // SAFETY: as in `is_lit`; this `Led` owns bit 0 (see `take`).
        unsafe {
            let others = read_volatile(LED0) & !1;
            write_volatile(LED0, others | u32::from(lit));
        }
    }
}

impl ErrorType for Led {
    type Error = Infallible;
}

impl OutputPin for Led {
    fn set_low(&mut self) -> Result<(), Infallible> {
        self.set(false);
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), Infallible> {
        self.set(true);
        Ok(())
    }
}

impl ErrorType for Button {
    type Error = Infallible;
}

impl InputPin for Button {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        // SAFETY: BUTTON is the FPGA I/O block's button register, always mapped.
        Ok(unsafe { read_volatile(BUTTON) } & 1 != 0)
    }
    fn is_low(&mut self) -> Result<bool, Infallible> {
        self.is_high().map(|high| !high)
    }
}
