//! Helpers shared by the `sprout-data` integration tests: scratch folders that clean up after
//! themselves, and small generated data sets.

use std::path::{Path, PathBuf};

use sprout_data::{generate, Domain, LeafConfig, Summary};

/// A fresh, empty folder under the system temp dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sprout-data-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small 32x32 configuration.
pub fn config(classes: &[&str], per_class: usize, domain: Domain) -> LeafConfig {
    LeafConfig {
        classes: classes.iter().map(|c| c.to_string()).collect(),
        per_class,
        size: 32,
        seed: 42,
        domain,
        val_fraction: 0.2,
    }
}

pub fn generate_into(config: &LeafConfig, out: &Path) -> Summary {
    generate(config, out, |_, _| {}).expect("generation succeeds")
}
