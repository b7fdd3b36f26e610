//! FP8 tensors of safetensors files (`F8_E4M3`, `F8_E5M2`, their `FNUZ` variants, `F8_E8M0`),
//! decoded exactly, and the scale tensors that FP8 checkpoints ship beside their weights.
//!
//! Every FP8 value is a small integer times a power of two, so each one is exact in `f32`:
//! the default load decodes them into `f32` (a copy, four bytes per value). With
//! [`OpenOptions::keep_quantized`](crate::source::OpenOptions::keep_quantized), `F8_E4M3` and
//! `F8_E5M2` tensors become Burn `QFloat` tensors of value `E4M3` / `E5M2` (one byte per
//! value): the file's bytes, then the scales in Burn's layout (a copy too, since the scales
//! follow the values in Burn's `TensorData`).
//!
//! Scales folded in, where a convention pairs them with a weight of the same file:
//! - DeepSeek-V3 style: `X.weight` `[out, in]` beside `X.weight_scale_inv` `F32`
//!   `[ceil(out/128), ceil(in/128)]`, value = fp8 × scale of its 128 × 128 block. Kept, the
//!   pair is one `QFloat` with per-block `[128, 128]` `F32` scales where the blocks divide the
//!   matrix; otherwise (and without `keep_quantized`) it is decoded into `f32`.
//! - compressed-tensors / vLLM style: `X.weight` beside `X.weight_scale` `F32` `[]` or `[1]`
//!   (kept: a per-tensor `F32` scale), or `[out, 1]` (one scale per row: decoded into `f32`).
//!
//! The scale tensor is consumed: it is not listed by the source. A scale of another dtype or
//! shape, or in another shard, is left alone (listed, loaded as it is).

use std::collections::HashMap;

use burn::tensor::DType;
use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype};
use rayon::prelude::*;
use safetensors::Dtype;

/// The side of the square blocks of the `weight_scale_inv` convention.
const BLOCK: usize = 128;

/// An 8-bit float format of safetensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// `F8_E4M3` (`float8_e4m3fn`): bias 7, no infinity, `S.1111.111` is NaN.
    E4M3,
    /// `F8_E5M2`: IEEE-like, bias 15, with infinities and NaNs.
    E5M2,
    /// `F8_E4M3FNUZ`: bias 8, no infinity, no negative zero (`0x80` is NaN).
    E4M3Fnuz,
    /// `F8_E5M2FNUZ`: bias 16, no infinity, no negative zero (`0x80` is NaN).
    E5M2Fnuz,
    /// `F8_E8M0` (`float8_e8m0fnu`): `2^(e - 127)`, `0xFF` is NaN.
    E8M0,
}

impl Format {
    /// The format of a safetensors dtype, if it is an 8-bit float.
    pub(super) fn of(dtype: Dtype) -> Option<Self> {
        Some(match dtype {
            Dtype::F8_E4M3 => Self::E4M3,
            Dtype::F8_E5M2 => Self::E5M2,
            Dtype::F8_E4M3FNUZ => Self::E4M3Fnuz,
            Dtype::F8_E5M2FNUZ => Self::E5M2Fnuz,
            Dtype::F8_E8M0 => Self::E8M0,
            _ => return None,
        })
    }

