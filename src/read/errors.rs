//! The errors of a file's open, as every reader of this folder reports them.

use crate::format::FormatError;
use crate::source::ReadError;

/// The I/O error of `action` on the file `name`, as a reader reports it.
pub(crate) fn io_error(
    name: &str,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> ReadError {
    let file = name.to_string();
    move |source| ReadError::Io {
        file,
        action,
        source,
    }
}

/// The file `name` is not a valid pack: `source` says why.
pub(crate) fn invalid_error(name: &str, source: FormatError) -> ReadError {
    ReadError::Invalid {
        file: name.to_string(),
        source,
    }
}
