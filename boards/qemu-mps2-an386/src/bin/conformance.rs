//! The Cortex-M backend's conformance checks on the emulated Cortex-M4: the DSP and the
//! scalar int8 kernels bit-exact against sprout-core's int8 reference kernels, the f32
//! kernels within `1e-5 + 1e-4·|want|` of the reference kernels (see
//! `sprout_cortex_m::conformance`). Exits 0 when all pass, 1 at the first mismatch.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, Ordering};

use qemu_mps2_an386 as board;
use sprout_cortex_m::conformance::{check_activations, check_f32, check_int8, Mismatch, Scratch};
use sprout_cortex_m::int8::{dsp, scalar};
use sprout_cortex_m::CortexM;

/// The checks' buffers (about 90 KiB), in `.bss` rather than on the stack.
fn scratch() -> &'static mut Scratch {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    static mut SCRATCH: Scratch = Scratch::new();
    if TAKEN.swap(true, Ordering::AcqRel) {
        board::exit(false);
    }
    let place = &raw mut SCRATCH;
    // SAFETY: `TAKEN` lets this line run once, so the reference is unique.
    unsafe { &mut *place }
}

fn report(what: &str, result: Result<usize, Mismatch>) -> bool {
    match result {
        Ok(cases) => defmt::info!("{=str}: {=usize} cases pass", what, cases),
        Err(m) => defmt::error!("{=str}: {}", what, defmt::Display2Format(&m)),
    }
    result.is_ok()
}

#[cortex_m_rt::entry]
fn main() -> ! {
    let s = scratch();
    let dsp_ok = report("int8 dsp", check_int8(dsp::KERNELS, s));
    let scalar_ok = report("int8 scalar", check_int8(scalar::KERNELS, s));
    let f32_ok = report("f32 fpu", check_f32(&mut CortexM, s));
    let activations_ok = report("f32 activations", check_activations(&mut CortexM, s));
    board::exit(dsp_ok && scalar_ok && f32_ok && activations_ok)
}
