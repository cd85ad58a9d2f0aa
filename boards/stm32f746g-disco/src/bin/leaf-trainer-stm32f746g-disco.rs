//! The leaf classifier's head fine-tuned on the STM32F746G-DISCO (`leaf_trainer::serve`):
//! the host talks over the ST-LINK's virtual COM port (`sprout device ... --port
//! /dev/ttyACM0`), checkpoints go to the flash's sectors 6 and 7 (one 256 KiB slot each),
//! and the log goes over RTT (`probe-rs run`).
#![no_std]
#![no_main]

use stm32f746g_disco as board;

leaf_trainer::board_main!(board, 256 * 1024);
