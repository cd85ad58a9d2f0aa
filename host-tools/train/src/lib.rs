//! sprout-train: training on the desktop. Data sources (folder-per-class image trees and
//! `.npz` / `.safetensors` tensor files), the training loop over the CPU backend with
//! validation, atomic checkpoints that resume bit-identically, and the training curve.
//!
//! ```no_run
//! use sprout_train::{open_data, train, Model, Pipeline, TrainOptions};
//! use sprout_zoo::Architecture;
//! # fn main() -> Result<(), sprout_train::TrainError> {
//! let mut model = Model::from_zoo(Architecture::LeafNet, 16, 0)?;
//! let (mut data, mut val) =
//!     open_data(&mut model, "leaves".as_ref(), None, true, true, 0, &Pipeline::default())?;
//! let options = TrainOptions { epochs: 5, out_dir: Some("runs/leafnet".into()), ..Default::default() };
//! let outcome = train(&model, &mut data, &mut val, &options, &mut |_| {})?;
//! println!("validation accuracy {:.1} %", 100.0 * outcome.metrics.accuracy());
//! # Ok(())
//! # }
//! ```

mod checkpoint;
mod curve;
mod error;
mod files;
mod metrics;
mod model;
mod quantize;
mod source;
mod trainer;

pub use checkpoint::{
    checkpoint_name, read_checkpoint, write_checkpoint, Checkpoint, EpochRecord, KEEP, MAGIC,
};
pub use curve::{render_curve, write_curve};
pub use error::{CheckpointError, TrainError};
pub use files::write_atomic;
pub use metrics::{argmax, softmax, Metrics};
pub use model::{Inference, Model};
pub use quantize::{calibrate, quantize, QuantizeSettings, RangeMethod};
pub use source::{encode_npy, read_npy, read_tensor_file, DataSource, TensorSet};
/// How image folders are read (re-exported for [`open_data`]).
pub use sprout_data::Pipeline;
pub use trainer::{
    folder_classes, open_data, train, LossScaleReport, OptimizerChoice, Outcome, ScheduleChoice,
    TrainEvent, TrainOptions,
};
