//! Dequantization of ggml's block types into `f32`, block by block, bit for bit as llama.cpp's
//! reference (`gguf.quants.dequantize`, numpy in `f32`) computes it: the same operations in
//! the same order, each rounded to `f32` (no fused multiply-add). Blocks are independent, so a
//! tensor is dequantized in parallel. The grid-based IQ types are in `grid.rs`; `Q8_1` and
//! `Q8_K`, which the reference has no class for, are ggml's `d * q`.
//!
//! The names are the reference's: `d` and `dmin` the block scales, `q`, `qs`, `qh`, `ql` the
//! packed values, `e` an element of the block, `j`/`l` a sub-block and an element of it.
#![allow(clippy::many_single_char_names)]

use burn::tensor::{DType, bf16, f16};
use rayon::prelude::*;

use super::grid;
use super::types::GgmlType;

/// Dequantizes one block (`block_bytes` bytes) into its `block` values.
pub(super) type Dequantize = fn(&[u8], &mut [f32]);

/// The dequantizer of `ty`, when this crate has one.
pub(super) fn dequantizer(ty: GgmlType) -> Option<Dequantize> {
    Some(match ty.name() {
        "Q4_0" => q4_0,
        "Q4_1" => q4_1,
        "Q5_0" => q5_0,
        "Q5_1" => q5_1,
        "Q8_0" => q8_0,
        "Q8_1" => q8_1,
        "Q2_K" => q2_k,
        "Q3_K" => q3_k,
        "Q4_K" => q4_k,
        "Q5_K" => q5_k,
        "Q6_K" => q6_k,
        "Q8_K" => q8_k,
        "TQ1_0" => tq1_0,
        "TQ2_0" => tq2_0,
        "MXFP4" => mxfp4,
        "NVFP4" => nvfp4,
        "IQ4_NL" => iq4_nl,
        "IQ4_XS" => iq4_xs,
        "IQ2_XXS" => grid::iq2_xxs,
        "IQ2_XS" => grid::iq2_xs,
        "IQ2_S" => grid::iq2_s,
        "IQ3_XXS" => grid::iq3_xxs,
        "IQ3_S" => grid::iq3_s,
        "IQ1_S" => grid::iq1_s,
        "IQ1_M" => grid::iq1_m,
        _ => return None,
    })
}

/// Dequantizes `raw` (whole blocks of `ty`) into `out` (`block` values per block, stored
/// little-endian as `dtype`: `F32`, or `F16`/`BF16` rounded to nearest-even from the `f32`
/// value, as `half` and numpy's `astype` round), in parallel over groups of blocks.
pub(super) fn dequantize(ty: GgmlType, f: Dequantize, raw: &[u8], out: &mut [u8], dtype: DType) {
    let (bytes, values) = (ty.block_bytes() as usize, ty.block() as usize);
    let width = dtype.size();
    // Groups of blocks large enough to be worth a task (about 64 KiB of `f32` values).
    let group = (16_384 / values).max(1);
    out.par_chunks_mut(values * width * group)
        .zip(raw.par_chunks(bytes * group))
        .for_each(|(out, raw)| {
            // One block's `f32` values (ggml's blocks hold at most 256).
            let mut block = [0f32; 256];
            let block = &mut block[..values];
            for (out, raw) in out
                .chunks_exact_mut(values * width)
                .zip(raw.chunks_exact(bytes))
            {
                f(raw, block);
                match dtype {
                    DType::F16 => {
                        for (o, v) in out.chunks_exact_mut(2).zip(block.iter()) {
                            o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
                        }
                    }
                    DType::BF16 => {
                        for (o, v) in out.chunks_exact_mut(2).zip(block.iter()) {
                            o.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
                        }
                    }
                    _ => {
                        for (o, v) in out.chunks_exact_mut(4).zip(block.iter()) {
                            o.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
        });
}

pub(super) fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The 32 values of 16 bytes of nibbles: the low nibbles first, then the high ones.
pub(super) fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    }
}

fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let (low, high) = out.split_at_mut(16);
    for ((l, h), &q) in low.iter_mut().zip(high).zip(&b[2..18]) {
        *l = d * f32::from((q & 0x0F).cast_signed() - 8);
        *h = d * f32::from((q >> 4).cast_signed() - 8);
    }
}

fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    let (low, high) = out.split_at_mut(16);
    for ((l, h), &q) in low.iter_mut().zip(high).zip(&b[4..20]) {
        *l = d * f32::from(q & 0x0F) + m;
        *h = d * f32::from(q >> 4) + m;
    }
}

/// The 32 5-bit values of a `Q5_0`/`Q5_1` block: nibbles of `qs` (low ones first), high bits
/// in the `u32` `qh`.
pub(super) fn five(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    std::array::from_fn(|j| nibble(qs, j) | ((((qh >> j) & 1) as u8) << 4))
}

fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (o, q) in out.iter_mut().zip(five(&b[2..6], &b[6..])) {
        *o = d * f32::from(q.cast_signed() - 16);
    }
}

fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    for (o, q) in out.iter_mut().zip(five(&b[4..8], &b[8..])) {
        *o = d * f32::from(q) + m;
    }
}

fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..]) {
        *o = f32::from(q.cast_signed()) * d;
    }
}

/// `Q8_1`: as `Q8_0`, with the block's sum `s` (`f16`) after `d`, unused here.
fn q8_1(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[4..]) {
        *o = d * f32::from(q.cast_signed());
    }
}

/// `Q8_K`: an `f32` scale, 256 `i8`, then 16 `i16` sums of 16 (unused here).
fn q8_k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out.iter_mut().zip(&b[4..260]) {
        *o = d * f32::from(q.cast_signed());
    }
}

/// Element `e` of 256 packed 2 bits a value, 32 bytes a group of 128: `(qs[g*32 + l] >> 2s) & 3`.
fn two_bits(qs: &[u8], e: usize) -> u8 {
    let (g, s, l) = (e / 128, (e % 128) / 32, e % 32);
    (qs[g * 32 + l] >> (2 * s)) & 3
}

fn q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (half(b, 80), half(b, 82));
    // Sub-blocks of 16 (one scale and min each): group `g` of 128, shift `s`, half `h`.
    for (k, out) in out.chunks_exact_mut(16).enumerate() {
        let (g, s, h) = (k / 8, (k % 8) / 2, k % 2);
        let sc = scales[k];
        let dl = d * f32::from(sc & 0x0F);
        let ml = dmin * f32::from(sc >> 4);
        let q = &qs[g * 32 + h * 16..][..16];
        for (o, &q) in out.iter_mut().zip(q) {
            *o = dl * f32::from((q >> (2 * s)) & 3) - ml;
        }
    }
}

/// Sub-block `k` (of 16 values) of a `Q3_K` block: its scale `d * (sc - 32)` and its values
/// (-4..=3). Element `e = 16k + i` is bit `e / 32` of `hmask[e % 32]` and 2 bits of `qs` as in
/// `Q2_K`.
pub(super) fn q3_k_sub(b: &[u8], k: usize) -> (f32, [i8; 16]) {
    let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
    let d = half(b, 108);
    let low = if k < 8 {
        scales[k] & 0x0F
    } else {
        scales[k - 8] >> 4
    };
    let high = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
    let dl = d * f32::from((low | (high << 4)).cast_signed() - 32);
    let (g, s, h) = (k / 8, (k % 8) / 2, k % 2);
    let bit = k / 2;
    let q = &qs[g * 32 + h * 16..][..16];
    let m = &hmask[h * 16..][..16];
    let values = std::array::from_fn(|i| {
        let qh = ((m[i] >> bit) & 1) ^ 1;
        ((q[i] >> (2 * s)) & 3).cast_signed() - (qh << 2).cast_signed()
    });
    (dl, values)
}

fn q3_k(b: &[u8], out: &mut [f32]) {
    for (k, out) in out.chunks_exact_mut(16).enumerate() {
        let (dl, q) = q3_k_sub(b, k);
        for (o, q) in out.iter_mut().zip(q) {
            *o = dl * f32::from(q);
        }
    }
}

/// The 8 scales and 8 mins of a `Q4_K`/`Q5_K` block's 12 bytes (6 bits each).
fn scale_min(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        mn[j] = s[4 + j] & 0x3F;
        sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
    (sc, mn)
}

fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (sc, mn) = scale_min(&b[4..16]);
    let qs = &b[16..144];
    for (j, out) in out.chunks_exact_mut(32).enumerate() {
        let dj = d * f32::from(sc[j]);
        let mj = dmin * f32::from(mn[j]);
        let shift = 4 * (j % 2);
        for (o, &q) in out.iter_mut().zip(&qs[(j / 2) * 32..][..32]) {
            *o = dj * f32::from((q >> shift) & 0x0F) - mj;
        }
    }
}

fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (sc, mn) = scale_min(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for (j, out) in out.chunks_exact_mut(32).enumerate() {
        let dj = d * f32::from(sc[j]);
        let mj = dmin * f32::from(mn[j]);
        let shift = 4 * (j % 2);
        for ((o, &q), &h) in out.iter_mut().zip(&qs[(j / 2) * 32..][..32]).zip(qh) {
            let q = ((q >> shift) & 0x0F) | (((h >> j) & 1) << 4);
            *o = dj * f32::from(q) - mj;
        }
    }
}

/// Sub-block `k` (of 16 values) of a `Q6_K` block: its scale `d * sc` and its values
/// (-32..=31). Element `e = 16k + i` is in half `h` of 128, quarter `s` of it (its nibble
/// `s / 2` of `ql`, its 2 bits `s` of `qh`).
pub(super) fn q6_k_sub(b: &[u8], k: usize) -> (f32, [i8; 16]) {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = half(b, 208);
    let (h, s, part) = (k / 8, (k % 8) / 2, k % 2);
    let di = d * f32::from(scales[k].cast_signed());
    let low = &ql[h * 64 + (s % 2) * 32 + part * 16..][..16];
    let high = &qh[h * 32 + part * 16..][..16];
    let values = std::array::from_fn(|i| {
        let low = (low[i] >> (4 * (s / 2))) & 0x0F;
        let high = (high[i] >> (2 * s)) & 3;
        (low | (high << 4)).cast_signed() - 32
    });
    (di, values)
}

