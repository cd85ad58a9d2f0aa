//! `TrainError`: what can go wrong loading data, building the model, training, writing
//! checkpoints and outputs; every message names the file, tensor or setting at fault.

use std::path::PathBuf;

pub use sprout_core::format::host_checkpoint::CheckpointError;
use sprout_core::{ExecError, FormatError, GraphError};

/// A training, evaluation or inference failure.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A file or folder to read does not exist.
    #[error("not found: {}", path.display())]
    NotFound { path: PathBuf },
    /// A file of another kind than the one expected (a PNG given as a model).
    #[error("{} is {found}, not {expected}", path.display())]
    WrongKind { path: PathBuf, found: &'static str, expected: String },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// An output path that cannot be written, or that names an input.
    #[error("{}: {detail}", path.display())]
    Output { path: PathBuf, detail: String },
    /// A tensor file (`.npz`, `.npy`, `.safetensors`) that cannot be read at all.
    #[error("{}: {detail}", path.display())]
    TensorFile { path: PathBuf, detail: String },
    /// A tensor of a tensor file with the wrong shape, dtype or values.
    #[error("{}: tensor '{tensor}': expected {expected}, found {actual}", path.display())]
    Tensor { path: PathBuf, tensor: String, expected: String, actual: String },
    /// The image-folder data set could not be read.
    #[error(transparent)]
    Data(#[from] sprout_data::DataError),
    /// A `.sprout` model file that does not decode.
    #[error("{}: {source}", path.display())]
    Model { path: PathBuf, source: FormatError },
    /// A checkpoint that does not decode or does not belong to this training run.
    #[error("checkpoint {}: {source}", path.display())]
    Checkpoint { path: PathBuf, source: CheckpointError },
    /// Recording, differentiating or compiling the model failed.
    #[error("cannot compile the model: {0}")]
    Graph(#[from] GraphError),
    /// The `--trainable` choice selects nothing sensible.
    #[error(transparent)]
    Select(#[from] sprout_zoo::SelectError),
    /// Running a plan failed.
    #[error("running the model failed: {0}")]
    Exec(ExecError),
    /// The training curve could not be drawn.
    #[error("{}: cannot draw the curve: {detail}", path.display())]
    Plot { path: PathBuf, detail: String },
    /// A model whose output is not the `[N, classes]` logits that training, evaluation and
    /// prediction need (a backbone's feature map).
    #[error(
        "{}: the model's output '{output}' has shape {shape:?}, not [N, classes] logits; \
         training, eval and predict need a classifier (`sprout run` gives any output)",
        path.display()
    )]
    NotClassifier { path: PathBuf, output: String, shape: Vec<usize> },
    /// Training produced a non-finite loss or weights: it stops, and nothing is written from
    /// them (the last good checkpoint stays).
    #[error(
        "training stopped: {what} at epoch {epoch}, batch {batch}; {origin}. Nothing was \
         saved from it (the last good checkpoint stays); lower --lr or look for NaN or \
         infinity in the data"
    )]
    NonFinite { what: String, epoch: u32, batch: usize, origin: String },
    /// The data does not fit the model (class count, sample shape), or a setting is invalid.
    #[error("{0}")]
    Mismatch(String),
}

impl From<ExecError> for TrainError {
    fn from(e: ExecError) -> Self {
        TrainError::Exec(e)
    }
}

impl TrainError {
    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
