//! A record's dtype description as Burn's [`DType`]: the plain dtypes by name (the names
//! live in [`crate::format`]) and quantized tensors' schemes.

use burn::tensor::{BoolStore, DType};

use super::node::{self, Node};
use crate::format::dtype::{bool_store_from_name, dtype_from_name};

/// A tensor's dtype as Burn 0.14-0.21 wrote it, quantized ones included (checked against the
/// tensor's `len` bytes: a quantized tensor's length follows from its scheme and shape).
pub(super) fn tensor_dtype(node: &Node, shape: &[u64], len: usize) -> Result<DType, String> {
    if let Node::Map(entries) = node
        && let [(variant, Node::Map(fields))] = entries.as_slice()
        && variant == "QFloat"
    {
        return quantized(fields, shape, len).map(DType::QFloat);
    }
    dtype(node).ok_or_else(|| format!("dtype {node:?} is not one Burn 0.22 has"))
}

/// A quantized tensor's scheme: Burn 0.18-0.21's `QuantScheme { value, param, store, level,
/// mode }` as Burn 0.22's (`value`, `store`, `mode`, and a per-tensor or per-block scale level
/// of `param`'s dtype), checked against the tensor's byte length.
///
/// Both versions lay a quantized tensor out as its values, then its scales. Burn 0.21's ndarray backend (the one that writes records on the CPU) keeps
/// 8-bit values one byte each whatever the `store`, and its scales as `f32` whatever `param`
/// says: where the record's length is not what Burn 0.22 reads for the scheme as written, the
/// same bytes are read as `Native` (one byte a value) and/or `f32` scales, the first reading
/// whose length matches. Bytes that fit none (4- and 2-bit values one byte each, a scheme of
/// an older Burn) are an error, never a guess.
fn quantized(
    fields: &[(String, Node)],
    shape: &[u64],
    len: usize,
) -> Result<burn::tensor::quantization::QuantScheme, String> {
    use burn::tensor::quantization::{
        QuantMode, QuantScheme, QuantStore, QuantValue, ScaleDtype, quantized_data_len,
    };
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let text = |name: &str| field(name).and_then(Node::as_str);
    let refuse = |what: String| {
        format!(
            "a quantized tensor whose {what}: not a scheme Burn 0.22 reads (dequantize under the Burn that wrote it and save again)"
        )
    };
    let value = match text("value") {
        Some("Q8F") => QuantValue::Q8F,
        Some("Q8S") => QuantValue::Q8S,
        Some("E5M2") => QuantValue::E5M2,
        Some("E4M3") => QuantValue::E4M3,
        Some("Q4F") => QuantValue::Q4F,
        Some("Q4S") => QuantValue::Q4S,
        Some("E2M1") => QuantValue::E2M1,
        Some("Q2F") => QuantValue::Q2F,
        Some("Q2S") => QuantValue::Q2S,
        _ => return Err(refuse(format!("values are {:?}", field("value")))),
    };
    let mode = match text("mode") {
        Some("Symmetric") => QuantMode::Symmetric,
        _ => return Err(refuse(format!("mode is {:?}", field("mode")))),
    };
    let param = match text("param") {
        Some("F32") => ScaleDtype::F32,
        Some("F16") => ScaleDtype::F16,
        Some("BF16") => ScaleDtype::BF16,
        Some("UE8M0") => ScaleDtype::UE8M0,
        Some("UE4M3") => ScaleDtype::UE4M3,
        _ => return Err(refuse(format!("scales are {:?}", field("param")))),
    };
    let rank = shape.len();
    let store = match field("store") {
        Some(Node::Str(s)) if s == "Native" => QuantStore::Native,
        Some(Node::Map(e)) => match e.as_slice() {
            [(kind, Node::UInt(dim))] if (*dim as usize) < rank.max(1) => match kind.as_str() {
                "PackedU32" => QuantStore::PackedU32(*dim as usize),
                "PackedNative" => QuantStore::PackedNative(*dim as usize),
                _ => return Err(refuse(format!("store is {kind:?}"))),
            },
            _ => return Err(refuse(format!("store is {e:?}"))),
        },
        other => return Err(refuse(format!("store is {other:?}"))),
    };
    let block: Option<Vec<u8>> = match field("level") {
        Some(Node::Str(s)) if s == "Tensor" => None,
        Some(Node::Map(e)) => match e.as_slice() {
            [(kind, Node::Map(size))] if kind == "Block" => {
                Some(block_size(size).ok_or_else(|| refuse(format!("block size is {size:?}")))?)
            }
            _ => return Err(refuse(format!("level is {e:?}"))),
        },
        other => return Err(refuse(format!("level is {other:?}"))),
    };
    // Every element is at least 2 bits: more elements than 4 a byte cannot be this tensor's
    // (and the product below cannot overflow).
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if elements.is_none_or(|n| n > (len as u64).saturating_mul(4)) {
        return Err(format!(
            "{len} bytes cannot hold a quantized tensor of shape {shape:?}"
        ));
    }
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let scheme = |store: QuantStore, scale: ScaleDtype| {
        let scheme = QuantScheme::default()
            .with_value(value)
            .with_mode(mode)
            .with_store(store);
        match &block {
            // Burn 0.22's own default: no level stored, read as one f32 scale.
            None if scale == ScaleDtype::F32 => scheme,
            None => scheme.per_tensor(scale),
            Some(block) => scheme.per_block(block, scale),
        }
    };
    let readings = [
        scheme(store, param),
        scheme(QuantStore::Native, param),
        scheme(store, ScaleDtype::F32),
        scheme(QuantStore::Native, ScaleDtype::F32),
    ];
    let shape = burn::tensor::Shape::from(dims);
    // The values, then the scales (and a two-level scheme's per-tensor scale after them),
    // as `QuantizedBytes` lays them out.
    let stored_len = |s: &QuantScheme| quantized_data_len(s, &shape);
    let expected = stored_len(&readings[0]);
    readings
        .into_iter()
        .find(|s| stored_len(s) == len)
        .ok_or_else(|| {
            format!(
                "{len} bytes for a quantized tensor of shape {:?} (Burn 0.22 reads {expected} \
             for its scheme, {value:?} values)",
                shape.as_slice()
            )
        })
}

/// A `BlockSize { storage, len }` as serde wrote it: at most 5 dimensions, none of them 0.
fn block_size(fields: &[(String, Node)]) -> Option<Vec<u8>> {
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let storage: Vec<u8> = match field("storage")? {
        Node::Bytes(node::Payload::Owned(v), _) => v.clone(),
        _ => return None,
    };
    let Node::UInt(len) = field("len")? else {
        return None;
    };
    let dims = storage.get(..usize::try_from(*len).ok()?)?;
    (dims.len() <= 5 && !dims.is_empty() && dims.iter().all(|&d| d > 0)).then(|| dims.to_vec())
}

/// A dtype as serde wrote Burn 0.14-0.21's `DType`: a unit variant's name, or a one-entry
/// map for `Bool(store)` (Burn 0.21; earlier versions wrote `Bool` alone: native bytes).
fn dtype(node: &Node) -> Option<DType> {
    Some(match node {
        Node::Str(name) if name == "Bool" => DType::Bool(BoolStore::Native),
        Node::Str(name) => return dtype_from_name(name),
        Node::Map(entries) if entries.len() == 1 => match (entries[0].0.as_str(), &entries[0].1) {
            ("Bool", Node::Str(store)) => DType::Bool(bool_store_from_name(store)?),

            _ => return None,
        },
        _ => return None,
    })
}
