//! The few ONNX messages decoded whole, written by hand from `onnx.proto` (ONNX 1.23) with
//! `prost`'s derive (no `protoc` at build time). The large ones (`ModelProto`, `GraphProto`,
//! `NodeProto`) are walked field by field instead ([`super::model`]), so that a node list is
//! never held; a tensor's data fields are left on the wire (prost skips the fields a message
//! does not declare), to be read from the mapping.

/// `OperatorSetIdProto`: an operator set the model imports.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct OperatorSetId {
    /// The domain (`""` for the default ONNX domain).
    #[prost(string, optional, tag = "1")]
    pub domain: Option<String>,
    /// Its version.
    #[prost(int64, optional, tag = "2")]
    pub version: Option<i64>,
}

/// `StringStringEntryProto`: metadata and external-data entries.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StringStringEntry {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `TensorProto.Segment`: a tensor split over several messages (not read).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Segment {
    #[prost(int64, optional, tag = "1")]
    pub begin: Option<i64>,
    #[prost(int64, optional, tag = "2")]
    pub end: Option<i64>,
}

/// `TensorProto` without its data fields (`float_data`, `int32_data`, `string_data`,
/// `int64_data`, `raw_data`, `double_data`, `uint64_data`: tags 4-7 and 9-11), which stay in
/// the file and are found by [`super::model::data_fields`].
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TensorHeader {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, optional, tag = "2")]
    pub data_type: Option<i32>,
    #[prost(message, optional, tag = "3")]
    pub segment: Option<Segment>,
    #[prost(string, optional, tag = "8")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntry>,
    /// `DEFAULT` (0) or `EXTERNAL` (1).
    #[prost(int32, optional, tag = "14")]
    pub data_location: Option<i32>,
}

/// A decoding error in ONNX's terms (`onnx.proto`'s message names, what went wrong), not
/// `prost`'s (`failed to decode Protobuf message: TensorHeader.name: ...`).
pub(super) fn plain(e: &prost::DecodeError) -> String {
    e.to_string()
        .trim_start_matches("failed to decode Protobuf message: ")
        .replace("TensorHeader.", "TensorProto.")
        .replace("StringStringEntry.", "StringStringEntryProto.")
        .replace("OperatorSetId.", "OperatorSetIdProto.")
        .replace("Segment.", "TensorProto.Segment.")
        .replace(
            "invalid string value: data is not UTF-8 encoded",
            "not UTF-8",
        )
        .replace("buffer underflow", "a length past the end of its message")
}
