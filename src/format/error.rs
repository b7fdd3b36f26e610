//! Errors found in the bytes of a burnpack file.

#[allow(unused_imports)]
use super::prelude::*;

use burn::tensor::DType;

/// What is wrong with a burnpack file's bytes. Each variant that concerns one tensor names it.
///
/// The reader wraps these with the file they came from ([`crate::source::ReadError::Invalid`]),
/// so a message always says which file, which tensor and what was wrong.
///
/// ```
/// use burnpack::format::{FormatError, Header};
/// let err = Header::parse(b"not a burnpack file").unwrap_err();
/// assert!(matches!(err, FormatError::BadMagic { .. }));
/// assert!(err.to_string().contains("magic"));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file ends before a part that must be there.
    #[error("truncated: the {what} needs {needed} bytes, only {available} are present")]
    Truncated {
        /// Which part (`"header"`, `"metadata"`).
        what: &'static str,
        /// Bytes that part needs, counted from the start of the file.
        needed: u64,
        /// Bytes present.
        available: u64,
    },
    /// The first four bytes are not `NRUB`. `looks_like` says what the bytes resemble when
    /// this layer recognises them (a file of zeros, JSON text), or what to do with a file of
    /// another format.
    #[error(
        "bad magic number {found:#010x}: not a burnpack file (expected 0x4255524e){}",
        looks_like.map(|hint| format!("; {hint}")).unwrap_or_default()
    )]
    BadMagic {
        /// The magic number found.
        found: u32,
        /// What the file looks like instead, with a hint, when recognisable.
        looks_like: Option<&'static str>,
    },
    /// A format version this crate does not know (newer files are refused).
    #[error("unsupported format version {found} (this reader knows version 1)")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// A size exceeds one of the [`Limits`](super::Limits).
    #[error("{what} is {size}, above the limit of {limit} (raise `Limits` if you trust this file)")]
    LimitExceeded {
        /// What was too large (`"metadata size"`, `"tensor count"`, `"file size"`...).
        what: &'static str,
        /// The size found.
        size: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The CBOR metadata does not decode (including nesting deeper than the limit).
    #[error("metadata is not valid burnpack CBOR: {reason}")]
    Metadata {
        /// The decoder's explanation.
        reason: String,
    },
    /// Two entries of one metadata map share a key.
    #[error("duplicate {map} key '{key}'")]
    DuplicateKey {
        /// Which map (`"tensors"`, `"metadata"`, `"scalars"`).
        map: &'static str,
        /// The repeated key.
        key: String,
    },
    /// `start + data_start` (or the end) does not fit in 64 bits.
    #[error("tensor '{tensor}': data offsets [{start}, {end}] overflow")]
    OffsetOverflow {
        /// The tensor.
        tensor: String,
        /// Declared start, relative to the data section.
        start: u64,
        /// Declared end, relative to the data section.
        end: u64,
    },
    /// A tensor's end offset is before its start.
    #[error("tensor '{tensor}': data end {end} is before its start {start}")]
    EndBeforeStart {
        /// The tensor.
        tensor: String,
        /// Declared start.
        start: u64,
        /// Declared end.
        end: u64,
    },
    /// A tensor's bytes reach past the end of the file.
    #[error("tensor '{tensor}': data ends at byte {end} but the file has only {file_len} bytes")]
    PastEnd {
        /// The tensor.
        tensor: String,
        /// Absolute end offset.
        end: u64,
        /// File length.
        file_len: u64,
    },
    /// The byte range does not match shape × dtype.
    #[error(
        "tensor '{tensor}': {actual} bytes stored but shape {shape:?} of {dtype:?} needs {expected}"
    )]
    LengthMismatch {
        /// The tensor.
        tensor: String,
        /// Declared dtype.
        dtype: DType,
        /// Declared shape.
        shape: Vec<u64>,
        /// Bytes in its range.
        actual: u64,
        /// Bytes shape × dtype needs.
        expected: u64,
    },
    /// Shape × dtype size overflows, or a dimension does not fit this platform's `usize`.
    #[error("tensor '{tensor}': shape {shape:?} is too large to address")]
    ShapeOverflow {
        /// The tensor.
        tensor: String,
        /// Declared shape.
        shape: Vec<u64>,
    },
    /// The `checksums` byte string does not hold 8 bytes per tensor plus 8 for the header and
    /// metadata.
    #[error(
        "checksums hold {found} bytes, 8 per tensor and 8 for the metadata are needed for {tensors} tensors"
    )]
    Checksums {
        /// Bytes found.
        found: u64,
        /// Tensors in the file.
        tensors: u64,
    },
    /// The header and metadata do not match their stored checksum: a name, parameter id,
    /// dtype, shape, offset, metadata entry or scalar was changed after the file was written.
    #[error(
        "header or metadata corrupt: checksum mismatch (stored {expected:#018x}, computed {actual:#018x})"
    )]
    MetadataChecksum {
        /// The stored checksum.
        expected: u64,
        /// The checksum of the bytes read.
        actual: u64,
    },
    /// A tensor's bytes do not match the checksum stored for them.
    #[error(
        "tensor '{tensor}': data corrupt: checksum mismatch (stored {expected:#018x}, computed {actual:#018x})"
    )]
    TensorChecksum {
        /// The tensor.
        tensor: String,
        /// The stored checksum.
        expected: u64,
        /// The checksum of the bytes read.
        actual: u64,
    },
    /// A top-level metadata key this crate does not know, in a file whose `producer` is this
    /// crate: its writer adds none, so the key is damaged (`checksums` turned into
    /// `checksumr`, say). Loading ignores such keys as Burn does; verification refuses them.
    #[error(
        "unknown top-level metadata key '{key}' in a file of '{producer}', whose writer adds none: \
         the key is damaged"
    )]
    UnknownKey {
        /// The key as found.
        key: String,
        /// The `producer` metadata value.
        producer: String,
    },
    /// The file says this crate wrote it (`producer`) but carries no checksums, which every
    /// file this crate writes with checksums has: its metadata was probably damaged (a flipped
    /// bit in the `checksums` key turns checking off). Refused where checksums are required.
    #[error(
        "the producer '{producer}' writes checksums but this file has none: its metadata may be damaged"
    )]
    MissingChecksums {
        /// The `producer` metadata value.
        producer: String,
    },
    /// Bytes that must be zero (the padding after the metadata, the gaps between tensors) are
    /// not, in a file that carries checksums.
    #[error("non-zero byte at offset {offset} in the padding before {before}")]
    Padding {
        /// Absolute offset of the first non-zero byte.
        offset: u64,
        /// What follows the padding (`"the data section"` or a tensor name).
        before: String,
    },
    /// Two tensors' byte ranges overlap.
    #[error("tensor '{tensor}': its bytes overlap those of tensor '{other}'")]
    Overlap {
        /// The later tensor (by start offset).
        tensor: String,
        /// The tensor it overlaps.
        other: String,
    },
}

impl FormatError {
    /// The tensor this error is about, where there is one.
    ///
    /// ```
    /// use burnpack::format::FormatError;
    /// let err = FormatError::Overlap { tensor: "b".into(), other: "a".into() };
    /// assert_eq!(err.tensor(), Some("b"));
    /// ```
    #[must_use]
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Self::OffsetOverflow { tensor, .. }
            | Self::EndBeforeStart { tensor, .. }
            | Self::PastEnd { tensor, .. }
            | Self::LengthMismatch { tensor, .. }
            | Self::ShapeOverflow { tensor, .. }
            | Self::Overlap { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}
