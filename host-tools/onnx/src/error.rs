//! What can go wrong importing or exporting ONNX: every variant names the node or tensor
//! and, where there is one, the expected against the found value.

use sprout_core::GraphError;

/// Why an ONNX model could not be imported, or a sprout graph not exported.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The bytes are not a protobuf-encoded `ModelProto`.
    #[error("not a valid ONNX model: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The model lacks something every model must have.
    #[error("invalid ONNX model: {detail}")]
    Malformed { detail: String },
    /// The model's default-domain operator set is outside the range sprout reads.
    #[error("opset {found} is not supported: sprout imports opsets {min} to {max} (export with opset_version between them)")]
    Opset { found: i64, min: i64, max: i64 },
    /// An operator sprout has no mapping for.
    #[error("unsupported ONNX operator '{op_type}' (node '{node_name}')")]
    UnsupportedOp { op_type: String, node_name: String },
    /// A supported operator with settings or operands sprout cannot run.
    #[error("{op_type} node '{node_name}': {detail}")]
    Unsupported { op_type: String, node_name: String, detail: String },
    /// A tensor's type, shape or stored data is wrong or unsupported.
    #[error("tensor '{tensor}': {detail}")]
    Tensor { tensor: String, detail: String },
    /// A node reads a value no earlier node, input or initializer defines.
    #[error(
        "node '{node_name}' reads '{value}', which no input, initializer or earlier node defines"
    )]
    UnknownValue { node_name: String, value: String },
    /// Recording the sprout graph failed.
    #[error("{context}: {source}")]
    Graph { context: String, source: GraphError },
    /// A sprout op with no ONNX counterpart in the inference graph.
    #[error("sprout {op} node '{node}' cannot be exported to ONNX")]
    NotExportable { op: &'static str, node: String },
    /// The weights given to an export lack a tensor's values or hold the wrong count.
    #[error("weight '{name}': {detail}")]
    Weight { name: String, detail: String },
    /// A `metadata_props` entry under one of sprout's keys has a value it cannot read.
    #[error("metadata_props '{key}': {detail}")]
    Metadata { key: String, detail: String },
    /// The safetensors writer refused the tensors.
    #[error("safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
}

pub(crate) fn malformed(detail: impl Into<String>) -> OnnxError {
    OnnxError::Malformed { detail: detail.into() }
}

pub(crate) fn tensor_error(tensor: &str, detail: impl Into<String>) -> OnnxError {
    OnnxError::Tensor { tensor: tensor.into(), detail: detail.into() }
}
