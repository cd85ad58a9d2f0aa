//! The stack's high-water mark: [`paint`] fills the free RAM between the statics
//! (`_stack_end`) and the stack pointer with a pattern at start-up, and [`peak`] finds how
//! far down the stack has ever reached by the first word that lost it. This shows the
//! whole firmware (statics, arena and the deepest stack) inside the RAM region, with the
//! headroom left.

use core::ptr::{read_volatile, write_volatile};

/// The pattern painted into free stack memory.
const PAINT: u32 = 0xA5C3_5A3C;
/// Bytes above the stack pointer at paint time left untouched (the painting frame).
const LIVE_FRAME: usize = 64;

extern "C" {
    /// Lowest address the stack may grow to: the end of the statics (cortex-m-rt).
    static _stack_end: u32;
    /// The initial stack pointer: the top of RAM (cortex-m-rt).
    static _stack_start: u32;
}

/// The stack region: (lowest address, highest address + 1).
fn region() -> (usize, usize) {
    // Only the symbols' addresses are taken, never their values.
    (&raw const _stack_end as usize, &raw const _stack_start as usize)
}

/// Paints the unused part of the stack region. Call once, first thing in `main`.
pub fn paint() {
    let (bottom, _) = region();
    let below_frame = (cortex_m::register::msp::read() as usize - LIVE_FRAME) & !3;
    for address in (bottom..below_frame).step_by(4) {
        // SAFETY: `bottom..below_frame` lies between the last static and the live stack
        // frames: no Rust object lives there and no interrupt is enabled yet that could
        // push a frame into it.
        unsafe { write_volatile(address as *mut u32, PAINT) };
    }
}

/// The stack region's size in bytes.
pub fn size() -> usize {
    let (bottom, top) = region();
    top - bottom
}

/// The most stack ever used since [`paint`], in bytes.
pub fn peak() -> usize {
    let (bottom, top) = region();
    let untouched = (bottom..top)
        .step_by(4)
        // SAFETY: word-aligned reads inside the RAM region.
        .take_while(|&address| unsafe { read_volatile(address as *const u32) } == PAINT)
        .count();
    top - bottom - 4 * untouched
}
