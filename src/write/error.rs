//! Errors of the write path.

use std::path::PathBuf;

use burn::tensor::DType;

/// The error a deferred provider returns.
pub type ProviderError = Box<dyn std::error::Error + Send + Sync + 'static>;
use crate::format::FormatError;

/// Why a write failed. Each variant names the file and/or the tensor concerned.
///
/// After any error from [`Writer::write_to_file`](super::Writer::write_to_file) in atomic mode
/// the destination is exactly as it was and no scratch file remains.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::write::{Entry, WriteError, Writer};
/// let bad = Entry::resident("w", DType::F32, vec![3], Bytes::from_bytes_vec(vec![0; 4]));
/// let err = Writer::new(vec![bad]).into_bytes().unwrap_err();
/// assert!(matches!(err, WriteError::LengthMismatch { .. }));
/// assert!(err.to_string().contains("'w'"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// Two entries share a name.
    #[error("tensor '{tensor}' is given twice")]
    DuplicateName {
        /// The repeated name.
        tensor: String,
    },
    /// An entry's length does not match its shape and dtype.
    #[error(
        "tensor '{tensor}': {len} bytes given but shape {shape:?} of {dtype:?} needs {expected}"
    )]
    LengthMismatch {
        /// The entry.
        tensor: String,
        /// Its dtype.
        dtype: DType,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes given (or declared).
        len: u64,
        /// Bytes needed.
        expected: u64,
    },
    /// A deferred provider returned a different number of bytes than declared.
    #[error("tensor '{tensor}': provider returned {produced} bytes, {declared} were declared")]
    ProviderLength {
        /// The entry.
        tensor: String,
        /// Declared length.
        declared: u64,
        /// Produced length.
        produced: u64,
    },
    /// A deferred provider failed.
    #[error("tensor '{tensor}': provider failed: {source}")]
    Provider {
        /// The entry.
        tensor: String,
        /// The provider's error.
        source: ProviderError,
    },
    /// A deferred provider panicked (the panic was caught).
    #[error("tensor '{tensor}': provider panicked: {message}")]
    ProviderPanicked {
        /// The entry.
        tensor: String,
        /// The panic message.
        message: String,
    },
    /// A float dtype a write cannot cast to was asked for (`float_dtype`: F16, BF16 or F32).
    #[error(
        "cannot write float tensors as {dtype:?}: the float dtypes a write casts to are F16, BF16 and F32"
    )]
    FloatDtype {
        /// The dtype asked for.
        dtype: DType,
    },
    /// The metadata or layout cannot be represented (metadata over 4 GiB, sizes overflowing).
    #[error("cannot lay out the pack: {0}")]
    Layout(String),
    /// The write pipeline itself failed: its sink thread panicked, or the sink (an upload)
    /// stopped taking bytes (the sink's own error is reported by its caller).
    #[error("the write pipeline failed: {0}")]
    Pipeline(String),
    /// The writer's thread pool could not be started.
    #[error("cannot start {threads} writer threads: {reason}")]
    ThreadPool {
        /// Threads requested.
        threads: usize,
        /// The pool builder's error.
        reason: String,
    },
    /// Encoding the metadata failed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The caller's buffer is smaller than [`Writer::size`](super::Writer::size).
    #[error("buffer of {available} bytes is too small: the pack needs {needed}")]
    BufferTooSmall {
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: usize,
    },
    /// The destination exists and overwriting was refused.
    #[error("'{}' already exists (overwrite is off)", path.display())]
    AlreadyExists {
        /// The destination.
        path: PathBuf,
    },
    /// A file operation failed.
    #[error("cannot {action} '{}'{}: {source}", path.display(), tensor.as_ref().map(|t| format!(" (tensor '{t}')")).unwrap_or_default())]
    Io {
        /// What was being done (`"create"`, `"write"`, `"sync"`, `"rename onto"`...).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The tensor being written, if any.
        tensor: Option<String>,
        /// The OS error.
        source: std::io::Error,
    },
}

impl WriteError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            tensor: None,
            source,
        }
    }
}
