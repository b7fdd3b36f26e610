//! One tensor of a validated file ([`TensorInfo`]) and the checks of its descriptor.

#[allow(unused_imports)]
use super::prelude::*;

use burn::tensor::DType;

use super::dtype::{byte_len, element_align};
use super::error::FormatError;
use super::limits::Limits;
use super::table::{Dims, Name, Names, Row};

/// One tensor of a validated file: what it is and where its bytes are.
///
/// Obtained from [`Layout`](super::Layout) (and so from [`crate::read::Reader`]); every range has been
/// checked against the file, the limits and the other tensors.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let bytes = Writer::new(vec![Entry::resident("w", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3]))])
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(bytes).unwrap();
/// let info = reader.tensor("w").unwrap();
/// assert_eq!((info.dtype(), info.shape(), info.len()), (DType::U8, &[3][..], 3));
/// assert!(info.is_aligned());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// A range of the file's one buffer of names.
    pub(super) name: Name,
    dtype: DType,
    shape: Dims<usize>,
    param_id: Option<u64>,
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) checksum: Option<u64>,
}

super::dtype::tensor_description!(TensorInfo);

impl TensorInfo {
    /// Checks one descriptor against the data section start, the file length and the limits.
    pub(super) fn validate(
        names: &Names,
        d: &Row,
        data_start: u64,
        file_len: u64,
        limits: &Limits,
    ) -> Result<Self, FormatError> {
        let name = names.name(d.name);
        let (rel_start, rel_end) = d.data_offsets;
        if rel_end < rel_start {
            return Err(FormatError::EndBeforeStart {
                tensor: name.to_string(),
                start: rel_start,
                end: rel_end,
            });
        }
        let (Some(start), Some(end)) = (
            data_start.checked_add(rel_start),
            data_start.checked_add(rel_end),
        ) else {
            return Err(FormatError::OffsetOverflow {
                tensor: name.to_string(),
                start: rel_start,
                end: rel_end,
            });
        };
        if end > file_len {
            return Err(FormatError::PastEnd {
                tensor: name.to_string(),
                end,
                file_len,
            });
        }
        let len = end - start;
        if len > limits.max_tensor_size {
            return Err(FormatError::LimitExceeded {
                what: "tensor size",
                size: len,
                limit: limits.max_tensor_size,
            });
        }
        if !matches!(d.dtype, DType::QFloat(_)) {
            let Some(expected) = byte_len(d.dtype, &d.shape) else {
                return Err(FormatError::ShapeOverflow {
                    tensor: name.to_string(),
                    shape: d.shape.to_vec(),
                });
            };
            if expected != len {
                return Err(FormatError::LengthMismatch {
                    tensor: name.to_string(),
                    dtype: d.dtype,
                    shape: d.shape.to_vec(),
                    actual: len,
                    expected,
                });
            }
        }
        if d.shape.iter().any(|&dim| usize::try_from(dim).is_err()) {
            return Err(FormatError::ShapeOverflow {
                tensor: name.to_string(),
                shape: d.shape.to_vec(),
            });
        }
        #[allow(clippy::cast_possible_truncation)] // every dimension fits, checked above
        let shape = d.shape.iter().map(|&dim| dim as usize).collect();
        Ok(Self {
            name,
            dtype: d.dtype,
            shape,
            param_id: d.param_id,
            start,
            len,
            checksum: None,
        })
    }

    /// A tensor of another container (safetensors, and the sources to come), for a
    /// [`TensorSource`](crate::source::TensorSource) of that container: its ranges must have
    /// been validated against the file by that container's own rules. No parameter id, no
    /// checksum. `start` is the absolute offset of its bytes in the file.
    ///
    /// ```
    /// use burn::tensor::DType;
    /// use burnpack::format::TensorInfo;
    /// let t = TensorInfo::external("w".into(), DType::F32, vec![2, 2], 64, 16);
    /// assert_eq!((t.name(), t.len(), t.offset(), t.param_id()), ("w", 16, 64, None));
    /// ```
    #[must_use]
    pub fn external(name: String, dtype: DType, shape: Vec<usize>, start: u64, len: u64) -> Self {
        Self {
            name: Name::from(name),
            dtype,
            shape: shape.into_iter().collect(),
            param_id: None,
            start,
            len,
            checksum: None,
        }
    }

    /// The same tensor with the parameter id `id`: for sources of other containers that
    /// record one (the `ParamId` of a Burn record's parameter).
    ///
    /// ```
    /// use burn::tensor::DType;
    /// use burnpack::format::TensorInfo;
    /// let t = TensorInfo::external("w".into(), DType::F32, vec![1], 0, 4).with_param_id(7);
    /// assert_eq!(t.param_id(), Some(7));
    /// ```
    #[must_use]
    pub fn with_param_id(mut self, id: u64) -> Self {
        self.param_id = Some(id);
        self
    }

    /// The same tensor under another name and parameter id, where it is in its file: how an
    /// incremental checkpoint names a tensor that a data file holds. The name is `range` of
    /// `names`, a buffer shared by many tensors (the checkpoint's references): no copy of
    /// it. `range` must lie on character boundaries of `names` (a name out of range reads as
    /// empty, never a panic).
    #[cfg(feature = "optim")]
    pub(crate) fn renamed_in(
        &self,
        names: &alloc::sync::Arc<str>,
        range: (usize, usize),
        param_id: Option<u64>,
    ) -> Self {
        Self {
            name: Name::new(names, range),
            param_id,
            ..self.clone()
        }
    }

    /// A tensor as a record made when its file was written says it is (an incremental
    /// checkpoint's references): its name `range` of `names`, at `start` with the length its
    /// dtype and shape make. `None` for a dtype whose length is not its shape's (quantized)
    /// or a length that overflows. Its place in the file is checked by
    /// `format::vouched::layout`.
    #[cfg(feature = "optim")]
    pub(crate) fn recorded(
        names: &alloc::sync::Arc<str>,
        range: (usize, usize),
        dtype: DType,
        shape: &[usize],
        start: u64,
        checksum: Option<u64>,
    ) -> Option<Self> {
        if matches!(dtype, DType::QFloat(_)) {
            return None;
        }
        let len = super::dtype::byte_len_of(dtype, shape.iter().map(|&d| d as u64))?;
        Some(Self {
            name: Name::new(names, range),
            dtype,
            shape: shape.iter().copied().collect(),
            param_id: None,
            start,
            len,
            checksum,
        })
    }

    /// Absolute offset of the first byte in the file.
    #[must_use]
    pub fn offset(&self) -> u64 {
        self.start
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tensor has no bytes (a zero-size dimension).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of elements (product of the shape).
    #[must_use]
    pub fn num_elements(&self) -> usize {
        // Every source checks that shape × dtype size fits; a zero dimension makes any
        // other empty, and the product never overflows for a tensor of a validated table.
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// The stored xxh3-64 checksum of the tensor's bytes, if the file has checksums.
    #[must_use]
    pub fn checksum(&self) -> Option<u64> {
        self.checksum
    }

    /// Whether the tensor's file offset is a multiple of its element size, so a view into a
    /// page-aligned mapping can be used in place. Files written by Burn and by this crate
    /// always are; other writers may not be, and such tensors are copied when read.
    #[must_use]
    pub fn is_aligned(&self) -> bool {
        self.start.is_multiple_of(element_align(self.dtype) as u64)
    }
}
