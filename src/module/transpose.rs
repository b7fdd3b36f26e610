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

/// [`transpose`] for items of `W` bytes: each band of [`TILE`] output rows (a contiguous run
/// of `out`) is filled tile by tile, bands on every core for a large matrix.
fn typed<const W: usize>(input: &[u8], out: &mut [u8], rows: usize, cols: usize) {
    let input: &[[u8; W]] = bytemuck::cast_slice(input);
    let out: &mut [[u8; W]] = bytemuck::cast_slice_mut(out);
    if rows == 0 || cols == 0 {
        return;
    }
    let band = |(index, dst): (usize, &mut [[u8; W]])| {
        let c0 = index * TILE;
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
    };
    let band_len = TILE * rows;
    if input.len() * W >= PARALLEL_BYTES && crate::platform::threads_available() {
        use rayon::prelude::*;
        out.par_chunks_mut(band_len).enumerate().for_each(band);
    } else {
        out.chunks_mut(band_len).enumerate().for_each(band);
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
    let out = crate::read::source::aligned_bytes(
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
            for (rows, cols) in [(1, 1), (1, 70), (70, 1), (31, 33), (64, 96), (257, 1031)] {
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
