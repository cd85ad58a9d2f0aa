//! The subset of `onnx.proto` sprout reads and writes, as `prost` messages.
//!
//! Field numbers and types are those of the official schema (`onnx/onnx.proto`, proto2,
//! IR version 7 and later): `ModelProto` (ir_version = 1, producer_name = 2,
//! producer_version = 3, domain = 4, model_version = 5, doc_string = 6, graph = 7,
//! opset_import = 8, metadata_props = 14), `GraphProto` (node = 1, name = 2,
//! initializer = 5, doc_string = 10, input = 11, output = 12, value_info = 13),
//! `NodeProto` (input = 1, output = 2, name = 3, op_type = 4, attribute = 5,
//! doc_string = 6, domain = 7), `AttributeProto` (name = 1, f = 2, i = 3, s = 4, t = 5,
//! floats = 7, ints = 8, strings = 9, tensors = 10, doc_string = 13, type = 20),
//! `TensorProto` (dims = 1, data_type = 2, float_data = 4 packed, int32_data = 5 packed,
//! int64_data = 7 packed, name = 8, raw_data = 9, double_data = 10 packed,
//! doc_string = 12, data_location = 14), `ValueInfoProto` (name = 1, type = 2,
//! doc_string = 3), `TypeProto` (tensor_type = 1 in the `value` oneof, denotation = 6),
//! `TypeProto.Tensor` (elem_type = 1, shape = 2), `TensorShapeProto` (dim = 1),
//! `TensorShapeProto.Dimension` (dim_value = 1 / dim_param = 2 oneof, denotation = 3),
//! `OperatorSetIdProto` (domain = 1, version = 2), `StringStringEntryProto` (key = 1,
//! value = 2). Fields sprout does not use (graphs in attributes, sparse tensors,
//! sequence and map types, training info) are skipped by the decoder as unknown fields.

/// `TensorProto.DataType.FLOAT`.
pub const FLOAT: i32 = 1;
/// `TensorProto.DataType.INT32`.
pub const INT32: i32 = 6;
/// `TensorProto.DataType.INT64`.
pub const INT64: i32 = 7;
/// `TensorProto.DataType.BOOL`.
pub const BOOL: i32 = 9;
/// `TensorProto.DataType.DOUBLE`.
pub const DOUBLE: i32 = 11;

/// `AttributeProto.AttributeType` values.
pub mod attribute_type {
    pub const FLOAT: i32 = 1;
    pub const INT: i32 = 2;
    pub const STRING: i32 = 3;
    pub const TENSOR: i32 = 4;
    pub const FLOATS: i32 = 6;
    pub const INTS: i32 = 7;
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, optional, tag = "2")]
    pub producer_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub producer_version: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub model_version: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, optional, tag = "1")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "2")]
    pub version: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(string, optional, tag = "10")]
    pub doc_string: Option<String>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub op_type: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub domain: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "13")]
    pub doc_string: Option<String>,
    /// An `AttributeType` (see [`attribute_type`]).
    #[prost(int32, optional, tag = "20")]
    pub r#type: Option<i32>,
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub s: Option<Vec<u8>>,
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    /// A `TensorProto.DataType` ([`FLOAT`], [`INT64`], ...).
    #[prost(int32, optional, tag = "2")]
    pub data_type: Option<i32>,
    #[prost(float, repeated, packed = "true", tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int32, repeated, packed = "true", tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(int64, repeated, packed = "true", tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, optional, tag = "8")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "12")]
    pub doc_string: Option<String>,
    #[prost(bytes = "vec", optional, tag = "9")]
    pub raw_data: Option<Vec<u8>>,
    #[prost(double, repeated, packed = "true", tag = "10")]
    pub double_data: Vec<f64>,
    /// `DEFAULT = 0`, `EXTERNAL = 1` (external data is not supported).
    #[prost(int32, optional, tag = "14")]
    pub data_location: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    #[prost(string, optional, tag = "3")]
    pub doc_string: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    #[prost(oneof = "type_proto::Value", tags = "1")]
    pub value: Option<type_proto::Value>,
    #[prost(string, optional, tag = "6")]
    pub denotation: Option<String>,
}

