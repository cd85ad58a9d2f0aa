//! Puts this board's `memory.x` and `device.x` on the linker's search path for
//! cortex-m-rt's `link.x`.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for script in ["memory.x", "device.x"] {
        std::fs::copy(script, out.join(script)).expect("linker scripts are readable");
        println!("cargo:rerun-if-changed={script}");
    }
    println!("cargo:rustc-link-search={}", out.display());
}
