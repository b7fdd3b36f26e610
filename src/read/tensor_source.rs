//! What the module loader (and anything else that consumes tensors) reads from: a validated
//! table of tensors and a way to get each one's bytes.

use burn::tensor::Bytes;

use super::error::ReadError;
use crate::format::TensorInfo;

/// A source of tensors: a validated table (name, dtype, shape, parameter id, checksum, where
/// the bytes are) and each tensor's bytes as a Burn [`Bytes`], zero-copy where the source
/// allows.
///
/// A pack file, pack bytes in memory or an embedded pack ([`Reader`](super::Reader)) is one;
/// another container (a safetensors file, a sharded index, an object in a bucket) becomes one
/// by building its [`TensorInfo`] table and reading bytes: the module loader
/// ([`PackModule::load_from_source`](crate::module::PackModule::load_from_source)) never asks
/// which kind it has.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::{Reader, TensorSource};
/// use burnpack::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![2], Bytes::from_bytes_vec(vec![1, 2]))])
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let source: &dyn TensorSource = &reader;
/// let info = &source.tensors()[0];
/// assert_eq!(&source.read(info).unwrap()[..], &[1, 2]);
/// assert!(source.check(info, &[1, 2]).unwrap());
/// ```
pub trait TensorSource {
    /// The name used in errors: a path, a URL, or `"<memory>"`.
    fn file(&self) -> &str;

    /// Every tensor, sorted by name.
    fn tensors(&self) -> &[TensorInfo];

    /// The bytes of `info` (a tensor of this source).
    ///
    /// # Errors
    /// The bytes could not be read.
    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError>;

    /// The name prefix under which module parameters live (see
    /// [`NAMESPACE_KEY`](crate::format::NAMESPACE_KEY)); `None` when every tensor is one.
    fn namespace(&self) -> Option<&str> {
        None
    }

    /// Checks `bytes` (as read for `info`) against its stored checksum. Returns `false` when
    /// the source stores none.
    ///
    /// # Errors
    /// [`ReadError::Checksum`] naming the tensor.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        let Some(expected) = info.checksum() else {
            return Ok(false);
        };
        let actual = crate::format::checksum(bytes);
        if actual == expected {
            Ok(true)
        } else {
            Err(ReadError::Checksum {
                file: self.file().to_string(),
                tensor: info.name().to_string(),
                expected,
                actual,
            })
        }
    }

    /// Checks of the whole source made before a verified load (see
    /// [`Reader::verify_structure`](super::Reader::verify_structure)); none by default.
    ///
    /// # Errors
    /// What the source finds wrong.
    fn verify_structure(&self) -> Result<(), ReadError> {
        Ok(())
    }
}
