//! Blocks that one of Burn's quantization schemes holds exactly, kept quantized: GGUF's `Q8_0`
//! (blocks of 32 values along a row, an `f16` scale and 32 `i8` each) is Burn's symmetric
//! 8-bit scheme with per-block `[32]` `F16` scales. Read, its blocks are split into Burn's
//! layout (every `i8` value in row-major order, then every scale, in block order), which is
//! what `TensorData` of dtype `QFloat` holds; Burn's dequantization, `value * scale` in `f32`,
//! is then the reference's.

use burn::tensor::DType;
use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype};
use rayon::prelude::*;

use super::types::GgmlType;

/// The values of a block and its bytes: one `f16` scale then 32 `i8`.
const Q8_0: (usize, usize) = (32, 34);

/// Burn's quantized dtype that holds `ty` exactly, when one does.
pub(super) fn burn_dtype(ty: GgmlType) -> Option<DType> {
    (ty.name() == "Q8_0").then(|| {
        DType::QFloat(
            QuantScheme::default()
                // Q8F: the full `i8` range (-128 included), as the reference multiplies it.
                .with_value(QuantValue::Q8F)
                .with_store(QuantStore::Native)
                .per_block([32], ScaleDtype::F16),
        )
    })
}

/// The length of `blocks` blocks of `Q8_0` in Burn's layout (as `quantized_data_len` counts).
pub(super) fn burn_len(elements: u64) -> Option<u64> {
    let blocks = elements / Q8_0.0 as u64;
    elements.checked_add(blocks.checked_mul(2)?)
}

/// Splits `raw` (whole `Q8_0` blocks) into Burn's layout in `out`: the values, then the scales
/// (native-endian `f16`, as Burn decodes them), in parallel over groups of blocks.
pub(super) fn split_q8_0(raw: &[u8], out: &mut [u8]) {
    let (values, bytes) = Q8_0;
    let blocks = raw.len() / bytes;
    let (out_values, out_scales) = out.split_at_mut(blocks * values);
    let group = 2048;
    out_values
        .par_chunks_mut(values * group)
        .zip(out_scales.par_chunks_mut(2 * group))
        .zip(raw.par_chunks(bytes * group))
        .for_each(|((out_values, out_scales), raw)| {
            for ((v, s), block) in out_values
                .chunks_exact_mut(values)
                .zip(out_scales.chunks_exact_mut(2))
                .zip(raw.chunks_exact(bytes))
            {
                let scale = burn::tensor::f16::from_le_bytes([block[0], block[1]]);
                s.copy_from_slice(&scale.to_ne_bytes());
                v.copy_from_slice(&block[2..]);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Shape;
    use burn::tensor::quantization::quantized_data_len;

    #[test]
    fn the_layout_has_the_length_burn_counts() {
        let ty = GgmlType::from_id(8).unwrap();
        let Some(DType::QFloat(scheme)) = burn_dtype(ty) else {
            panic!("Q8_0 is held exactly");
        };
        for shape in [vec![32], vec![3, 64], vec![2, 5, 96]] {
            let elements: usize = shape.iter().product();
            assert_eq!(
                burn_len(elements as u64),
                Some(quantized_data_len(&scheme, &Shape::from(shape)) as u64)
            );
        }
        assert!(burn_dtype(GgmlType::from_id(2).unwrap()).is_none());
    }
}
