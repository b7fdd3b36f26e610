//! A tensor by name onto a device, from any [`TensorSource`]: candle's `VarBuilder::get`, for
//! every format this crate reads.

use burn::tensor::kind::{Basic, Kind};
use burn::tensor::{DType, Device, Tensor, TensorData};

use super::{Mismatch, ModuleError};
use crate::source::{TensorKind, TensorSource, TensorSourceExt};

/// Tensors by name onto a device, for every [`TensorSource`] (a pack, a checkpoint, a foreign
/// file opened by the registry, an object on object storage). Implemented for every source;
/// bring it into scope with `use burnpack::module::LoadTensor`. The data on the host is
/// [`TensorSourceExt`]'s.
///
/// The rank asked for (`D`) and the kind (`Tensor<D>` float, `Tensor<D, Int>`,
/// `Tensor<D, Bool>`) are checked against the file's tensor before anything reaches the
/// device; the tensor is built with [`Tensor::from_data`] at the dtype asked (F16 and BF16
/// stay so), from the source's bytes without a copy where the source and the backend allow.
///
/// ```
/// use burn::tensor::{Bytes, DType, Device, Tensor};
/// use burnpack::module::LoadTensor;
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![2, 2], Bytes::from_elems(vec![1.0f32, 2.0, 3.0, 4.0]))])
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let device = Device::flex();
/// let w: Tensor<2> = reader.load_tensor("w", &device).unwrap();
/// assert_eq!(w.dims(), [2, 2]);
/// let half: Tensor<2> = reader.load_tensor_as("w", &device, DType::F16).unwrap();
/// assert_eq!(half.dtype(), DType::F16);
/// // Rank 2 is not rank 3: refused, naming the file and the tensor.
/// let err = reader.load_tensor::<3, burn::tensor::Float>("w", &device).unwrap_err();
/// assert!(err.to_string().contains("'w' has rank 2"));
/// ```
pub trait LoadTensor: TensorSource {
    /// The tensor called `name` on `device` with the dtype it is stored in (a quantized tensor
    /// stays quantized).
    ///
    /// # Errors
    /// [`ModuleError::Read`]: no such tensor, a withheld one, a failed read;
    /// [`ModuleError::Mismatch`] (naming the file and the tensor): another rank or kind, or a
    /// dtype the backend refused.
    fn load_tensor<const D: usize, K: Basic>(
        &self,
        name: &str,
        device: &Device,
    ) -> Result<Tensor<D, K>, ModuleError> {
        let data = self.tensor_data(name)?;
        let dtype = data.dtype();
        onto_device(self.file(), name, data, device, dtype)
    }

    /// The tensor called `name` on `device`, cast to `dtype` (of the same kind: a float to
    /// another float, an integer to another integer). A quantized tensor asked as a float
    /// dtype is dequantized by the backend, then cast.
    ///
    /// # Errors
    /// See [`load_tensor`](Self::load_tensor); a cast to another kind, or to a quantized
    /// dtype.
    fn load_tensor_as<const D: usize, K: Basic>(
        &self,
        name: &str,
        device: &Device,
        dtype: DType,
    ) -> Result<Tensor<D, K>, ModuleError> {
        let data = self.tensor_data(name)?;
        let stored = data.dtype();
        if TensorKind::of(dtype) != TensorKind::of(stored)
            || (stored != dtype && matches!(dtype, DType::QFloat(_)))
        {
            return Err(failed(
                self.file(),
                name,
                format!("stored as {stored:?}, which is not cast to {dtype:?} here"),
            ));
        }
        if matches!(stored, DType::QFloat(_)) && stored != dtype {
            // Dequantized by the backend, then cast: a float tensor either way.
            let quantized: Tensor<D> = onto_device(self.file(), name, data, device, stored)?;
            let cast = crate::panic::catch_quiet(|| quantized.dequantize().cast(dtype))
                .map_err(|why| failed(self.file(), name, format!("cannot dequantize: {why}")))?;
            let data = cast.into_data();
            return onto_device(self.file(), name, data, device, dtype);
        }
        let data = self.tensor_data_as(name, dtype)?;
        onto_device(self.file(), name, data, device, dtype)
    }
}

impl<S: TensorSource + ?Sized> LoadTensor for S {}

/// A [`ModuleError::Mismatch`] of one tensor that could not be made.
fn failed(file: &str, name: &str, why: String) -> ModuleError {
    ModuleError::Mismatch {
        file: file.to_string(),
        mismatch: Box::new(Mismatch {
            failed: vec![(name.to_string(), why)],
            ..Mismatch::default()
        }),
    }
}

/// `data` (the tensor `name` of `file`) as a `Tensor<D, K>` of `dtype` on `device`, its rank
/// and kind checked first.
fn onto_device<const D: usize, K: Basic>(
    file: &str,
    name: &str,
    data: TensorData,
    device: &Device,
    dtype: DType,
) -> Result<Tensor<D, K>, ModuleError> {
    let shape = data.shape().to_vec();
    if shape.len() != D {
        return Err(failed(
            file,
            name,
            format!(
                "'{name}' has rank {} (shape {shape:?}); rank {D} was asked",
                shape.len()
            ),
        ));
    }
    let kind = match K::KIND {
        Kind::Float => TensorKind::Float,
        Kind::Int => TensorKind::Int,
        Kind::Bool => TensorKind::Bool,
    };
    if TensorKind::of(dtype) != kind {
        return Err(failed(
            file,
            name,
            format!("stored as {dtype:?}, not a {kind} tensor"),
        ));
    }
    if let Some(why) = super::quantized::fp8_refused_on(device, data.dtype()) {
        return Err(failed(file, name, why));
    }
    crate::panic::catch_quiet(|| Tensor::<D, K>::from_data(data, (device, dtype))).map_err(|why| {
        failed(
            file,
            name,
            format!("{dtype:?} is not supported on {device:?} (the backend refused it: {why})"),
        )
    })
}
