//! UART0 of the MPS2 board: an Arm CMSDK APB UART (QEMU's `cmsdk-apb-uart`, wired to the
//! machine's first serial port), polled, as a blocking `embedded-io` byte stream for the
//! link protocol.

use core::convert::Infallible;
use core::ptr::{read_volatile, write_volatile};

/// UART0's register block.
const UART0: usize = 0x4000_4000;
/// Registers, as byte offsets.
const DATA: usize = 0x00;
const STATE: usize = 0x04;
const CTRL: usize = 0x08;
const BAUDDIV: usize = 0x10;
/// STATE bits.
const TX_FULL: u32 = 1 << 0;
const RX_FULL: u32 = 1 << 1;
/// CTRL bits.
const TX_ENABLE: u32 = 1 << 0;
const RX_ENABLE: u32 = 1 << 1;
/// 25 MHz / 217 ≈ 115200 baud (QEMU ignores the rate but wants a divider of at least 16).
const DIVIDER: u32 = 217;

/// A CMSDK APB UART: blocking reads and writes by polling.
pub struct Uart {
    base: usize,
}

impl Uart {
    /// Enables UART0's transmitter and receiver.
    ///
    /// # Safety
    /// Only one `Uart` may exist for UART0: it owns the peripheral's registers.
    pub unsafe fn uart0() -> Self {
        let uart = Self { base: UART0 };
        uart.write_register(BAUDDIV, DIVIDER);
        uart.write_register(CTRL, TX_ENABLE | RX_ENABLE);
        uart
    }

    fn read_register(&self, offset: usize) -> u32 {
        // SAFETY: `base + offset` is a register of the UART this value owns.
        unsafe { read_volatile((self.base + offset) as *const u32) }
    }

    fn write_register(&self, offset: usize, value: u32) {
        // SAFETY: as in `read_register`.
        unsafe { write_volatile((self.base + offset) as *mut u32, value) }
    }

    fn can_read(&self) -> bool {
        self.read_register(STATE) & RX_FULL != 0
    }

    fn write_byte(&mut self, byte: u8) {
        while self.read_register(STATE) & TX_FULL != 0 {}
        self.write_register(DATA, u32::from(byte));
    }
}

impl embedded_io::ErrorType for Uart {
    type Error = Infallible;
}

impl embedded_io::Read for Uart {
    /// Waits for the first byte, then takes what else has already arrived.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        while !self.can_read() {}
        let mut count = 0;
        while count < buf.len() && self.can_read() {
            buf[count] = self.read_register(DATA) as u8;
            count += 1;
        }
        Ok(count)
    }
}

impl embedded_io::ReadReady for Uart {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        Ok(self.can_read())
    }
}

impl embedded_io::Write for Uart {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        buf.iter().for_each(|&byte| self.write_byte(byte));
        Ok(buf.len())
    }

    /// The transmitter holds one byte, which QEMU sends at once.
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
