//! Data sources for training and evaluation: a folder-per-class image tree (through
//! `sprout_data`) or a tensor file (`.npz`, `.safetensors`) holding `x` (f32) and `y` (i64).

use std::fs;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use sprout_data::{Batch, Dataset, Loader, Pipeline, Rng, Transform};

use crate::kind::{expect_kind, read_kind, FileKind};
use crate::split::Fnv;
use crate::tensor_file::TensorFile;
use crate::TrainError;

/// Samples held in memory: `x` is `len` samples of `sample_dims` back to back.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSet {
    pub x: Vec<f32>,
    pub y: Vec<i32>,
    /// The shape of one sample (`[C, H, W]` for images, `[F]` for features).
    pub sample_dims: Vec<usize>,
    pub path: PathBuf,
}

impl TensorSet {
    /// The samples at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> TensorSet {
        let per: usize = self.sample_dims.iter().product();
        TensorSet {
            x: indices.iter().flat_map(|&i| &self.x[i * per..(i + 1) * per]).copied().collect(),
            y: indices.iter().map(|&i| self.y[i]).collect(),
            sample_dims: self.sample_dims.clone(),
            path: self.path.clone(),
        }
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// One array read from a tensor file: its shape and values.
pub(crate) enum Array {
    F32(Vec<usize>, Vec<f32>),
    I64(Vec<usize>, Vec<i64>),
    Other(Vec<usize>, String),
}

impl Array {
    fn shape(&self) -> &[usize] {
        match self {
            Array::F32(s, _) | Array::I64(s, _) | Array::Other(s, _) => s,
        }
    }

    fn dtype(&self) -> &str {
        match self {
            Array::F32(..) => "float32",
            Array::I64(..) => "int64",
            Array::Other(_, d) => d,
        }
    }
}

fn tensor_error(path: &Path, tensor: &str, expected: String, actual: String) -> TrainError {
    TrainError::Tensor { path: path.to_path_buf(), tensor: tensor.into(), expected, actual }
}

pub(crate) fn file_error(path: &Path, detail: impl Into<String>) -> TrainError {
    TrainError::TensorFile { path: path.to_path_buf(), detail: detail.into() }
}

/// Brackets an `.npy` header may nest: numpy writes at most four (a structured dtype with a
/// sub-array shape), and npyz's header parser takes time exponential in the depth (18
/// unclosed brackets: a minute).
const NPY_HEADER_DEPTH: usize = 8;

/// Where an `.npy` file's header text starts and how long it is, from its first bytes
/// (format version 1: a 16-bit length; later ones: 32-bit), or `None` for other bytes.
pub(crate) fn npy_header_span(bytes: &[u8]) -> Option<(usize, usize)> {
    match bytes {
        [0x93, b'N', b'U', b'M', b'P', b'Y', 1, _, lo, hi, ..] => {
            Some((10, usize::from(u16::from_le_bytes([*lo, *hi]))))
        }
        [0x93, b'N', b'U', b'M', b'P', b'Y', _, _, a, b, c, d, ..] => {
            Some((12, u32::from_le_bytes([*a, *b, *c, *d]) as usize))
        }
        _ => None,
    }
}

/// Refuses an `.npy` whose header nests brackets deeper than [`NPY_HEADER_DEPTH`] or
/// declares more elements than its data bytes could hold (each takes at least one),
/// before npyz parses it and multiplies the shape out: `[2^52, 3, 64, 64]` would overflow
/// there (a wrapped count of 0 without overflow checks). `bytes` is the file or its start
/// up to the end of the header, `file_len` the file's length. Headers this does not
/// understand are left to npyz to refuse.
pub(crate) fn check_npy_header(
    path: &Path,
    name: &str,
    bytes: &[u8],
    file_len: u64,
) -> Result<(), TrainError> {
    let Some((start, len)) = npy_header_span(bytes) else { return Ok(()) };
    let Some(header) = bytes.get(start..).and_then(|rest| rest.get(..len)) else { return Ok(()) };
    let header = String::from_utf8_lossy(header);
    let mut depth = 0usize;
    for c in header.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > NPY_HEADER_DEPTH {
            return Err(file_error(
                path,
                format!(
                    "array '{name}' has a header nesting brackets more than \
                     {NPY_HEADER_DEPTH} deep; numpy writes at most 4"
                ),
            ));
        }
    }
    let dims = header
        .split_once("'shape'")
        .and_then(|(_, rest)| rest.split_once('('))
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(dims, _)| dims);
    let Some(dims) = dims else { return Ok(()) };
    // Multiplied in npyz's order, so an overflow there is one here.
    let mut count = Some(1u64);
    for dim in dims.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let Ok(dim) = dim.parse::<u64>() else { return Ok(()) };
        count = count.and_then(|c| c.checked_mul(dim));
    }
    let data = file_len.saturating_sub((start + len) as u64);
    if count.is_none_or(|count| count > data) {
        return Err(file_error(
            path,
            format!(
                "array '{name}' declares shape ({dims}): {} elements, but only {data} data \
                 bytes follow its header",
                count.map_or("more than 2^64".to_string(), |count| count.to_string())
            ),
        ));
    }
    Ok(())
}

