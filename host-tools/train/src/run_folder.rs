//! Where a run writes: a fresh folder per run (`runs/<name>`, then `<name>-2`, `<name>-3`,
//! ...), an exact `--out-dir` that must be new or empty, or the folder of the checkpoint a
//! run resumes.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::TrainError;

fn refuse(detail: String) -> TrainError {
    TrainError::Mismatch(detail)
}

/// The run folder, created (or, resuming, found): the folder of `resume` when given (with
/// `out_dir`, which must then be that folder), else `out_dir` exactly (new or empty), else
/// the first free one of `base`, `base-2`, `base-3`, ...
pub fn run_folder(
    base: &Path,
    out_dir: Option<&Path>,
    resume: Option<&Path>,
) -> Result<PathBuf, TrainError> {
    if let Some(checkpoint) = resume {
        let folder = match checkpoint.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let canonical = |p: &Path| fs::canonicalize(p).map_err(TrainError::io(p));
        let own = canonical(&folder)?;
        if let Some(dir) = out_dir {
            if !dir.exists() || canonical(dir)? != own {
                return Err(refuse(format!(
                    "--out-dir {}: a resumed run continues in the folder of its checkpoint, {}",
                    dir.display(),
                    folder.display()
                )));
            }
        }
        return Ok(folder);
    }
    if let Some(dir) = out_dir {
        if dir.exists() {
            let mut entries = fs::read_dir(dir).map_err(TrainError::io(dir))?;
            if entries.next().is_some() {
                return Err(refuse(format!(
                    "--out-dir {}: not empty (another run's files?); give a new folder, or \
                     --resume a checkpoint in it",
                    dir.display()
                )));
            }
        } else {
            fs::create_dir_all(dir).map_err(TrainError::io(dir))?;
        }
        return Ok(dir.to_path_buf());
    }
    if let Some(parent) = base.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(TrainError::io(parent))?;
    }
    let name = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for n in 1.. {
        let candidate =
            if n == 1 { base.to_path_buf() } else { base.with_file_name(format!("{name}-{n}")) };
        // `create_dir` fails on an existing folder: two runs starting together get two.
        match fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(TrainError::io(&candidate)(e)),
        }
    }
    unreachable!("some run folder name is free")
}
