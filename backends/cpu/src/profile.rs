//! A per-kernel wall-clock profile of plan runs on this backend, gathered through the
//! executor's [`StepObserver`]: which kernels a training step's time goes to. CPU kernels
//! finish before they return, so the time between a call's start and end is its own.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use sprout_core::kernel::KernelCall;
use sprout_core::StepObserver;

/// Calls and time of every kernel kind seen, summed over all the runs observed.
#[derive(Clone, Debug, Default)]
pub struct KernelProfile {
    started: Option<Instant>,
    kinds: BTreeMap<&'static str, KernelTime>,
}

/// One kernel kind's share of a profile.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelTime {
    pub calls: u64,
    pub time: Duration,
}

impl KernelProfile {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every kernel kind seen with its calls and time, the most time first.
    pub fn kinds(&self) -> Vec<(&'static str, KernelTime)> {
        let mut kinds: Vec<_> = self.kinds.iter().map(|(k, t)| (*k, *t)).collect();
        kinds.sort_by(|a, b| b.1.time.cmp(&a.1.time).then(a.0.cmp(b.0)));
        kinds
    }

    /// The time of every observed call together.
    pub fn total(&self) -> Duration {
        self.kinds.values().map(|k| k.time).sum()
    }
}

impl StepObserver for KernelProfile {
    fn before(&mut self, _: usize, _: &KernelCall) {
        self.started = Some(Instant::now());
    }

    fn after(&mut self, _: usize, kernel: &KernelCall) {
        let Some(started) = self.started.take() else { return };
        let kind = self.kinds.entry(kernel.name()).or_default();
        kind.calls += 1;
        kind.time += started.elapsed();
    }
}

/// A table: kernel, calls, milliseconds, share of the total.
impl fmt::Display for KernelProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALL: &str = "all kernels";
        let total = self.total().as_secs_f64();
        let width = self.kinds.keys().map(|k| k.len()).chain([ALL.len()]).max().unwrap_or(0);
        writeln!(f, "{:<width$} {:>8} {:>11} {:>6}", "kernel", "calls", "ms", "share")?;
        for (kind, t) in self.kinds() {
            let (ms, share) = (t.time.as_secs_f64() * 1e3, t.time.as_secs_f64() / total * 100.0);
            writeln!(f, "{kind:<width$} {:>8} {ms:>11.2} {share:>5.1}%", t.calls)?;
        }
        write!(f, "{ALL:<width$} {:>8} {:>11.2}", "", total * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_and_timed_per_kind() {
        let mut profile = KernelProfile::new();
        let relu = KernelCall::Relu(4);
        for index in 0..3 {
            profile.before(index, &relu);
            std::thread::sleep(Duration::from_millis(2));
            profile.after(index, &relu);
        }
        let kinds = profile.kinds();
        assert_eq!(kinds.len(), 1);
        assert_eq!((kinds[0].0, kinds[0].1.calls), ("relu", 3));
        assert!(kinds[0].1.time >= Duration::from_millis(6));
        assert_eq!(profile.total(), kinds[0].1.time);
        let table = profile.to_string();
        assert!(table.lines().nth(1).is_some_and(|l| l.starts_with("relu") && l.contains(" 3 ")));
    }

    #[test]
    fn a_call_that_failed_is_not_counted() {
        let mut profile = KernelProfile::new();
        let relu = KernelCall::Relu(4);
        profile.before(0, &relu);
        profile.before(1, &relu);
        profile.after(1, &relu);
        assert_eq!(profile.kinds()[0].1.calls, 1);
    }
}
