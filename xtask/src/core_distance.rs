//! How far apart two of the cores a process may use are: the time a cache line takes to go
//! from one core to the other and back, two threads pinned one to each core taking turns
//! to write it. Where two cores share a last-level cache this is some tens of
//! nanoseconds; on a virtual machine whose host places the two virtual CPUs far apart it
//! is several times that, and what one thread of a split writes and the other reads next
//! costs as much more: `cargo xtask bench cpu` prints it beside sprout's speedup from
//! threads, which depends on it.

use anyhow::{bail, Context, Result};

/// The CPU number of the `k`-th core this process may use.
#[cfg(target_os = "linux")]
pub fn allowed_cpu(k: usize) -> Result<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data (zero is an empty set); sched_getaffinity fills the
    // local it is given, and CPU_ISSET indexes within CPU_SETSIZE.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return Err(std::io::Error::last_os_error()).context("reading this process's cores");
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &allowed))
            .nth(k)
            .with_context(|| format!("this process may use fewer than {} cores", k + 1))
    }
}

/// The set holding CPU `cpu` alone.
#[cfg(target_os = "linux")]
pub fn only(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: as in `allowed_cpu`; `cpu` came from CPU_ISSET's range.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        one
    }
}

/// Pins the calling thread to CPU `cpu` (for good: only threads that end soon after).
#[cfg(target_os = "linux")]
fn pin_this_thread(cpu: usize) -> Result<()> {
    let set = only(cpu);
    // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is the calling thread.
    let status = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if status != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("pinning to CPU {cpu}"));
    }
    Ok(())
}

/// Nanoseconds a cache line takes from the `a`-th allowed core to the `b`-th and back, the
/// mean of `trips` round trips.
#[cfg(target_os = "linux")]
pub fn round_trip_ns(a: usize, b: usize, trips: u64) -> Result<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (cpu_a, cpu_b) = (allowed_cpu(a)?, allowed_cpu(b)?);
    if cpu_a == cpu_b {
        bail!("a round trip needs two cores, not CPU {cpu_a} twice");
    }
    // Even: the first thread's turn; odd: the second's.
    let line = AtomicU64::new(0);
    // A thread that cannot pin itself still takes its turns (the other would spin for
    // them forever) and reports the failure after.
    let take_turns = |cpu: usize, parity: u64| -> Result<std::time::Duration> {
        let pinned = pin_this_thread(cpu);
        let start = std::time::Instant::now();
        for turn in 0..trips {
            let mine = 2 * turn + parity;
            while line.load(Ordering::Acquire) != mine {
                std::hint::spin_loop();
            }
            line.store(mine + 1, Ordering::Release);
        }
        pinned.map(|()| start.elapsed())
    };
    // Two threads of their own: pinning the calling thread would leave it, and every
    // process it starts later, on one core.
    let elapsed = std::thread::scope(|scope| {
        let first = scope.spawn(|| take_turns(cpu_a, 0));
        let second = scope.spawn(|| take_turns(cpu_b, 1));
        let joined = |t: std::thread::ScopedJoinHandle<'_, Result<std::time::Duration>>| {
            t.join().unwrap_or_else(|_| bail!("a thread of the round trip panicked"))
        };
        let (first, second) = (joined(first), joined(second));
        second.and(first)
    })?;
    Ok(elapsed.as_secs_f64() * 1e9 / trips.max(1) as f64)
}

#[cfg(not(target_os = "linux"))]
pub fn round_trip_ns(_a: usize, _b: usize, _trips: u64) -> Result<f64> {
    bail!("the round trip between cores pins threads with sched_setaffinity, on Linux only")
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_time_and_needs_two_cores() {
        if allowed_cpu(1).is_err() {
            assert!(round_trip_ns(0, 1, 1000).is_err());
            return;
        }
        let ns = round_trip_ns(0, 1, 1000).unwrap();
        assert!(ns > 1.0 && ns < 1e6, "{ns} ns");
        assert!(round_trip_ns(0, 0, 1000).is_err());
        // The calling thread may still use every core: a second measurement finds both.
        assert!(allowed_cpu(1).is_ok() && round_trip_ns(0, 1, 1000).is_ok());
    }
}
