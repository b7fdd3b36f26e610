//! A parameter's bytes on the host, for the writer: borrowed from the backend's own storage
//! where Burn 0.22 allows it, read back otherwise.
//!
//! Copies per tensor between a parameter and the write system call, as measured by the peak
//! resident memory of saves of 16 MiB parameters (`tests/save_copies.rs`):
//!
//! | backend | route | copies |
//! |---|---|---:|
//! | flex (this crate's feature `flex`), autodiff too | the storage's `Arc<Bytes>`, shared with the parameter | 0 |
//! | ndarray (feature `ndarray`) | the storage's contiguous slice, shared with the parameter | 0 |
//! | a non-contiguous view (e.g. a transposed parameter) | `Tensor::try_into_data` | 1 |
//! | wgpu, CUDA (by design: the device read-back) | `Tensor::try_into_data` | 1 |
//! | Burn's own `into_data` of a flex parameter (this crate without `flex`) | | 2 |
//!
//! Burn's `into_data` copies twice on flex because the storage is shared with the parameter
//! (flex copies it into a `Vec<u8>`, then `Bytes::from_bytes_vec` copies that into a 32-byte
//! aligned allocation), and ndarray copies element by element. The borrowed routes keep a
//! reference to the storage (an `Arc`) in the entry until the writer has written and dropped
//! it; the parameter is never mutated through it (both backends copy on
//! write while a second reference exists).

use burn::tensor::{Bytes, Tensor, kind::Basic};

use crate::write::{Lent, ProviderError};

/// The first `len` bytes of `tensor`'s storage, lent (no copy), or the tensor back where its
/// backend or layout has no borrowed route.
#[allow(clippy::result_large_err)] // the tensor handed back, as it came (no allocation)
pub(crate) fn borrow<const D: usize, K: Basic>(
    tensor: Tensor<D, K>,
    len: u64,
) -> Result<Lent, Tensor<D, K>> {
    let dispatch = tensor.into_dispatch();
    match usize::try_from(len)
        .ok()
        .and_then(|len| borrowed::borrow(&dispatch.kind, len))
    {
        Some(bytes) => Ok(bytes),
        None => Err(Tensor::from_dispatch(dispatch)),
    }
}

/// The bytes of `tensor` read from its device (one copy on a GPU: the read-back).
pub(crate) fn read<const D: usize, K: Basic>(tensor: Tensor<D, K>) -> Result<Bytes, ProviderError> {
    let data = tensor
        .try_into_data()
        .map_err(|e| format!("device read failed: {e:?}"))?;
    Ok(data.into_bytes())
}

#[allow(unused_imports, unreachable_patterns)]
mod borrowed {
    use burn::backend::{BackendTensor, DispatchTensorKind};

    use crate::write::Lent;

    /// `len` bytes of the tensor's storage, without copying, where the backend stores them
    /// contiguously from the start of a buffer it shares.
    #[cfg_attr(
        not(any(feature = "flex", feature = "ndarray", feature = "autodiff")),
        allow(unused_variables)
    )]
    #[allow(clippy::only_used_in_recursion)] // used by flex / ndarray, when they are on
    pub(super) fn borrow(kind: &DispatchTensorKind, len: usize) -> Option<Lent> {
        match kind {
            #[cfg(feature = "flex")]
            DispatchTensorKind::Flex(tensor) => flex(tensor, len),
            #[cfg(feature = "ndarray")]
            DispatchTensorKind::NdArray(tensor) => ndarray(tensor, len),
            #[cfg(feature = "autodiff")]
            DispatchTensorKind::Autodiff(inner) => borrow(inner, len),
            _ => None,
        }
    }

    #[cfg(feature = "flex")]
    fn flex(tensor: &BackendTensor<burn::backend::Flex>, len: usize) -> Option<Lent> {
        let tensor = match tensor {
            BackendTensor::Float(t) | BackendTensor::Int(t) | BackendTensor::Bool(t) => t,
            #[cfg(feature = "autodiff")]
            BackendTensor::Autodiff(t) => t.primitive(),
            _ => return None,
        };
        let layout = tensor.layout();
        let data = tensor.data_arc();
        (layout.is_contiguous() && layout.start_offset() == 0 && data.len() >= len)
            .then(|| Lent::Prefix(data, len))
    }

    #[cfg(feature = "ndarray")]
    #[allow(deprecated)] // burn-ndarray is deprecated in 0.22 but still a backend users run
    fn ndarray(tensor: &BackendTensor<burn::backend::NdArray>, len: usize) -> Option<Lent> {
        use burn::backend::ndarray::NdArrayTensor;

        /// A contiguous ndarray storage (checked before wrapping), viewed as bytes.
        struct Contiguous(NdArrayTensor);
        macro_rules! bytes_of {
            ($tensor:expr, |$s:ident| $body:expr) => {
                match $tensor {
                    NdArrayTensor::F64($s) => $body,
                    NdArrayTensor::F32($s) => $body,
                    NdArrayTensor::I64($s) => $body,
                    NdArrayTensor::I32($s) => $body,
                    NdArrayTensor::I16($s) => $body,
                    NdArrayTensor::I8($s) => $body,
                    NdArrayTensor::U64($s) => $body,
                    NdArrayTensor::U32($s) => $body,
                    NdArrayTensor::U16($s) => $body,
                    NdArrayTensor::U8($s) => $body,
                    NdArrayTensor::Bool($s) => $body,
                }
            };
        }
        impl AsRef<[u8]> for Contiguous {
            fn as_ref(&self) -> &[u8] {
                bytes_of!(&self.0, |s| s
                    .view()
                    .to_slice()
                    .map_or(&[][..], bytemuck::cast_slice))
            }
        }

        let tensor = match tensor {
            BackendTensor::Float(t) | BackendTensor::Int(t) | BackendTensor::Bool(t) => t,
            #[cfg(feature = "autodiff")]
            BackendTensor::Autodiff(t) => t.primitive(),
            _ => return None,
        };
        let owner = Contiguous(tensor.clone());
        (owner.as_ref().len() == len).then(|| Lent::Owner(Box::new(owner)))
    }
}
