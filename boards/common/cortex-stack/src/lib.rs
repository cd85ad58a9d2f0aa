//! The stack of a cortex-m-rt firmware, which runs on the main stack from the top of RAM
//! down towards the statics (`_stack_end`):
//!
//! - [`guard`] makes 4 KiB just above the statics a no-access MPU region, so an overflow
//!   raises a MemManage fault instead of silently overwriting the statics (the training
//!   arena, the cached samples): a stack frame larger than the guard could still jump over
//!   it, so the firmware keeps its frames smaller (its big buffers are statics);
//!   [`on_overflow!`] defines the fault's handler, which moves the stack pointer back to
//!   the top of RAM (the overflowed stack cannot take a single push) and calls the
//!   firmware's function that reports the overflow;
//! - [`paint`] fills the free stack above the guard with a pattern at start-up and [`peak`]
//!   finds how far down the stack has ever reached by the first word that lost it: the
//!   whole firmware (statics, arena and the deepest stack) inside the RAM region, with the
//!   headroom left.
#![no_std]

use core::ptr::{read_volatile, write_volatile};

use cortex_m::peripheral::{MPU, SCB};

/// The pattern painted into free stack memory.
const PAINT: u32 = 0xA5C3_5A3C;
/// Bytes above the stack pointer at paint time left untouched (the painting frame).
const LIVE_FRAME: usize = 64;
/// The guard region's size, at an address it divides (the MPU's rule).
const GUARD_BYTES: usize = 4096;
/// Bytes left free between the statics and the guard: a stack pointer that jumped inside
/// the guard makes the fault's exception entry push its frame (up to 104 bytes with the
/// FPU's registers) below that pointer, possibly below the guard.
const LANDING_BYTES: usize = 128;
/// The MPU region the guard takes: the highest-numbered, which wins where regions overlap.
const GUARD_REGION: u32 = 7;
/// MPU_RASR: no access (AP = 0), never executed (XN), 2^(SIZE + 1) bytes, enabled.
const RASR_XN: u32 = 1 << 28;
const RASR_SIZE_4K: u32 = 11 << 1;
const RASR_ENABLE: u32 = 1;
/// MPU_CTRL: enabled, with the default memory map for privileged code everywhere else.
const CTRL_ENABLE: u32 = 1;
const CTRL_PRIVDEFENA: u32 = 1 << 2;
/// SCB_SHCSR: MemManage faults are taken as MemManage (not escalated to HardFault).
const SHCSR_MEMFAULTENA: u32 = 1 << 16;
/// SCB_CFSR's MemManage bits: exception entry's push faulted; MMFAR holds the address.
const MMFSR_MSTKERR: u32 = 1 << 4;
const MMFSR_MMARVALID: u32 = 1 << 7;

extern "C" {
    /// Lowest address the stack may grow to: the end of the statics (cortex-m-rt).
    static _stack_end: u32;
    /// The initial stack pointer: the top of RAM (cortex-m-rt).
    pub static _stack_start: u32;
}

/// The guard: (lowest address, highest address + 1), above the statics.
fn guard_region() -> (usize, usize) {
    // Only the symbol's address is taken, never its value.
    let start = (&raw const _stack_end as usize + LANDING_BYTES).next_multiple_of(GUARD_BYTES);
    (start, start + GUARD_BYTES)
}

/// The stack the firmware may use, above the guard: (lowest address, highest address + 1).
fn region() -> (usize, usize) {
    (guard_region().1, &raw const _stack_start as usize)
}

/// Paints the unused part of the stack region. Call once, first thing in `main`.
pub fn paint() {
    let (bottom, _) = region();
    let below_frame = (cortex_m::register::msp::read() as usize - LIVE_FRAME) & !3;
    for address in (bottom..below_frame).step_by(4) {
        // SAFETY: `bottom..below_frame` lies between the guard and the live stack frames:
        // no Rust object lives there and no interrupt is enabled yet that could push a
        // frame into it.
        unsafe { write_volatile(address as *mut u32, PAINT) };
    }
}

/// Turns on the guard below the stack (and MemManage faults, which [`on_overflow!`]'s
/// handler takes). Call once at start-up, before anything configures the MPU.
pub fn guard() {
    let (start, _) = guard_region();
    // SAFETY: start-up code, single-threaded; nothing else in the firmware uses the MPU,
    // and the region covers no Rust object (it lies between the statics and the stack).
    unsafe {
        let mpu = &*MPU::PTR;
        mpu.rnr.write(GUARD_REGION);
        mpu.rbar.write(start as u32);
        mpu.rasr.write(RASR_XN | RASR_SIZE_4K | RASR_ENABLE);
        mpu.ctrl.write(CTRL_ENABLE | CTRL_PRIVDEFENA);
        (*SCB::PTR).shcsr.modify(|value| value | SHCSR_MEMFAULTENA);
    }
    cortex_m::asm::dsb();
    cortex_m::asm::isb();
}

/// Whether the MemManage fault being handled is the stack's overflow: an access inside the
/// guard, or exception entry failing to push onto the stack.
pub fn overflowed() -> bool {
    // SAFETY: reads of fault status registers.
    let (status, address) = unsafe { ((*SCB::PTR).cfsr.read(), (*SCB::PTR).mmfar.read()) };
    let (start, end) = guard_region();
    let in_guard = status & MMFSR_MMARVALID != 0 && (start..end).contains(&(address as usize));
    in_guard || status & MMFSR_MSTKERR != 0
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
        // SAFETY: word-aligned reads inside the RAM region, above the guard.
        .take_while(|&address| unsafe { read_volatile(address as *const u32) } == PAINT)
        .count();
    top - bottom - 4 * untouched
}

/// Defines the MemManage handler for [`guard`]: it resets the main stack pointer to the top
/// of RAM, without touching the overflowed stack, and jumps to `$report`, an
/// `extern "C" fn() -> !` that logs the overflow and ends the run. Any other MemManage
/// fault (the firmware configures no other region) ends the same way.
#[macro_export]
macro_rules! on_overflow {
    ($report:path) => {
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        unsafe extern "C" fn MemoryManagement() {
            core::arch::naked_asm!(
                "ldr r0, ={top}",
                "msr msp, r0",
                "b {report}",
                top = sym $crate::_stack_start,
                report = sym $report,
            )
        }
    };
}
