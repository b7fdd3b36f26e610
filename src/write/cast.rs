//! Save-time precision: float entries written in another float dtype, each cast by its
//! provider on a writer thread as the writer reaches its slot (never the whole model at
//! once), rounding as Burn's own casts round (the `half` crate's round-to-nearest-even).

use burn::tensor::{Bytes, DType, bf16, f16};

use super::entry::{Data, Entry, Source};
use super::error::{ProviderError, WriteError};
use super::writer::Writer;
use crate::format::FLOAT_DTYPE_KEY;

/// The float dtypes a write can cast to.
const TARGETS: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

/// Whether `dtype` is a float an entry can be cast from (F64, F32, F16, BF16); ints, bools
/// and quantized data are never cast.
fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
}

/// `dtype` if a write can cast floats to it (F16, BF16, F32), otherwise the error naming it.
pub(crate) fn float_target(dtype: DType) -> Result<DType, WriteError> {
    if TARGETS.contains(&dtype) {
        Ok(dtype)
    } else {
        Err(WriteError::FloatDtype { dtype })
    }
}

/// The metadata value recording a cast to `dtype` (`F16`, `BF16`, `F32`).
pub(crate) fn float_dtype_name(dtype: DType) -> String {
    format!("{dtype:?}")
}

impl Writer {
    /// Writes every float entry (F64, F32, F16, BF16) as `dtype` (F16, BF16 or F32) and records
    /// it in the metadata ([`FLOAT_DTYPE_KEY`]: `burnpack.float_dtype` = `F16`...). Ints,
    /// bools and quantized tensors are written as they are.
    ///
    /// Each cast entry is a deferred one of the new length: its bytes are produced, cast and
    /// dropped on a writer thread when the writer reaches its slot, so a cast save holds a
    /// tensor (and its cast) per writer thread, never a cast copy of the model. Rounding is
    /// Burn's (`Tensor::cast`, the `half` crate): to nearest, ties to even; NaN stays NaN,
    /// values past the target's range become infinities.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType, f16};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![
    ///     Entry::resident("w", DType::F32, vec![2], Bytes::from_elems(vec![1.0f32, 0.1])),
    ///     Entry::resident("step", DType::I64, vec![1], Bytes::from_elems(vec![7i64])),
    /// ])
    /// .float_dtype(DType::F16)
    /// .unwrap()
    /// .into_bytes()
    /// .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// let w = reader.tensor("w").unwrap();
    /// assert_eq!(w.dtype(), DType::F16);
    /// let bits: Vec<u8> = reader.read(w).unwrap().to_vec();
    /// assert_eq!(bits, [f16::from_f32(1.0), f16::from_f32(0.1)].iter().flat_map(|h| h.to_le_bytes()).collect::<Vec<_>>());
    /// assert_eq!(reader.tensor("step").unwrap().dtype(), DType::I64);
    /// assert_eq!(reader.metadata()["burnpack.float_dtype"], "F16");
    /// ```
    ///
    /// # Errors
    /// [`WriteError::FloatDtype`] for a `dtype` other than F16, BF16 or F32.
    pub fn float_dtype(self, dtype: DType) -> Result<Self, WriteError> {
        Ok(self.cast_floats_to(float_target(dtype)?))
    }

    /// [`float_dtype`](Self::float_dtype) with a `dtype` already checked by [`float_target`].
    pub(crate) fn cast_floats_to(mut self, dtype: DType) -> Self {
        self.entries = std::mem::take(&mut self.entries)
            .into_iter()
            .map(|entry| entry.cast_float(dtype))
            .collect();
        self.metadata
            .insert(FLOAT_DTYPE_KEY.to_string(), float_dtype_name(dtype));
        self
    }
}

impl Entry {
    /// The entry written as `to` where it is a float of another dtype: a deferred entry of the
    /// cast length whose provider produces the original bytes and casts them. Any other entry
    /// (ints, bools, quantized, already `to`, already written, a shape whose size overflows,
    /// which the plan refuses) as it is.
    pub(crate) fn cast_float(self, to: DType) -> Self {
        let from = self.dtype;
        if !is_float(from)
            || !is_float(to)
            || from == to
            || matches!(self.source, Source::Written(_))
        {
            return self;
        }
        let Some(elems) = self
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        else {
            return self;
        };
        let (Some(from_len), Some(len)) = (
            elems.checked_mul(from.size() as u64),
            elems.checked_mul(to.size() as u64),
        ) else {
            return self;
        };
        let Entry {
            name,
            shape,
            param_id,
            source,
            ..
        } = self;
        let provider = move || -> Result<Bytes, ProviderError> {
            let data = match source {
                Source::Resident(bytes) => Data::Bytes(bytes),
                Source::Lent(lent) => Data::Lent(lent),
                Source::Deferred { len, provider } => {
                    let bytes = provider()?;
                    if bytes.len() as u64 != len {
                        return Err(format!(
                            "provider returned {} bytes, {len} were declared",
                            bytes.len()
                        )
                        .into());
                    }
                    Data::Bytes(bytes)
                }
                Source::Written(_) => return Err("the tensor is already written".into()),
            };
            if data.len() as u64 != from_len {
                return Err(format!(
                    "{} bytes of {from:?} given where its shape needs {from_len}",
                    data.len()
                )
                .into());
            }
            Ok(cast_floats(&data, from, to))
        };
        let entry = Entry::deferred(name, to, shape, len, provider);
        match param_id {
            Some(id) => entry.with_param_id(id),
            None => entry,
        }
    }
}

