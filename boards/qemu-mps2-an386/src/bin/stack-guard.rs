//! Checks the stack guard under QEMU (`cortex_stack::guard`): recurses until the stack
//! overflows, which must raise the guard's MemManage fault, attributed to the stack, before
//! anything below it is touched. Exits 0 only from that fault's handler.
#![no_std]
#![no_main]

use core::hint::black_box;

use qemu_mps2_an386 as board;

cortex_stack::on_overflow!(overflowed);

extern "C" fn overflowed() -> ! {
    let caught = cortex_stack::overflowed();
    defmt::info!("stack-guard: MemManage fault, attributed to the stack: {=bool}", caught);
    board::exit(caught)
}

#[cortex_m_rt::entry]
fn main() -> ! {
    cortex_stack::paint();
    cortex_stack::guard();
    defmt::info!("stack-guard: recursing through {=usize} bytes of stack", cortex_stack::size());
    let depth = deeper(0);
    defmt::error!("stack-guard: {=u32} frames deep and no fault", depth);
    board::exit(false)
}

/// One 256-byte frame per call, forever (`black_box` keeps the frames and the recursion).
#[inline(never)]
fn deeper(depth: u32) -> u32 {
    let mut frame = [0u8; 256];
    frame[0] = depth as u8;
    black_box(&mut frame);
    if black_box(true) {
        deeper(depth + 1).wrapping_add(u32::from(frame[1]))
    } else {
        depth
    }
}
