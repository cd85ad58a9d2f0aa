//! Float32 `.npy` files streamed a chunk at a time, so a command that runs through its
//! inputs (`sprout run`) holds one chunk of them and of its outputs, whatever the files'
//! sizes: [`NpySamples`] reads (opening it reads and checks the header only, against the
//! file's length), [`write_npy_chunks`] writes, atomically.

use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;

use crate::files::write_atomic_with;
use crate::kind::{expect_kind, FileKind};
use crate::source::{check_npy_header, file_error, npy_header_span};
use crate::TrainError;

/// The longest header read: numpy's own are under a kilobyte; npyz's parser is slow on
/// long ones.
const MAX_HEADER: usize = 1 << 20;

/// The samples `x[N, ...]` of a float32 `.npy` file, read in order.
pub struct NpySamples {
    reader: BufReader<File>,
    path: PathBuf,
    shape: Vec<usize>,
    per_sample: usize,
    remaining: usize,
}

impl NpySamples {
    /// Opens `path`, a little-endian float32 `.npy` array in C order with at least one
    /// axis, whose data bytes the file holds in full.
    pub fn open(path: &Path) -> Result<Self, TrainError> {
        expect_kind(path, &[FileKind::Npy], "a numpy .npy array")?;
        let file = File::open(path).map_err(TrainError::io(path))?;
        let file_len = file.metadata().map_err(TrainError::io(path))?.len();
        let mut reader = BufReader::new(file);
        let mut prefix = vec![0u8; 12];
        reader.read_exact(&mut prefix).map_err(|_| file_error(path, "ends inside its header"))?;
        let (start, len) = npy_header_span(&prefix)
            .ok_or_else(|| file_error(path, "is not a numpy .npy array"))?;
        if len > MAX_HEADER {
            return Err(file_error(
                path,
                format!("its header declares {len} bytes; at most {MAX_HEADER} are read"),
            ));
        }
        if start + len < prefix.len() {
            return Err(file_error(path, "has a header too short to hold a shape"));
        }
        prefix.resize(start + len, 0);
        reader
            .read_exact(&mut prefix[12..])
            .map_err(|_| file_error(path, "ends inside its header"))?;
        check_npy_header(path, "x", &prefix, file_len)?;
        let header = npyz::NpyHeader::from_reader(Cursor::new(&prefix))
            .map_err(|e| file_error(path, format!("array 'x' is not a valid .npy: {e}")))?;
        let npy = npyz::NpyFile::with_header(header, std::io::empty());
        let dtype = match npy.dtype() {
            npyz::DType::Plain(t) => t.to_string(),
            other => format!("{other:?}"),
        };
        let shape = npy
            .shape()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| file_error(path, "array 'x': a dimension exceeds memory"))?;
        let problem = if dtype != "<f4" {
            Some(format!("array 'x' has numpy dtype {dtype}; float32 ('<f4') expected"))
        } else if npy.order() != npyz::Order::C {
            Some("array 'x' is in Fortran order; C (row-major) order expected".into())
        } else if shape.is_empty() {
            Some("array 'x' is a scalar; samples [N, ...] expected".into())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(file_error(path, problem));
        }
        let per_sample = shape[1..].iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let bytes = per_sample
            .and_then(|n| n.checked_mul(shape[0]))
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| file_error(path, format!("shape {shape:?} has too many elements")))?;
        let data = file_len - prefix.len() as u64;
        if (bytes as u64) > data {
            return Err(file_error(
                path,
                format!("array 'x': shape {shape:?} needs {bytes} bytes, the file holds {data}"),
            ));
        }
        let per_sample = per_sample.unwrap_or(0);
        let remaining = shape[0];
        Ok(Self { reader, path: path.to_path_buf(), shape, per_sample, remaining })
    }

    /// The array's shape, `[N, ...]`.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Reads the next `samples` samples into `x` (those left when fewer are; empty at the
    /// end), reusing its allocation: the bytes land in `x`'s own memory, with no second
    /// buffer and no fresh pages from one chunk to the next.
    pub fn read_into(&mut self, samples: usize, x: &mut Vec<f32>) -> Result<(), TrainError> {
        let samples = samples.min(self.remaining);
        x.resize(samples * self.per_sample, 0.0);
        self.reader
            .read_exact(bytemuck::cast_slice_mut(x.as_mut_slice()))
            .map_err(TrainError::io(&self.path))?;
        self.remaining -= samples;
        // The file is little-endian; this compiles away on a little-endian host.
        x.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
        Ok(())
    }
}

