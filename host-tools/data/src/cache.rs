//! The cache of resized pictures (8-bit, at the model's input size, before augmentation): in
//! memory under a byte cap, beyond which samples are simply decoded again, or as files in a
//! folder, named by a hash of the source file, its size and time and the resize settings.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use image::RgbImage;

use crate::error::DataError;
use crate::files::write_replaceable;
use crate::resize::ResizeMode;
use crate::rng::fnv1a;

/// Where resized pictures are kept between epochs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Decode every sample every epoch.
    None,
    /// In memory, up to `max_bytes` of pixels; samples beyond are decoded again.
    Memory { max_bytes: usize },
    /// As files in this folder (created if missing), kept across runs.
    Disk(PathBuf),
}

impl Default for CacheMode {
    /// In memory, up to 512 MiB: small data sets are decoded once.
    fn default() -> Self {
        CacheMode::Memory { max_bytes: 512 << 20 }
    }
}

/// What a cached picture is the result of.
pub(crate) struct Key<'a> {
    pub index: usize,
    pub path: &'a Path,
    pub width: u32,
    pub height: u32,
    pub mode: ResizeMode,
}

/// A cache in use.
pub(crate) enum Cache {
    None,
    Memory { max_bytes: usize, held: Mutex<(usize, HashMap<usize, RgbImage>)> },
    Disk(PathBuf),
}

/// The start of a cache file, before its key, size and pixels.
const MAGIC: &[u8; 8] = b"SPRTRSZ1";

impl Cache {
    /// Opens `mode`'s cache (creating a disk cache's folder).
    pub fn open(mode: &CacheMode) -> Result<Self, DataError> {
        Ok(match mode {
            CacheMode::None => Cache::None,
            CacheMode::Memory { max_bytes } => {
                Cache::Memory { max_bytes: *max_bytes, held: Mutex::new((0, HashMap::new())) }
            }
            CacheMode::Disk(dir) => {
                fs::create_dir_all(dir).map_err(DataError::io(dir))?;
                Cache::Disk(dir.clone())
            }
        })
    }

    /// Bytes of pixels held in memory.
    pub fn memory_bytes(&self) -> usize {
        match self {
            Cache::Memory { held, .. } => held.lock().expect("cache lock").0,
            _ => 0,
        }
    }

    /// The cached picture for `key`, if any.
    pub fn get(&self, key: &Key<'_>) -> Option<RgbImage> {
        match self {
            Cache::None => None,
            Cache::Memory { held, .. } => {
                held.lock().expect("cache lock").1.get(&key.index).cloned()
            }
            Cache::Disk(dir) => {
                let (name, id) = disk_key(key)?;
                read_entry(&dir.join(name), &id, key)
            }
        }
    }

    /// Keeps `image` for `key`, where there is room; a disk cache that cannot be written is
    /// an error naming the file.
    pub fn put(&self, key: &Key<'_>, image: &RgbImage) -> Result<(), DataError> {
        match self {
            Cache::None => Ok(()),
            Cache::Memory { max_bytes, held } => {
                let mut held = held.lock().expect("cache lock");
                if held.0 + image.len() <= *max_bytes && !held.1.contains_key(&key.index) {
                    held.0 += image.len();
                    held.1.insert(key.index, image.clone());
                }
                Ok(())
            }
            Cache::Disk(dir) => {
                let Some((name, id)) = disk_key(key) else { return Ok(()) };
                let mut bytes = Vec::with_capacity(MAGIC.len() + 12 + id.len() + image.len());
                bytes.extend_from_slice(MAGIC);
                bytes.extend_from_slice(&(id.len() as u32).to_le_bytes());
                bytes.extend_from_slice(id.as_bytes());
                bytes.extend_from_slice(&image.width().to_le_bytes());
                bytes.extend_from_slice(&image.height().to_le_bytes());
                bytes.extend_from_slice(image.as_raw());
                let path = dir.join(name);
                write_replaceable(&path, &bytes).map_err(DataError::io(path))
            }
        }
    }
}

/// A disk entry's file name (a hash) and the full identity it was made from: the source's
/// path, size and modification time and the resize settings. `None` when the source cannot
/// be looked at (decoding will then report why).
fn disk_key(key: &Key<'_>) -> Option<(String, String)> {
    let meta = fs::metadata(key.path).ok()?;
    let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    let id = format!(
        "{}\n{}\n{modified}\n{}\n{}x{}",
        key.path.display(),
        meta.len(),
        key.mode.name(),
        key.width,
        key.height
    );
    Some((format!("{:016x}.rgb", fnv1a(id.as_bytes())), id))
}

/// The picture in cache file `path`, when it holds exactly `id` at the key's size.
fn read_entry(path: &Path, id: &str, key: &Key<'_>) -> Option<RgbImage> {
    let bytes = fs::read(path).ok()?;
    let rest = bytes.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let (stored, rest) = rest.split_at_checked(u32::from_le_bytes(*len) as usize)?;
    let (width, rest) = rest.split_first_chunk::<4>()?;
    let (height, pixels) = rest.split_first_chunk::<4>()?;
    let size = (u32::from_le_bytes(*width), u32::from_le_bytes(*height));
    if stored != id.as_bytes() || size != (key.width, key.height) {
        return None;
    }
    RgbImage::from_raw(size.0, size.1, pixels.to_vec()).filter(|image| image.len() == pixels.len())
}
