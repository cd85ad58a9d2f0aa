//! sprout-train: training on the desktop. Data sources (folder-per-class image trees and
//! `.npz` / `.safetensors` tensor files), the training loop over the CPU backend with
//! honest train/validation splits, validation, atomic checkpoints that resume
//! bit-identically, and run folders (`args.json`, `metrics.csv`, the curve, early stopping).
//!
//! ```no_run
//! use sprout_train::{open_data, train, DataOptions, Model, TrainOptions};
//! use sprout_zoo::Architecture;
//! # fn main() -> Result<(), sprout_train::TrainError> {
//! let mut model = Model::from_zoo(Architecture::LeafNet, 16, 0)?;
//! let mut data = open_data(&mut model, "leaves".as_ref(), &DataOptions::default())?;
//! println!("{}", data.split); // 240 train / 60 validation images (stratified, 20%, seed 0)
//! let options = TrainOptions { epochs: 5, out_dir: Some("runs/leafnet".into()), ..Default::default() };
//! let outcome = train(&model, &mut data.train, &mut data.val, &options, &mut |_| {})?;
//! println!("validation accuracy {:.1} %", 100.0 * outcome.metrics.accuracy());
//! # Ok(())
//! # }
//! ```

mod agreement;
mod bias_correction;
mod calibration;
mod checkpoint;
mod closest_calibration;
mod error;
mod files;
mod kind;
mod logit_adjust;
mod memory;
mod metrics;
mod metrics_csv;
mod model;
mod mse_range;
mod new_head;
mod npy_stream;
mod plot;
mod preprocess;
mod quantize;
mod run_folder;
mod run_record;
mod source;
mod split;
mod tensor_file;
mod trainer;
mod version;

pub use agreement::{default_max_layers, measurable, FallbackTarget, KeptFloat, NOT_CLASS_SCORES};
pub use calibration::{even_pick, open_calibration};
pub use checkpoint::{
    checkpoint_name, read_checkpoint, write_checkpoint, Checkpoint, EpochRecord, KEEP, MAGIC,
};
pub use error::{CheckpointError, TrainError};
pub use files::{check_output, write_atomic};
pub use kind::{expect_kind, read_kind, FileKind};
pub use logit_adjust::{adjusted_loss, LogitAdjust};
pub use memory::{check_graph, graph_bytes, initial_memory};
pub use metrics::{argmax, softmax, Metrics};
pub use metrics_csv::{
    read_metrics, render_metrics, write_metrics, MetricsRow, HEADER, METRICS_FILE,
};
pub use model::{Inference, Model, Network, INFERENCE_BATCH};
pub use npy_stream::{write_npy_chunks, NpySamples};
pub use plot::{render_png, render_svg, write_curves, CURVE_SIZE};
pub use preprocess::{fit_of, image_input, ImageInput};
pub use quantize::{
    calibrate, calibrate_with_progress, quantize, quantize_with_progress, quantize_with_reports,
    Agreement, Calibration, Int8Model, QuantizeSettings, RangeMethod, CANDIDATES,
};
pub use run_folder::run_folder;
pub use run_record::{RunRecord, RECORD_FILE};
pub use source::{
    encode_npy, read_npy, read_tensor_file, read_unlabelled_tensors, DataSource, TensorSamples,
    TensorSet,
};
pub use split::{ClassCount, DataSplit, SplitKind, DEFAULT_VAL_FRACTION};
pub use sprout_cpu::{KernelProfile, KernelTime};
/// How image folders are read (re-exported for [`DataOptions`]).
pub use sprout_data::Pipeline;
pub use tensor_file::TensorFile;
pub use trainer::{
    check_gradient_offset, folder_classes, open_data, open_eval_data, train, DataOptions,
    LossScaleReport, NamedOffset, OptimizerChoice, Outcome, ScheduleChoice, TrainData, TrainEvent,
    TrainOptions,
};
pub use version::{version_string, GIT_COMMIT, VERSION};
