//! The link's messages: what the host asks ([`Request`]) and what the device answers
//! ([`Response`]), with the records they carry. Postcard encodes them, so the order of
//! variants and fields is part of the protocol: change it only with [`PROTOCOL_VERSION`].

use core::fmt;

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks. `Request::Hello` and `Response::Hello` keep their
/// first fields (`protocol`) in every version, so a mismatch is reported, never misparsed.
/// Version 2: streamed training (`StartStream`, `StreamSample`, `EndEpoch`,
/// [`DeviceInfo::streams`]).
pub const PROTOCOL_VERSION: u16 = 2;

/// The most payload bytes one frame carries; samples and checkpoints move in chunks of this.
pub const MAX_CHUNK: usize = 512;

/// A request from the host. Every request gets exactly one [`Response`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Opens a conversation. A `session` the device has not seen last resets its transfer
    /// state; the same `session` again (a reconnect) keeps it, so transfers resume.
    Hello {
        protocol: u16,
        session: u32,
    },
    /// The name of class `label`.
    ClassName {
        label: u16,
    },
    /// Forget every stored sample.
    ClearSamples,
    /// One chunk of sample `id`: RGB8 pixels, row-major, interleaved, of the device's
    /// [`SampleShape`]. Ids are the host's; a new id starts a new sample.
    PushSample {
        id: u32,
        label: u16,
        split: Split,
        #[serde(borrow)]
        chunk: Chunk<'a>,
    },
    StartTraining(TrainingConfig),
    StopTraining,
    QueryProgress,
    /// Up to [`MAX_CHUNK`] bytes of the device's checkpoint from `offset`.
    PullCheckpoint {
        offset: u32,
    },
    /// One chunk of a checkpoint for the device to store; the last one commits it.
    PushCheckpoint {
        checkpoint: CheckpointInfo,
        #[serde(borrow)]
        chunk: Chunk<'a>,
    },
    /// Starts a streamed run of `epochs` epochs (a device whose [`DeviceInfo::streams`]):
    /// the device stores no sample; the host sends the held-out samples with
    /// [`Request::StreamSample`] and ends that pass with `EndEpoch { epoch: 0 }` (the start's
    /// accuracy), then for each epoch `n` the training samples (one step each), the held-out
    /// ones again and `EndEpoch { epoch: n }`.
    StartStream(TrainingConfig),
    /// One chunk of streamed sample `id` of `total` bytes (RGB8 pixels of the device's
    /// [`SampleShape`]): with its last chunk the device trains one step on it
    /// ([`Split::Train`]) or scores it ([`Split::Validation`]). Ids are the host's and new
    /// for every sample sent, so a repeated chunk is never carried out twice.
    StreamSample {
        id: u32,
        label: u16,
        split: Split,
        total: u32,
        #[serde(borrow)]
        chunk: Chunk<'a>,
    },
    /// Ends pass `epoch` of a streamed run (0: the start's evaluation); answered with the
    /// run's [`Response::Progress`]. Ending a pass that already ended answers the same.
    EndEpoch {
        epoch: u16,
    },
}

/// The device's answer to one [`Request`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response<'a> {
    Hello {
        protocol: u16,
        device: DeviceInfo,
    },
    ClassName(&'a str),
    /// The request was carried out.
    Ack,
    /// A chunk was stored (or was already there): the transfer continues at `next`.
    Received {
        next: u32,
    },
    Progress(TrainingProgress),
    /// Checkpoint bytes `offset..offset + bytes.len()` of `checkpoint`.
    Checkpoint {
        checkpoint: CheckpointInfo,
        offset: u32,
        bytes: &'a [u8],
    },
    /// The request was understood and refused.
    Error(DeviceError),
    /// The last frame arrived damaged: send it again.
    Nack,
}

/// Part of a larger transfer: bytes `offset..offset + bytes.len()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk<'a> {
    pub offset: u32,
    pub bytes: &'a [u8],
}

