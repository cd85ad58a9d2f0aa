//! The leaf classifier's head fine-tuned on the nRF52840 DK (`leaf_trainer::serve`): the
//! host talks over the on-board debugger's virtual COM port (`sprout device ... --port
//! /dev/ttyACM0`), checkpoints go to the storage region through the NVMC (two 8 KiB slots
//! of two pages each), and the log goes over RTT (`probe-rs run`).
#![no_std]
#![no_main]

use nrf52840_dk as board;

leaf_trainer::board_main!(board, 8 * 1024);
