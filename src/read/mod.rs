//! Reading burnpack files: sources (memory map, bytes, buffered reads), the reader, and
//! zero-copy tensor views.
//!
//! Opening parses only the header and the metadata; the tensor data is touched only when a
//! tensor's bytes are asked for, and then (for mapped and in-memory sources) handed out as a
//! Burn [`Bytes`](burn::tensor::Bytes) window into the source without copying.
//!
//! The [`Reader`] is a [`TensorSource`](crate::source::TensorSource), the seam of the source
//! core ([`crate::source`]) every container of tensors goes through.

mod describe;
mod errors;
mod reader;
#[cfg(feature = "optim")]
mod recorded;
#[cfg(feature = "optim")]
mod shared;

pub(crate) use describe::describe_pack;
pub use reader::{ReadMode, ReadOptions, Reader};
#[cfg(feature = "optim")]
pub(crate) use shared::{fingerprint, open_recorded_shared, open_shared, settled_fingerprint};

/// Moved to [`crate::source`] (the source core); these paths stay one release.
#[doc(hidden)]
pub use crate::source::{
    AsTensorSource, Checksums, CopyReason, DescribedSource, Description, InShard, PackSource,
    ReadError, Routing, Sharded, SourceError, SourceErrorKind, SourceTable, TableBuilder,
    TensorSource, Value, Withheld, assemble_shards, assert_source_contract, bytes_from_vec,
    human_bytes,
};

/// Opens `path` for reading when it is a regular file (symbolic links followed), and refuses
/// anything else (a named pipe, a device, a directory, a socket) *before* opening it, with an
/// [`std::io::ErrorKind::InvalidInput`] error saying what it is: opening a FIFO would block
/// until a writer comes, and a device never ends. Every reader of this crate opens what a user
/// or an index names through it.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let err = burnpack::read::open_regular_file(dir.path()).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// assert!(err.to_string().contains("a directory"));
/// let path = dir.path().join("weights.bin");
/// std::fs::write(&path, b"data").unwrap();
/// assert!(burnpack::read::open_regular_file(&path).is_ok());
/// ```
///
/// # Errors
/// The path does not exist or cannot be opened, or is not a regular file.
pub fn open_regular_file(path: impl AsRef<std::path::Path>) -> std::io::Result<std::fs::File> {
    crate::platform::open_regular(path.as_ref())
}
