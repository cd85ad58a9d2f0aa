//! The resource limits every decoder and loader checks declared sizes against before it
//! allocates (model and plan tensors, decoded images, archive members, file reads): one
//! policy, with defaults a user raises with `--max-memory` or `SPROUT_MAX_MEMORY`.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use crate::error::DataError;

/// The environment variable that sets [`Limits::max_memory`] (e.g. `8G`).
pub const MAX_MEMORY_ENV: &str = "SPROUT_MAX_MEMORY";

/// An archive member smaller than this inflates freely: the ratio limit is for bombs.
const INFLATION_FLOOR: u64 = 1 << 20;

/// What one model, plan, data file or image may declare, checked before allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the tensors of one model or plan, the arrays of one data file, or one decoded
    /// image (with its expansion to RGB) may take; also the size of a model or tensor file.
    pub max_memory: u64,
    /// Pixels (width times height) an image header may declare.
    pub max_pixels: u64,
    /// Bytes an image file may hold.
    pub max_file_bytes: u64,
    /// How many times its stored size an archive member (`.npz`) above 1 MiB may inflate to.
    pub max_inflation: u64,
}

impl Default for Limits {
    /// 2 GiB of memory, 100 megapixels, 256 MiB image files, inflation of 100 times.
    fn default() -> Self {
        Self {
            max_memory: 2 << 30,
            max_pixels: 100_000_000,
            max_file_bytes: 256 << 20,
            max_inflation: 100,
        }
    }
}

static CURRENT: OnceLock<Limits> = OnceLock::new();

impl Limits {
    /// The default limits with `max_memory` from [`MAX_MEMORY_ENV`] when it is set.
    pub fn from_env() -> Result<Self, DataError> {
        let mut limits = Limits::default();
        if let Ok(value) = std::env::var(MAX_MEMORY_ENV) {
            limits.max_memory = parse_size(&value).map_err(|detail| DataError::BadLimit {
                variable: MAX_MEMORY_ENV,
                value: value.clone(),
                detail,
            })?;
        }
        Ok(limits)
    }

    /// Makes `self` the limits of this process (what [`Limits::current`] returns); the
    /// first call wins, as a program sets them once at start.
    pub fn install(self) {
        let _ = CURRENT.set(self);
    }

    /// The limits of this process: those installed, else the defaults.
    pub fn current() -> Limits {
        CURRENT.get().copied().unwrap_or_default()
    }

    /// Refuses `bytes` of memory for `what` above [`Limits::max_memory`].
    pub fn check_memory(&self, what: &str, bytes: u64) -> Result<(), DataError> {
        if bytes > self.max_memory {
            return Err(DataError::OverLimit { what: what.into(), bytes, limit: self.max_memory });
        }
        Ok(())
    }

    /// Refuses an archive member of `stored` bytes that declares `inflated` bytes: above
    /// the memory limit, or above 1 MiB and [`Limits::max_inflation`] times `stored`.
    pub fn check_inflation(&self, what: &str, stored: u64, inflated: u64) -> Result<(), DataError> {
        self.check_memory(what, inflated)?;
        let allowed = stored.saturating_mul(self.max_inflation).max(INFLATION_FLOOR);
        if inflated > allowed {
            return Err(DataError::Inflation {
                what: what.into(),
                stored,
                inflated,
                ratio: self.max_inflation,
            });
        }
        Ok(())
    }
}

/// A size in bytes from text: a whole number with an optional `K`, `M`, `G` or `T` suffix
/// (powers of 1024, `B` or `iB` after it allowed), e.g. `512M`, `8GiB`, `1048576`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let not_a_size = || format!("'{text}' is not a size such as 512M or 8G");
    let t = text.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(not_a_size()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let number: u64 = digits.trim().parse().map_err(|_| not_a_size())?;
    let bytes = number.checked_mul(1 << shift).ok_or_else(|| format!("'{text}' is too large"))?;
    if bytes == 0 {
        return Err("a limit of 0 bytes leaves nothing to load".into());
    }
    Ok(bytes)
}

/// The bytes of `path`, which must be a regular file (a FIFO or a device is refused before it
/// is opened) of at most `max` bytes; at most `max + 1` bytes are ever read.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, DataError> {
    let meta = regular_file(path)?;
    let too_large = |bytes| DataError::FileTooLarge { path: path.to_path_buf(), bytes, limit: max };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    let file = fs::File::open(path).map_err(DataError::io(path))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(DataError::io(path))?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The metadata of `path` (links followed) when it is a regular file; a FIFO, a device, a
/// socket or a folder is refused before anything opens it (opening a FIFO blocks).
pub fn regular_file(path: &Path) -> Result<fs::Metadata, DataError> {
    let meta = fs::metadata(path).map_err(DataError::io(path))?;
    if !meta.is_file() {
        return Err(DataError::NotAFile { path: path.to_path_buf(), kind: kind(&meta) });
    }
    Ok(meta)
}

/// What a path that is not a regular file is, for the error.
fn kind(meta: &fs::Metadata) -> String {
    let file_type = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let special = [
            (file_type.is_fifo(), "a FIFO"),
            (file_type.is_char_device(), "a character device"),
            (file_type.is_block_device(), "a block device"),
            (file_type.is_socket(), "a socket"),
        ];
        if let Some((_, name)) = special.iter().find(|(is, _)| *is) {
            return (*name).into();
        }
    }
    if file_type.is_dir() { "a folder" } else { "a special file" }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("64kB"), Ok(64 << 10));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2X").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").unwrap_err().contains("too large"));
    }

    #[test]
    fn memory_and_inflation_over_the_limits_are_refused_with_their_numbers() {
        let limits = Limits { max_memory: 1 << 30, ..Limits::default() };
        assert!(limits.check_memory("x", 1 << 30).is_ok());
        let error = limits.check_memory("model m", (1 << 30) + 1).unwrap_err().to_string();
        assert!(error.contains("model m") && error.contains("1073741824"), "{error}");
        // Small members inflate freely; big ones only up to 100 times.
        assert!(limits.check_inflation("a", 10, 1 << 20).is_ok());
        assert!(limits.check_inflation("b", 1 << 20, 100 << 20).is_ok());
        let error = limits.check_inflation("c", 1 << 20, 101 << 20).unwrap_err().to_string();
        assert!(error.contains("100 times"), "{error}");
        assert!(limits.check_inflation("d", 1 << 30, (1 << 30) + 1).is_err());
    }
}
