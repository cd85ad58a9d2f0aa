//! The minimal firmware: logs the board over defmt, greets on the serial port, checks that
//! the flash storage reads back erased after an erase, and exits (under `probe-rs run`).
#![no_std]
#![no_main]

use embedded_io::Write;
use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};
use nrf52840_dk as board;

#[cortex_m_rt::entry]
fn main() -> ! {
    let Some(mut b) = board::init() else { board::exit(false) };
    defmt::info!(
        "sprout on {=str}: {=usize} KiB of flash storage",
        board::NAME,
        b.storage.capacity() / 1024
    );
    let greeted = b.serial.write_all(b"sprout: hello from the nRF52840 DK\r\n").is_ok();
    let mut word = [0u8; 4];
    let erased = b.storage.erase(0, 4096).is_ok()
        && b.storage.read(0, &mut word).is_ok()
        && word == [0xFF; 4];
    defmt::info!("serial: {=bool}, storage: {=bool}", greeted, erased);
    board::exit(greeted && erased)
}
