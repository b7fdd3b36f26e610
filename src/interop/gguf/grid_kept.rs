//! The grid-based IQ types split into Burn's `Q8F` per-block layout (see `quantized.rs`): each
//! value is a grid entry times a sign (`IQ2`, `IQ3`: `±grid`, at most 62 in magnitude) or a
//! grid entry shifted by `±1/8` (`IQ1`: `8 * grid ± 1` with the scale divided by 8, exact: a
//! power of two of a normal `f32`), an `i8`; the scale of each sub-block is the `f32` product
//! `grid.rs` computes, so that Burn's `scale * value` rounds as the reference's
//! `scale * grid * sign` (a sign flip is exact) and `scale * (grid + delta)` (one rounding of
//! the same real number) do.
//!
//! Each splitter writes one GGML block: `v`, its 256 values; `s`, its sub-block scales
//! (native-endian `f32`, one per 32 or 16 values).
#![allow(clippy::many_single_char_names)]

use super::grid::{
    IQ1S, IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS, half, iq2_scale, ksigns, nibble_scale, row, rows,
    u16_at, u32_at,
};

fn scale(s: &mut [u8], k: usize, scale: f32) {
    s[4 * k..4 * k + 4].copy_from_slice(&scale.to_ne_bytes());
}

/// A group of 8 values `grid * sign`, minus where bit `k` of `signs` is set.
fn signed(v: &mut [i8], grid: &[i8], signs: u8) {
    for (k, (v, &g)) in v.iter_mut().zip(grid).enumerate() {
        *v = if (signs >> k) & 1 == 0 { g } else { -g };
    }
}

/// A group of 8 `IQ1` values `8 * grid ± 1` (`grid + delta`, times 8).
fn shifted(v: &mut [i8], grid: &[i8], minus: bool) {
    for (v, &g) in v.iter_mut().zip(grid) {
        *v = 8 * g + if minus { -1 } else { 1 };
    }
}

/// `IQ2_XXS`: sub-blocks of 32.
pub(super) fn iq2_xxs(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    for (j, (v, q)) in v
        .chunks_exact_mut(32)
        .zip(b[2..].chunks_exact(8))
        .enumerate()
    {
        let aux = u32_at(q, 4);
        scale(s, j, iq2_scale(d, (aux >> 28) as u8));
        for (l, v) in v.chunks_exact_mut(8).enumerate() {
            signed(
                v,
                row::<8>(&IQ2XXS, usize::from(q[l])),
                ksigns(aux >> (7 * l)),
            );
        }
    }
}

/// `IQ2_XS`: sub-blocks of 16.
pub(super) fn iq2_xs(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let scales = &b[66..74];
    for (g, v) in v.chunks_exact_mut(8).enumerate() {
        let q = u16_at(b, 2 + 2 * g);
        if g % 2 == 0 {
            scale(s, g / 2, iq2_scale(d, nibble_scale(scales, g / 2)));
        }
        signed(
            v,
            row::<8>(&IQ2XS, usize::from(q & 511)),
            ksigns(u32::from(q >> 9)),
        );
    }
}

/// `IQ2_S`: sub-blocks of 16.
pub(super) fn iq2_s(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for (g, v) in v.chunks_exact_mut(8).enumerate() {
        let high = (qh[g / 4] >> (2 * (g % 4))) & 3;
        let i = usize::from(qs[g]) | (usize::from(high) << 8);
        if g % 2 == 0 {
            scale(s, g / 2, iq2_scale(d, nibble_scale(scales, g / 2)));
        }
        signed(v, row::<8>(&IQ2S, i), signs[g]);
    }
}

/// `IQ3_XXS`: sub-blocks of 32.
pub(super) fn iq3_xxs(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let qs = &b[2..66];
    for (j, v) in v.chunks_exact_mut(32).enumerate() {
        let aux = u32_at(b, 66 + 4 * j);
        scale(s, j, d * (0.5 + f32::from((aux >> 28) as u8)) * 0.5);
        for (l, v) in v.chunks_exact_mut(8).enumerate() {
            let at = 8 * j + 2 * l;
            let grid = rows(&IQ3XXS, usize::from(qs[at]), usize::from(qs[at + 1]));
            signed(v, &grid, ksigns(aux >> (7 * l)));
        }
    }
}

/// `IQ3_S`: sub-blocks of 32.
pub(super) fn iq3_s(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    let index = |i: usize| usize::from(qs[i]) | (usize::from((qh[i / 8] >> (i % 8)) & 1) << 8);
    for (g, v) in v.chunks_exact_mut(8).enumerate() {
        if g % 4 == 0 {
            scale(s, g / 4, d * f32::from(1 + 2 * nibble_scale(scales, g / 4)));
        }
        signed(v, &rows(&IQ3S, index(2 * g), index(2 * g + 1)), signs[g]);
    }
}

/// `IQ1_S`: sub-blocks of 32, the scale divided by 8.
pub(super) fn iq1_s(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let d = half(b, 0);
    let qs = &b[2..34];
    for (j, v) in v.chunks_exact_mut(32).enumerate() {
        let qh = u16_at(b, 34 + 2 * j);
        scale(s, j, d * f32::from(2 * ((qh >> 12) & 7) + 1) * 0.125);
        for (l, v) in v.chunks_exact_mut(8).enumerate() {
            let i = usize::from(qs[4 * j + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
            shifted(v, row::<8>(&IQ1S, i), qh & 0x8000 != 0);
        }
    }
}

/// `IQ1_M`: sub-blocks of 16, the scale divided by 8.
pub(super) fn iq1_m(b: &[u8], v: &mut [i8], s: &mut [u8]) {
    let (qs, qh) = (&b[..32], &b[32..48]);
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
    let d = burn::tensor::f16::from_bits(bits).to_f32();
    for (g, v) in v.chunks_exact_mut(8).enumerate() {
        if g % 2 == 0 {
            let k = (sc[g / 8] >> (3 * ((g / 2) % 4))) & 7;
            scale(s, g / 2, d * f32::from(2 * k + 1) * 0.125);
        }
        let h = (qh[g / 2] >> (4 * (g % 2))) & 0x0F;
        let i = usize::from(qs[g]) | (usize::from(h & 7) << 8);
        shifted(v, row::<8>(&IQ1S, i), h & 8 != 0);
    }
}
