//! Checks this board's support code under QEMU: UART0 both ways (prints a greeting, then
//! echoes one line it receives, upper-cased), the emulated flash's NOR semantics, and the
//! user LED and button pins on the FPGA I/O registers.
//! Exits 0 when every check passes. `cargo xtask test` feeds the line and reads the echo.
#![no_std]
#![no_main]

use embedded_hal::digital::{InputPin, OutputPin};
use embedded_io::{Read, Write};
use embedded_storage::nor_flash::{NorFlash, NorFlashErrorKind, ReadNorFlash};
use qemu_mps2_an386 as board;

/// What the host sends and expects back.
const GREETING: &[u8] = b"sprout board-check: send a line\n";

#[cortex_m_rt::entry]
fn main() -> ! {
    let Some(mut b) = board::init() else { board::exit(false) };
    defmt::info!("board-check on {=str}", board::NAME);
    let uart_ok = echo_a_line(&mut b.serial).is_ok();
    let storage_ok = check_storage(&mut b.storage);
    let controls_ok = check_controls(&mut b.led, &mut b.button);
    defmt::info!(
        "uart: {=bool}, storage: {=bool}, controls: {=bool}",
        uart_ok,
        storage_ok,
        controls_ok
    );
    board::exit(uart_ok && storage_ok && controls_ok)
}

fn echo_a_line(uart: &mut board::uart::Uart) -> Result<(), core::convert::Infallible> {
    uart.write_all(GREETING)?;
    let mut line = [0u8; 64];
    let mut len = 0;
    while len < line.len() {
        let mut byte = [0u8];
        if uart.read(&mut byte)? == 0 {
            continue;
        }
        if byte[0] == b'\n' {
            break;
        }
        line[len] = byte[0];
        len += 1;
    }
    line[..len].make_ascii_uppercase();
    uart.write_all(b"echo: ")?;
    uart.write_all(&line[..len])?;
    uart.write_all(b"\n")
}

/// Erase gives 0xFF, writes only clear bits, misaligned and out-of-range access is refused.
fn check_storage(storage: &mut board::storage::Storage) -> bool {
    let mut word = [0u8; 4];
    let erased =
        storage.erase(0, 4096).is_ok() && storage.read(0, &mut word).is_ok() && word == [0xFF; 4];
    let anded = storage.write(0, &[0xF0, 0x0F, 0x12, 0xFF]).is_ok()
        && storage.write(0, &[0x3C, 0xFF, 0xFF, 0x00]).is_ok()
        && storage.read(0, &mut word).is_ok()
        && word == [0x30, 0x0F, 0x12, 0x00];
    let refused = storage.write(2, &word) == Err(NorFlashErrorKind::NotAligned)
        && storage.erase(0, storage.capacity() as u32 + 4096)
            == Err(NorFlashErrorKind::OutOfBounds);
    defmt::info!(
        "storage: erased {=bool}, and-ed {=bool}, refused {=bool}",
        erased,
        anded,
        refused
    );
    erased && anded && refused
}

/// The LED register follows the pin, and the button (QEMU models no presses) reads released.
fn check_controls(led: &mut board::fpgaio::Led, button: &mut board::fpgaio::Button) -> bool {
    let lit = led.set_high().is_ok() && led.is_lit();
    let dark = led.set_low().is_ok() && !led.is_lit();
    let released = button.is_low() == Ok(true);
    defmt::info!("controls: lit {=bool}, dark {=bool}, released {=bool}", lit, dark, released);
    lit && dark && released
}
