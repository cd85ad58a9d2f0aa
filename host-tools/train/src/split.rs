//! Which images train and which validate: `DATA/train` + `DATA/val` as given, or a stratified
//! split of one folder; class folders checked against the model's and each other's classes;
//! and a description of the result (counts and a fingerprint) for the run folder and `--resume`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sprout_data::Dataset;

use crate::TrainError;

/// The share of a single image folder that validates when `--val-fraction` is not given.
pub const DEFAULT_VAL_FRACTION: f32 = 0.2;

/// How the validation data was chosen. Externally tagged in JSON (`"stratified": {...}` or
/// `"folders"`): an internally tagged or flattened enum is buffered by serde, which cannot
/// read numbers back when serde_json's `arbitrary_precision` is on in the build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitKind {
    /// `DATA/train` and `DATA/val`, as given.
    Folders,
    /// One folder split per class: `fraction` of each class validates, chosen by `seed`.
    Stratified { fraction: f32, seed: u64 },
    /// A tensor file, validated on the `--val` file.
    TensorFiles { val: PathBuf },
    /// A tensor file with no `--val`: validated on its own samples.
    TrainingFile,
}

/// One class of the data: how many samples train and validate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassCount {
    pub name: String,
    pub train: usize,
    pub val: usize,
}

/// What a run trains and validates on: the split, its counts per class and a hash of the
/// sample list (paths and labels, or tensor values), so a changed data set is noticed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataSplit {
    pub kind: SplitKind,
    pub train: usize,
    pub val: usize,
    pub classes: Vec<ClassCount>,
    /// FNV-1a (64 bits, hex) of the training then the validation samples (tensor values
    /// by their XXH3 digests, a sample at a time: [`Fnv::write_sample`]).
    pub hash: String,
}

impl fmt::Display for DataSplit {
    /// `N train / M validation images (stratified, 20%, seed 0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (train, val) = (self.train, self.val);
        match &self.kind {
            SplitKind::Folders => {
                write!(f, "{train} train / {val} validation images (train/ and val/ folders)")
            }
            SplitKind::Stratified { fraction, seed } => write!(
                f,
                "{train} train / {val} validation images (stratified, {}%, seed {seed})",
                fraction * 100.0
            ),
            SplitKind::TensorFiles { val: path } => {
                write!(f, "{train} train / {val} validation samples ({})", path.display())
            }
            SplitKind::TrainingFile => write!(
                f,
                "{train} train samples, validated on the same samples (give --val for held-out data)"
            ),
        }
    }
}

/// FNV-1a, 64 bits (tensor samples by their XXH3 digests, [`Fnv::write_sample`]): a stable
/// hash of the sample list.
pub(crate) struct Fnv(u64);

