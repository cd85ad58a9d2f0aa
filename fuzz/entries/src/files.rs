//! The decoders that read files: `.npy`, `.npz` and `.safetensors` tensor files and PNG /
//! JPEG photos, each input written to a scratch file and read back through the same
//! function the commands call (file-kind checks included).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use sprout_data::{load_resized, Limits, ResizeMode};
use sprout_train::{read_npy, read_tensor_file, read_unlabelled_tensors};

/// Classes a fuzzed tensor file's labels must lie below.
const CLASSES: usize = 10;

/// A tensor file: the first byte picks the reader (`.npy` as `sprout predict` takes it,
/// a labelled `.npz` / `.safetensors` data set as `sprout train` takes it, or unlabelled
/// as `sprout eval --calibration` does), the rest is the file.
pub fn tensors(data: &[u8]) -> bool {
    let Some((&reader, file)) = data.split_first() else { return false };
    with_file("data.bin", file, |path| match reader % 3 {
        0 => read_npy(path).is_ok_and(|(shape, values)| {
            assert_eq!(elements(&shape), Some(values.len()), "npy shape {shape:?}");
            true
        }),
        1 => read_tensor_file(path, CLASSES).is_ok_and(|set| {
            let x_dims = [&[set.len()][..], &set.sample_dims].concat();
            assert_eq!(elements(&x_dims), Some(set.x.len()), "x of shape {x_dims:?}");
            assert!(set.y.iter().all(|&y| (0..CLASSES as i32).contains(&y)), "labels");
            true
        }),
        _ => read_unlabelled_tensors(path).is_ok(),
    })
}

/// The element count of `shape`, `None` when it overflows.
fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// A PNG or JPEG photo, decoded and resized to 16x16 as the data loader does, under
/// limits small enough that a fuzzer's many runs stay fast (the checks are the same).
pub fn image(file: &[u8]) -> bool {
    let limits = Limits {
        max_pixels: 1 << 22,
        max_file_bytes: 1 << 20,
        max_memory: 64 << 20,
        ..Limits::default()
    };
    with_file("photo.img", file, |path| {
        load_resized(path, 16, 16, ResizeMode::Crop, &limits).is_ok_and(|image| {
            assert_eq!(image.dimensions(), (16, 16), "resized photo");
            true
        })
    })
}

/// Calls `read` with the path of a scratch file holding `bytes`, removed afterwards. Each
/// call has its own file, so replays may run on several threads.
pub(crate) fn with_file(name: &str, bytes: &[u8], read: impl FnOnce(&Path) -> bool) -> bool {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let path = scratch().join(format!("sprout-fuzz-{}-{call}-{name}", std::process::id()));
    fs::write(&path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    let accepted = read(&path);
    let _ = fs::remove_file(&path);
    accepted
}

/// Where scratch files go: shared memory where there is some, so a fuzzer's many writes
/// stay off the disk.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
}
