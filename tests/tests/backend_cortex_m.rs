//! The Cortex-M backend's host build (its f32 kernels; the int8 ones are checked by the
//! crate's own conformance module, on the host and under QEMU) against the shared suite.

use sprout_cortex_m::CortexM;
use sprout_tests::conformance::check_backend;

#[test]
fn cortex_m_backend_matches_the_reference() {
    check_backend(|| CortexM, "cortex-m");
}
