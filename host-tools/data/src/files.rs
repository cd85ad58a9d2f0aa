//! Writing a file atomically and durably, the one way every sprout crate writes its
//! outputs: the bytes go to a temporary file beside the target (`.NAME.tmp-PID-N`), which is
//! synced, renamed over the target, and the folder synced, so neither a reader nor a power
//! cut sees a partial or lost file. Temporary files that killed sprout processes left behind
//! are removed on the first write of a process to their folder.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What sits between a temporary file's target name and the id of the process writing it.
const TEMP_MARK: &str = ".tmp-";

/// Writes `bytes` to `path`, whole or not at all, and durably: the file and its folder are
/// synced before this returns. Nothing is left behind on failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write(path, bytes, true)
}

/// [`write_atomic`] without the syncs, for files that can be made again (generated images,
/// cache entries): a reader still never sees a partial file, but a power cut may lose the
/// newest ones. About four times as fast for small files (300 64x64 PNGs: 0.63 s against
/// 2.4 s on an ext4 disk).
pub(crate) fn write_replaceable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write(path, bytes, false)
}

/// [`write_atomic`] of what `fill` writes (through a buffer), for outputs made a piece at a
/// time: whole or not at all, and durably. When `fill` fails, nothing is left behind and
/// its error is returned.
pub fn write_atomic_with<E: From<io::Error>>(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    write_with(path, true, fill)
}

fn write(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    write_with(path, durable, |file| file.write_all(bytes))
}

fn write_with<E: From<io::Error>>(
    path: &Path,
    durable: bool,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    let folder = folder_of(path);
    remove_stale_once(folder);
    let temp = temp_path(path)?;
    let result = (|| -> Result<(), E> {
        let mut file = io::BufWriter::new(fs::File::create(&temp)?);
        fill(&mut file)?;
        let file = file.into_inner().map_err(io::IntoInnerError::into_error)?;
        if durable {
            file.sync_all()?;
        }
        Ok(fs::rename(&temp, path)?)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result?;
    match durable {
        true => Ok(sync_folder(folder)?),
        false => Ok(()),
    }
}

/// Checks that a file can be created in `path`'s folder, by creating (and removing) a
/// temporary file there as [`write_atomic`] would.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let probe = temp_path(path)?;
    fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
    fs::remove_file(&probe)
}

/// The folder a file `path` lives in (`.` for a bare name).
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A temporary file name beside `path` that no other write uses.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the path names no file (it ends in ..)")
    })?;
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(folder_of(path).join(temp_name(name, std::process::id(), unique)))
}

/// `.NAME.tmp-PID-N`: hidden, named after its target and the process writing it.
fn temp_name(target: &OsStr, pid: u32, unique: u64) -> String {
    format!(".{}{TEMP_MARK}{pid}-{unique}", target.to_string_lossy())
}