pub mod type_proto {
    /// `TypeProto.Tensor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        #[prost(int32, optional, tag = "1")]
        pub elem_type: Option<i32>,
        #[prost(message, optional, tag = "2")]
        pub shape: Option<super::TensorShapeProto>,
    }

    /// The `value` oneof (sequence = 4 and map = 5 are not read).
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(message, tag = "1")]
        TensorType(Tensor),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

pub mod tensor_shape_proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dimension {
        #[prost(oneof = "dimension::Value", tags = "1, 2")]
        pub value: Option<dimension::Value>,
        #[prost(string, optional, tag = "3")]
        pub denotation: Option<String>,
    }

    pub mod dimension {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(int64, tag = "1")]
            DimValue(i64),
            #[prost(string, tag = "2")]
            DimParam(String),
        }
    }
}

// ---- constructors, for the exporter and for tests that write models ----

impl AttributeProto {
    fn named(name: &str, kind: i32) -> Self {
        Self { name: Some(name.into()), r#type: Some(kind), ..Default::default() }
    }

    pub fn int(name: &str, value: i64) -> Self {
        Self { i: Some(value), ..Self::named(name, attribute_type::INT) }
    }

    pub fn ints(name: &str, values: &[i64]) -> Self {
        Self { ints: values.to_vec(), ..Self::named(name, attribute_type::INTS) }
    }

    pub fn float(name: &str, value: f32) -> Self {
        Self { f: Some(value), ..Self::named(name, attribute_type::FLOAT) }
    }

    pub fn floats(name: &str, values: &[f32]) -> Self {
        Self { floats: values.to_vec(), ..Self::named(name, attribute_type::FLOATS) }
    }

    pub fn string(name: &str, value: &str) -> Self {
        Self { s: Some(value.as_bytes().to_vec()), ..Self::named(name, attribute_type::STRING) }
    }

    pub fn tensor(name: &str, value: TensorProto) -> Self {
        Self { t: Some(value), ..Self::named(name, attribute_type::TENSOR) }
    }
}

impl TensorProto {
    /// A float tensor stored as little-endian `raw_data`, as PyTorch writes them.
    pub fn f32(name: &str, dims: &[i64], values: &[f32]) -> Self {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(FLOAT),
            raw_data: Some(raw),
            ..Default::default()
        }
    }

    /// An `int64` tensor stored in `int64_data`.
    pub fn i64(name: &str, dims: &[i64], values: &[i64]) -> Self {
        Self {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(INT64),
            int64_data: values.to_vec(),
            ..Default::default()
        }
    }
}

impl NodeProto {
    /// A node of the default domain.
    pub fn new(op_type: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Self {
        Self {
            op_type: Some(op_type.into()),
            name: Some(name.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    pub fn with(mut self, attribute: AttributeProto) -> Self {
        self.attribute.push(attribute);
        self
    }
}

/// A dimension of a value's shape: fixed, or symbolic (a dynamic axis).
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Fixed(i64),
    Symbolic(String),
}

impl ValueInfoProto {
    /// A float tensor value with a shape.
    pub fn f32(name: &str, dims: &[Dim]) -> Self {
        use tensor_shape_proto::{dimension, Dimension};
        let dim = dims
            .iter()
            .map(|d| Dimension {
                value: Some(match d {
                    Dim::Fixed(v) => dimension::Value::DimValue(*v),
                    Dim::Symbolic(s) => dimension::Value::DimParam(s.clone()),
                }),
                denotation: None,
            })
            .collect();
        Self {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(FLOAT),
                    shape: Some(TensorShapeProto { dim }),
                })),
                denotation: None,
            }),
            doc_string: None,
        }
    }
}

impl ModelProto {
    /// A model of `graph` importing the default-domain operator set `opset`.
    pub fn new(graph: GraphProto, opset: i64) -> Self {
        Self {
            // IR version 7 came with opset 13 (ONNX 1.8), IR 4 with opset 9 (ONNX 1.5).
            ir_version: Some(if opset >= 13 { 7 } else { 4 }),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            producer_name: Some("sprout".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            graph: Some(graph),
            ..Default::default()
        }
    }
}