/// Decodes one `.npy` image (f32 or i64, little-endian, C order). Its declared shape is
/// checked (element count without overflow, within the memory limit, matching the bytes
/// present) before any value is allocated.
fn parse_npy(path: &Path, name: &str, bytes: &[u8]) -> Result<Array, TrainError> {
    check_npy_header(path, name, bytes, bytes.len() as u64)?;
    let mut cursor = Cursor::new(bytes);
    let header = npyz::NpyHeader::from_reader(&mut cursor)
        .map_err(|e| file_error(path, format!("array '{name}' is not a valid .npy: {e}")))?;
    let present = bytes.len() as u64 - cursor.position();
    let npy = npyz::NpyFile::with_header(header, cursor);
    let shape = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| file_error(path, format!("array '{name}': a dimension exceeds memory")))?;
    if npy.order() != npyz::Order::C {
        return Err(tensor_error(path, name, "C (row-major) order".into(), "Fortran order".into()));
    }
    let dtype = npy.dtype();
    let decoded = |e: std::io::Error| file_error(path, format!("array '{name}': {e}"));
    let type_str = match &dtype {
        npyz::DType::Plain(t) => t.to_string(),
        other => format!("{other:?}"),
    };
    let element = match type_str.as_str() {
        "<f4" => 4,
        "<i8" => 8,
        _ => return Ok(Array::Other(shape, format!("numpy dtype {type_str}"))),
    };
    let declared = shape.iter().try_fold(element, |n: u64, &d| n.checked_mul(d as u64));
    let what = format!("array '{name}' of {} (shape {shape:?})", path.display());
    let declared = declared.ok_or_else(|| {
        file_error(path, format!("array '{name}': shape {shape:?} has too many elements"))
    })?;
    sprout_data::Limits::current().check_memory(&what, declared)?;
    if present < declared {
        return Err(file_error(
            path,
            format!(
                "array '{name}': shape {shape:?} needs {declared} bytes, the file holds {present}"
            ),
        ));
    }
    Ok(match element {
        4 => Array::F32(shape, npy.into_vec::<f32>().map_err(decoded)?),
        _ => Array::I64(shape, npy.into_vec::<i64>().map_err(decoded)?),
    })
}

/// Reads the arrays named in `names` from an `.npz` archive; each member's declared size is
/// checked against the memory and inflation limits before it is inflated, and no more than
/// it declares is ever read.
fn read_npz(path: &Path, names: &[&str]) -> Result<Vec<Array>, TrainError> {
    let file = fs::File::open(path).map_err(TrainError::io(path))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| file_error(path, format!("not a readable .npz (zip) archive: {e}")))?;
    let limits = sprout_data::Limits::current();
    let mut arrays = Vec::new();
    let mut total = 0u64;
    for &name in names {
        let entry = archive.by_name(&format!("{name}.npy")).map_err(|_| {
            file_error(
                path,
                format!("no array named '{name}' (expected arrays {})", names.join(" and ")),
            )
        })?;
        let declared = entry.size();
        total = total.saturating_add(declared);
        let what = format!("array '{name}' of {}", path.display());
        limits.check_inflation(&what, entry.compressed_size(), declared)?;
        limits.check_memory(&format!("the arrays of {}", path.display()), total)?;
        let mut bytes = Vec::with_capacity(declared as usize);
        entry
            .take(declared.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| file_error(path, format!("array '{name}' cannot be read: {e}")))?;
        if bytes.len() as u64 != declared {
            return Err(file_error(
                path,
                format!("array '{name}' declares {declared} bytes, it inflates to another size"),
            ));
        }
        arrays.push(parse_npy(path, name, &bytes)?);
    }
    Ok(arrays)
}

