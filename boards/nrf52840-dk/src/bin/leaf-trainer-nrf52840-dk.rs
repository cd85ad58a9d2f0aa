//! The leaf classifier's head fine-tuned on the nRF52840 DK (`leaf_trainer::serve`): the
//! host talks over the on-board debugger's virtual COM port (`sprout device ... --port
//! /dev/ttyACM0`), checkpoints go to the 64 KiB storage region through the NVMC, and the log
//! goes over RTT (`probe-rs run`).
#![no_std]
#![no_main]

use nrf52840_dk as board;

/// Checkpoint slots: two of 8 KiB (two 4 KiB pages each) from the storage region's start.
const SLOT_BYTES: u32 = 8 * 1024;

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
