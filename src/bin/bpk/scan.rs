//! One scan for every source: each tensor read (and checked where the source has checksums), floats
//! optionally scanned for NaN/Inf.

use burn::tensor::{BoolStore, DType, bf16, f16};
use burnpack::format::TensorInfo;
use burnpack::source::TensorSource;
use rayon::prelude::*;
use std::path::Path;

use crate::Failure;

/// The values of a quantized tensor (`QFloat`, `shape`), dequantized on the host as Burn
/// dequantizes them (`q * scale` of the element's block, in `f32`), for the schemes whose bytes
/// Burn's own decoder splits: integer values one per byte, or packed in `u32` along the last
/// dimension, with one level of scales. `None` for any other scheme, or bytes of another
/// length than Burn's for the shape.
fn dequantized(dtype: DType, shape: &[usize], bytes: &[u8]) -> Option<Vec<f32>> {
    use burn::tensor::quantization::{
        BlockLayout, QuantStore, QuantValue, QuantizedBytes, global_scale_size, quantized_data_len,
    };
    let DType::QFloat(scheme) = dtype else {
        return None;
    };
    let integer = matches!(
        scheme.value,
        QuantValue::Q8F
            | QuantValue::Q8S
            | QuantValue::Q4F
            | QuantValue::Q4S
            | QuantValue::Q2F
            | QuantValue::Q2S
    );
    let eight = matches!(
        scheme.value,
        QuantValue::Q8F | QuantValue::Q8S | QuantValue::E4M3 | QuantValue::E5M2
    );
    let stored = match scheme.store {
        QuantStore::Native => eight,
        QuantStore::PackedU32(0) => integer,
        _ => false,
    };
    let shape = burn::tensor::Shape::from(shape.to_vec());
    if !stored
        || global_scale_size(&scheme) != 0
        || quantized_data_len(&scheme, &shape) != bytes.len()
        || (matches!(scheme.store, QuantStore::PackedU32(_)) && !bytes.len().is_multiple_of(4))
    {
        return None;
    }
    // Packed values are read as `u32`s: their buffer is made of them, so it is aligned.
    let buffer = match scheme.store {
        QuantStore::Native => burn::tensor::Bytes::from_bytes_vec(bytes.to_vec()),
        _ => burn::tensor::Bytes::from_elems(
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<u32>>(),
        ),
    };
    let quantized = QuantizedBytes {
        bytes: buffer,
        scheme,
        shape: shape.clone(),
    };
    let (values, scales) = quantized.into_vec_i8();
    let layout = scheme
        .block_size()
        .map(|block| BlockLayout::new(&shape, &block));
    let scale = |i: usize| {
        let block = layout.as_ref().map_or(0, |l| l.block_of(i));
        scales.block.get(block).copied().unwrap_or(f32::NAN)
    };
    Some(
        values
            .iter()
            .enumerate()
            .map(|(i, &q)| value(scheme.value, q) * scale(i))
            .collect(),
    )
}

/// One stored value of a `QFloat` tensor: an integer, or the bits of an 8-bit float (OCP
/// `E4M3`: no infinities, `S.1111.111` NaN; `E5M2`: the high byte of an `f16`).
fn value(kind: burn::tensor::quantization::QuantValue, q: i8) -> f32 {
    use burn::tensor::quantization::QuantValue;
    let bits = q as u8;
    match kind {
        QuantValue::E5M2 => f16::from_bits(u16::from(bits) << 8).to_f32(),
        QuantValue::E4M3 => {
            let sign = if bits & 0x80 == 0 { 1.0 } else { -1.0 };
            let (exp, mant) = (i32::from((bits >> 3) & 0x0f), f32::from(bits & 0x07));
            if exp == 0x0f && bits & 0x07 == 0x07 {
                f32::NAN
            } else if exp == 0 {
                sign * mant / 8.0 * 2f32.powi(-6)
            } else {
                sign * (1.0 + mant / 8.0) * 2f32.powi(exp - 7)
            }
        }
        _ => f32::from(q),
    }
}

