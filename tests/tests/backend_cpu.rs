//! The conformance suite on `sprout-cpu`, threaded and single-threaded, within the suite's
//! documented tolerance of the reference kernels.

use sprout_cpu::Cpu;
use sprout_tests::conformance::check_backend;

#[test]
fn cpu_with_all_threads_conforms() {
    check_backend(Cpu::new, "cpu");
}

#[test]
fn cpu_with_two_threads_conforms() {
    // Two threads split work even on a one-core machine, so the threaded paths run.
    check_backend(|| Cpu::with_threads(2), "cpu, 2 threads");
}

#[test]
fn cpu_with_one_thread_conforms() {
    check_backend(|| Cpu::with_threads(1), "cpu, 1 thread");
}
