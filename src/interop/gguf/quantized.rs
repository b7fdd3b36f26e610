//! Blocks that one of Burn's quantization schemes holds exactly, kept quantized.
//!
//! Every type kept is a block of small integers (or entries of an integer table) times a
//! scale per sub-block computed exactly in `f32`: Burn's symmetric `Q8F` values (one `i8`
//! each, `-128` included) with per-block scales, whose dequantization, `scale * value` in
//! `f32`, is then the reference's product bit for bit.
//!
//! | GGUF     | values              | Burn block | scale                          |
//! |----------|---------------------|------------|--------------------------------|
//! | `Q8_0`   | `q`                 | `[32]`     | `F16` `d`                      |
//! | `Q4_0`   | `q - 8`             | `[32]`     | `F16` `d`                      |
//! | `Q5_0`   | `q - 16`            | `[32]`     | `F16` `d`                      |
//! | `IQ4_NL` | `kvalues_iq4nl[q]`  | `[32]`     | `F16` `d`                      |
//! | `IQ4_XS` | `kvalues_iq4nl[q]`  | `[32]`     | `F32` `d * (ls - 32)`          |
//! | `Q3_K`   | `q - 4 * !hmask`    | `[16]`     | `F32` `d * (sc - 32)`          |
//! | `Q6_K`   | `q - 32`            | `[16]`     | `F32` `d * sc`                 |
//! | `TQ1_0`  | `q - 1` (base 3)    | `[128]`    | `F16` `d` (twice per block)    |
//! | `TQ2_0`  | `q - 1`             | `[128]`    | `F16` `d` (twice per block)    |
//! | `MXFP4`  | e2m1, doubled       | `[32]`     | `F32` `2^(e - 128)`            |
//! | `NVFP4`  | e2m1, doubled       | `[16]`     | `F32` `ue4m3(s) / 2`           |
//! | `IQ2_XXS`, `IQ3_XXS`, `IQ3_S` | `±grid` | `[32]` | `F32`, as `grid.rs` computes it |
//! | `IQ2_XS`, `IQ2_S` | `±grid`    | `[16]`     | `F32`, as `grid.rs` computes it |
//! | `IQ1_S`  | `8 * grid ± 1`      | `[32]`     | `F32` `d * (2s + 1) / 8`       |
//! | `IQ1_M`  | `8 * grid ± 1`      | `[16]`     | `F32` `d * (2s + 1) / 8`       |
//!
//! Burn's blocks are at most 255 values along a dimension (`BlockSize` holds `u8`), so the
//! ternary types' one scale per 256 is stored once per half. Values are stored one `i8`
//! each (`QuantStore::Native`): Burn's `ndarray` backend loads no other value type than
//! `Q8F`/`Q8S` (its `q_from_data` refuses `Q4F`, `Q2F` and `E2M1`), and `flex` unpacks every
//! store to `i8` anyway. Read, blocks are split into Burn's layout (every value in
//! row-major order, then every scale, native-endian, in block order), which is what
//! `TensorData` of dtype `QFloat` holds.

use burn::tensor::DType;
use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype, scale_size};
use rayon::prelude::*;

use super::dequant::{
    IQ4, MXFP4, e8m0_half, five, half, nibble, q3_k_sub, q6_k_sub, tq1_0_int, tq2_0_int, ue4m3_half,
};
use super::grid_kept;
use super::types::GgmlType;

/// Splits one GGML block into its values (`block` `i8`) and its scales (native-endian bytes).
type Split = fn(&[u8], &mut [i8], &mut [u8]);

/// How a type is kept: Burn's block (along a row) and scale dtype, and its splitter.
struct Kept {
    sub: u8,
    scale: ScaleDtype,
    split: Split,
}

/// The types kept quantized (the test checks each against the dequantizer).
#[cfg(test)]
pub(super) const KEPT: [&str; 11] = [
    "Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q3_K", "Q6_K", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
];

