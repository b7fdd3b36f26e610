//! What the module loader (and anything else that consumes tensors) reads from: a validated
//! table of tensors and a way to get each one's bytes.

use std::ops::Range;

use burn::tensor::Bytes;

use super::error::ReadError;
use crate::format::TensorInfo;

/// A source of tensors: a validated table (name, dtype, shape, parameter id, checksum, where
/// the bytes are) and each tensor's bytes as a Burn [`Bytes`], zero-copy where the source
/// allows.
///
/// A pack file, pack bytes in memory or an embedded pack ([`Reader`](crate::read::Reader)) is one;
/// another container (a safetensors file, a sharded index, an object in a bucket) becomes one
/// by building its [`TensorInfo`] table and reading bytes: the module loader
/// ([`PackModule::load_from_source`](crate::module::PackModule::load_from_source)) never asks
/// which kind it has.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::TensorSource;
/// use burnpack::write::{Entry, Writer};
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

    /// The tensor called `name`, if any (a binary search of [`tensors`](Self::tensors)).
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let source: &dyn TensorSource = &Reader::from_bytes(pack).unwrap();
    /// assert_eq!(source.tensor("w").unwrap().len(), 1);
    /// assert!(source.tensor("v").is_none());
    /// ```
    fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        crate::format::position(self.tensors(), name).map(|i| &self.tensors()[i])
    }

    /// The bytes of `info` (a tensor of this source).
    ///
    /// # Errors
    /// The bytes could not be read.
    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError>;

    /// The bytes `range` of `info` (offsets into the tensor's own bytes, not the file), for
    /// reading part of a tensor (a range of rows: see
    /// [`TensorSourceExt::tensor_rows`](crate::source::TensorSourceExt::tensor_rows)). Sources
    /// whose tensors are windows of a mapping or a file (packs, safetensors, object storage...)
    /// read or fetch only those bytes; the default reads the whole tensor and hands out the
    /// window, which is correct for every source.
    ///
    /// A range is **not checked against the tensor's checksum** (a checksum covers the whole
    /// tensor): read the whole tensor with [`read`](Self::read) and [`check`](Self::check) it
    /// where that matters.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![4], Bytes::from_bytes_vec(vec![1, 2, 3, 4]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// let info = reader.tensor("w").unwrap();
    /// assert_eq!(&reader.read_range(info, 1..3).unwrap()[..], &[2, 3]);
    /// assert!(reader.read_range(info, 3..5).is_err());
    /// ```
    ///
    /// # Errors
    /// The range is not inside the tensor's bytes ([`ReadError::Unsupported`] naming the
    /// tensor), or the bytes could not be read.
    fn read_range(&self, info: &TensorInfo, range: Range<u64>) -> Result<Bytes, ReadError> {
        super::check_range(self.file(), info, &range)?;
        let whole = self.read(info)?;
        super::window(self.file(), info, whole, range)
    }

    /// Tensors the source lists but cannot hand out (a dtype Burn has no equivalent of, such
    /// as FP8 in a safetensors file): not in [`tensors`](Self::tensors), shown by tools, and
    /// refused by name where a load or a conversion wants one (a load with
    /// [`allow_partial`](crate::module::LoadOptions::allow_partial) leaves the parameter as it
    /// is, as for a missing tensor). Empty by default.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// assert!(Reader::from_bytes(pack).unwrap().withheld().is_empty());
    /// ```
    fn withheld(&self) -> &[super::Withheld] {
        &[]
    }

    /// The bytes of the withheld tensor `name` exactly as the file stores them (no dtype of
    /// Burn's describes them): what a tool compares byte for byte where it cannot compare
    /// values. [`ReadError::NotFound`] for a name [`withheld`](Self::withheld) does not list,
    /// and by default.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::{ReadError, TensorSource};
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// assert!(matches!(reader.read_withheld("w"), Err(ReadError::NotFound { .. })));
    /// ```
    ///
    /// # Errors
    /// The name is not withheld, or its bytes cannot be read.
    fn read_withheld(&self, name: &str) -> Result<Bytes, ReadError> {
        Err(ReadError::NotFound {
            file: self.file().to_string(),
            tensor: name.to_string(),
        })
    }

    /// The name prefix under which module parameters live (see
    /// [`NAMESPACE_KEY`](crate::format::NAMESPACE_KEY)); `None` when every tensor is one.
    fn namespace(&self) -> Option<&str> {
        None
    }

    /// Why [`read`](Self::read) hands `info` out as a copy rather than a view of the source;
    /// `None` for a view (the default: a source that always copies must say so).
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// assert_eq!(reader.copy_reason(&reader.tensors()[0]), None);
    /// ```
    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let _ = info;
        None
    }

    /// Checks `bytes` (as read for `info`) against its stored checksum. Returns `false` when
    /// the source stores none.
    ///
    /// # Errors
    /// [`ReadError::Checksum`] naming the tensor.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        check_checksum(self.file(), info, bytes)
    }

    /// This source as one that threads may share, where it is one: the module loader then
    /// reads ahead of its walk on every core when the reads are copies
    /// ([`copy_reason`](Self::copy_reason)). `None` (the default): one read at a time.
    ///
    /// ```
    /// use burnpack::read::Reader;
    /// use burnpack::source::TensorSource;
    /// let reader = Reader::from_bytes(burnpack::write::Writer::new(vec![]).into_bytes().unwrap()).unwrap();
    /// assert!(reader.shared().is_some());
    /// ```
    fn shared(&self) -> Option<&(dyn TensorSource + Sync)> {
        None
    }

    /// Whether [`prefetch`](Self::prefetch) is worth calling before a load: `true` for sources
    /// that fetch over a network, where asking for everything at once lets them fetch in
    /// parallel and coalesce neighbouring ranges, and for mapped foreign files read ahead in
    /// the file's order (safetensors, `.pt` files: a cold load then reads at the disk's
    /// speed); `false` (the default) for in-memory sources, packs and Burn records, whose
    /// reads cost nothing up front or already come in the file's order.
    fn wants_prefetch(&self) -> bool {
        false
    }

    /// Fetches `wanted` (tensors of this source) ahead of their [`read`](Self::read)s. The
    /// module loader calls it with exactly the tensors the load will read (after filters,
    /// renames and the namespace), when [`wants_prefetch`](Self::wants_prefetch) says so.
    ///
    /// # Errors
    /// A tensor could not be fetched, or failed its checksum.
    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        let _ = wanted;
        Ok(())
    }

    /// Checks of the whole source made before a verified load (see
    /// [`Reader::verify_structure`](crate::read::Reader::verify_structure)); none by default.
    ///
    /// # Errors
    /// What the source finds wrong.
    fn verify_structure(&self) -> Result<(), ReadError> {
        Ok(())
    }
}