/// Reads the tensors named in `names` from a `.safetensors` file.
fn read_safetensors(path: &Path, names: &[&str]) -> Result<Vec<Array>, TrainError> {
    let bytes = sprout_data::read_bounded(path, sprout_data::Limits::current().max_memory)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| file_error(path, format!("not a readable .safetensors file: {e}")))?;
    let mut arrays = Vec::new();
    for &name in names {
        let view = st.tensor(name).map_err(|_| {
            file_error(
                path,
                format!("no tensor named '{name}' (expected tensors {})", names.join(" and ")),
            )
        })?;
        arrays.push(array_of(view.dtype(), view.shape().to_vec(), view.data()));
    }
    Ok(arrays)
}

/// The array of `shape` whose little-endian values of `dtype` are `data` (float32 and int64
/// decoded, other types named).
pub(crate) fn array_of(dtype: safetensors::Dtype, shape: Vec<usize>, data: &[u8]) -> Array {
    use safetensors::Dtype;
    match dtype {
        Dtype::F32 => Array::F32(
            shape,
            data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        ),
        Dtype::I64 => Array::I64(
            shape,
            data.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8-byte chunks")))
                .collect(),
        ),
        other => Array::Other(shape, format!("{other:?}").to_lowercase()),
    }
}

fn shape_text(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// Reads the arrays `names` of a tensor file (`.npz` or `.safetensors`, by extension).
fn read_arrays(path: &Path, names: &[&str]) -> Result<Vec<Array>, TrainError> {
    match tensor_file_kind(path)? {
        FileKind::Safetensors => read_safetensors(path, names),
        _ => read_npz(path, names),
    }
}

/// What kind of tensor file `path` is: `.safetensors`, or `.npz` (a zip archive); anything
/// else is an error.
fn tensor_file_kind(path: &Path) -> Result<FileKind, TrainError> {
    let expected = [FileKind::Npz, FileKind::Zip, FileKind::Safetensors];
    expect_kind(path, &expected, "a class folder or a .npz / .safetensors tensor file")
}

/// The shape and values of `x`: float32 `[N, ...]` with `N >= 1`.
pub(crate) fn samples_of(path: &Path, x: Array) -> Result<(Vec<usize>, Vec<f32>), TrainError> {
    match x {
        Array::F32(shape, values) if shape.len() >= 2 && shape[0] > 0 => Ok((shape, values)),
        Array::F32(shape, _) => Err(tensor_error(
            path,
            "x",
            "shape [N, ...] with N >= 1 (e.g. [N, C, H, W])".into(),
            shape_text(&shape),
        )),
        other => Err(tensor_error(path, "x", "dtype float32".into(), other.dtype().into())),
    }
}

/// Reads only `x` of a tensor file (float32 `[N, ...]`), for data without labels: every
/// sample gets label 0.
pub fn read_unlabelled_tensors(path: &Path) -> Result<TensorSet, TrainError> {
    let x = read_arrays(path, &["x"])?.pop().expect("one array");
    let (shape, x) = samples_of(path, x)?;
    Ok(TensorSet {
        x,
        y: vec![0; shape[0]],
        sample_dims: shape[1..].to_vec(),
        path: path.to_path_buf(),
    })
}

/// Reads a tensor file (`.npz` or `.safetensors`, by extension) holding `x`: float32
/// `[N, ...]` (`[N, C, H, W]` for images) and `y`: int64 `[N]` class indices below
/// `classes`.
pub fn read_tensor_file(path: &Path, classes: usize) -> Result<TensorSet, TrainError> {
    labelled_set(path, read_arrays(path, &["x", "y"])?, classes)
}

/// The samples of `arrays`, `x` and `y` as [`read_tensor_file`] reads them from `path`.
fn labelled_set(path: &Path, arrays: Vec<Array>, classes: usize) -> Result<TensorSet, TrainError> {
    let mut arrays = arrays.into_iter();
    let (x, y) = (arrays.next().expect("two arrays"), arrays.next().expect("two arrays"));
    let (x_shape, x) = samples_of(path, x)?;
    let y = labels_of(path, y, x_shape[0], classes)?;
    Ok(TensorSet { x, y, sample_dims: x_shape[1..].to_vec(), path: path.to_path_buf() })
}

/// The labels `y` of `n` samples: int64 `[n]` class indices below `classes`.
pub(crate) fn labels_of(
    path: &Path,
    y: Array,
    n: usize,
    classes: usize,
) -> Result<Vec<i32>, TrainError> {
    let y = match y {
        Array::I64(shape, values) if shape == [n] => values,
        Array::I64(shape, _) => {
            return Err(tensor_error(path, "y", format!("shape [{n}]"), shape_text(&shape)))
        }
        other => {
            let actual = format!("dtype {} (shape {:?})", other.dtype(), other.shape());
            return Err(tensor_error(path, "y", "dtype int64".into(), actual));
        }
    };
    if let Some((i, &label)) = y.iter().enumerate().find(|(_, &l)| l < 0 || l as usize >= classes) {
        return Err(tensor_error(
            path,
            "y",
            format!("class indices in 0..{classes}"),
            format!("{label} at index {i}"),
        ));
    }
    Ok(y.into_iter().map(|l| l as i32).collect())
}

/// Reads a float32 `.npy` file: its shape and values.
pub fn read_npy(path: &Path) -> Result<(Vec<usize>, Vec<f32>), TrainError> {
    let bytes = read_kind(path, FileKind::Npy, "a numpy .npy array")?;
    match parse_npy(path, "x", &bytes)? {
        Array::F32(shape, values) if !shape.is_empty() => Ok((shape, values)),
        Array::F32(shape, _) => {
            Err(tensor_error(path, "x", "shape [N, ...]".into(), shape_text(&shape)))
        }
        other => Err(tensor_error(path, "x", "dtype float32".into(), other.dtype().into())),
    }
}

/// Encodes float32 values of `shape` as a `.npy` file.
pub fn encode_npy(shape: &[usize], values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    use npyz::WriterBuilder;
    let mut writer = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&shape)
        .writer(&mut out)
        .begin_nd()
        .expect("writing into memory cannot fail");
    writer.extend(values.iter().copied()).expect("writing into memory cannot fail");
    writer.finish().expect("writing into memory cannot fail");
    out
}