fn kept(ty: GgmlType) -> Option<Kept> {
    use ScaleDtype::{F16, F32};
    let (sub, scale, split): (u8, ScaleDtype, Split) = match ty.name() {
        "Q8_0" => (32, F16, q8_0),
        "Q4_0" => (32, F16, q4_0),
        "Q5_0" => (32, F16, q5_0),
        "IQ4_NL" => (32, F16, iq4_nl),
        "IQ4_XS" => (32, F32, iq4_xs),
        "Q3_K" => (16, F32, q3_k),
        "Q6_K" => (16, F32, q6_k),
        "TQ1_0" => (128, F16, tq1_0),
        "TQ2_0" => (128, F16, tq2_0),
        "MXFP4" => (32, F32, mxfp4),
        "NVFP4" => (16, F32, nvfp4),
        "IQ2_XXS" => (32, F32, grid_kept::iq2_xxs),
        "IQ2_XS" => (16, F32, grid_kept::iq2_xs),
        "IQ2_S" => (16, F32, grid_kept::iq2_s),
        "IQ3_XXS" => (32, F32, grid_kept::iq3_xxs),
        "IQ3_S" => (32, F32, grid_kept::iq3_s),
        "IQ1_S" => (32, F32, grid_kept::iq1_s),
        "IQ1_M" => (16, F32, grid_kept::iq1_m),
        _ => return None,
    };
    Some(Kept { sub, scale, split })
}

/// Burn's quantized dtype that holds `ty` exactly, when one does.
pub(super) fn burn_dtype(ty: GgmlType) -> Option<DType> {
    kept(ty).map(|k| {
        DType::QFloat(
            QuantScheme::default()
                // Q8F: the full `i8` range (-128 included), as the reference multiplies it.
                .with_value(QuantValue::Q8F)
                .with_store(QuantStore::Native)
                .per_block([k.sub], k.scale),
        )
    })
}

/// The length of `elements` values of `ty` in Burn's layout (as `quantized_data_len` counts).
pub(super) fn burn_len(ty: GgmlType, elements: u64) -> Option<u64> {
    let k = kept(ty)?;
    let scales = (elements / u64::from(k.sub)).checked_mul(scale_size(k.scale) as u64)?;
    elements.checked_add(scales)
}

/// Splits `raw` (whole blocks of a kept `ty`) into Burn's layout in `out` (of
/// [`burn_len`] bytes): the values, then the scales, in parallel over groups of blocks.
pub(super) fn split(ty: GgmlType, raw: &[u8], out: &mut [u8]) {
    let Some(k) = kept(ty) else {
        return;
    };
    let (bytes, values) = (ty.block_bytes() as usize, ty.block() as usize);
    let scales = values / usize::from(k.sub) * scale_size(k.scale);
    let blocks = raw.len() / bytes;
    let (out_values, out_scales) = out.split_at_mut(blocks * values);
    let group = (16_384 / values).max(1);
    out_values
        .par_chunks_mut(values * group)
        .zip(out_scales.par_chunks_mut(scales * group))
        .zip(raw.par_chunks(bytes * group))
        .for_each(|((out_values, out_scales), raw)| {
            for ((v, s), block) in out_values
                .chunks_exact_mut(values)
                .zip(out_scales.chunks_exact_mut(scales))
                .zip(raw.chunks_exact(bytes))
            {
                (k.split)(block, bytemuck::cast_slice_mut(v), s);
            }
        });
}

/// The `f16` at `at` of `b`, native-endian, into `s` (as many times as `s` holds it).
fn f16_scale(b: &[u8], at: usize, s: &mut [u8]) {
    let scale = burn::tensor::f16::from_le_bytes([b[at], b[at + 1]]).to_ne_bytes();
    for s in s.chunks_exact_mut(2) {
        s.copy_from_slice(&scale);
    }
}

fn f32_scale(s: &mut [u8], k: usize, scale: f32) {
    s[4 * k..4 * k + 4].copy_from_slice(&scale.to_ne_bytes());
}

fn q8_0(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 0, s);
    v.copy_from_slice(bytemuck::cast_slice(&b[2..34]));
}

fn q4_0(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 0, s);
    for (j, v) in v.iter_mut().enumerate() {
        *v = nibble(&b[2..], j).cast_signed() - 8;
    }
}

fn q5_0(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 0, s);
    for (v, q) in v.iter_mut().zip(five(&b[2..6], &b[6..])) {
        *v = q.cast_signed() - 16;
    }
}

fn iq4_nl(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 0, s);
    for (j, v) in v.iter_mut().enumerate() {
        *v = IQ4[usize::from(nibble(&b[2..], j))];
    }
}

fn iq4_xs(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let high = u16::from_le_bytes([b[2], b[3]]);
    let (low, qs) = (&b[4..8], &b[8..136]);
    for (i, v) in v.chunks_exact_mut(32).enumerate() {
        let lo = (low[i / 2] >> (4 * (i % 2))) & 0x0F;
        let hi = ((high >> (2 * i)) as u8) & 3;
        f32_scale(s, i, d * f32::from((lo | (hi << 4)).cast_signed() - 32));
        for (l, v) in v.iter_mut().enumerate() {
            *v = IQ4[usize::from(nibble(&qs[i * 16..], l))];
        }
    }
}