/// The writing process's id when `name` is one of sprout's temporary file names
/// (`.NAME.tmp-PID` as older versions wrote, or `.NAME.tmp-PID-N`).
fn temp_owner(name: &str) -> Option<u32> {
    let (target, tail) = name.strip_prefix('.')?.rsplit_once(TEMP_MARK)?;
    if target.is_empty() {
        return None;
    }
    let (pid, unique) = tail.split_once('-').unwrap_or((tail, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(unique)).then(|| pid.parse().ok()).flatten()
}

/// Removes, once per folder and process, the temporary files of processes that no longer
/// run (a `kill -9` during a write). Failures are ignored: the write itself reports what
/// matters.
fn remove_stale_once(folder: &Path) {
    static CLEANED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let key = fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
    let first = CLEANED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(key);
    if first {
        remove_stale(folder);
    }
}

/// Removes the temporary files in `folder` whose writing process is gone; returns their
/// number.
fn remove_stale(folder: &Path) -> usize {
    let Ok(entries) = fs::read_dir(folder) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_owner) else { continue };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && !process_alive(pid) && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether process `pid` runs (or might: where this cannot be told, every process counts
/// as running, so nothing is removed).
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
        if pid <= 0 {
            return true;
        }
        // Signal 0 checks without sending: only "no such process" means gone.
        // SAFETY: `kill` with signal 0 has no effect beyond its return value.
        let result = unsafe { libc::kill(pid, 0) };
        result == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// Makes a rename in `folder` durable (on Unix; elsewhere a folder cannot be opened to sync
/// and the rename is as durable as the system makes it).
/// Syncs `folder`, so that a rename into it survives a power cut (a no-op off Unix).
pub fn sync_folder(folder: &Path) -> io::Result<()> {
    #[cfg(unix)]
    fs::File::open(folder)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = folder;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_are_told_from_other_files() {
        assert_eq!(temp_owner(".m.sprout.tmp-4242"), Some(4242));
        assert_eq!(temp_owner(".m.sprout.tmp-4242-7"), Some(4242));
        assert_eq!(temp_owner(&temp_name(OsStr::new("a.tmp-1"), 9, 3)), Some(9));
        for other in ["m.sprout.tmp-4242", ".tmp-4242", ".m.tmp-", ".m.tmp-12x", ".m.tmp-1-", ".m"]
        {
            assert_eq!(temp_owner(other), None, "{other}");
        }
    }

    /// A process id that is not running: a child that has exited and been reaped.
    #[cfg(unix)]
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
        pid
    }

    #[cfg(unix)]
    #[test]
    fn only_temporary_files_of_dead_processes_are_removed() {
        let folder = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let stale = [format!(".m.sprout.tmp-{dead}"), format!(".best.sprout.tmp-{dead}-3")];
        let kept = [
            format!(".m.sprout.tmp-{}-0", std::process::id()),
            format!("m.sprout.tmp-{dead}"),
            "notes.txt".to_string(),
        ];
        for name in stale.iter().chain(&kept) {
            fs::write(folder.path().join(name), b"x").unwrap();
        }
        // A folder named like a temporary file is not sprout's.
        fs::create_dir(folder.path().join(format!(".d.tmp-{dead}"))).unwrap();

        write_atomic(&folder.path().join("out.bin"), b"new").unwrap();
        let mut left: Vec<String> = fs::read_dir(folder.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected: Vec<String> = kept.to_vec();
        expected.extend([format!(".d.tmp-{dead}"), "out.bin".into()]);
        expected.sort();
        assert_eq!(left, expected);
        assert_eq!(fs::read(folder.path().join("out.bin")).unwrap(), b"new");
    }

    #[test]
    fn a_failed_write_leaves_nothing_and_keeps_the_old_file() {
        let folder = tempfile::tempdir().unwrap();
        let target = folder.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"x").unwrap();
        assert!(write_atomic(&target, b"bytes").is_err());
        let names: Vec<_> =
            fs::read_dir(folder.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["taken"]);
        assert!(write_atomic(&folder.path().join("missing/x"), b"bytes").is_err());
    }

    /// An output written in pieces: a failure part way leaves the old file as it was and
    /// no temporary behind, and passes the writer's own error on.
    #[test]
    fn a_piecewise_write_is_whole_or_not_at_all() {
        let folder = tempfile::tempdir().unwrap();
        let target = folder.path().join("out.bin");
        write_atomic(&target, b"old").unwrap();
        let failed = write_atomic_with(&target, |w| {
            w.write_all(&[7; 100_000])?;
            Err(io::Error::other("the third piece failed"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "the third piece failed");
        let names: Vec<_> =
            fs::read_dir(folder.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["out.bin"]);
        assert_eq!(fs::read(&target).unwrap(), b"old");
        write_atomic_with(&target, |w| {
            (0..3u8).try_for_each(|piece| w.write_all(&[piece; 70_000]))
        })
        .unwrap();
        let written = fs::read(&target).unwrap();
        assert_eq!((written.len(), written[0], written[209_999]), (210_000, 0, 2));
    }
}
