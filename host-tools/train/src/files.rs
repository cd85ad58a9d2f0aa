//! Atomic file writes: a temporary file in the same folder, synced, then renamed over the
//! target, so a reader (or a crash) never sees a partial file.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::TrainError;

/// Writes `bytes` to `path` atomically (temporary file in the same folder + rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = folder.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result.map_err(TrainError::io(path))
}
