//! Labelled samples of a `.safetensors` file read a batch at a time: opening it reads and
//! checks its header and its labels; the inputs are read only as batches ask for them, so
//! a training run holds one batch of them, not the whole file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::tensor::Metadata;
use sprout_data::Batch;

use crate::source::{array_of, file_error, labels_of, samples_of};
use crate::split::Fnv;
use crate::TrainError;

/// The longest header read, the `safetensors` crate's own limit.
const MAX_HEADER: u64 = 100_000_000;
/// Bytes of `x` hashed per read, rounded down to whole samples (at least one).
const HASH_CHUNK: usize = 1 << 20;

/// A `.safetensors` file's `x` (float32 `[N, ...]`, left in the file) and `y` (class
/// indices, in memory).
#[derive(Clone, Debug)]
pub struct TensorFile {
    file: Arc<File>,
    /// Where `x`'s values start in the file.
    x_start: u64,
    pub y: Vec<i32>,
    /// The shape of one sample.
    pub sample_dims: Vec<usize>,
    pub path: PathBuf,
}

impl TensorFile {
    /// Opens `path`, a `.safetensors` file holding `x` (float32 `[N, ...]`) and `y` (int64
    /// `[N]` class indices below `classes`): its header is checked as the `safetensors`
    /// crate checks it (tensors back to back, sized as their shapes say, filling the file)
    /// and `x` and `y` as a file read whole would be.
    pub fn open(path: &Path, classes: usize) -> Result<Self, TrainError> {
        let io = |e| TrainError::Io { path: path.to_path_buf(), source: e };
        let unreadable =
            |detail: &str| file_error(path, format!("not a readable .safetensors file: {detail}"));
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(|_| unreadable("shorter than its header's length"))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n > len - 8 {
            return Err(unreadable(&format!("a header of {n} bytes in a file of {len}")));
        }
        let mut header = vec![0; n as usize];
        file.read_exact(&mut header).map_err(io)?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| unreadable(&e.to_string()))?;
        let end = metadata.tensors().values().map(|t| t.data_offsets.1).max().unwrap_or(0);
        let data = 8 + n;
        if data.checked_add(end as u64) != Some(len) {
            return Err(unreadable("its tensors do not fill the file"));
        }
        let info = |name: &str| {
            metadata.info(name).ok_or_else(|| {
                file_error(path, format!("no tensor named '{name}' (expected tensors x and y)"))
            })
        };
        let (x, y) = (info("x")?, info("y")?);
        let (x_shape, _) = samples_of(path, array_of(x.dtype, x.shape.clone(), &[]))?;
        let (start, end) = y.data_offsets;
        let mut y_bytes = vec![0; end - start];
        file.seek(SeekFrom::Start(data + start as u64)).map_err(io)?;
        file.read_exact(&mut y_bytes).map_err(io)?;
        let y = labels_of(path, array_of(y.dtype, y.shape.clone(), &y_bytes), x_shape[0], classes)?;
        Ok(Self {
            file: Arc::new(file),
            x_start: data + x.data_offsets.0 as u64,
            y,
            sample_dims: x_shape[1..].to_vec(),
            path: path.to_path_buf(),
        })
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// Bytes of one sample's values.
    fn sample_bytes(&self) -> usize {
        4 * self.sample_dims.iter().product::<usize>()
    }

    /// Reads `len` bytes of `x` from byte `at` on into `bytes`.
    fn read_x(&self, at: usize, bytes: &mut Vec<u8>, len: usize) -> Result<(), TrainError> {
        let io = |e| TrainError::Io { path: self.path.clone(), source: e };
        bytes.resize(len, 0);
        let mut file = &*self.file;
        file.seek(SeekFrom::Start(self.x_start + at as u64)).map_err(io)?;
        file.read_exact(bytes).map_err(io)
    }