    /// The dtype's name in safetensors headers.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::E4M3 => "F8_E4M3",
            Self::E5M2 => "F8_E5M2",
            Self::E4M3Fnuz => "F8_E4M3FNUZ",
            Self::E5M2Fnuz => "F8_E5M2FNUZ",
            Self::E8M0 => "F8_E8M0",
        }
    }

    /// Burn's quantized value of the same bits, where Burn has one.
    fn quant_value(self) -> Option<QuantValue> {
        match self {
            Self::E4M3 => Some(QuantValue::E4M3),
            Self::E5M2 => Some(QuantValue::E5M2),
            _ => None,
        }
    }

    /// The value of `byte`, exactly (every one is representable in `f32`).
    pub(super) fn decode(self, byte: u8) -> f32 {
        let negative = byte & 0x80 != 0;
        let sign = |v: f32| if negative { -v } else { v };
        let (exponent_bits, bias) = match self {
            Self::E8M0 => {
                return if byte == 0xFF {
                    f32::NAN
                } else {
                    pow2(i32::from(byte) - 127)
                };
            }
            Self::E4M3 => (4, 7),
            Self::E5M2 => (5, 15),
            Self::E4M3Fnuz => (4, 8),
            Self::E5M2Fnuz => (5, 16),
        };
        let mantissa_bits = 7 - exponent_bits;
        let e = i32::from((byte & 0x7F) >> mantissa_bits);
        let m = byte & ((1 << mantissa_bits) - 1);
        let top = (1 << exponent_bits) - 1;
        match self {
            Self::E4M3 if e == top && m == (1 << mantissa_bits) - 1 => return sign(f32::NAN),
            Self::E5M2 if e == top => {
                return sign(if m == 0 { f32::INFINITY } else { f32::NAN });
            }
            Self::E4M3Fnuz | Self::E5M2Fnuz if byte == 0x80 => return f32::NAN,
            _ => {}
        }
        let magnitude = if e == 0 {
            f32::from(m) * pow2(1 - bias - mantissa_bits)
        } else {
            f32::from(m | (1 << mantissa_bits)) * pow2(e - bias - mantissa_bits)
        };
        sign(magnitude)
    }

    /// Every byte's value.
    fn table(self) -> [f32; 256] {
        let mut table = [0.0; 256];
        for (byte, value) in (0..=255u8).zip(table.iter_mut()) {
            *value = self.decode(byte);
        }
        table
    }
}

/// `2^k` for `k` in `[-149, 127]`, exactly (subnormal below `-126`).
fn pow2(k: i32) -> f32 {
    if k >= -126 {
        f32::from_bits((k + 127).cast_unsigned() << 23)
    } else {
        f32::from_bits(1u32 << (k + 149))
    }
}

/// A scale tensor folded into an FP8 weight: where its `f32` values are, and how they cover
/// the weight seen as a `[rows, cols]` matrix (`block_rows` × `block_cols` values each, the
/// grid `grid_cols` blocks wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Scale {
    /// Absolute offset of the scale tensor's bytes in the shard.
    pub(super) start: u64,
    /// Their length.
    pub(super) len: u64,
    /// How each scale is stored: `F32`, `F16` or `BF16` (widened to `f32` exactly).
    dtype: Dtype,
    rows: usize,
    cols: usize,
    block_rows: usize,
    block_cols: usize,
    grid_cols: usize,
}

impl Scale {
    /// The number of scales.
    fn count(&self) -> usize {
        self.rows.div_ceil(self.block_rows) * self.grid_cols
    }
}

/// How an FP8 tensor is read: its format, its stored length, its folded scale, and whether it
/// is kept as a `QFloat` (else decoded into `f32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fp8 {
    pub(super) format: Format,
    /// The stored bytes (one per value).
    pub(super) raw_len: u64,
    pub(super) scale: Option<Scale>,
    kept: Option<QuantScheme>,
    /// The dtype a tensor not kept is decoded into (`F32`, `F16` or `BF16`).
    decoded: DType,
}

impl Fp8 {
    /// How a tensor of `format` and `shape` (`raw_len` bytes) is read, with `scale` folded
    /// in, kept quantized where asked and Burn holds it exactly. Returns it with the dtype and
    /// length the source lists, `None` where the length overflows.
    pub(super) fn new(
        format: Format,
        raw_len: u64,
        scale: Option<Scale>,
        (keep, decoded): (bool, DType),
    ) -> Option<(Self, DType, u64)> {
        let kept = format.quant_value().filter(|_| keep).and_then(|value| {
            let scheme = QuantScheme::default()
                .with_value(value)
                .with_store(QuantStore::Native);
            match scale {
                None => Some(scheme.per_tensor(ScaleDtype::F32)),
                Some(s) if s.count() == 1 && s.block_rows >= s.rows && s.block_cols >= s.cols => {
                    Some(scheme.per_tensor(ScaleDtype::F32))
                }
                Some(s)
                    if s.block_rows == BLOCK
                        && s.block_cols == BLOCK
                        && s.rows.is_multiple_of(BLOCK)
                        && s.cols.is_multiple_of(BLOCK) =>
                {
                    Some(scheme.per_block([BLOCK as u8, BLOCK as u8], ScaleDtype::F32))
                }
                Some(_) => None,
            }
        });
        let fp8 = Self {
            format,
            raw_len,
            scale,
            kept,
            decoded,
        };
        let (dtype, len) = match kept {
            Some(scheme) => {
                let scales = scale.map_or(1, |s| s.count()) as u64;
                (DType::QFloat(scheme), raw_len.checked_add(scales * 4)?)
            }
            None => (decoded, raw_len.checked_mul(decoded.size() as u64)?),
        };
        Some((fp8, dtype, len))
    }

