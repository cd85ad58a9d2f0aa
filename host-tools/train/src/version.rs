//! The version of sprout's tools: the crate version and the git commit they were built from
//! (set by `build.rs`), for `sprout --version` and the record of a training run.

/// `0.1.0 (abc123def456)`: the version and the commit (`-dirty` when the tree had changes,
/// `unknown` when built outside a git checkout).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SPROUT_GIT_COMMIT"), ")");

/// The git commit sprout was built from.
pub const GIT_COMMIT: &str = env!("SPROUT_GIT_COMMIT");

/// The version and the commit, as [`VERSION`].
pub fn version_string() -> String {
    VERSION.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_names_the_crate_version_and_a_commit() {
        let text = version_string();
        assert_eq!(text, format!("{} ({GIT_COMMIT})", env!("CARGO_PKG_VERSION")));
        let hash = GIT_COMMIT.strip_suffix("-dirty").unwrap_or(GIT_COMMIT);
        let is_hash = hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        assert!(is_hash || GIT_COMMIT == "unknown", "{GIT_COMMIT}");
    }
}
