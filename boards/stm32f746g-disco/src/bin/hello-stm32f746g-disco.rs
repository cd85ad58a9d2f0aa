//! The minimal firmware: logs the board over defmt, greets on the serial port and exits
//! (under `probe-rs run`).
#![no_std]
#![no_main]

use embedded_io::Write;
use stm32f746g_disco as board;

#[cortex_m_rt::entry]
fn main() -> ! {
    let Some(mut b) = board::init() else { board::exit(false) };
    defmt::info!("sprout on {=str}", board::NAME);
    let greeted = b.serial.write_all(b"sprout: hello from the STM32F746G-DISCO\r\n").is_ok();
    defmt::info!("serial: {=bool}", greeted);
    board::exit(greeted)
}