    /// Writes the tensor as listed into `out`: `raw` (its stored bytes) and `scales` (the
    /// folded scale tensor's bytes, little-endian `f32`, or empty) either laid out as Burn's
    /// `QFloat` (the values, then the scales, native-endian) or decoded into `f32`.
    pub(super) fn fill(&self, raw: &[u8], scales: &[u8], out: &mut [u8]) {
        let scales: Vec<f32> = match self.scale.map(|s| s.dtype) {
            Some(Dtype::F16) => scales
                .chunks_exact(2)
                .map(|b| burn::tensor::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Some(Dtype::BF16) => scales
                .chunks_exact(2)
                .map(|b| burn::tensor::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => scales
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        };
        if self.kept.is_some() {
            let (values, tail) = out.split_at_mut(raw.len());
            values.copy_from_slice(raw);
            let ones = [1.0f32];
            let scales = if self.scale.is_some() {
                &scales[..]
            } else {
                &ones[..]
            };
            for (o, s) in tail.chunks_exact_mut(4).zip(scales) {
                o.copy_from_slice(&s.to_ne_bytes());
            }
            return;
        }
        let table = self.format.table();
        let width = self.decoded.size();
        let put = |o: &mut [u8], v: f32| match self.decoded {
            DType::F16 => o.copy_from_slice(&burn::tensor::f16::from_f32(v).to_ne_bytes()),
            DType::BF16 => o.copy_from_slice(&burn::tensor::bf16::from_f32(v).to_ne_bytes()),
            _ => o.copy_from_slice(&v.to_ne_bytes()),
        };
        let Some(scale) = self.scale else {
            out.par_chunks_mut(width * 4096)
                .zip(raw.par_chunks(4096))
                .for_each(|(out, raw)| {
                    for (o, &b) in out.chunks_exact_mut(width).zip(raw) {
                        put(o, table[usize::from(b)]);
                    }
                });
            return;
        };
        let cols = scale.cols.max(1);
        out.par_chunks_mut(width * cols)
            .zip(raw.par_chunks(cols))
            .enumerate()
            .for_each(|(row, (out, raw))| {
                let grid = &scales[(row / scale.block_rows) * scale.grid_cols..];
                for (col, (o, &b)) in out.chunks_exact_mut(width).zip(raw).enumerate() {
                    put(o, table[usize::from(b)] * grid[col / scale.block_cols]);
                }
            });
    }
}

/// A tensor of a shard's header, as pairing sees it.
pub(super) struct Listed<'a> {
    pub(super) dtype: Dtype,
    pub(super) shape: &'a [usize],
    /// Absolute offset and length of its bytes.
    pub(super) start: u64,
    pub(super) len: u64,
}

/// The FP8 weights of one shard that a convention pairs with a scale tensor of the same
/// shard: each weight's name, with the scale's name and how it covers the weight.
///
/// # Errors
/// A weight beside a scale tensor that does not cover it as its convention says (another
/// dtype than `F32`/`F16`/`BF16`, another grid or rank), or beside both `_scale_inv` and
/// `_scale` (which applies is ambiguous): the weight's name and why. Loading such a weight
/// without its scale would give values off by the scale, silently.
pub(super) fn pairs(
    tensors: &HashMap<&str, Listed<'_>>,
) -> Result<HashMap<String, (String, Scale)>, (String, String)> {
    let mut found = HashMap::new();
    for (&name, weight) in tensors {
        if Format::of(weight.dtype).is_none() {
            continue;
        }
        let beside: Vec<(&str, String)> = ["_scale_inv", "_scale"]
            .into_iter()
            .map(|suffix| (suffix, format!("{name}{suffix}")))
            .filter(|(_, scale)| tensors.contains_key(scale.as_str()))
            .collect();
        match beside.as_slice() {
            [] => {}
            [(suffix, scale_name)] => {
                let scale = &tensors[scale_name.as_str()];
                let Some(covered) = covering(weight, scale, *suffix == "_scale_inv") else {
                    return Err((
                        name.to_string(),
                        format!(
                            "its scale tensor '{scale_name}' ({:?} {:?}) does not cover it \
                             (a weight {:?} takes {}, in F32, F16 or BF16): loaded without it, \
                             its values would be off by the scale",
                            scale.dtype,
                            scale.shape,
                            weight.shape,
                            if *suffix == "_scale_inv" {
                                "one scale per 128x128 block"
                            } else {
                                "one scale ([] or [1]), or one per row ([rows, 1])"
                            }
                        ),
                    ));
                };
                found.insert(name.to_string(), (scale_name.clone(), covered));
            }
            _ => {
                return Err((
                    name.to_string(),
                    format!(
                        "both '{name}_scale_inv' and '{name}_scale' are beside it: which scale \
                         applies is ambiguous"
                    ),
                ));
            }
        }
    }
    Ok(found)
}

/// How `scale` covers `weight` under its convention (`inv`: 128 × 128 blocks), if it does.
fn covering(weight: &Listed<'_>, scale: &Listed<'_>, inv: bool) -> Option<Scale> {
    let width = match scale.dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        _ => return None,
    };
    let count: usize = scale.shape.iter().product();
    if scale.len != count as u64 * width {
        return None;
    }
    let at = |rows, cols, block_rows, block_cols, grid_cols| Scale {
        start: scale.start,
        len: scale.len,
        dtype: scale.dtype,
        rows,
        cols,
        block_rows,
        block_cols,
        grid_cols,
    };
    match (weight.shape, scale.shape, inv) {
        (&[rows, cols], &[grid_rows, grid_cols], true)
            if rows > 0
                && cols > 0
                && grid_rows == rows.div_ceil(BLOCK)
                && grid_cols == cols.div_ceil(BLOCK) =>
        {
            Some(at(rows, cols, BLOCK, BLOCK, grid_cols))
        }
        (&[rows, cols], &[out, 1], false) if out == rows && rows > 0 && cols > 0 => {
            Some(at(rows, cols, 1, cols, 1))
        }
        (shape, [] | [1], false) if count == 1 => {
            let n: usize = shape.iter().product();
            (n > 0).then(|| at(1, n, 1, n, 1))
        }
        _ => None,
    }
}