/// `bytes` (little-endian `from` floats) as little-endian `to` floats, rounded as Burn's
/// casts round: `half`'s conversions (to nearest, ties to even) straight from f64 or f32,
/// through f32 (exact) from the other half type. `from` and `to` are F64, F32, F16 or BF16;
/// a trailing partial element is ignored (callers check the length).
pub(crate) fn cast_floats(bytes: &[u8], from: DType, to: DType) -> Bytes {
    let n = bytes.len() / from.size();
    let mut out = vec![0u8; n * to.size()];
    // Each element as f64 (exact for every source dtype) with its f32 rounding where the
    // source is not f64 (exact too), so that every path rounds once, as `half` does.
    macro_rules! each {
        ($width:literal, $read:expr) => {{
            let read = $read;
            for (src, dst) in bytes
                .chunks_exact($width)
                .zip(out.chunks_exact_mut(to.size()))
            {
                let src: [u8; $width] = src.try_into().unwrap_or([0; $width]);
                write_one(read(src), to, dst);
            }
        }};
    }
    match from {
        DType::F64 => each!(8, |b| Value::F64(f64::from_le_bytes(b))),
        DType::F32 => each!(4, |b| Value::F32(f32::from_le_bytes(b))),
        DType::F16 => each!(2, |b| Value::F32(f16::from_le_bytes(b).to_f32())),
        DType::BF16 => each!(2, |b| Value::F32(bf16::from_le_bytes(b).to_f32())),
        _ => return Bytes::from_bytes_vec(bytes.to_vec()),
    }
    Bytes::from_bytes_vec(out)
}

/// One source value, exactly.
#[derive(Clone, Copy)]
enum Value {
    F64(f64),
    F32(f32),
}

/// Writes `value` as `to` into `dst` (its width).
#[allow(clippy::cast_possible_truncation)] // f64 -> f32 is the cast itself, rounded to nearest even
fn write_one(value: Value, to: DType, dst: &mut [u8]) {
    match (value, to) {
        (Value::F64(v), DType::F16) => dst.copy_from_slice(&f16::from_f64(v).to_le_bytes()),
        (Value::F64(v), DType::BF16) => dst.copy_from_slice(&bf16::from_f64(v).to_le_bytes()),
        (Value::F64(v), DType::F32) => dst.copy_from_slice(&(v as f32).to_le_bytes()),
        (Value::F64(v), _) => dst.copy_from_slice(&v.to_le_bytes()),
        (Value::F32(v), DType::F16) => dst.copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        (Value::F32(v), DType::BF16) => dst.copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        (Value::F32(v), DType::F32) => dst.copy_from_slice(&v.to_le_bytes()),
        (Value::F32(v), _) => dst.copy_from_slice(&f64::from(v).to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even_as_half_does() {
        // 1 + 2^-11 is halfway between two f16 values: ties to even (1.0).
        let values = [
            1.0f32 + f32::EPSILON * 1024.0,
            -0.1,
            65520.0,
            f32::NAN,
            1e-8,
        ];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = cast_floats(&bytes, DType::F32, DType::F16);
        let want: Vec<u8> = values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(&out[..], &want[..]);
        assert_eq!(f16::from_le_bytes([out[0], out[1]]), f16::ONE);
        let out = cast_floats(&bytes, DType::F32, DType::BF16);
        let want: Vec<u8> = values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(&out[..], &want[..]);
        let wide: Vec<u8> = [0.1f64, 1e300, -3.5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let out = cast_floats(&wide, DType::F64, DType::BF16);
        let want: Vec<u8> = [0.1f64, 1e300, -3.5]
            .iter()
            .flat_map(|&v| bf16::from_f64(v).to_le_bytes())
            .collect();
        assert_eq!(&out[..], &want[..]);
        let half: Vec<u8> = out.to_vec();
        let back = cast_floats(&half, DType::BF16, DType::F16);
        let want: Vec<u8> = half
            .chunks_exact(2)
            .flat_map(|b| f16::from_f32(bf16::from_le_bytes([b[0], b[1]]).to_f32()).to_le_bytes())
            .collect();
        assert_eq!(&back[..], &want[..]);
    }

    #[test]
    fn other_targets_are_refused() {
        for dtype in [
            DType::F64,
            DType::I32,
            DType::U8,
            DType::Bool(burn::tensor::BoolStore::Native),
        ] {
            assert!(matches!(
                float_target(dtype),
                Err(WriteError::FloatDtype { .. })
            ));
        }
    }
}
