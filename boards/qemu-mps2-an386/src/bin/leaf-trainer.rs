//! The leaf classifier's head fine-tuned on the emulated Cortex-M4 (`leaf_trainer::serve`),
//! served over UART0 (`sprout device ... --port tcp:...` through QEMU's serial socket),
//! with checkpoints in the emulated flash (two 8 KiB slots); everything inside the 256 KiB
//! RAM region.
#![no_std]
#![no_main]

use qemu_mps2_an386 as board;

leaf_trainer::board_main!(board, 8 * 1024);