/// Refuses an FP8 weight of one shard whose scale tensor (`<weight>_scale_inv` or
/// `<weight>_scale`) is in another: pairing sees one shard at a time, and the weight loaded
/// without its scale would be off by it, silently.
pub(super) fn refuse_scale_elsewhere(
    path: &std::path::Path,
    table: &crate::source::SourceTable<crate::source::InShard<Option<Fp8>>>,
) -> Result<(), crate::source::SourceError> {
    for (info, place) in table.tensors().iter().zip(table.places()) {
        if !matches!(place.place, Some(fp8) if fp8.scale.is_none()) {
            continue;
        }
        for suffix in ["_scale_inv", "_scale"] {
            let scale = format!("{}{suffix}", info.name());
            if table.get(&scale).is_some() {
                return Err(crate::source::SourceError::Tensor {
                    path: path.to_path_buf(),
                    tensor: info.name().to_string(),
                    reason: format!(
                        "its scale tensor '{scale}' is in another shard: FP8 scales are folded \
                         into weights of their own shard only, and loaded without it the \
                         weight would be off by the scale"
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_decode_exactly() {
        assert_eq!(Format::E4M3.decode(0x38), 1.0);
        assert_eq!(Format::E4M3.decode(0x7E), 448.0);
        assert_eq!(Format::E4M3.decode(0x01), 2f32.powi(-9));
        assert!(Format::E4M3.decode(0x7F).is_nan());
        assert_eq!(Format::E4M3.decode(0x80).to_bits(), (-0.0f32).to_bits());
        assert_eq!(Format::E5M2.decode(0x3C), 1.0);
        assert_eq!(Format::E5M2.decode(0x7C), f32::INFINITY);
        assert_eq!(Format::E5M2.decode(0xFC), f32::NEG_INFINITY);
        assert_eq!(Format::E5M2.decode(0x7B), 57344.0);
        assert_eq!(Format::E5M2.decode(0x01), 2f32.powi(-16));
        assert!(Format::E4M3Fnuz.decode(0x80).is_nan());
        assert_eq!(Format::E4M3Fnuz.decode(0x7F), 240.0);
        assert_eq!(Format::E5M2Fnuz.decode(0x40), 1.0);
        assert_eq!(Format::E8M0.decode(127), 1.0);
        assert_eq!(Format::E8M0.decode(0), 2f32.powi(-127));
        assert_eq!(Format::E8M0.decode(254), 2f32.powi(127));
        assert!(Format::E8M0.decode(255).is_nan());
    }
}
