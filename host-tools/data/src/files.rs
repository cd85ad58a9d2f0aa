//! Writing a file atomically: the bytes go to a uniquely named temporary file beside it,
//! which is then renamed, so a reader never sees a truncated file.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::DataError;

/// Writes `bytes` to `path` through a temporary file in the same folder.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temporary =
        PathBuf::from(format!("{}.partial-{}-{unique}", path.display(), std::process::id()));
    let written = fs::write(&temporary, bytes).and_then(|()| fs::rename(&temporary, path));
    if let Err(source) = written {
        let _ = fs::remove_file(&temporary);
        return Err(DataError::Io { path: path.to_path_buf(), source });
    }
    Ok(())
}
