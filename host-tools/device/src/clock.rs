//! `StdClock`: the link's [`Clock`] from `std::time::Instant`.

use std::time::Instant;

use sprout_core::link::Clock;

/// Milliseconds since the clock was made; copies count from the same moment.
#[derive(Clone, Copy, Debug)]
pub struct StdClock(Instant);

impl Default for StdClock {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl Clock for StdClock {
    fn now_ms(&mut self) -> u32 {
        // Truncation wraps, as `Clock` allows.
        self.0.elapsed().as_millis() as u32
    }
}
