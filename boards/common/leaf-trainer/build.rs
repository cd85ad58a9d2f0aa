//! Copies the device bundle named by `SPROUT_LEAF_BUNDLE` to `OUT_DIR/leaf.bundle` for the
//! trainer to embed, padded with erased bytes to a fixed partition of [`BUNDLE_PARTITION`]
//! bytes (so the firmware's size does not move with the bundle's exact length; the trainer
//! finds the bundle's end in its frame header).

use std::path::PathBuf;

/// The flash the trainer reserves for its bundle.
const BUNDLE_PARTITION: usize = 160 * 1024;

/// The variable that names the bundle the leaf trainer embeds.
const BUNDLE_VAR: &str = "SPROUT_LEAF_BUNDLE";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-env-changed={BUNDLE_VAR}");
    let Some(bundle) = std::env::var_os(BUNDLE_VAR) else {
        panic!("the leaf trainer embeds a device bundle: set {BUNDLE_VAR} to its path");
    };
    let bundle = PathBuf::from(bundle);
    let mut bytes = std::fs::read(&bundle)
        .unwrap_or_else(|e| panic!("cannot read the bundle {}: {e}", bundle.display()));
    let len = bytes.len();
    assert!(
        len <= BUNDLE_PARTITION,
        "the bundle {} has {len} bytes; the firmware's partition holds {BUNDLE_PARTITION}",
        bundle.display()
    );
    bytes.resize(BUNDLE_PARTITION, 0xFF);
    std::fs::write(out.join("leaf.bundle"), bytes).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed={}", bundle.display());
}
