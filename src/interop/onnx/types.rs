//! ONNX's `TensorProto.DataType`, the Burn dtype of each, and the typed fields' decoding.

use super::wire::{Wire, fields, varints};

use burn::tensor::{BoolStore, DType};

/// The name of ONNX data type `id` (`FLOAT`, `INT4`...), as `onnx.proto` spells it.
pub(super) fn name(id: i32) -> String {
    const NAMES: [&str; 27] = [
        "UNDEFINED",
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
        "BFLOAT16",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "UINT4",
        "INT4",
        "FLOAT4E2M1",
        "FLOAT8E8M0",
        "UINT2",
        "INT2",
    ];
    usize::try_from(id)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("data type {id}"), |n| (*n).to_string())
}

/// The Burn dtype holding ONNX data type `id` exactly, or `None`.
pub(super) fn burn_dtype(id: i32) -> Option<DType> {
    Some(match id {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool(BoolStore::Native),
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

/// The typed field that holds values of data type `id` when there is no `raw_data`
/// (`onnx.proto`'s rules): `float_data` (4), `int32_data` (5), `int64_data` (7),
/// `double_data` (10), `uint64_data` (11).
pub(super) fn typed_field(id: i32) -> Option<u32> {
    Some(match id {
        1 => 4,
        2 | 3 | 4 | 5 | 6 | 9 | 10 | 16 => 5,
        7 => 7,
        11 => 10,
        12 | 13 => 11,
        _ => return None,
    })
}

/// The name of typed field `field`.
pub(super) fn field_name(field: u32) -> &'static str {
    match field {
        4 => "float_data",
        5 => "int32_data",
        6 => "string_data",
        7 => "int64_data",
        9 => "raw_data",
        10 => "double_data",
        11 => "uint64_data",
        _ => "a data field",
    }
}

/// Bytes per element of Burn dtype `dtype` (those [`burn_dtype`] gives).
pub(super) fn size(dtype: DType) -> u64 {
    dtype.size() as u64
}

/// Writes the typed-field value `v` (a varint, or a fixed word's bits) as an element of data
/// type `id` into `out` (its size); `false` when it does not fit that type.
pub(super) fn put(id: i32, v: u64, out: &mut [u8]) -> bool {
    let signed = v.cast_signed();
    let small = i32::try_from(signed).ok();
    match id {
        1 => out.copy_from_slice(&(v as u32).to_le_bytes()),
        11 | 13 => out.copy_from_slice(&v.to_le_bytes()),
        7 => out.copy_from_slice(&signed.to_le_bytes()),
        6 => match small {
            Some(x) => out.copy_from_slice(&x.to_le_bytes()),
            None => return false,
        },
        12 => match u32::try_from(v) {
            Ok(x) => out.copy_from_slice(&x.to_le_bytes()),
            Err(_) => return false,
        },
        5 => match small.and_then(|x| i16::try_from(x).ok()) {
            Some(x) => out.copy_from_slice(&x.to_le_bytes()),
            None => return false,
        },
        // FLOAT16 and BFLOAT16 values are their bits in `int32_data`.
        4 | 10 | 16 => match small.and_then(|x| u16::try_from(x).ok()) {
            Some(x) => out.copy_from_slice(&x.to_le_bytes()),
            None => return false,
        },
        3 => match small.and_then(|x| i8::try_from(x).ok()) {
            Some(x) => out[0] = x.cast_unsigned(),
            None => return false,
        },
        2 => match small.and_then(|x| u8::try_from(x).ok()) {
            Some(x) => out[0] = x,
            None => return false,
        },
        9 => match small {
            Some(0) => out[0] = 0,
            Some(1) => out[0] = 1,
            _ => return false,
        },
        _ => return false,
    }
    true
}

/// The values of typed field `field` of the tensor message `raw` into `out`, each as data
/// type `data_type`; the count was checked when the file was opened.
pub(super) fn decode_typed(
    raw: &[u8],
    base: u64,
    field: u32,
    data_type: i32,
    out: &mut [u8],
) -> Result<(), String> {
    let width = burn_dtype(data_type).map_or(1, |d| d.size());
    let mut chunks = out.chunks_exact_mut(width.max(1));
    let mut put = |v: u64| -> Result<(), String> {
        let slot = chunks.next().ok_or("more values than elements")?;
        if put(data_type, v, slot) {
            Ok(())
        } else {
            Err(format!(
                "{} holds {v}, which is no {} value",
                field_name(field),
                name(data_type)
            ))
        }
    };
    for f in fields(raw, base) {
        let (number, value) = f?;
        if number != field {
            continue;
        }
        match value {
            Wire::Varint(v) | Wire::Fixed64(v) => put(v)?,
            Wire::Fixed32(v) => put(u64::from(v))?,
            Wire::Bytes(data, _) if field == 4 => {
                for w in data.chunks_exact(4) {
                    put(u64::from(u32::from_le_bytes(
                        w.try_into().unwrap_or_default(),
                    )))?;
                }
            }
            Wire::Bytes(data, _) if field == 10 => {
                for w in data.chunks_exact(8) {
                    put(u64::from_le_bytes(w.try_into().unwrap_or_default()))?;
                }
            }
            Wire::Bytes(data, _) => {
                for v in varints(data) {
                    put(v?)?;
                }
            }
        }
    }
    Ok(())
}
