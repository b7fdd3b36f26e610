//! The error of a [`PackStore`](super::PackStore) operation.

use std::path::PathBuf;

use crate::module::ModuleError;
use crate::source::ReadError;
use crate::write::WriteError;

/// What went wrong in a [`PackStore`](super::PackStore) operation. Each variant names the file (or "bytes").
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file or bytes could not be opened or read, or a tensor failed its checksum.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// An incremental checkpoint's data files could not be opened or do not hold what its
    /// manifest names.
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    /// The pack could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A parameter could not be collected from the module. A read or write error on the way
    /// is [`Read`](Self::Read) or [`Write`](Self::Write), never this.
    #[error(transparent)]
    Module(ModuleError),
    /// The file exists and the store was not told to overwrite it.
    #[error("{}: already exists (use .overwrite(true) to replace it)", .0.display())]
    AlreadyExists(PathBuf),
    /// A bytes store was asked to load before it was given or saved any bytes.
    #[error("bytes store: no bytes to read from")]
    NoBytes,
    /// A store over another container ([`PackStore::from_source`](super::PackStore::from_source)) was asked to save.
    #[error("{0}: a store over a tensor source is read-only")]
    ReadOnly(String),
    /// The load did not match the module: errors while applying (with `validate`), or
    /// missing tensors (without `allow_partial`), as burn-store reports them.
    #[error("{file}: {message}")]
    Validation {
        /// The file, or "bytes".
        file: String,
        /// burn-store's report.
        message: String,
    },
}

impl From<ModuleError> for StoreError {
    fn from(e: ModuleError) -> Self {
        e.lift(Self::Module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_error_of_the_module_is_a_write_error_of_the_store() {
        let write = WriteError::AlreadyExists {
            path: "m.bpk".into(),
        };
        let err = StoreError::from(ModuleError::Write(write));
        assert!(matches!(err, StoreError::Write(_)), "{err:?}");
    }
}