/// What the device tells about itself in its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The graph hash of the model the device trains (what checkpoints record).
    pub model_hash: u64,
    /// How many classes the model tells apart; labels are `0..classes`.
    pub classes: u16,
    /// The samples the device takes.
    pub sample: SampleShape,
    /// Samples stored now.
    pub samples: u32,
    /// The checkpoint the device would send, if it has one.
    pub checkpoint: Option<CheckpointInfo>,
    /// The device trains from its input (it cannot store the samples): the host streams
    /// them every epoch ([`Request::StartStream`]) instead of pushing them once.
    pub streams: bool,
}

/// The picture size a device trains on; samples travel as RGB8, `3 * width * height` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleShape {
    pub width: u16,
    pub height: u16,
}

impl SampleShape {
    /// The bytes of one sample.
    pub fn bytes(self) -> u32 {
        3 * u32::from(self.width) * u32::from(self.height)
    }
}

/// Whether a sample is trained on or held out to measure accuracy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Split {
    Train,
    Validation,
}

/// A whole checkpoint: its length and the CRC-32 ([`crate::checksum::CRC32`]) of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub len: u32,
    pub crc: u32,
}

impl CheckpointInfo {
    /// The length and CRC-32 of `bytes`; `None` past the 4 GiB a `u32` length can announce.
    pub fn of(bytes: &[u8]) -> Option<Self> {
        let len = u32::try_from(bytes.len()).ok()?;
        Some(Self { len, crc: crate::checksum::CRC32.checksum(bytes) })
    }
}

/// How to train.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingConfig {
    pub epochs: u16,
    /// `None`: the rate the device's plan was compiled with.
    pub learning_rate: Option<f32>,
}

/// Where training stands.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingProgress {
    pub state: TrainingState,
    /// Epochs finished, of `epochs`.
    pub epoch: u16,
    pub epochs: u16,
    /// Optimizer steps taken since training started.
    pub step: u32,
    /// The mean training loss of the last epoch (or of the steps so far in the first).
    pub loss: f32,
    /// Accuracy on the validation samples after the last epoch, in `[0, 1]`.
    pub accuracy: Option<f32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrainingState {
    Idle,
    Running,
    Finished,
    Stopped,
    /// Training stopped on its own: a non-finite loss, or storage failed.
    Failed,
}

