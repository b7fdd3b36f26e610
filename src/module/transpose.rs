//! Matrices transposed on the host: in tiles, so that both sides are read and written a cache
//! line at a time, and in bands of output rows on every core.
//!
//! Used where a transposed parameter is laid out contiguous at load
//! ([`LoadOptions::contiguous`](super::LoadOptions::contiguous), or a backend that copies to
//! transpose anyway) and for the values and block scales of a block-quantized matrix
//! (`super::quantized`). A backend's own copy of a transposed view walks it element by element
//! through its strides (flex's `to_contiguous`: about 0.8 GB/s per core on this project's
//! machine); this is several times that, and it runs while the load still reads the file.

use burn::tensor::{Bytes, DType};

/// Items per side of a tile: 32 rows of 32 items of 4 bytes are 4 KiB in, 4 KiB out.
const TILE: usize = 32;

/// Bytes under which a transpose stays on the calling thread.
const PARALLEL_BYTES: usize = 1 << 20;

/// `input` (`rows` x `cols` items of `width` bytes, row-major) into `out`, transposed
/// (`cols` x `rows`). Both must hold exactly `rows * cols * width` bytes.
pub(super) fn transpose(input: &[u8], out: &mut [u8], rows: usize, cols: usize, width: usize) {
    debug_assert_eq!(input.len(), rows * cols * width);
    debug_assert_eq!(out.len(), input.len());
    match width {
        1 => typed::<1>(input, out, rows, cols),
        2 => typed::<2>(input, out, rows, cols),
        4 => typed::<4>(input, out, rows, cols),
        8 => typed::<8>(input, out, rows, cols),
        16 => typed::<16>(input, out, rows, cols),
        _ => {
            for r in 0..rows {
                for c in 0..cols {
                    let from = (r * cols + c) * width;
                    let to = (c * rows + r) * width;
                    out[to..to + width].copy_from_slice(&input[from..from + width]);
                }
            }
        }
    }
}

/// [`transpose`] for items of `W` bytes: each band of output rows (a contiguous run of `out`)
/// is filled tile by tile, bands on every core for a large matrix.
fn typed<const W: usize>(input: &[u8], out: &mut [u8], rows: usize, cols: usize) {
    let (input, _) = input.as_chunks::<W>();
    let (out, _) = out.as_chunks_mut::<W>();
    if rows == 0 || cols == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let (band_rows, fill): (usize, Band<W>) = if W == 4 {
        (QUAD_TILE, band_of_quads::<W>)
    } else {
        (TILE, band::<W>)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (band_rows, fill): (usize, Band<W>) = (TILE, band::<W>);
    let parallel = input.len() * W >= PARALLEL_BYTES && crate::platform::threads_available();
    // Enough bands for every thread when the output has few rows (`[vocab, 768]` transposed
    // has 768), in multiples of 4 (the register blocks). At most `cols` rows, so a band's
    // length never exceeds the matrix's (no overflow where `rows * cols` fits).
    let band_rows = if parallel {
        let share = cols.div_ceil(rayon::current_num_threads().max(1));
        band_rows.min(share.next_multiple_of(4))
    } else {
        band_rows
    }
    .min(cols);
    let run =
        |(index, dst): (usize, &mut [[u8; W]])| fill(input, dst, rows, cols, index * band_rows);
    let band_len = band_rows * rows;
    if parallel {
        use rayon::prelude::*;
        out.par_chunks_mut(band_len).enumerate().for_each(run);
    } else {
        out.chunks_mut(band_len).enumerate().for_each(run);
    }
}

/// Fills output rows `c0..` of a transpose: `(input, dst, rows, cols, c0)`.
type Band<const W: usize> = fn(&[[u8; W]], &mut [[u8; W]], usize, usize, usize);

/// Output rows `c0..` (as many as `dst` holds) of the transpose of `input`: for each tile of
/// [`TILE`] source rows, each output row's run of them, read down the tile's column.
fn band<const W: usize>(
    input: &[[u8; W]],
    dst: &mut [[u8; W]],
    rows: usize,
    cols: usize,
    c0: usize,
) {
    let width = dst.len() / rows;
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for dc in 0..width {
            let c = c0 + dc;
            let line = &mut dst[dc * rows + r0..dc * rows + r1];
            for (k, item) in line.iter_mut().enumerate() {
                *item = input[(r0 + k) * cols + c];
            }
        }
    }
}

/// Items per side of a tile of 4-byte items transposed 4 x 4 in registers: 256 x 256 measured
/// fastest on this project's machine (1.4-1.9 GB/s per core against 1.1-1.3 for [`band`]'s
/// 32 x 32 tiles, 1024 x 1024 f32 matrices; a plain copy runs at 4.3).
#[cfg(target_arch = "x86_64")]
const QUAD_TILE: usize = 256;

