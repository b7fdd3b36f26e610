//! Layouts NumPy stores and Burn does not: big-endian elements and Fortran (column-major)
//! order, each turned into Burn's (little-endian, row-major) in memory of its own.

/// Reverses the bytes of every `size`-byte element of `bytes`.
pub(super) fn byte_swap(bytes: &mut [u8], size: usize) {
    if size > 1 {
        for element in bytes.chunks_exact_mut(size) {
            element.reverse();
        }
    }
}

/// `src`, the elements (`size` bytes each) of an array of `shape` in Fortran order (the first
/// index fastest), written into `out` in C order (the last index fastest).
pub(super) fn from_fortran(src: &[u8], out: &mut [u8], shape: &[usize], size: usize) {
    let n = shape.len();
    if n < 2 {
        out.copy_from_slice(src);
        return;
    }
    // Fortran strides, in elements.
    let mut strides = vec![1usize; n];
    for k in 1..n {
        strides[k] = strides[k - 1] * shape[k - 1];
    }
    let mut index = vec![0usize; n];
    let mut from = 0usize;
    for element in out.chunks_exact_mut(size) {
        element.copy_from_slice(&src[from * size..(from + 1) * size]);
        // The next C-order index: the last dimension fastest; `from` follows it.
        for k in (0..n).rev() {
            index[k] += 1;
            from += strides[k];
            if index[k] < shape[k] {
                break;
            }
            from -= strides[k] * shape[k];
            index[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fortran_order_is_laid_out_row_major() {
        // [[0, 1, 2], [3, 4, 5]] in Fortran order: 0 3 1 4 2 5.
        let src = [0u8, 3, 1, 4, 2, 5];
        let mut out = [0u8; 6];
        super::from_fortran(&src, &mut out, &[2, 3], 1);
        assert_eq!(out, [0, 1, 2, 3, 4, 5]);
        // A 2x3x2 array: element (i, j, k) = 100i + 10j + k, stored i fastest.
        let shape = [2usize, 3, 2];
        let mut fortran = Vec::new();
        for k in 0..2u16 {
            for j in 0..3u16 {
                for i in 0..2u16 {
                    fortran.extend((100 * i + 10 * j + k).to_le_bytes());
                }
            }
        }
        let mut out = vec![0u8; fortran.len()];
        super::from_fortran(&fortran, &mut out, &shape, 2);
        let got: Vec<u16> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let want: Vec<u16> = (0..2)
            .flat_map(|i| (0..3).flat_map(move |j| (0..2).map(move |k| 100 * i + 10 * j + k)))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn big_endian_elements_are_swapped() {
        let mut bytes = [0u8, 0, 0, 1, 0, 0, 0, 2];
        super::byte_swap(&mut bytes, 4);
        assert_eq!(bytes, [1, 0, 0, 0, 2, 0, 0, 0]);
    }
}
