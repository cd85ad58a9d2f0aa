//! Board support for Nordic's nRF52840 DK (Cortex-M4F at 64 MHz, 256 KiB SRAM, 1 MiB
//! flash): [`init`] sets up UARTE0 on the on-board debugger's virtual COM port (P0.06 TX,
//! P0.08 RX, 115200 baud) as one `embedded-io` stream and the NVMC over the 64 KiB
//! `STORAGE` region of `memory.x` as `embedded-storage` NOR flash, LED 1 (P0.13) and
//! button 1 (P0.11), both active low, as `embedded-hal` pins; `defmt` logs over RTT
//! and panics go through `panic-probe`. Flash and run with `probe-rs` (this folder's
//! runner).
#![no_std]

use defmt_rtt as _;
use panic_probe as _;

use embedded_hal::digital::PinState;
use nrf52840_hal::gpio::{p0, Input, Level, Output, Pin, PullUp, PushPull};
use nrf52840_hal::nvmc::Nvmc;
use nrf52840_hal::pac;
use nrf52840_hal::uarte::{Baudrate, Parity, Pins, Uarte, UarteRx, UarteTx};

/// The board's name, as the firmware reports it.
pub const NAME: &str = "nrf52840-dk";
/// No clock for the trainer's tick count.
pub const CLOCK: Option<fn() -> u32> = None;
/// LED 1 is lit, button 1 pressed, at a low level.
pub const LED_LIT: PinState = PinState::Low;
pub const BUTTON_PRESSED: PinState = PinState::Low;

extern "C" {
    /// The storage region, from `memory.x`.
    static mut _storage_start: u8;
    static _storage_length: u8;
}

/// UARTE0 as one byte stream.
pub struct Serial {
    tx: UarteTx<pac::UARTE0>,
    rx: UarteRx<pac::UARTE0>,
}

/// The peripherals a firmware uses.
pub struct Board {
    pub serial: Serial,
    pub storage: Nvmc<pac::NVMC>,
    pub led: Pin<Output<PushPull>>,
    pub button: Pin<Input<PullUp>>,
}

/// Sets up the serial port, the flash storage, LED 1 (dark) and button 1. Returns `None`
/// when called twice.
pub fn init() -> Option<Board> {
    let p = pac::Peripherals::take()?;
    let port0 = p0::Parts::new(p.P0);
    let pins = Pins {
        txd: port0.p0_06.into_push_pull_output(Level::High).degrade(),
        rxd: port0.p0_08.into_floating_input().degrade(),
        cts: None,
        rts: None,
    };
    let led = port0.p0_13.into_push_pull_output(Level::High).degrade();
    let button = port0.p0_11.into_pullup_input().degrade();
    let uarte = Uarte::new(p.UARTE0, pins, Parity::EXCLUDED, Baudrate::BAUD115200);
    let tx_buf = cortex_m::singleton!(: [u8; 64] = [0; 64])?;
    let rx_buf = cortex_m::singleton!(: [u8; 1] = [0; 1])?;
    let (tx, rx) = uarte.split(tx_buf, rx_buf).ok()?;
    let length = &raw const _storage_length as usize;
    // SAFETY: `Peripherals::take` succeeded, so this runs once: the region reserved in
    // `memory.x` (page-aligned, outside the image) gets exactly one owner.
    let storage = unsafe { core::slice::from_raw_parts_mut(&raw mut _storage_start, length) };
    Some(Board { serial: Serial { tx, rx }, storage: Nvmc::new(p.NVMC, storage), led, button })
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

impl embedded_io::ErrorType for Serial {
    type Error = nrf52840_hal::uarte::Error;
}

impl embedded_io::Read for Serial {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        self.rx.read(buf)
    }
}

impl embedded_io::ReadReady for Serial {
    fn read_ready(&mut self) -> Result<bool, Self::Error> {
        self.rx.read_ready()
    }
}

impl embedded_io::Write for Serial {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        self.tx.write(buf)
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.tx.flush()
    }
}