fn q3_k(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    for (k, v) in v.chunks_exact_mut(16).enumerate() {
        let (scale, values) = q3_k_sub(b, k);
        f32_scale(s, k, scale);
        v.copy_from_slice(&values);
    }
}

fn q6_k(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    for (k, v) in v.chunks_exact_mut(16).enumerate() {
        let (scale, values) = q6_k_sub(b, k);
        f32_scale(s, k, scale);
        v.copy_from_slice(&values);
    }
}

fn tq1_0(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 52, s);
    for (e, v) in v.iter_mut().enumerate() {
        *v = tq1_0_int(b, e);
    }
}

fn tq2_0(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f16_scale(b, 64, s);
    for (e, v) in v.iter_mut().enumerate() {
        *v = tq2_0_int(b, e);
    }
}

fn mxfp4(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    f32_scale(s, 0, e8m0_half(b[0]));
    for (j, v) in v.iter_mut().enumerate() {
        *v = MXFP4[usize::from(nibble(&b[1..], j))];
    }
}

fn nvfp4(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    for (k, v) in v.chunks_exact_mut(16).enumerate() {
        f32_scale(s, k, ue4m3_half(b[k]));
        let qs = &b[4 + 8 * k..12 + 8 * k];
        // Low nibbles first, then the high ones.
        for (j, v) in v.iter_mut().enumerate() {
            *v = MXFP4[usize::from((qs[j % 8] >> (4 * (j / 8))) & 0x0F)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::quantization::quantized_data_len;
    use burn::tensor::{Device, Shape, Tensor, TensorData};

    /// Each kept type, split and dequantized by Burn, gives what `dequant.rs` (itself checked
    /// bit for bit against the reference in `tests/gguf.rs`) gives, on blocks of every byte
    /// pattern this generator makes, zero and negative scales included.
    #[test]
    fn every_kept_type_dequantizes_in_burn_as_the_dequantizer_does() {
        for name in KEPT {
            let ty = (0..64)
                .filter_map(GgmlType::from_id)
                .find(|t| t.name() == name)
                .unwrap();
            let Some(DType::QFloat(scheme)) = burn_dtype(ty) else {
                panic!("{name} is kept");
            };
            let (bytes, values) = (ty.block_bytes() as usize, ty.block() as usize);
            // Enough blocks to pick many rows of the grids.
            let rows = 48;
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(ty.id());
            let mut raw: Vec<u8> = (0..rows * 2 * bytes)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 24) as u8
                })
                .collect();
            // Finite `f16` scales where the type has them (exponent bits not all ones).
            for block in raw.chunks_exact_mut(bytes) {
                let at = match name {
                    "Q3_K" => Some(108),
                    "Q6_K" => Some(208),
                    "TQ1_0" => Some(52),
                    "TQ2_0" => Some(64),
                    // `IQ1_M`: the top nibble of the last `u16` of scales is the `f16`'s.
                    "IQ1_M" => Some(54),
                    "MXFP4" | "NVFP4" => None,
                    _ => Some(0),
                };
                if let Some(at) = at {
                    block[at + 1] &= 0xBB;
                }
            }
            let shape = [rows, 2 * values];
            let elements = (rows * 2 * values) as u64;
            let len = burn_len(ty, elements).unwrap() as usize;
            assert_eq!(
                len,
                quantized_data_len(&scheme, &Shape::from(shape)),
                "{name}"
            );
            let mut out = vec![0u8; len];
            split(ty, &raw, &mut out);
            let mut expected = vec![0u8; elements as usize * 4];
            let f = super::super::dequant::dequantizer(ty).unwrap();
            super::super::dequant::dequantize(ty, f, &raw, &mut expected, DType::F32);
            let data = TensorData::from_bytes_vec(out, shape, DType::QFloat(scheme));
            let got = Tensor::<2>::from_data(data, (&Device::flex(), DType::QFloat(scheme)))
                .dequantize()
                .into_data();
            assert_eq!(got.as_bytes(), &expected[..], "{name}");
        }
        assert!(burn_dtype(GgmlType::from_id(12).unwrap()).is_none(), "Q4_K");
    }
}
