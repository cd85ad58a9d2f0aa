//! `LinkError`: what can go wrong talking to a device, each message naming the port, the
//! request, the file or the value at fault.

use std::path::PathBuf;

use sprout_core::link::ClientError;

/// A failure of a device command.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No serial device by that name.
    #[error("serial port {port} not found (ports here: {})", list(available))]
    PortNotFound { port: String, available: Vec<String> },
    /// The serial device exists but would not open.
    #[error("cannot open serial port {port}: {source}")]
    OpenSerial { port: String, source: serialport::Error },
    /// A `tcp:` port that cannot be reached.
    #[error("cannot connect to tcp:{address}: {source}")]
    Connect { address: String, source: std::io::Error },
    /// The link failed or the device refused a request.
    #[error("{port}: {source}")]
    Link { port: String, source: ClientError<std::io::Error> },
    /// A checkpoint for another model.
    #[error(
        "the checkpoint belongs to model {checkpoint:#018x}, the device runs model {device:#018x}"
    )]
    ModelMismatch { device: u64, checkpoint: u64 },
    /// A file that is not a device checkpoint (as `sprout device pull` saves).
    #[error("{}: {source}", path.display())]
    NotACheckpoint {
        path: PathBuf,
        source: sprout_core::format::device_checkpoint::CheckpointError,
    },
    /// A device checkpoint file whose framing is damaged (or another kind of file).
    #[error("{}: not an intact device checkpoint file: {source}", path.display())]
    CheckpointFile { path: PathBuf, source: sprout_core::format::container::FrameError },
    /// A class folder the device's model does not know.
    #[error("class folder '{class}' in {} is not one of the device's classes ({})", folder.display(), list(device))]
    UnknownClass { class: String, folder: PathBuf, device: Vec<String> },
    /// The data folder cannot be read.
    #[error(transparent)]
    Data(#[from] sprout_data::DataError),
    /// Training ended in failure on the device.
    #[error("training failed on the device after {epoch} epochs")]
    TrainingFailed { epoch: u16 },
    /// An input file is missing or of the wrong kind, or writing an output failed (nothing
    /// partial is left behind).
    #[error(transparent)]
    Write(#[from] sprout_train::TrainError),
}

fn list(names: &[String]) -> String {
    match names.is_empty() {
        true => "none".into(),
        false => names.join(", "),
    }
}
