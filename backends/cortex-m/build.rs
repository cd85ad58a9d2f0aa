//! Enables the DSP-SIMD int8 path (`cfg(dsp_simd)`) on targets whose cores all have the
//! DSP extension: Armv7E-M (`thumbv7em-*`: Cortex-M4, M7). Stable Rust does not expose
//! `target_feature = "dsp"` to `cfg`, so the target name decides.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(dsp_simd)");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.starts_with("thumbv7em") {
        println!("cargo::rustc-cfg=dsp_simd");
    }
}
