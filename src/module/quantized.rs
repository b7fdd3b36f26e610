//! Exact transposes of block-quantized matrices on the host.
//!
//! A convention that stores a matrix transposed (llama.cpp's `[out, in]` for Burn's
//! `[in, out]`) is applied by strides for plain tensors. Burn's backends transpose a
//! block-quantized tensor by dequantizing it, transposing and quantizing again (flex:
//! `block_safe_layout_op`), which changes its values. This module transposes the stored
//! values and the grid of block scales instead, with the blocks transposed with them
//! (`[1, 32]` blocks become `[32, 1]`), so the loaded tensor dequantizes to exactly what the
//! file holds.

use burn::tensor::quantization::{QuantScheme, QuantStore, global_scale_size, scale_size};
use burn::tensor::{Bytes, DType, TensorData};

/// The data of a parameter stored as `bytes` of `shape` and dtype `stored`, loaded as `dtype`,
/// to be transposed or not: a block-quantized matrix to transpose comes back transposed here,
/// exactly (one copy), with its transposed scheme and `false` (nothing left to transpose).
pub(super) fn stored_data(
    bytes: Bytes,
    shape: &[usize],
    stored: DType,
    dtype: DType,
    transpose: bool,
) -> (TensorData, DType, bool) {
    match transpose.then(|| transposed(&bytes, shape, stored)) {
        Some(Some((bytes, shape, swapped))) => (
            TensorData::from_bytes(bytes, shape, swapped),
            swapped,
            false,
        ),
        _ => (
            TensorData::from_bytes(bytes, shape.iter().copied(), stored),
            dtype,
            transpose,
        ),
    }
}

/// `bytes` (a `QFloat` tensor of `shape` `[rows, cols]` under `scheme`: the values, then the
/// block scales) transposed: its bytes, shape and scheme. `None` where this is not exact here:
/// a rank other than 2, values not stored one per byte, no block scales, a two-level scheme,
/// blocks that do not divide the matrix, or bytes of another length.
pub(super) fn transposed(
    bytes: &[u8],
    shape: &[usize],
    dtype: DType,
) -> Option<(Bytes, [usize; 2], DType)> {
    let DType::QFloat(scheme) = dtype else {
        return None;
    };
    let &[rows, cols] = shape else {
        return None;
    };
    let block = scheme.block_size()?;
    let block = block.to_dim_vec(2);
    let (br, bc) = (usize::from(block[0]), usize::from(block[1]));
    if scheme.store != QuantStore::Native
        || scheme.size_bits_stored() != 8
        || global_scale_size(&scheme) != 0
        || br == 0
        || bc == 0
        || !rows.is_multiple_of(br)
        || !cols.is_multiple_of(bc)
    {
        return None;
    }
    let values = rows.checked_mul(cols)?;
    let (grid_rows, grid_cols) = (rows / br, cols / bc);
    let width = scale_size(scheme.scale_dtype());
    if bytes.len() != values + grid_rows * grid_cols * width {
        return None;
    }
    let (stored, scales) = bytes.split_at(values);
    let mut out = vec![0u8; bytes.len()];
    let (out_values, out_scales) = out.split_at_mut(values);
    super::transpose::transpose(stored, out_values, rows, cols, 1);
    super::transpose::transpose(scales, out_scales, grid_rows, grid_cols, width);
    let mut swapped: QuantScheme = scheme;
    swapped.swap_block_dims(2, 0, 1);
    Some((
        Bytes::from_bytes_vec(out),
        [cols, rows],
        DType::QFloat(swapped),
    ))
}

/// Why `device` cannot take a `QFloat` of `dtype` exactly, where Burn 0.22 would take it and
/// get it wrong: flex dequantizes `E4M3` / `E5M2` values as if their bytes were integers
/// (`0x38`, FP8 1.0, as 56.0) and ndarray refuses them (a panic); the cubecl backends (wgpu,
/// CUDA) decode them. `None` where the device holds it (every other dtype).
pub(super) fn fp8_refused_on(device: &burn::tensor::Device, dtype: DType) -> Option<String> {
    use burn::tensor::quantization::QuantValue;
    let DType::QFloat(scheme) = dtype else {
        return None;
    };
    if !matches!(scheme.value, QuantValue::E4M3 | QuantValue::E5M2) {
        return None;
    }
    // Burn's dispatch device names its backend; an autodiff device names the one it wraps.
    let name = format!("{device:?}");
    (name.contains("Flex(") || name.contains("NdArray(")).then(|| {
        format!(
            "{:?} values are not dequantized exactly on {device:?} (Burn 0.22's CPU backends \
             read FP8 bytes as integers, or refuse them): open the source without \
             keep_quantized to load them decoded into f32, or load onto wgpu or CUDA",
            scheme.value
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::quantization::{QuantValue, ScaleDtype};
    use burn::tensor::{Device, Tensor, TensorData};

    #[test]
    fn a_transposed_block_quantized_matrix_dequantizes_to_the_transposed_values() {
        let scheme = QuantScheme::default()
            .with_value(QuantValue::Q8F)
            .with_store(QuantStore::Native)
            .per_block([4], ScaleDtype::F16);
        let (rows, cols) = (3, 8);
        let values: Vec<i8> = (0..24).map(|i| (i * 7 % 255 - 127) as i8).collect();
        let scales = [0.5f32, 0.25, 2.0, 1.5, 0.125, 3.0];
        let data = TensorData::quantized(values, [rows, cols], scheme, &scales, None);
        let dtype = DType::QFloat(scheme);
        let device = Device::flex();
        let expected = Tensor::<2>::from_data(data.clone(), (&device, dtype))
            .dequantize()
            .transpose()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let (bytes, shape, swapped) = transposed(data.as_bytes(), &[rows, cols], dtype).unwrap();
        let DType::QFloat(s) = swapped else {
            unreachable!()
        };
        assert_eq!(s.block_size().unwrap().to_dim_vec(2), [4, 1]);
        let data = TensorData::from_bytes(bytes, shape, swapped);
        let got = Tensor::<2>::from_data(data, (&device, swapped))
            .dequantize()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(got, expected);
        // Not exact here: per-tensor scales (transposed by strides anyway), a rank of 3.
        let tensor = QuantScheme::default().with_store(QuantStore::Native);
        assert!(transposed(&[0; 28], &[4, 6], DType::QFloat(tensor)).is_none());
        assert!(transposed(&[0; 36], &[1, 3, 8], dtype).is_none());
    }
}
