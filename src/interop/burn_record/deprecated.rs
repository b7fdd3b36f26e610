//! The Burn-record source's constructor of the last release, kept one more, deprecated: the one
//! shape of every source is `open`, `open_with(path, &OpenOptions)`,
//! `from_bytes(bytes, &OpenOptions)`, the format told by content.

use std::path::Path;

use super::LegacySource;
use crate::format::Limits;
use crate::source::SourceError;

impl LegacySource {
    /// Opens a record whose format is told by its content, not its name.
    ///
    /// # Errors
    /// As [`open_with`](LegacySource::open_with).
    #[deprecated(
        since = "0.1.0",
        note = "use LegacySource::open_with(path, &OpenOptions)"
    )]
    pub fn open_detect(path: impl AsRef<Path>, limits: &Limits) -> Result<Self, SourceError> {
        Self::open_with(path, limits)
    }
}