/// Calls `f` with every element of a tensor as f64 (`false` for non-numeric dtypes and for
/// quantized schemes not decoded here).
pub(crate) fn for_each_f64(info: &TensorInfo, bytes: &[u8], mut f: impl FnMut(f64)) -> bool {
    let dtype = info.dtype();
    if let DType::QFloat(_) = dtype {
        let Some(values) = dequantized(dtype, info.shape(), bytes) else {
            return false;
        };
        values.into_iter().for_each(|v| f(f64::from(v)));
        return true;
    }
    macro_rules! each {
        ($n:literal, $conv:expr) => {
            for c in bytes.chunks_exact($n) {
                f($conv(c.try_into().expect("exact chunk")))
            }
        };
    }
    match dtype {
        DType::F64 => each!(8, f64::from_le_bytes),
        DType::F32 | DType::Flex32 => each!(4, |b| f64::from(f32::from_le_bytes(b))),
        DType::F16 => each!(2, |b| f16::from_le_bytes(b).to_f64()),
        DType::BF16 => each!(2, |b| bf16::from_le_bytes(b).to_f64()),
        DType::I64 => each!(8, |b| i64::from_le_bytes(b) as f64),
        DType::I32 => each!(4, |b| f64::from(i32::from_le_bytes(b))),
        DType::I16 => each!(2, |b| f64::from(i16::from_le_bytes(b))),
        DType::I8 => each!(1, |b: [u8; 1]| f64::from(b[0] as i8)),
        DType::U64 => each!(8, |b| u64::from_le_bytes(b) as f64),
        DType::U32 => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::U16 => each!(2, |b| f64::from(u16::from_le_bytes(b))),
        DType::U8 | DType::Bool(BoolStore::Native | BoolStore::U8) => {
            each!(1, |b: [u8; 1]| f64::from(b[0]))
        }
        DType::Bool(BoolStore::U32) => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::QFloat(_) => return false,
    }
    true
}

/// What reading every tensor of a source found.
pub(crate) struct Scan {
    /// Problems found: checksum mismatches, tensors with NaN or infinite values (one line
    /// each, naming the file and the tensor).
    pub(crate) problems: Vec<String>,
    /// What was not checked, said once per tensor (a quantized scheme not scanned for NaN).
    pub(crate) notes: Vec<String>,
    /// Tensors whose checksum matched (none for sources without checksums).
    pub(crate) verified: usize,
    /// Bytes read.
    pub(crate) total: u64,
}

/// Reads every tensor of `source` in parallel (a progress bar from 256 MiB on), checks each
/// against its checksum and, with `nan`, scans floats for NaN and infinite values. A tensor
/// whose bytes fail their check is a problem; one that cannot be read at all (an I/O error)
/// is the failure returned.
pub(crate) fn scan(
    source: &(dyn TensorSource + Sync),
    path: &Path,
    nan: bool,
) -> Result<Scan, Failure> {
    let total: u64 = source.tensors().iter().map(TensorInfo::len).sum();
    let bar = crate::progress::Bar::new(total, "read and checked");
    // Per tensor: name, NaN count, infinity count (`None`: a float tensor not decoded here),
    // checksum verdict.
    type Verdict = (String, Option<(u64, u64)>, Result<bool, String>);
    let results: Vec<Result<Verdict, Failure>> = source
        .tensors()
        .par_iter()
        .map(|t| {
            let bytes = match source.read(t) {
                Ok(bytes) => bytes,
                // Read, and found damaged (a reference that does not hold): a problem.
                Err(e) if !e.kind().is_unreadable() => {
                    bar.inc(t.len());
                    return Ok((t.name().to_string(), Some((0, 0)), Err(e.to_string())));
                }
                Err(e) => return Err(Failure::of(&e)),
            };
            let sum = source.check(t, &bytes).map_err(|e| e.to_string());
            let (mut nans, mut infs) = (0u64, 0u64);
            let float = t.dtype().is_float() || matches!(t.dtype(), DType::QFloat(_));
            let scanned = !(nan && float)
                || for_each_f64(t, &bytes, |v| {
                    nans += u64::from(v.is_nan());
                    infs += u64::from(v.is_infinite());
                });
            bar.inc(t.len());
            Ok((t.name().to_string(), scanned.then_some((nans, infs)), sum))
        })
        .collect();
    bar.finish();
    let (mut problems, mut notes, mut verified) = (Vec::new(), Vec::new(), 0);
    for result in results {
        let (name, counts, sum) = result?;
        match sum {
            Ok(checked) => verified += usize::from(checked),
            Err(message) => problems.push(message),
        }
        let Some((nans, infs)) = counts else {
            notes.push(format!(
                "{}: tensor '{name}': quantized with a scheme this scan does not decode: not \
                 scanned for NaN/Inf",
                path.display()
            ));
            continue;
        };
        if nans + infs > 0 {
            problems.push(format!(
                "{}: tensor '{name}': {nans} NaN and {infs} infinite values",
                path.display()
            ));
        }
    }
    Ok(Scan {
        problems,
        notes,
        verified,
        total,
    })
}