/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl Fnv {
    pub(crate) fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds one sample's values (`bytes`, little-endian) as their XXH3 digest (64 bits):
    /// [`Self::write`] is a chain of dependent steps, one per byte, a serial share of every
    /// training run on a tensor file.
    pub(crate) fn write_sample(&mut self, bytes: &[u8]) {
        self.write(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
    }

    pub(crate) fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// Counts per class of labelled samples.
pub(crate) fn class_counts(
    names: &[String],
    train: impl Iterator<Item = usize>,
    val: impl Iterator<Item = usize>,
) -> Vec<ClassCount> {
    let mut counts: Vec<ClassCount> =
        names.iter().map(|n| ClassCount { name: n.clone(), train: 0, val: 0 }).collect();
    for label in train {
        counts[label].train += 1;
    }
    for label in val {
        counts[label].val += 1;
    }
    counts
}

/// The folder that holds the training classes: `DATA/train` when present, else `DATA`.
pub(crate) fn training_root(data: &Path) -> PathBuf {
    if data.join("train").is_dir() {
        data.join("train")
    } else {
        data.to_path_buf()
    }
}

/// The folder `sprout eval` measures: `DATA/val`, else `DATA/train`, else `DATA`.
pub(crate) fn evaluation_root(data: &Path) -> PathBuf {
    if data.join("val").is_dir() {
        data.join("val")
    } else {
        training_root(data)
    }
}

/// Opens the class folders of `root`; with `known` (a model whose class names are fixed),
/// every folder must be one of them and every one of them must have a folder, and labels
/// follow their order. `what` names the other side in messages ("the model").
pub(crate) fn open_classes(
    root: &Path,
    known: Option<&[String]>,
    what: &str,
) -> Result<Dataset, TrainError> {
    let dataset = Dataset::open(root)?;
    match known {
        Some(known) => relabel(dataset, known, what),
        None => Ok(dataset),
    }
}

/// `dataset` with the labels of `classes`, which must be exactly its class folders.
fn relabel(dataset: Dataset, classes: &[String], what: &str) -> Result<Dataset, TrainError> {
    let unknown: Vec<&str> =
        dataset.classes.iter().filter(|c| !classes.contains(c)).map(String::as_str).collect();
    let missing: Vec<&str> =
        classes.iter().filter(|c| !dataset.classes.contains(c)).map(String::as_str).collect();
    let mut problems = Vec::new();
    if !unknown.is_empty() {
        problems.push(format!("class folders {what} does not have: {}", unknown.join(", ")));
    }
    if !missing.is_empty() {
        problems.push(format!("no folder for classes of {what}: {}", missing.join(", ")));
    }
    if !problems.is_empty() {
        return Err(TrainError::Mismatch(format!(
            "{}: {} ({what} has {})",
            dataset.root.display(),
            problems.join("; "),
            classes.join(", ")
        )));
    }
    let position = |name: &String| classes.iter().position(|c| c == name).expect("checked above");
    let map: Vec<usize> = dataset.classes.iter().map(position).collect();
    let mut samples: Vec<(PathBuf, usize)> =
        dataset.samples.into_iter().map(|(path, label)| (path, map[label])).collect();
    samples.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    Ok(Dataset { root: dataset.root, classes: classes.to_vec(), samples })
}

/// The training and validation images of the folder `data` (see the crate docs for the
/// layouts), with labels in the order of `known` when given. `fraction` is the
/// `--val-fraction` given, if any: an error with `DATA/val`, which is used as given.
pub(crate) fn split_folder(
    data: &Path,
    known: Option<&[String]>,
    fraction: Option<f32>,
    seed: u64,
) -> Result<(Dataset, Dataset, DataSplit), TrainError> {
    let (train_dir, val_dir) = (data.join("train"), data.join("val"));
    let (train, val, kind) = if val_dir.is_dir() {
        if !train_dir.is_dir() {
            return Err(TrainError::Mismatch(format!(
                "{}: has val/ but no train/ folder; put the training images in {}",
                data.display(),
                train_dir.display()
            )));
        }
        if let Some(f) = fraction {
            return Err(TrainError::Mismatch(format!(
                "--val-fraction {f}: {} has train/ and val/ folders, which are used as given; \
                 leave --val-fraction out",
                data.display()
            )));
        }
        let train = open_classes(&train_dir, known, "the model")?;
        let val = open_classes(&val_dir, Some(&train.classes), "train/")?;
        (train, val, SplitKind::Folders)
    } else {
        let fraction = fraction.unwrap_or(DEFAULT_VAL_FRACTION);
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(TrainError::Mismatch(format!(
                "--val-fraction {fraction}: must lie between 0 and 1 (exclusive)"
            )));
        }
        let all = open_classes(&training_root(data), known, "the model")?;
        let (train, val) = all.split(fraction, seed);
        if val.is_empty() {
            return Err(TrainError::Mismatch(format!(
                "{}: every class has a single image: nothing is left to validate on; add \
                 images or give train/ and val/ folders",
                all.root.display()
            )));
        }
        (train, val, SplitKind::Stratified { fraction, seed })
    };
    let mut hash = Fnv::new();
    for (part, set) in [(b"train", &train), (b"val\0\0", &val)] {
        hash.write(part);
        for (path, label) in &set.samples {
            let relative = path.strip_prefix(data).unwrap_or(path);
            hash.write(relative.to_string_lossy().as_bytes());
            hash.write(&[0]);
            hash.write(&(*label as u64).to_le_bytes());
        }
    }
    let labels = |d: &Dataset| d.samples.iter().map(|s| s.1).collect::<Vec<_>>().into_iter();
    let split = DataSplit {
        kind,
        train: train.len(),
        val: val.len(),
        classes: class_counts(&train.classes, labels(&train), labels(&val)),
        hash: hash.hex(),
    };
    Ok((train, val, split))
}

#[cfg(test)]
mod tests {
    use super::Fnv;

    /// A change of any one bit of a sample changes its hash.
    #[test]
    fn sample_hashes_see_every_bit_of_a_sample() {
        let hash = |bytes: &[u8]| {
            let mut h = Fnv::new();
            h.write_sample(bytes);
            h.hex()
        };
        let sample: Vec<u8> = (0..84u8).map(|b| b.wrapping_mul(37)).collect();
        let original = hash(&sample);
        for bit in 0..8 * sample.len() {
            let mut changed = sample.clone();
            changed[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(hash(&changed), original, "bit {bit}");
        }
    }
}