/// Why a device refused a request. Sent in [`Response::Error`]; the firmware's
/// [`super::DeviceApp`] returns these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeviceError {
    /// Training is running; stop it first.
    Busy,
    /// There is no checkpoint to send yet.
    NoCheckpoint,
    /// Training needs samples; none are stored.
    NoSamples,
    /// A label outside `0..classes`.
    UnknownLabel { label: u16, classes: u16 },
    /// The sample store is full.
    SamplesFull { capacity: u32 },
    /// The checkpoint does not fit the device's storage.
    CheckpointTooLarge { capacity: u32 },
    /// The received checkpoint's bytes do not match the CRC-32 it was announced with.
    ChecksumMismatch { expected: u32, computed: u32 },
    /// The checkpoint is not one this device's model can use.
    CheckpointRejected,
    /// Writing to storage failed.
    Storage,
    /// A chunk outside its transfer.
    OutOfRange { offset: u32, len: u32, total: u32 },
    /// The reply would not fit in a frame.
    ReplyTooLarge,
    /// The device's trainer failed to carry out the request (its log says why).
    Failed,
    /// A streamed sample announced another size than the device's samples.
    SampleSize { expected: u32, actual: u32 },
    /// The device trains from cached features: push the samples and start training.
    NotStreamed,
    /// The device trains from its input: stream the samples every epoch.
    StreamsSamples,
    /// No streamed run is going on.
    NoStream,
    /// The host ended pass `host` of a streamed run, the device is at pass `device`.
    WrongEpoch { device: u16, host: u16 },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DeviceError::Busy => write!(f, "the device is training; stop it first"),
            DeviceError::NoCheckpoint => write!(f, "the device has no checkpoint yet"),
            DeviceError::NoSamples => write!(f, "the device has no samples to train on"),
            DeviceError::UnknownLabel { label, classes } => {
                write!(f, "label {label} is not one of the device's {classes} classes")
            }
            DeviceError::SamplesFull { capacity } => {
                write!(f, "the device's sample store is full ({capacity} samples)")
            }
            DeviceError::CheckpointTooLarge { capacity } => {
                write!(f, "the checkpoint exceeds the device's {capacity} bytes of storage")
            }
            DeviceError::ChecksumMismatch { expected, computed } => write!(
                f,
                "checkpoint CRC mismatch: announced {expected:#010x}, received bytes give {computed:#010x}"
            ),
            DeviceError::CheckpointRejected => {
                write!(f, "the device's model cannot use this checkpoint")
            }
            DeviceError::Storage => write!(f, "the device failed to write its storage"),
            DeviceError::OutOfRange { offset, len, total } => write!(
                f,
                "chunk {offset}..{} lies outside a transfer of {total} bytes",
                u64::from(offset) + u64::from(len)
            ),
            DeviceError::ReplyTooLarge => write!(f, "the device's reply did not fit in a frame"),
            DeviceError::Failed => write!(f, "the device failed to carry out the request"),
            DeviceError::SampleSize { expected, actual } => write!(
                f,
                "a streamed sample of {actual} bytes, the device takes samples of {expected}"
            ),
            DeviceError::NotStreamed => {
                write!(f, "the device trains from stored samples; it streams none")
            }
            DeviceError::StreamsSamples => {
                write!(f, "the device trains from its input: samples must be streamed")
            }
            DeviceError::NoStream => write!(f, "the device is not on a streamed run"),
            DeviceError::WrongEpoch { device, host } => write!(
                f,
                "the host ended pass {host} of the streamed run, the device is at pass {device}"
            ),
        }
    }
}

impl core::error::Error for DeviceError {}

/// The kind of a request, to name it in errors ("no answer to push checkpoint").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Hello,
    ClassName,
    ClearSamples,
    PushSample,
    StartTraining,
    StopTraining,
    QueryProgress,
    PullCheckpoint,
    PushCheckpoint,
    StartStream,
    StreamSample,
    EndEpoch,
}

impl Request<'_> {
    pub fn kind(&self) -> RequestKind {
        match self {
            Request::Hello { .. } => RequestKind::Hello,
            Request::ClassName { .. } => RequestKind::ClassName,
            Request::ClearSamples => RequestKind::ClearSamples,
            Request::PushSample { .. } => RequestKind::PushSample,
            Request::StartTraining(_) => RequestKind::StartTraining,
            Request::StopTraining => RequestKind::StopTraining,
            Request::QueryProgress => RequestKind::QueryProgress,
            Request::PullCheckpoint { .. } => RequestKind::PullCheckpoint,
            Request::PushCheckpoint { .. } => RequestKind::PushCheckpoint,
            Request::StartStream(_) => RequestKind::StartStream,
            Request::StreamSample { .. } => RequestKind::StreamSample,
            Request::EndEpoch { .. } => RequestKind::EndEpoch,
        }
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestKind::Hello => "hello",
            RequestKind::ClassName => "class name",
            RequestKind::ClearSamples => "clear samples",
            RequestKind::PushSample => "push sample",
            RequestKind::StartTraining => "start training",
            RequestKind::StopTraining => "stop training",
            RequestKind::QueryProgress => "query progress",
            RequestKind::PullCheckpoint => "pull checkpoint",
            RequestKind::PushCheckpoint => "push checkpoint",
            RequestKind::StartStream => "start stream",
            RequestKind::StreamSample => "stream sample",
            RequestKind::EndEpoch => "end epoch",
        })
    }
}
