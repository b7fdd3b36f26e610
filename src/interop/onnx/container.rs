//! ONNX as the registry sees it: a `ModelProto` recognised by its first fields, its near-miss
//! hint, its openers.

use super::OnnxSource;
use crate::interop::container::{Container, boxed};

/// Whether `head` starts as `onnx.save` writes a `ModelProto`: `ir_version` (field 1, a
/// varint of 1 to 127) first, then one of the model's other fields (`producer_name`,
/// `producer_version`, `domain`, `model_version`, `doc_string`, `graph`, `opset_import`,
/// `metadata_props`).
fn sniff(head: &[u8], _len: u64) -> bool {
    matches!(
        head,
        [
            0x08,
            1..=0x7f,
            0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42 | 0x72,
            ..
        ]
    )
}

/// ONNX models: their initializers.
pub(crate) const CONTAINER: Container = Container {
    name: "onnx",
    sniff,
    hint: "this looks like an ONNX model: open its initializers with \
           `burnpack::interop::onnx::OnnxSource` or `burnpack::interop::open_any`, or convert \
           them with `bpk convert IN.onnx OUT.bpk`",
    open: |path, options| boxed(OnnxSource::open_with(path, options)),
    open_file: |path, file, options| boxed(OnnxSource::open_opened(path, Some(file), options)),
    open_index: None,
    index_shards: None,
    from_bytes: |bytes, options| boxed(OnnxSource::from_bytes(bytes, options)),
    refuse: None,
};
