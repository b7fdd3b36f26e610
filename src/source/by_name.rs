//! Tensors by name from any [`TensorSource`], as Burn [`TensorData`]: whole, cast, or a range
//! of rows read on its own (`safetensors`' `get_tensor` / `get_slice`, for every source).

use std::ops::Range;

use burn::tensor::{Bytes, DType, TensorData};

use super::{ReadError, TensorSource};
use crate::format::TensorInfo;

fn unsupported(file: &str, info: &TensorInfo, reason: String) -> ReadError {
    ReadError::Unsupported {
        file: file.to_string(),
        tensor: info.name().to_string(),
        reason,
    }
}

/// Tensors by name as Burn [`TensorData`], for every [`TensorSource`] (a pack, a checkpoint,
/// a foreign file opened by the registry, an object on object storage): what
/// `safetensors`' `get_tensor` and `get_slice` are, for any format. Implemented for every
/// source; bring it into scope with `use burnpack::source::TensorSourceExt`.
///
/// The data is the source's bytes without a copy where the source hands out views (a
/// mapped pack, a safetensors file): [`TensorData::from_bytes`] over them. A quantized tensor
/// (`QFloat`) comes back as quantized data. A tensor onto a device is
/// [`LoadTensor`](crate::module::LoadTensor)'s.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::TensorSourceExt;
/// use burnpack::write::{Entry, Writer};
/// let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
/// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![3, 2], Bytes::from_elems(values))])
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let data = reader.tensor_data("w").unwrap();
/// assert_eq!(data.shape().to_vec(), [3, 2]);
/// assert_eq!(data.try_to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
/// let half = reader.tensor_data_as("w", DType::F16).unwrap();
/// assert_eq!(half.dtype(), DType::F16);
/// let rows = reader.tensor_rows("w", 1..3).unwrap();
/// assert_eq!(rows.shape().to_vec(), [2, 2]);
/// assert_eq!(rows.try_to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0, 5.0]);
/// assert!(reader.tensor_data("v").is_err());
/// ```
pub trait TensorSourceExt: TensorSource {
    /// The tensor called `name`: [`ReadError::NotFound`] when the source has none, and the
    /// source's refusal (naming the tensor, its dtype and why) when it lists the tensor but
    /// withholds it ([`withheld`](TensorSource::withheld), such as FP8 in safetensors).
    ///
    /// # Errors
    /// As said.
    fn find_tensor(&self, name: &str) -> Result<&TensorInfo, ReadError> {
        if let Some(info) = self.tensor(name) {
            return Ok(info);
        }
        match self.withheld().iter().find(|w| w.name == name) {
            Some(w) => Err(w.error(self.file())),
            None => Err(ReadError::NotFound {
                file: self.file().to_string(),
                tensor: name.to_string(),
            }),
        }
    }

    /// The tensor called `name` as stored (its dtype and shape), zero-copy where the source
    /// allows.
    ///
    /// # Errors
    /// See [`find_tensor`](Self::find_tensor); a failed read or checksum.
    fn tensor_data(&self, name: &str) -> Result<TensorData, ReadError> {
        let info = self.find_tensor(name)?;
        let bytes = self.read(info)?;
        data(self.file(), info, bytes, info.shape().to_vec())
    }

    /// The tensor called `name` cast to `dtype` (as stored, without a copy, when it already is
    /// `dtype`). A quantized tensor is not cast here (dequantizing is the backend's: see
    /// [`LoadTensor::load_tensor_as`](crate::module::LoadTensor::load_tensor_as)).
    ///
    /// # Errors
    /// See [`tensor_data`](Self::tensor_data); a cast Burn does not make, or a quantized
    /// tensor ([`ReadError::Unsupported`] naming it).
    fn tensor_data_as(&self, name: &str, dtype: DType) -> Result<TensorData, ReadError> {
        let data = self.tensor_data(name)?;
        cast(self.file(), name, data, dtype)
    }

