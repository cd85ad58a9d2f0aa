//! Board support for ST's STM32F746G-DISCO (Cortex-M7F, 320 KiB SRAM, 1 MiB flash), the
//! board published MCU-training results use: [`init`] runs the core from the 16 MHz
//! internal oscillator and sets up USART1 on the ST-LINK's virtual COM port (PA9 TX, PB7
//! RX, 115200 baud) as an `embedded-io` stream, and the flash's last two sectors as
//! checkpoint [`storage`], and the user LED LD1 (PI1) and user button B1 (PI11), both
//! active high, as [`controls`]; `defmt` logs over RTT and panics go through `panic-probe`. Flash
//! and run with `probe-rs` (this folder's runner).
#![no_std]

pub mod controls;
pub mod storage;

use defmt_rtt as _;
use panic_probe as _;

use embedded_hal::digital::PinState;
use stm32f7xx_hal::gpio::{Alternate, PA9, PB7};
use stm32f7xx_hal::pac::{self, USART1};
use stm32f7xx_hal::prelude::*;
use stm32f7xx_hal::serial::{self, Config};

/// The board's name, as the firmware reports it.
pub const NAME: &str = "stm32f746g-disco";
/// No clock for the trainer's tick count.
pub const CLOCK: Option<fn() -> u32> = None;
/// LD1 is lit, B1 pressed, at a high level.
pub const LED_LIT: PinState = PinState::High;
pub const BUTTON_PRESSED: PinState = PinState::High;

/// USART1 as one byte stream: reads block for the first byte; [`embedded_io::ReadReady`]
/// looks ahead by one byte, which the next read returns first.
pub struct Serial {
    port: serial::Serial<USART1, (PA9<Alternate<7>>, PB7<Alternate<7>>)>,
    ahead: Option<u8>,
}

/// A receive error of the serial port.
#[derive(Debug)]
pub struct SerialError(pub serial::Error);

/// The peripherals a firmware uses.
pub struct Board {
    pub serial: Serial,
    pub storage: storage::Storage,
    pub led: controls::Led,
    pub button: controls::Button,
}

/// Sets up clocks, the serial port, LD1 (dark) and B1. Returns `None` when called twice.
pub fn init() -> Option<Board> {
    let p = pac::Peripherals::take()?;
    let clocks = p.RCC.constrain().cfgr.freeze();
    let (gpioa, gpiob, gpioi) = (p.GPIOA.split(), p.GPIOB.split(), p.GPIOI.split());
    let pins = (gpioa.pa9.into_alternate::<7>(), gpiob.pb7.into_alternate::<7>());
    let serial = serial::Serial::new(p.USART1, pins, &clocks, Config::default());
    Some(Board {
        serial: Serial { port: serial, ahead: None },
        storage: storage::Storage::new(p.FLASH),
        led: controls::Led(gpioi.pi1.into_push_pull_output()),
        // B1 has its own pull-down resistor on the board.
        button: controls::Button(gpioi.pi11.into_floating_input()),
    })
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
        *first = match self.ahead.take() {
            Some(byte) => byte,
            None => nb::block!(self.port.read()).map_err(SerialError)?,
        };
        let mut count = 1;
        while count < buf.len() {
            match self.port.read() {
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
            let _ = nb::block!(self.port.write(byte));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), SerialError> {
        let _ = nb::block!(self.port.flush());
        Ok(())
    }
}

impl embedded_io::ReadReady for Serial {
    fn read_ready(&mut self) -> Result<bool, SerialError> {
        if self.ahead.is_none() {
            match self.port.read() {
                Ok(byte) => self.ahead = Some(byte),
                Err(nb::Error::WouldBlock) => {}
                Err(nb::Error::Other(error)) => return Err(SerialError(error)),
            }
        }
        Ok(self.ahead.is_some())
    }
}
