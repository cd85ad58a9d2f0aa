//! Counting executed instructions under `qemu-system-arm -icount shift=0`.
//!
//! With `-icount shift=0` QEMU advances its virtual clock by exactly 1 ns per executed
//! instruction, and SysTick (clocked from the 25 MHz core clock) counts down one tick per
//! 40 ns of that clock: one tick per 40 instructions. [`InstructionCounter::calibrate`]
//! measures the ratio instead of trusting it, by timing a loop of a known instruction
//! count, and the cost of a measurement with nothing in it is subtracted from every
//! measurement. Measurements must stay under 2^24 ticks (about 670 million instructions).
//!
//! Without `-icount` the same code measures QEMU's wall-clock-driven time, which means
//! nothing: only figures taken with `-icount shift=0` are instruction counts.

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;

/// SysTick's reload: the full 24-bit range.
const RELOAD: u32 = 0x00FF_FFFF;
/// Iterations of the calibration loop (two instructions each).
const CALIBRATION_LOOPS: u32 = 1_000_000;

/// Executed-instruction counts from SysTick ticks.
pub struct InstructionCounter {
    syst: SYST,
    instructions_per_tick: f32,
    empty_ticks: u32,
}

impl InstructionCounter {
    /// Starts SysTick from the core clock, free-running, no interrupt; uncalibrated.
    pub fn new(mut syst: SYST) -> Self {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(RELOAD);
        syst.clear_current();
        syst.disable_interrupt();
        syst.enable_counter();
        Self { syst, instructions_per_tick: 40.0, empty_ticks: 0 }
    }

    /// SysTick ticks that `f` takes.
    fn ticks(&mut self, f: impl FnOnce()) -> u32 {
        self.syst.clear_current();
        let start = SYST::get_current();
        f();
        let end = SYST::get_current();
        start.wrapping_sub(end) & RELOAD
    }

    /// Measures the empty measurement and the instructions per tick; returns the latter.
    pub fn calibrate(&mut self) -> f32 {
        self.empty_ticks = self.ticks(|| {});
        let looped = self.ticks(|| busy_loop(CALIBRATION_LOOPS));
        let ticks = looped.saturating_sub(self.empty_ticks).max(1);
        self.instructions_per_tick = (2 * CALIBRATION_LOOPS) as f32 / ticks as f32;
        self.instructions_per_tick
    }

    /// Instructions `f` executes, less the measurement's own.
    pub fn instructions(&mut self, f: impl FnOnce()) -> f32 {
        let ticks = self.ticks(f).saturating_sub(self.empty_ticks);
        ticks as f32 * self.instructions_per_tick
    }
}

/// SysTick's ticks since it last wrapped, counting up (it counts down from [`RELOAD`]).
pub fn ticks() -> u32 {
    RELOAD - SYST::get_current()
}

/// Exactly `2 · count` instructions (`subs` + `bne` per iteration) for `count ≥ 1`.
fn busy_loop(count: u32) {
    // SAFETY: register-only arithmetic and a local branch; no memory, stack or flags
    // visible to the caller.
    unsafe {
        core::arch::asm!(
            "2:",
            "subs {n}, {n}, #1",
            "bne 2b",
            n = inout(reg) count => _,
            options(nomem, nostack),
        );
    }
}
