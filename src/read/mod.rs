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

mod error;
mod reader;
pub(crate) mod source;
mod tensor_source;

pub use error::ReadError;
pub use reader::{ReadMode, ReadOptions, Reader};
pub use tensor_source::{CopyReason, PackSource, TensorSource};
