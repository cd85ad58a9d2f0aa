//! Board support for QEMU's `mps2-an386` machine (Cortex-M4F at 25 MHz), the board CI runs
//! sprout's firmware on: [`init`] hands out the peripherals, [`exit`] ends the emulation
//! with a semihosting exit code, `defmt` logs over semihosting, [`uart::Uart`] is UART0
//! (QEMU's first serial port) as an `embedded-io` stream, [`storage::Storage`] is an
//! emulated NOR flash, [`fpgaio`] gives the user LED and button, and
//! [`counter::InstructionCounter`] counts executed instructions under
//! `qemu-system-arm -icount shift=0`.
//!
//! Its `memory.x` gives the firmware exactly 256 KiB of RAM. Run a binary with
//! `cargo run --release --bin NAME` in this folder, or through `cargo xtask`, which also
//! decodes the defmt output.
#![no_std]

pub mod counter;
pub mod fpgaio;
pub mod storage;
pub mod uart;

use cortex_m_semihosting::debug;
use defmt_semihosting as _;
use embedded_hal::digital::PinState;

/// The board's name, as the firmware reports it.
pub const NAME: &str = "qemu-mps2-an386";
/// Core clock (SysTick's processor clock source), in Hz.
pub const CORE_CLOCK_HZ: u32 = 25_000_000;
/// SysTick as the trainer's clock (free-running from [`init`] on): one tick per 40
/// instructions under `-icount shift=0`.
pub const CLOCK: Option<fn() -> u32> = Some(counter::ticks);
/// The LED is lit, the button pressed, when its register bit is set.
pub const LED_LIT: PinState = PinState::High;
pub const BUTTON_PRESSED: PinState = PinState::High;

/// The peripherals a firmware uses.
pub struct Board {
    pub serial: uart::Uart,
    pub storage: storage::Storage,
    pub counter: counter::InstructionCounter,
    pub led: fpgaio::Led,
    pub button: fpgaio::Button,
}

/// Takes the core peripherals and sets up UART0, the flash emulation, SysTick, the LED and
/// the button. Returns `None` when called twice.
pub fn init() -> Option<Board> {
    let core = cortex_m::Peripherals::take()?;
    // SAFETY: `Peripherals::take` succeeded, so this is the only call that gets here.
    let (led, button) = unsafe { fpgaio::take() };
    Some(Board {
        // SAFETY: `Peripherals::take` succeeded, so this is the only call that gets here
        // and nothing else owns UART0 or the storage region.
        serial: unsafe { uart::Uart::uart0() },
        storage: unsafe { storage::Storage::take() },
        counter: counter::InstructionCounter::new(core.SYST),
        led,
        button,
    })
}

/// Ends the emulation: QEMU exits with status 0 when `success`, 1 otherwise.
pub fn exit(success: bool) -> ! {
    debug::exit(if success { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    // Without a debugger or QEMU's semihosting the call returns: park the core.
    loop {
        cortex_m::asm::wfi();
    }
}

/// External interrupts of the MPS2 board's Cortex-M4 (UARTs, timers, ...).
const INTERRUPTS: usize = 32;

extern "C" {
    /// cortex-m-rt's handler for exceptions and interrupts nobody handles.
    fn DefaultHandler();
}

/// The device part of the vector table, which cortex-m-rt's `device` feature leaves to the
/// board: every interrupt goes to `DefaultHandler`.
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
static __INTERRUPTS: [unsafe extern "C" fn(); INTERRUPTS] = [DefaultHandler; INTERRUPTS];

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    defmt::error!("panic: {}", defmt::Display2Format(info));
    exit(false)
}

#[cortex_m_rt::exception]
unsafe fn HardFault(frame: &cortex_m_rt::ExceptionFrame) -> ! {
    defmt::error!("hard fault at pc {=u32:#010x}", frame.pc());
    exit(false)
}