/// [`band`] for 4-byte items (f32, i32, u32): tiles of [`QUAD_TILE`] source rows, each 4 x 4
/// block of them loaded as four vectors, transposed in registers (SSE2, which every x86-64
/// processor has) and stored as four; the ragged edges item by item.
#[cfg(target_arch = "x86_64")]
fn band_of_quads<const W: usize>(
    input: &[[u8; W]],
    dst: &mut [[u8; W]],
    rows: usize,
    cols: usize,
    c0: usize,
) {
    use std::arch::x86_64::{_MM_TRANSPOSE4_PS, _mm_loadu_ps, _mm_storeu_ps};
    assert!(W == 4 && rows > 0);
    let width = dst.len() / rows;
    assert!(dst.len() == width * rows && c0 + width <= cols && input.len() == rows * cols);
    let (rows4, width4) = (rows - rows % 4, width - width % 4);
    let from = input.as_ptr().cast::<f32>();
    let to = dst.as_mut_ptr().cast::<f32>();
    for r0 in (0..rows4).step_by(QUAD_TILE) {
        let r1 = (r0 + QUAD_TILE).min(rows4);
        for dc in (0..width4).step_by(4) {
            for r in (r0..r1).step_by(4) {
                // SAFETY: `r + 3 < rows4 <= rows` and `c0 + dc + 3 < c0 + width <= cols`, so
                // the four loads of 4 items lie inside `input` (`rows * cols` items, checked
                // above); `dc + 3 < width` and `r + 3 < rows`, so the four stores lie inside
                // `dst` (`width * rows` items). Unaligned loads and stores take any address;
                // the items are plain bytes, moved as they are (never computed on as floats).
                unsafe {
                    let at = |k: usize| from.add((r + k) * cols + c0 + dc);
                    let (mut a, mut b) = (_mm_loadu_ps(at(0)), _mm_loadu_ps(at(1)));
                    let (mut c, mut d) = (_mm_loadu_ps(at(2)), _mm_loadu_ps(at(3)));
                    _MM_TRANSPOSE4_PS(&mut a, &mut b, &mut c, &mut d);
                    _mm_storeu_ps(to.add(dc * rows + r), a);
                    _mm_storeu_ps(to.add((dc + 1) * rows + r), b);
                    _mm_storeu_ps(to.add((dc + 2) * rows + r), c);
                    _mm_storeu_ps(to.add((dc + 3) * rows + r), d);
                }
            }
        }
    }
    // The last `rows % 4` source rows of every output row, and the last `width % 4` output rows.
    for dc in 0..width {
        let start = if dc < width4 { rows4 } else { 0 };
        for r in start..rows {
            dst[dc * rows + r] = input[r * cols + c0 + dc];
        }
    }
}

/// A matrix's `bytes` (`shape` `[rows, cols]`, items of `dtype`) laid out transposed in memory
/// of their own (huge pages for a large one): the bytes and the shape `[cols, rows]`. `None`
/// where this is not a plain transpose (a rank other than 2, a quantized dtype, whose blocks
/// `super::quantized` transposes, or bytes of another length): the caller keeps the view.
/// `Some(Err)` when the memory is refused.
pub(super) fn contiguous(
    bytes: &[u8],
    shape: &[usize],
    dtype: DType,
) -> Option<std::io::Result<(Bytes, [usize; 2])>> {
    let &[rows, cols] = shape else {
        return None;
    };
    if matches!(dtype, DType::QFloat(_)) {
        return None;
    }
    let width = dtype.size();
    if width == 0 || rows.checked_mul(cols)?.checked_mul(width)? != bytes.len() {
        return None;
    }
    let out = crate::source::data::aligned_bytes(
        bytes.len(),
        |e| e,
        |out| {
            transpose(bytes, out, rows, cols, width);
            Ok(())
        },
    );
    Some(out.map(|out| (out, [cols, rows])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(input: &[u8], rows: usize, cols: usize, width: usize) -> Vec<u8> {
        let mut out = vec![0; input.len()];
        for r in 0..rows {
            for c in 0..cols {
                let (from, to) = ((r * cols + c) * width, (c * rows + r) * width);
                out[to..to + width].copy_from_slice(&input[from..from + width]);
            }
        }
        out
    }

    #[test]
    fn every_width_and_ragged_shape_matches_the_definition() {
        // Shapes around the tile and the parallel threshold, items of every width.
        for width in [1, 2, 3, 4, 8, 16] {
            let shapes = [(1, 1), (1, 70), (70, 1), (31, 33), (64, 96), (257, 1031)];
            // Past the parallel threshold with few output rows: bands narrower than a tile.
            let narrow = [(5000, 60), (70_000, 3)];
            for (rows, cols) in shapes.into_iter().chain(narrow) {
                let input: Vec<u8> = (0..rows * cols * width)
                    .map(|i| (i * 31 % 251) as u8)
                    .collect();
                let mut out = vec![0; input.len()];
                transpose(&input, &mut out, rows, cols, width);
                assert_eq!(
                    out,
                    naive(&input, rows, cols, width),
                    "{rows}x{cols}x{width}"
                );
            }
        }
    }

    #[test]
    fn contiguous_keeps_the_view_where_it_is_not_a_plain_transpose() {
        let bytes = vec![0u8; 24];
        assert!(contiguous(&bytes, &[2, 3, 1], DType::F32).is_none());
        assert!(contiguous(&bytes, &[6], DType::F32).is_none());
        assert!(contiguous(&bytes, &[2, 2], DType::F32).is_none());
        let values: Vec<u8> = (0..24).collect();
        let (out, shape) = contiguous(&values, &[2, 3], DType::F32).unwrap().unwrap();
        assert_eq!(shape, [3, 2]);
        assert_eq!(&*out, naive(&values, 2, 3, 4).as_slice());
    }
}
