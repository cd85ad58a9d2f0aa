//! sprout-onnx: ONNX import into a sprout [`Graph`](sprout_core::Graph) and export of a
//! graph's inference part to ONNX (opset 13) and its weights to safetensors, and back
//! (named safetensors weights applied onto a graph, with checks).
//!
//! Initializer names are weight names both ways, so a head fine-tuned on the device
//! loads straight back into PyTorch by name (`load_state_dict` from the safetensors file,
//! or the ONNX initializers). Opsets 11 to 24 import; the operators an ordinary CNN from
//! PyTorch's exporters uses are mapped (see `host-tools/README.md`), and shape-computing
//! subgraphs are constant-folded from the static shapes.
//!
//! The protobuf messages are declared with `prost` from the official `onnx.proto` (see
//! [`proto`]); no protobuf compiler is needed.

pub mod error;
pub mod export;
mod fold;
pub mod import;
pub mod metadata;
mod patterns;
pub mod proto;
pub mod weights_in;

pub use error::OnnxError;
pub use export::{
    export_onnx, export_onnx_with_metadata, export_proto, export_safetensors, graph_weights,
    state_dict, NamedTensor, Weights,
};
pub use import::{import, import_with, ImportOptions, Imported};
pub use metadata::{metadata_props, read_metadata_props};
pub use weights_in::{apply_state_dict, read_safetensors, with_weights};