/// Writes the float32 array `[shape]` to `path` from the chunks `next` returns, in order,
/// until it returns an empty one: whole or not at all (an error of `next`, or chunks that
/// do not add up to `shape`, leave no file).
pub fn write_npy_chunks(
    path: &Path,
    shape: &[usize],
    mut next: impl FnMut() -> Result<Vec<f32>, TrainError>,
) -> Result<(), TrainError> {
    let expected = shape.iter().product::<usize>();
    write_atomic_with(path, |file| {
        let written = TrainError::io(path);
        let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let options = npyz::WriteOptions::<f32>::new().default_dtype().shape(&dims);
        let mut npy = options.writer(file).begin_nd().map_err(TrainError::io(path))?;
        let mut count = 0;
        loop {
            let chunk = next()?;
            if chunk.is_empty() {
                break;
            }
            count += chunk.len();
            if count > expected {
                break;
            }
            npy.extend(chunk).map_err(TrainError::io(path))?;
        }
        if count != expected {
            let detail = format!("{count} values were made for an array {shape:?} of {expected}");
            return Err(TrainError::Output { path: path.to_path_buf(), detail });
        }
        npy.finish().map_err(written)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::encode_npy;

    fn temp(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn samples_come_in_order_in_chunks_of_any_size() {
        let values: Vec<f32> = (0..7 * 6).map(|i| i as f32 * 0.5).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = temp(&dir, "seven.npy", &encode_npy(&[7, 2, 3], &values));
        let mut npy = NpySamples::open(&path).unwrap();
        assert_eq!(npy.shape(), [7, 2, 3]);
        let (mut read, mut chunk) = (Vec::new(), vec![f32::NAN; 100]);
        for samples in [3, 1, 5, 2] {
            npy.read_into(samples, &mut chunk).unwrap();
            assert_eq!(chunk.len(), samples.min(7 - read.len() / 6) * 6);
            read.extend_from_slice(&chunk);
        }
        assert_eq!(read, values);
        npy.read_into(4, &mut chunk).unwrap();
        assert!(chunk.is_empty());
    }

    #[test]
    fn chunks_written_read_back_as_one_array_and_a_short_count_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.npy");
        let mut pieces = vec![vec![], vec![4.0, 5.0], vec![0.0, 1.0, 2.0, 3.0]];
        write_npy_chunks(&path, &[3, 2], || Ok(pieces.pop().unwrap())).unwrap();
        let (shape, values) = crate::source::read_npy(&path).unwrap();
        assert_eq!((shape, values), (vec![3, 2], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
        let short = dir.path().join("short.npy");
        let mut pieces = vec![vec![], vec![1.0; 5]];
        let error = write_npy_chunks(&short, &[3, 2], || Ok(pieces.pop().unwrap())).unwrap_err();
        assert!(error.to_string().contains("5 values were made for an array [3, 2] of 6"));
        assert!(!short.exists());
    }

    #[test]
    fn a_bad_array_is_refused_at_open_naming_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |name: &str, bytes: &[u8]| match NpySamples::open(&temp(&dir, name, bytes)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{name} was accepted"),
        };
        let good = encode_npy(&[4, 3], &[1.0; 12]);
        let message = refused("short.npy", &good[..good.len() - 4]);
        assert!(message.contains("needs 48 bytes, the file holds 44"), "{message}");
        assert!(refused("header.npy", &good[..30]).contains("inside its header"));
        let scalar = encode_npy(&[], &[1.0]);
        assert!(refused("scalar.npy", &scalar).contains("scalar"));
        let mut int64 = good.clone();
        let at = int64.windows(3).position(|w| w == b"<f4").unwrap();
        int64[at..at + 3].copy_from_slice(b"<i4");
        assert!(refused("int.npy", &int64).contains("dtype <i4"));
        let mut huge = b"\x93NUMPY\x02\x00".to_vec();
        huge.extend(u32::MAX.to_le_bytes());
        assert!(refused("huge.npy", &huge).contains("at most 1048576"));
        assert!(refused("text.npy", b"not an array at all").contains(".npy"));
    }
}
