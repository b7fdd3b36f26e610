//! Errors of the read path.

use crate::format::FormatError;

/// Why reading failed. Every variant names the file (`"<memory>"` for in-memory sources).
///
/// ```
/// use burnpack::read::{ReadError, Reader};
/// let err = Reader::open("/no/such/file.bpk").unwrap_err();
/// assert!(matches!(err, ReadError::Io { .. }));
/// assert!(err.to_string().contains("/no/such/file.bpk"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file's contents are not a valid burnpack (the inner error names the tensor).
    #[error("{file}: {source}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong.
        source: FormatError,
    },
    /// A file operation failed.
    #[error("{file}: cannot {action}: {source}")]
    Io {
        /// The file.
        file: String,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A tensor's bytes do not match its stored checksum.
    #[error(
        "{file}: tensor '{tensor}': checksum mismatch (stored {expected:#018x}, computed {actual:#018x}): the data is corrupt"
    )]
    Checksum {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// The stored checksum.
        expected: u64,
        /// The checksum of the bytes read.
        actual: u64,
    },
    /// No tensor of that name.
    #[error("{file}: no tensor named '{tensor}'")]
    NotFound {
        /// The file.
        file: String,
        /// The name asked for.
        tensor: String,
    },
}
