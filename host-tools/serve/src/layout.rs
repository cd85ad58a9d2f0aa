//! Where everything lives in the data folder: `sprout.db`, `images/` and `models/` (files
//! named by the SHA-256 of their bytes), `jobs/<id>/` (a job's data snapshot, run folder and
//! output) and `tmp/` (uploads being checked).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The paths of one data folder.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    /// The layout of `root`, creating its folders; `tmp/` is emptied (what is there was
    /// being uploaded when the service stopped).
    pub fn create(root: &Path) -> anyhow::Result<Self> {
        let layout = Self { root: root.to_path_buf() };
        let tmp = layout.tmp();
        if tmp.exists() {
            fs::remove_dir_all(&tmp).with_context(|| format!("cannot empty {}", tmp.display()))?;
        }
        for dir in [layout.root.clone(), layout.images(), layout.models(), layout.jobs(), tmp] {
            fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(layout)
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

    /// Job `id`'s folder: `data/` (its snapshot of the data set), `run/` (the run folder)
    /// and `model.sprout` (the trained model).
    pub fn job(&self, id: i64) -> PathBuf {
        self.jobs().join(id.to_string())
    }
}
