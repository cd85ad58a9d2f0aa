//! Where everything lives in the data folder: `sprout.db`, `images/` and `models/` (files
//! named by the SHA-256 of their bytes), `jobs/<id>/` (a job's data snapshot, run folder and
//! output), `tmp/` (uploads being checked) and `sprout.lock` (held by the running service).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The paths of one data folder.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    /// The layout of `root`, creating its folders.
    pub fn create(root: &Path) -> anyhow::Result<Self> {
        let layout = Self { root: root.to_path_buf() };
        for dir in
            [layout.root.clone(), layout.images(), layout.models(), layout.jobs(), layout.tmp()]
        {
            fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(layout)
    }

    /// Makes this process the folder's one service: an exclusive lock on `sprout.lock`,
    /// held as long as the returned file is open, then `tmp/` emptied (what is there was
    /// being uploaded when the last service stopped). A second service is refused.
    pub fn claim(&self) -> anyhow::Result<fs::File> {
        use std::os::fd::AsRawFd;
        let path = self.root.join("sprout.lock");
        let lock =
            fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            anyhow::bail!("{} is in use by another sprout serve", self.root.display());
        }
        let tmp = self.tmp();
        fs::remove_dir_all(&tmp).with_context(|| format!("cannot empty {}", tmp.display()))?;
        fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok(lock)
    }

    pub fn database(&self) -> PathBuf {
        self.root.join("sprout.db")
    }

    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    pub fn models(&self) -> PathBuf {
        self.root.join("models")
    }

    pub fn jobs(&self) -> PathBuf {
        self.root.join("jobs")
    }

    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// An image by its hash and extension: `images/ab/abcd....png`.
    pub fn image(&self, hash: &str, ext: &str) -> PathBuf {
        self.images().join(&hash[..2]).join(format!("{hash}.{ext}"))
    }

    /// A model version's file by its hash: `models/abcd....sprout`.
    pub fn model(&self, hash: &str) -> PathBuf {
        self.models().join(format!("{hash}.sprout"))
    }

    /// A device bundle or device checkpoint by its hash: `models/abcd....bundle`,
    /// `models/abcd....ckpt` (`extension`).
    pub fn device_file(&self, hash: &str, extension: &str) -> PathBuf {
        self.models().join(format!("{hash}.{extension}"))
    }

    /// Job `id`'s folder: `data/` (its snapshot of the data set), `run/` (the run folder)
    /// and `model.sprout` (the trained model).
    pub fn job(&self, id: i64) -> PathBuf {
        self.jobs().join(id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn one_service_claims_a_folder_and_empties_its_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::create(dir.path()).unwrap();
        std::fs::write(layout.tmp().join("upload-left-over"), b"x").unwrap();
        let lock = layout.claim().unwrap();
        assert!(std::fs::read_dir(layout.tmp()).unwrap().next().is_none());
        let error = Layout::create(dir.path()).unwrap().claim().unwrap_err();
        assert!(error.to_string().contains("in use by another sprout serve"), "{error}");
        drop(lock);
        assert!(layout.claim().is_ok(), "the lock goes with its file");
    }
}
