//! Byte lengths and alignments of Burn's [`DType`]s.

#[allow(unused_imports)]
use super::prelude::*;

use burn::tensor::{BoolStore, DType};

/// Bytes needed by a tensor of `dtype` and `shape`, or `None` when the product overflows `u64`
/// or the dtype is quantized (packed values plus inline scales: not a product of the shape).
///
/// ```
/// use burn::tensor::DType;
/// assert_eq!(burnpack::format::byte_len(DType::F32, &[2, 3]), Some(24));
/// assert_eq!(burnpack::format::byte_len(DType::BF16, &[]), Some(2));
/// assert_eq!(burnpack::format::byte_len(DType::F64, &[u64::MAX, 2]), None);
/// ```
#[must_use]
pub fn byte_len(dtype: DType, shape: &[u64]) -> Option<u64> {
    byte_len_of(dtype, shape.iter().copied())
}

/// Every dtype of Burn 0.22 but the quantized ones: what test data is generated over
/// (feature `internals`).
#[cfg(any(test, feature = "internals", feature = "optim"))]
pub const PLAIN_DTYPES: [DType; 16] = [
    DType::F64,
    DType::F32,
    DType::Flex32,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U64,
    DType::U32,
    DType::U16,
    DType::U8,
    DType::Bool(burn::tensor::BoolStore::Native),
    DType::Bool(burn::tensor::BoolStore::U8),
    DType::Bool(burn::tensor::BoolStore::U32),
];

/// A dtype without parameters by the name serde gives its variant (`"F32"`, `"Flex32"`...),
/// as Burn writes it in a pack's metadata and wrote it in its 0.14-0.21 records; `None` for
/// any other name (`Bool` and `QFloat` carry parameters: see [`bool_store_from_name`]).
/// Bytes rather than text, so a decoder can match a name it has not checked for UTF-8 (text
/// that is not UTF-8 matches none of them).
pub(crate) fn dtype_from_name(name: impl AsRef<[u8]>) -> Option<DType> {
    Some(match name.as_ref() {
        b"F64" => DType::F64,
        b"F32" => DType::F32,
        b"Flex32" => DType::Flex32,
        b"F16" => DType::F16,
        b"BF16" => DType::BF16,
        b"I64" => DType::I64,
        b"I32" => DType::I32,
        b"I16" => DType::I16,
        b"I8" => DType::I8,
        b"U64" => DType::U64,
        b"U32" => DType::U32,
        b"U16" => DType::U16,
        b"U8" => DType::U8,
        _ => return None,
    })
}

/// The store of a `Bool` dtype (`{"Bool": store}`) by the name serde gives its variant.
pub(crate) fn bool_store_from_name(name: impl AsRef<[u8]>) -> Option<BoolStore> {
    Some(match name.as_ref() {
        b"Native" => BoolStore::Native,
        b"U8" => BoolStore::U8,
        b"U32" => BoolStore::U32,
        _ => return None,
    })
}

/// [`byte_len`] over any sequence of dimensions (no intermediate `Vec`).
pub(crate) fn byte_len_of(dtype: DType, dims: impl IntoIterator<Item = u64>) -> Option<u64> {
    if matches!(dtype, DType::QFloat(_)) {
        return None;
    }
    // A zero dimension makes an empty tensor whatever the others are (checked first, so
    // that `[2^32, 2^32, 2^32, 0]` is as empty as `[0, 2^32, 2^32, 2^32]`).
    let dims: smallvec::SmallVec<[u64; 8]> = dims.into_iter().collect();
    if dims.contains(&0) {
        return Some(0);
    }
    dims.into_iter()
        .try_fold(1u64, u64::checked_mul)?
        .checked_mul(dtype.size() as u64)
}

/// The alignment a zero-copy view of `dtype` elements needs (the element size, at least 1).
///
/// A view at an address that is not a multiple of this cannot be handed to a backend as a
/// typed slice and is copied instead.
///
/// ```
/// use burn::tensor::DType;
/// assert_eq!(burnpack::format::element_align(DType::F64), 8);
/// assert_eq!(burnpack::format::element_align(DType::U8), 1);
/// ```
#[must_use]
pub fn element_align(dtype: DType) -> usize {
    match dtype {
        // Quantized tensors are stored as packed u32 words (or bytes) followed by f32 scales.
        DType::QFloat(_) => 4,
        other => other.size().max(1),
    }
}

/// The checksum burnpack stores per tensor: xxh3-64 of its bytes.
///
/// ```
/// assert_eq!(burnpack::format::checksum(b""), 0x2d06_8005_38d3_94c2);
/// ```
#[must_use]
pub fn checksum(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// The checksum of a file's header and metadata that burnpack stores in the last 8 bytes of the
/// metadata: xxh3-64 of the 10 header bytes followed by the metadata blob without those last
/// 8 bytes (so it covers every name, parameter id, dtype, shape, offset, metadata entry,
/// scalar and tensor checksum).
///
/// ```
/// let header = burnpack::format::Header::new(20).to_bytes();
/// let a = burnpack::format::metadata_checksum(&header, &[1; 12]);
/// assert_ne!(a, burnpack::format::metadata_checksum(&header, &[1; 11]));
/// ```
#[must_use]
pub fn metadata_checksum(header: &[u8], covered_metadata: &[u8]) -> u64 {
    use core::hash::Hasher;
    let mut hasher = twox_hash::XxHash3_64::with_seed(0);
    hasher.write(header);
    hasher.write(covered_metadata);
    hasher.finish()
}

/// The accessors of a tensor's description (`name`, `dtype`, `shape`, `param_id`), for every
/// record of a tensor that has those fields ([`TensorInfo`](super::TensorInfo), read; and the
/// writer's `Entry`): written once.
macro_rules! tensor_description {
    ($record:ty) => {
        impl $record {
            /// The tensor's name (for module parameters, the dotted field path).
            #[must_use]
            pub fn name(&self) -> &str {
                &self.name
            }

            /// Element type.
            #[must_use]
            pub fn dtype(&self) -> burn::tensor::DType {
                self.dtype
            }

            /// Dimensions; empty for a scalar tensor.
            #[must_use]
            pub fn shape(&self) -> &[usize] {
                &self.shape
            }

            /// The parameter id (a module parameter's `ParamId`), if the tensor has one.
            #[must_use]
            pub fn param_id(&self) -> Option<u64> {
                self.param_id
            }
        }
    };
}
pub(crate) use tensor_description;