/// Labelled samples of a tensor file: a `.safetensors` file's read a batch at a time (see
/// [`TensorFile`]), an `.npz` archive's inflated into memory.
#[derive(Clone, Debug)]
pub enum TensorSamples {
    Memory(TensorSet),
    File(TensorFile),
}

impl TensorSamples {
    /// Opens a tensor file as [`read_tensor_file`] reads it, leaving a `.safetensors`
    /// file's inputs in the file.
    pub fn open(path: &Path, classes: usize) -> Result<Self, TrainError> {
        match tensor_file_kind(path)? {
            FileKind::Safetensors => TensorFile::open(path, classes).map(TensorSamples::File),
            _ => {
                let arrays = read_npz(path, &["x", "y"])?;
                labelled_set(path, arrays, classes).map(TensorSamples::Memory)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.labels().len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels().is_empty()
    }

    pub fn labels(&self) -> &[i32] {
        match self {
            TensorSamples::Memory(set) => &set.y,
            TensorSamples::File(file) => &file.y,
        }
    }

    /// The shape of one sample.
    pub fn sample_dims(&self) -> &[usize] {
        match self {
            TensorSamples::Memory(set) => &set.sample_dims,
            TensorSamples::File(file) => &file.sample_dims,
        }
    }

    /// Feeds `hash` the bytes of every sample's input values (little-endian, a sample at a
    /// time: [`Fnv::write_sample`]), then of every label.
    pub(crate) fn hash_into(&self, hash: &mut Fnv) -> Result<(), TrainError> {
        match self {
            TensorSamples::Memory(set) => {
                let per = set.sample_dims.iter().product::<usize>().max(1);
                let mut bytes = Vec::with_capacity(4 * per);
                for sample in set.x.chunks(per) {
                    bytes.clear();
                    bytes.extend(sample.iter().flat_map(|v| v.to_le_bytes()));
                    hash.write_sample(&bytes);
                }
            }
            TensorSamples::File(file) => file.hash_inputs_into(hash)?,
        }
        for l in self.labels() {
            hash.write(&l.to_le_bytes());
        }
        Ok(())
    }

    /// The samples as batches of `batch`.
    pub fn into_source(self, batch: usize, seed: u64, shuffle: bool) -> DataSource {
        match self {
            TensorSamples::Memory(set) => DataSource::tensors(set, batch, seed, shuffle),
            TensorSamples::File(file) => {
                DataSource::File { file, batch: batch.max(1), seed, shuffle }
            }
        }
    }
}

/// Where samples come from.
pub enum DataSource {
    /// A folder-per-class image tree, streamed through decoding threads.
    Folder(Loader),
    /// A tensor file held in memory.
    Tensors { set: TensorSet, batch: usize, seed: u64, shuffle: bool },
    /// A `.safetensors` file read a batch at a time.
    File { file: TensorFile, batch: usize, seed: u64, shuffle: bool },
}

impl DataSource {
    /// The images of `dataset` (a whole folder, or a split of one), streamed through
    /// `pipeline`'s decoding threads.
    pub fn folder(
        dataset: Dataset,
        transform: Transform,
        batch: usize,
        seed: u64,
        shuffle: bool,
        pipeline: &Pipeline,
    ) -> Result<Self, TrainError> {
        let loader = Loader::new(dataset, transform, batch, seed, pipeline)?;
        Ok(DataSource::Folder(if shuffle { loader } else { loader.no_shuffle() }))
    }

    /// Samples of a tensor file.
    pub fn tensors(set: TensorSet, batch: usize, seed: u64, shuffle: bool) -> Self {
        DataSource::Tensors { set, batch: batch.max(1), seed, shuffle }
    }

    pub fn len(&self) -> usize {
        match self {
            DataSource::Folder(b) => b.dataset().len(),
            DataSource::Tensors { set, .. } => set.len(),
            DataSource::File { file, .. } => file.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Class names, when the source knows them (a folder tree).
    pub fn class_names(&self) -> Option<Vec<String>> {
        match self {
            DataSource::Folder(b) => Some(b.dataset().classes.clone()),
            DataSource::Tensors { .. } | DataSource::File { .. } => None,
        }
    }

    /// Where the samples come from, for messages.
    pub fn origin(&self) -> PathBuf {
        match self {
            DataSource::Folder(b) => b.dataset().root.clone(),
            DataSource::Tensors { set, .. } => set.path.clone(),
            DataSource::File { file, .. } => file.path.clone(),
        }
    }

    /// The batches of `epoch`, the last one possibly smaller. The order depends only on the
    /// seed and the epoch, so a resumed run sees the same batches.
    pub fn epoch(
        &mut self,
        epoch: u64,
    ) -> Box<dyn Iterator<Item = Result<Batch, TrainError>> + '_> {
        match self {
            DataSource::Folder(b) => Box::new(b.epoch(epoch).map(|r| r.map_err(TrainError::from))),
            DataSource::Tensors { set, batch, seed, shuffle } => {
                let per: usize = set.sample_dims.iter().product();
                let set = &*set;
                let chunks = batch_indices(set.len(), *batch, *seed, epoch, *shuffle);
                Box::new(chunks.into_iter().map(move |indices| {
                    let mut x = Vec::with_capacity(indices.len() * per);
                    let mut y = Vec::with_capacity(indices.len());
                    for i in indices {
                        x.extend_from_slice(&set.x[i * per..(i + 1) * per]);
                        y.push(set.y[i]);
                    }
                    Ok(Batch { x, y })
                }))
            }
            DataSource::File { file, batch, seed, shuffle } => {
                let file = &*file;
                let chunks = batch_indices(file.len(), *batch, *seed, epoch, *shuffle);
                Box::new(chunks.into_iter().map(move |indices| file.batch(&indices)))
            }
        }
    }
}

/// The sample indices of each batch of `batch` in `epoch` over `len` samples: shuffled by
/// the seed and the epoch, or in order.
fn batch_indices(
    len: usize,
    batch: usize,
    seed: u64,
    epoch: u64,
    shuffle: bool,
) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..len).collect();
    if shuffle {
        Rng::derive(seed, epoch).shuffle(&mut order);
    }
    order.chunks(batch).map(<[usize]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An `.npz` of `x` (float32 zeros of `shape`) and `y` (int64 zeros), deflated.
    fn zeros_npz(path: &Path, shape: &[usize]) {
        let n: usize = shape.iter().product();
        let x = encode_npy(shape, &vec![0.0; n]);
        let mut y = Vec::new();
        use npyz::WriterBuilder;
        let mut writer = npyz::WriteOptions::<i64>::new()
            .default_dtype()
            .shape(&[shape[0] as u64])
            .writer(&mut y)
            .begin_nd()
            .unwrap();
        writer.extend(vec![0i64; shape[0]]).unwrap();
        writer.finish().unwrap();
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
        for (name, bytes) in [("x.npy", x), ("y.npy", y)] {
            zip.start_file(name, options).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn an_npz_member_inflating_over_the_ratio_limit_is_refused_before_inflating() {
        let dir = std::env::temp_dir().join(format!("sprout-npz-bomb-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // 8 MiB of zeros deflate to a few KB: a small bomb (the inflated to 1.5 GiB).
        let bomb = dir.join("bomb.npz");
        zeros_npz(&bomb, &[512, 4096]);
        assert!(fs::metadata(&bomb).unwrap().len() < 100_000);
        let error = read_tensor_file(&bomb, 2).unwrap_err().to_string();
        assert!(
            error.contains("array 'x'") && error.contains("over the limit of 100 times"),
            "{error}"
        );
        // Small members inflate freely, whatever their ratio.
        let small = dir.join("small.npz");
        zeros_npz(&small, &[4, 16]);
        assert_eq!(read_tensor_file(&small, 2).unwrap().len(), 4);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_npy_shape_needing_more_bytes_than_the_file_holds_is_refused() {
        let mut bytes = encode_npy(&[2, 3], &[1.0; 6]);
        bytes.truncate(bytes.len() - 4);
        let error = parse_npy(Path::new("x.npy"), "x", &bytes).err().unwrap().to_string();
        assert!(error.contains("needs 24 bytes, the file holds 20"), "{error}");
        let header =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }";
        let mut wraps = b"\x93NUMPY\x01\x00".to_vec();
        wraps.extend_from_slice(&(header.len() as u16).to_le_bytes());
        wraps.extend_from_slice(header.as_bytes());
        let error = parse_npy(Path::new("x.npy"), "x", &wraps).err().unwrap().to_string();
        assert!(error.contains("more than 2^64 elements"), "{error}");
    }

    /// A format 1.0 `.npy` declaring `shape` over `data` zero bytes.
    fn npy(shape: &str, data: usize) -> Vec<u8> {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        let padded = (10 + header.len() + 1).div_ceil(64) * 64 - 10;
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((padded as u16).to_le_bytes());
        bytes.extend(format!("{header:<width$}\n", width = padded - 1).bytes());
        bytes.resize(bytes.len() + data, 0);
        bytes
    }

    /// [`check_npy_header`] of a whole file `bytes`, named `x.npy`.
    fn check_header(bytes: &[u8]) -> Result<(), TrainError> {
        check_npy_header(Path::new("x.npy"), "x", bytes, bytes.len() as u64)
    }

    #[test]
    fn an_npy_shape_beyond_its_bytes_is_refused_before_decoding() {
        assert!(check_header(&encode_npy(&[2, 3], &[0.0; 6])).is_ok());
        assert!(check_header(&npy("(2, 3)", 24)).is_ok());
        let error = |shape, data| check_header(&npy(shape, data)).unwrap_err();
        let wraps = error("(4503599627370496, 3, 64, 64)", 16).to_string();
        assert!(wraps.contains("more than 2^64 elements") && wraps.contains("x.npy"), "{wraps}");
        // npyz would overflow on the first two dimensions, whatever follows.
        assert!(error("(9223372036854775808, 4, 0)", 0).to_string().contains("2^64"));
        let short = error("(10,)", 8).to_string();
        assert!(short.contains("10 elements, but only 8 data bytes"), "{short}");
    }

    #[test]
    fn an_npy_header_nesting_brackets_deeply_is_refused_before_parsing() {
        // A structured dtype with a sub-array, as numpy writes it: four deep.
        let structured = npy("(1,), 'descr': [('a', '<f4', (2,))]", 8);
        assert!(check_header(&structured).is_ok());
        let deep = npy(&format!("({}", "[".repeat(40)), 8);
        let message = check_header(&deep).unwrap_err().to_string();
        assert!(message.contains("more than 8 deep"), "{message}");
    }
}
