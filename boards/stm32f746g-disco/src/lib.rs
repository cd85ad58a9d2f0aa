//! Board support for ST's STM32F746G-DISCO (Cortex-M7F, 320 KiB SRAM, 1 MiB flash), the
//! board published MCU-training results use: [`init`] runs the core from the 16 MHz
//! internal oscillator and sets up USART1 on the ST-LINK's virtual COM port (PA9 TX, PB7
//! RX, 115200 baud) as an `embedded-io` stream; `defmt` logs over RTT and panics go through
//! `panic-probe`. Flash and run with `probe-rs` (this folder's runner).
//!
//! No flash storage yet: the F746's flash sectors are 32 to 256 KiB, unequal, so the
//! two-slot checkpoint store needs its own sector map (issue 6, item 4).
#![no_std]

use defmt_rtt as _;
use panic_probe as _;

use stm32f7xx_hal::gpio::{Alternate, PA9, PB7};
use stm32f7xx_hal::pac::{self, USART1};
use stm32f7xx_hal::prelude::*;
use stm32f7xx_hal::serial::{self, Config};

/// The board's name, as the firmware reports it.
pub const NAME: &str = "stm32f746g-disco";

/// USART1 as one blocking byte stream.
pub struct Serial(serial::Serial<USART1, (PA9<Alternate<7>>, PB7<Alternate<7>>)>);

/// A receive error of the serial port.
#[derive(Debug)]
pub struct SerialError(pub serial::Error);

/// The peripherals a firmware uses.
pub struct Board {
    pub serial: Serial,
}

/// Sets up clocks and the serial port. Returns `None` when called twice.
pub fn init() -> Option<Board> {
    let p = pac::Peripherals::take()?;
    let clocks = p.RCC.constrain().cfgr.freeze();
    let (gpioa, gpiob) = (p.GPIOA.split(), p.GPIOB.split());
    let pins = (gpioa.pa9.into_alternate::<7>(), gpiob.pb7.into_alternate::<7>());
    let serial = serial::Serial::new(p.USART1, pins, &clocks, Config::default());
    Some(Board { serial: Serial(serial) })
}

/// Ends the run: with a debugger attached (`probe-rs run`) a semihosting exit with status
/// 0 or 1; without one, parks the core.
pub fn exit(success: bool) -> ! {
    defmt::flush();
    if cortex_m::peripheral::DCB::is_debugger_attached() {
        use cortex_m_semihosting::debug;
        debug::exit(if success { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    }
    loop {
        cortex_m::asm::wfi();
    }
}

impl core::fmt::Display for SerialError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "USART1 receive error: {:?}", self.0)
    }
}

impl core::error::Error for SerialError {}

impl embedded_io::Error for SerialError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl embedded_io::ErrorType for Serial {
    type Error = SerialError;
}

impl embedded_io::Read for Serial {
    /// Waits for the first byte, then takes what else has already arrived.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, SerialError> {
        let Some(first) = buf.first_mut() else { return Ok(0) };
        *first = nb::block!(self.0.read()).map_err(SerialError)?;
        let mut count = 1;
        while count < buf.len() {
            match self.0.read() {
                Ok(byte) => buf[count] = byte,
                Err(nb::Error::WouldBlock) => break,
                Err(nb::Error::Other(error)) => return Err(SerialError(error)),
            }
            count += 1;
        }
        Ok(count)
    }
}

impl embedded_io::Write for Serial {
    fn write(&mut self, buf: &[u8]) -> Result<usize, SerialError> {
        for &byte in buf {
            // Writing a byte cannot fail on this USART (the error type is `Infallible`).
            let _ = nb::block!(self.0.write(byte));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), SerialError> {
        let _ = nb::block!(self.0.flush());
        Ok(())
    }
}
