//! Content-addressed files: bytes are written to a uniquely named file in `tmp/`, synced,
//! checked, then renamed to their final name (the SHA-256 of the bytes), so a file under
//! `images/` or `models/` is always whole and two uploads of the same bytes never collide.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes` in lowercase hex.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A file in `tmp/` that is removed when dropped unless [`Staged::place`]d.
pub struct Staged {
    pub path: PathBuf,
}

impl Staged {
    /// Writes `bytes` to a new file in `tmp` (named `prefix-RANDOM`) and syncs it.
    pub fn write(tmp: &Path, prefix: &str, bytes: &[u8]) -> std::io::Result<Self> {
        let mut random = [0u8; 12];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let staged = Self { path: tmp.join(format!("{prefix}-{}", hex::encode(random))) };
        let mut file = fs::File::create_new(&staged.path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Moves the file to `target` (creating its folder) and syncs that folder, as
    /// `sprout_data::write_atomic` does; when `target` exists already (the same bytes, since
    /// names are hashes) the staged copy is dropped.
    pub fn place(self, target: &Path) -> std::io::Result<()> {
        let folder = sprout_data::folder_of(target);
        fs::create_dir_all(folder)?;
        if !target.exists() {
            fs::rename(&self.path, target)?;
            sprout_data::sync_folder(folder)?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::{sha256, Staged};

    #[test]
    fn staged_files_are_placed_whole_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("ab").join(sha256(b"hello"));
        Staged::write(dir.path(), "up", b"hello").unwrap().place(&target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
        // The same bytes again: the target stays, the staged copy goes.
        Staged::write(dir.path(), "up", b"hello").unwrap().place(&target).unwrap();
        let dropped = Staged::write(dir.path(), "up", b"other").unwrap();
        let path = dropped.path.clone();
        drop(dropped);
        assert!(!path.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the placed folder remains: {left:?}");
        assert_eq!(
            sha256(b"hello"),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }
}