    /// The samples at `indices`, in that order, each read straight into its place in the
    /// batch (the file's little-endian values swapped in place on a big-endian host).
    pub fn batch(&self, indices: &[usize]) -> Result<Batch, TrainError> {
        let io = |e| TrainError::Io { path: self.path.clone(), source: e };
        let per = self.sample_bytes();
        let mut x = vec![0f32; indices.len() * per / 4];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut x);
        let mut file = &*self.file;
        for (&i, sample) in indices.iter().zip(bytes.chunks_exact_mut(per.max(1))) {
            file.seek(SeekFrom::Start(self.x_start + (i * per) as u64)).map_err(io)?;
            file.read_exact(sample).map_err(io)?;
        }
        if cfg!(target_endian = "big") {
            x.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
        }
        Ok(Batch { x, y: indices.iter().map(|&i| self.y[i]).collect() })
    }

    /// Feeds `hash` the bytes of every sample's input values (little-endian, a sample at a
    /// time), as for samples held in memory.
    pub(crate) fn hash_inputs_into(&self, hash: &mut Fnv) -> Result<(), TrainError> {
        let per = self.sample_bytes();
        let (total, chunk) = (self.len() * per, (HASH_CHUNK / per.max(1)).max(1) * per);
        let mut bytes = Vec::with_capacity(chunk.min(total));
        for at in (0..total).step_by(chunk.max(1)) {
            self.read_x(at, &mut bytes, chunk.min(total - at))?;
            bytes.chunks(per.max(1)).for_each(|sample| hash.write_sample(sample));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{read_tensor_file, DataSource, TensorSamples};
    use safetensors::{tensor::TensorView, Dtype};

    /// A `.safetensors` file of `n` samples of `[2, 3]` and labels `i % 3`.
    fn write(path: &Path, n: usize, x_dtype: Dtype) {
        let x: Vec<u8> = (0..n * 6).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect();
        let y: Vec<u8> = (0..n).flat_map(|i| ((i % 3) as i64).to_le_bytes()).collect();
        let tensors = [
            ("x", TensorView::new(x_dtype, vec![n, 2, 3], &x).unwrap()),
            ("y", TensorView::new(Dtype::I64, vec![n], &y).unwrap()),
        ];
        std::fs::write(path, safetensors::serialize(tensors, None).unwrap()).unwrap();
    }

    #[test]
    fn batches_read_from_the_file_equal_those_of_the_file_read_whole() {
        let dir = std::env::temp_dir().join(format!("sprout-tensor-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("samples.safetensors");
        write(&path, 11, Dtype::F32);
        let whole = read_tensor_file(&path, 3).unwrap();
        let file = TensorFile::open(&path, 3).unwrap();
        assert_eq!((file.len(), &file.y, &file.sample_dims), (11, &whole.y, &whole.sample_dims));
        let (mut from_file, mut in_memory) = (Fnv::new(), Fnv::new());
        TensorSamples::File(file.clone()).hash_into(&mut from_file).unwrap();
        TensorSamples::Memory(whole.clone()).hash_into(&mut in_memory).unwrap();
        assert_eq!(from_file.hex(), in_memory.hex());
        let mut streamed = TensorSamples::File(file).into_source(4, 7, true);
        let mut held = DataSource::tensors(whole, 4, 7, true);
        for epoch in 0..2 {
            let a: Vec<Batch> = streamed.epoch(epoch).map(Result::unwrap).collect();
            let b: Vec<Batch> = held.epoch(epoch).map(Result::unwrap).collect();
            assert_eq!(a.len(), 3);
            for (a, b) in a.iter().zip(&b) {
                assert_eq!((&a.x, &a.y), (&b.x, &b.y));
            }
        }
        // Checked as a file read whole: labels past the classes, inputs of another dtype.
        let message = TensorFile::open(&path, 2).unwrap_err().to_string();
        assert!(message.contains("class indices in 0..2"), "{message}");
        write(&path, 3, Dtype::I32);
        let message = TensorFile::open(&path, 3).unwrap_err().to_string();
        assert!(message.contains("dtype float32"), "{message}");
        // A file cut short is refused before any sample is read.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let message = TensorFile::open(&path, 3).unwrap_err().to_string();
        assert!(message.contains("do not fill the file"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