    /// The rows `rows` of the tensor called `name` (a range of its first dimension), reading
    /// only those rows' bytes where the source allows
    /// ([`read_range`](TensorSource::read_range)). The rows are not checked against the
    /// tensor's checksum, which covers the whole tensor.
    ///
    /// # Errors
    /// See [`find_tensor`](Self::find_tensor); a scalar, a quantized tensor (its blocks are not
    /// laid out by rows), or rows outside the first dimension ([`ReadError::Unsupported`]
    /// naming the tensor); a failed read.
    fn tensor_rows(&self, name: &str, rows: Range<usize>) -> Result<TensorData, ReadError> {
        let info = self.find_tensor(name)?;
        let refuse = |reason: String| unsupported(self.file(), info, reason);
        let shape = info.shape();
        let Some((&first, rest)) = shape.split_first() else {
            return Err(refuse("a scalar has no rows".to_string()));
        };
        if matches!(info.dtype(), DType::QFloat(_)) {
            return Err(refuse(format!(
                "quantized ({:?}): its blocks and scales are not laid out by rows; read it whole",
                info.dtype()
            )));
        }
        if rows.start > rows.end || rows.end > first {
            return Err(refuse(format!(
                "rows {}..{} asked of {first}",
                rows.start, rows.end
            )));
        }
        let too_big = || refuse("rows do not fit in memory".to_string());
        let row = rest
            .iter()
            .try_fold(info.dtype().size() as u64, |n, &d| n.checked_mul(d as u64))
            .ok_or_else(too_big)?;
        let start = (rows.start as u64).checked_mul(row).ok_or_else(too_big)?;
        let end = (rows.end as u64).checked_mul(row).ok_or_else(too_big)?;
        let bytes = self.read_range(info, start..end)?;
        let mut sliced = shape.to_vec();
        sliced[0] = rows.len();
        data(self.file(), info, bytes, sliced)
    }

    /// [`tensor_rows`](Self::tensor_rows) cast to `dtype`.
    ///
    /// # Errors
    /// See [`tensor_rows`](Self::tensor_rows) and [`tensor_data_as`](Self::tensor_data_as).
    fn tensor_rows_as(
        &self,
        name: &str,
        rows: Range<usize>,
        dtype: DType,
    ) -> Result<TensorData, ReadError> {
        let data = self.tensor_rows(name, rows)?;
        cast(self.file(), name, data, dtype)
    }
}

impl<S: TensorSource + ?Sized> TensorSourceExt for S {}

/// `bytes` of `info` as [`TensorData`] of `shape`; a length that does not fit refused.
fn data(
    file: &str,
    info: &TensorInfo,
    bytes: Bytes,
    shape: Vec<usize>,
) -> Result<TensorData, ReadError> {
    TensorData::try_from_bytes(bytes, shape, info.dtype())
        .map_err(|e| unsupported(file, info, e.to_string()))
}

/// `data` (of the tensor `name`) cast to `dtype`.
fn cast(file: &str, name: &str, data: TensorData, dtype: DType) -> Result<TensorData, ReadError> {
    let refuse = |reason: String| ReadError::Unsupported {
        file: file.to_string(),
        tensor: name.to_string(),
        reason,
    };
    let from = data.dtype();
    if from == dtype {
        return Ok(data);
    }
    if matches!(from, DType::QFloat(_)) || matches!(dtype, DType::QFloat(_)) {
        return Err(refuse(format!(
            "cannot cast {from:?} to {dtype:?} on the host: quantizing and dequantizing are a \
             backend's (load it onto a device with `LoadTensor::load_tensor_as`)"
        )));
    }
    // Burn's cast panics on a few storage problems rather than returning them: caught.
    match crate::panic::catch_quiet(|| data.try_cast(dtype)) {
        Ok(Ok(cast)) => Ok(cast),
        Ok(Err(e)) => Err(refuse(format!("cannot cast {from:?} to {dtype:?}: {e}"))),
        Err(why) => Err(refuse(format!("cannot cast {from:?} to {dtype:?}: {why}"))),
    }
}
