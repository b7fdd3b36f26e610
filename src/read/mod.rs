//! Reading burnpack files: sources (memory map, bytes, buffered reads), the reader, and
//! zero-copy tensor views.
//!
//! Opening parses only the header and the metadata; the tensor data is touched only when a
//! tensor's bytes are asked for, and then (for mapped and in-memory sources) handed out as a
//! Burn [`Bytes`](burn::tensor::Bytes) window into the source without copying.
//!
//! [`TensorSource`] is the one seam every container of tensors goes through (packs here,
//! safetensors and object storage in `interop`, the sources to come): the module loader,
//! `PackStore` and `bpk` take any of them. Kept as a model: a new source is one type behind
//! this trait, never a copy of the load path.

mod contract;
mod describe;
mod error;
mod reader;
mod shards;
pub(crate) mod source;
mod table;
mod tensor_source;
mod withheld;

pub use contract::assert_source_contract;
pub(crate) use describe::describe_pack;
pub use describe::{
    AsTensorSource, Checksums, DescribedSource, Description, Value, human_bytes, streaming_writer,
};
pub use error::{ReadError, SourceError, SourceErrorKind};
pub use reader::{ReadMode, ReadOptions, Reader};
pub use shards::{InShard, Routing, Sharded, assemble_shards};
pub use source::bytes_from_vec;
pub use table::{SourceTable, TableBuilder};
pub(crate) use tensor_source::refuse_withheld;
pub use tensor_source::{CopyReason, PackSource, TensorSource};
pub use withheld::Withheld;

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
