//! The leaf classifier's head fine-tuned on the emulated Cortex-M4 (`leaf_trainer::serve`),
//! served over UART0 (`sprout device ... --port tcp:...` through QEMU's serial socket),
//! with checkpoints in the emulated flash; everything inside the 256 KiB RAM region.
#![no_std]
#![no_main]

use qemu_mps2_an386 as board;

/// Checkpoint slots in the emulated flash: two of 8 KiB from its start.
const SLOT_BYTES: u32 = 8 * 1024;

#[cortex_m_rt::entry]
fn main() -> ! {
    leaf_trainer::stack::paint();
    let Some(b) = board::init() else { board::exit(false) };
    leaf_trainer::serve(leaf_trainer::Board {
        name: board::NAME,
        serial: b.uart,
        flash: b.storage,
        slot_bytes: SLOT_BYTES,
        exit: board::exit,
    })
}