/// A [`TensorSource`] that is a whole burnpack: besides its tensors it has a validated
/// [`Layout`](crate::format::Layout) with the pack's scalars and metadata. A pack file or
/// buffer ([`Reader`](crate::read::Reader)) is one, and so is a pack on object storage
/// (`ObjectSource`, feature `object-store`); a [`Checkpoint`](crate::checkpoint::Checkpoint)
/// reads from either.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::PackSource;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
///     .scalar("step", 3u64)
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let source: &dyn PackSource = &reader;
/// assert_eq!(source.layout().scalars().len(), 1);
/// ```
pub trait PackSource: TensorSource {
    /// The pack's validated layout: tensors by position, scalars, metadata.
    fn layout(&self) -> &crate::format::Layout;
}

/// Why a tensor reached its parameter as a copy instead of a view of the source's memory
/// (see [`TensorSource::copy_reason`] and the module loader's
/// [`LoadReport`](crate::module::LoadReport)).
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::source::CopyReason;
/// let why = CopyReason::Cast { from: DType::F16, to: DType::F32 };
/// assert_eq!(why.to_string(), "cast from F16 to F32");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CopyReason {
    /// The bytes start at `offset`, which is not a multiple of the element size `align`
    /// (possible in safetensors files, never in packs from Burn or this crate).
    Unaligned {
        /// Absolute offset of the tensor's bytes in its file.
        offset: u64,
        /// The alignment the element type needs.
        align: usize,
    },
    /// The source reads on demand ([`ReadMode::Buffered`](crate::read::ReadMode)), so every tensor
    /// is read into memory of its own.
    Buffered,
    /// The load converts the stored dtype to another one (the [`DTypePolicy`](crate::module::DTypePolicy)
    /// or the backend's storage).
    Cast {
        /// The dtype in the source.
        from: burn::tensor::DType,
        /// The parameter's dtype.
        to: burn::tensor::DType,
    },
    /// A `PyTorch` `[out, in]` weight turned into Burn's `[in, out]`
    /// ([`LoadOptions::pytorch`](crate::module::LoadOptions::pytorch)), or any tensor a
    /// [`Convention`](crate::source::Convention) stores with its dimensions
    /// [reversed](crate::source::DimOrder::Reversed), on a backend that lays a transposed
    /// borrowed tensor out anew (ndarray); flex and GPU backends transpose by strides.
    Transposed,
    /// The container stores the bytes in another form (text numbers in a JSON record of Burn
    /// 0.14-0.21): they were decoded into memory of their own when the source was opened.
    Decoded {
        /// The container's format, as its users call it (`"JSON"`).
        format: &'static str,
    },
    /// The tensor is a non-contiguous view of its storage (a `PyTorch` tensor saved with its
    /// strides, such as a transposed weight): its elements were gathered into memory of their
    /// own.
    Strided,
}

impl std::fmt::Display for CopyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unaligned { offset, align } => {
                write!(f, "unaligned: offset {offset} is not a multiple of {align}")
            }
            Self::Buffered => f.write_str("buffered read"),
            Self::Strided => f.write_str("non-contiguous view: gathered from its strides"),
            Self::Cast { from, to } => write!(f, "cast from {from:?} to {to:?}"),
            Self::Transposed => f.write_str("transposed by the backend"),
            Self::Decoded { format } => write!(f, "decoded from {format}"),
        }
    }
}

/// Refuses a source that withholds a tensor, naming the first: for whoever would take every
/// tensor (a conversion), where leaving one out would write a partial file with `Ok`.
pub(crate) fn refuse_withheld<S: TensorSource + ?Sized>(
    source: &S,
) -> Result<(), super::ReadError> {
    match source.withheld().first() {
        Some(w) => Err(w.error(source.file())),
        None => Ok(()),
    }
}

/// [`TensorSource::check`]'s default: `bytes` against `info`'s checksum, `false` without one.
///
/// # Errors
/// [`ReadError::Checksum`] naming `file` and the tensor.
pub(crate) fn check_checksum(
    file: &str,
    info: &TensorInfo,
    bytes: &[u8],
) -> Result<bool, ReadError> {
    let Some(expected) = info.checksum() else {
        return Ok(false);
    };
    let actual = crate::format::checksum(bytes);
    if actual == expected {
        Ok(true)
    } else {
        Err(ReadError::Checksum {
            file: file.to_string(),
            tensor: info.name().to_string(),
            expected,
            actual,
        })
    }
}