fn q6_k(b: &[u8], out: &mut [f32]) {
    for (k, out) in out.chunks_exact_mut(16).enumerate() {
        let (di, q) = q6_k_sub(b, k);
        for (o, q) in out.iter_mut().zip(q) {
            *o = di * f32::from(q);
        }
    }
}

/// Element `e` of a `TQ1_0` block (-1..=1): base-3 digits of `qs` and `qh`.
pub(super) fn tq1_0_int(b: &[u8], e: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let (qs, qh) = (&b[..48], &b[48..52]);
    let v = if e < 160 {
        qs[e % 32].wrapping_mul(POW3[e / 32])
    } else if e < 240 {
        let e = e - 160;
        qs[32 + e % 16].wrapping_mul(POW3[e / 16])
    } else {
        let e = e - 240;
        qh[e % 4].wrapping_mul(POW3[e / 4])
    };
    ((u16::from(v) * 3) >> 8) as i8 - 1
}

fn tq1_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 52);
    for (e, o) in out.iter_mut().enumerate() {
        *o = d * f32::from(tq1_0_int(b, e));
    }
}

/// Element `e` of a `TQ2_0` block (-1..=2).
pub(super) fn tq2_0_int(b: &[u8], e: usize) -> i8 {
    two_bits(&b[..64], e).cast_signed() - 1
}

fn tq2_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 64);
    for (e, o) in out.iter_mut().enumerate() {
        *o = d * f32::from(tq2_0_int(b, e));
    }
}

/// e2m1 values, doubled (`kvalues_mxfp4`).
pub(super) const MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `ggml_e8m0_to_fp32_half`: the power of two of an `E8M0` scale, halved (`2^(e - 128)`; `e`
/// 0 and 1 are `f32` subnormals, 255 is `2^127`, not a NaN).
pub(super) fn e8m0_half(e: u8) -> f32 {
    let e = u32::from(e);
    let bits = if e < 2 {
        0x0020_0000 << e
    } else {
        (e - 1) << 23
    };
    f32::from_bits(bits)
}

fn mxfp4(b: &[u8], out: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for (j, o) in out.iter_mut().enumerate() {
        *o = d * f32::from(MXFP4[usize::from(nibble(&b[1..], j))]);
    }
}

/// `ue4m3_to_fp32`: an unsigned `E4M3` scale (bias 7; the top bit ignored, `0x7F` zero),
/// halved for the doubled e2m1 values. Every step is exact in `f32`.
pub(super) fn ue4m3_half(x: u8) -> f32 {
    let (exp, man) = ((x >> 3) & 0x0F, f32::from(x & 7));
    let raw = if exp == 0 {
        man * f32::from_bits(0x3B00_0000) // 2^-9
    } else {
        (1.0 + man / 8.0) * f32::from_bits(u32::from(exp + 120) << 23) // 2^(exp - 7)
    };
    if x == 0 || x == 0x7F { 0.0 } else { raw * 0.5 }
}

/// `NVFP4`: 4 sub-blocks of 16 e2m1 values, each with its `UE4M3` scale.
fn nvfp4(b: &[u8], out: &mut [f32]) {
    for (s, out) in out.chunks_exact_mut(16).enumerate() {
        let (d, qs) = (ue4m3_half(b[s]), &b[4 + 8 * s..12 + 8 * s]);
        // Low nibbles first, then the high ones.
        for (j, o) in out.iter_mut().enumerate() {
            let q = (qs[j % 8] >> (4 * (j / 8))) & 0x0F;
            *o = d * f32::from(MXFP4[usize::from(q)]);
        }
    }
}

/// The non-linear 4-bit grid of `IQ4_NL` and `IQ4_XS`.
pub(super) const IQ4: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

fn iq4_nl(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (j, o) in out.iter_mut().enumerate() {
        *o = d * f32::from(IQ4[usize::from(nibble(&b[2..], j))]);
    }
}

fn iq4_xs(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let high = u16::from_le_bytes([b[2], b[3]]);
    let (low, qs) = (&b[4..8], &b[8..136]);
    for (e, o) in out.iter_mut().enumerate() {
        let (i, l) = (e / 32, e % 32);
        let lo = (low[i / 2] >> (4 * (i % 2))) & 0x0F;
        let hi = ((high >> (2 * i)) as u8) & 3;
        let dl = d * f32::from((lo | (hi << 4)).cast_signed() - 32);
        *o = dl * f32::from(IQ4[usize::from(nibble(&qs[i * 16..], l))]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_said_to_be_dequantized_is_and_no_other() {
        for id in 0..64 {
            if let Some(ty) = GgmlType::from_id(id) {
                assert_eq!(ty.is_dequantized(), dequantizer(ty).is_some(), "{ty}");
            }
        }
    }
}
