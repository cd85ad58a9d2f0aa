//! The leaf classifier's head fine-tuned on the STM32F746G-DISCO (`leaf_trainer::serve`):
//! the host talks over the ST-LINK's virtual COM port (`sprout device ... --port
//! /dev/ttyACM0`), checkpoints go to the flash's sectors 6 and 7, and the log goes over RTT
//! (`probe-rs run`).
#![no_std]
#![no_main]

use stm32f746g_disco as board;

/// One checkpoint slot per 256 KiB sector.
const SLOT_BYTES: u32 = 256 * 1024;

#[cortex_m_rt::entry]
fn main() -> ! {
    leaf_trainer::stack::paint();
    let Some(b) = board::init() else { board::exit(false) };
    leaf_trainer::serve(leaf_trainer::Board {
        name: board::NAME,
        serial: b.serial,
        flash: b.storage,
        slot_bytes: SLOT_BYTES,
        exit: board::exit,
    })
}
