//! Output files for every command: the check before any work that an output path can be
//! written and is none of the inputs, and atomic, durable writes
//! (`sprout_data::write_atomic`: temporary file, sync, rename, folder sync, stale temporaries
//! of killed runs removed), errors naming the path.

use std::fs;
use std::path::Path;

use crate::TrainError;

/// Writes `bytes` to `path`, whole or not at all, synced to disk with its folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    sprout_data::write_atomic(path, bytes).map_err(TrainError::io(path))
}

/// [`write_atomic`] of what `fill` writes a piece at a time (through a buffer): whole or
/// not at all; `fill`'s error is returned as it is.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    let io_error = TrainError::io(path);
    sprout_data::write_atomic_with(path, |w| fill(w).map_err(Wrapped::Train)).map_err(|e| match e {
        Wrapped::Train(e) => e,
        Wrapped::Io(e) => io_error(e),
    })
}

/// A write's error: `fill`'s own, or one of the file's.
enum Wrapped {
    Train(TrainError),
    Io(std::io::Error),
}

impl From<std::io::Error> for Wrapped {
    fn from(e: std::io::Error) -> Self {
        Wrapped::Io(e)
    }
}

/// Checks, before any work, that `output` can be written: it names a file (not a folder) in
/// a folder that exists and takes new files, and it is none of `inputs` (`(flag, path)`
/// pairs; the same file under another name, through a symlink or a hard link, counts).
pub fn check_output(output: &Path, inputs: &[(&str, &Path)]) -> Result<(), TrainError> {
    let refuse = |detail: String| TrainError::Output { path: output.to_path_buf(), detail };
    let folder = sprout_data::folder_of(output);
    match fs::metadata(folder) {
        Err(_) => return Err(refuse(format!("the folder {} does not exist", folder.display()))),
        Ok(meta) if !meta.is_dir() => {
            return Err(refuse(format!("{} is not a folder", folder.display())))
        }
        Ok(_) => {}
    }
    if output.is_dir() || output.file_name().is_none() {
        return Err(refuse("is a folder, not a file name".into()));
    }
    if let Some((flag, _)) = inputs.iter().find(|(_, input)| same_file(output, input)) {
        return Err(refuse(format!("is the {flag} input; the output must not overwrite it")));
    }
    sprout_data::check_writable(output)
        .map_err(|e| refuse(format!("cannot write in the folder {}: {e}", folder.display())))
}

/// Whether `a` and `b` are one existing file (the same device and inode on Unix).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (fs::metadata(a), fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!((fs::canonicalize(a), fs::canonicalize(b)), (Ok(a), Ok(b)) if a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_may_not_be_an_input_under_any_name() {
        let folder = tempfile::tempdir().unwrap();
        let model = folder.path().join("m.sprout");
        fs::write(&model, b"model").unwrap();
        let inputs = [("MODEL", model.as_path())];
        let dotted = folder.path().join(".").join("m.sprout");
        let linked = folder.path().join("hard.sprout");
        fs::hard_link(&model, &linked).unwrap();
        let mut names = vec![model.clone(), dotted, linked];
        #[cfg(unix)]
        {
            let symlink = folder.path().join("soft.sprout");
            std::os::unix::fs::symlink(&model, &symlink).unwrap();
            names.push(symlink);
        }
        for name in names {
            let error = check_output(&name, &inputs).unwrap_err();
            assert!(matches!(error, TrainError::Output { .. }), "{error}");
            let message = error.to_string();
            assert!(message.contains("is the MODEL input"), "{message}");
        }
        check_output(&folder.path().join("other.sprout"), &inputs).unwrap();
        assert_eq!(fs::read(&model).unwrap(), b"model");
    }

    #[test]
    fn a_bad_output_path_is_named_before_any_work() {
        let folder = tempfile::tempdir().unwrap();
        let file = folder.path().join("file");
        fs::write(&file, b"x").unwrap();
        let cases = [
            (folder.path().join("missing/m.sprout"), "missing does not exist"),
            (file.join("m.sprout"), "file is not a folder"),
            (folder.path().to_path_buf(), "is a folder, not a file name"),
        ];
        for (output, needle) in cases {
            let message = check_output(&output, &[]).unwrap_err().to_string();
            assert!(message.contains(needle), "{message}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_that_takes_no_new_files_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let folder = tempfile::tempdir().unwrap();
        let locked = folder.path().join("locked");
        fs::create_dir(&locked).unwrap();
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
        // Root writes anywhere: then there is nothing to refuse.
        let writable = fs::write(locked.join("probe"), b"").is_ok();
        let result = check_output(&locked.join("m.sprout"), &[]);
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
        if writable {
            assert!(result.is_ok());
        } else {
            let message = result.unwrap_err().to_string();
            assert!(message.contains("cannot write in the folder"), "{message}");
        }
        assert!(fs::read_dir(&locked).unwrap().all(|e| e.unwrap().file_name() == "probe"));
    }
}
