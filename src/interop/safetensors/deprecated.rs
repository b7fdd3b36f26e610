//! The safetensors source's constructors of the last release, kept one more, deprecated: the
//! one shape of every source is `open`, `open_with(path, &OpenOptions)`,
//! `from_bytes(bytes, &OpenOptions)`.

use std::path::Path;

use burn::tensor::Bytes;

use super::SafetensorsSource;
use crate::format::Limits;
use crate::source::{OpenOptions, SourceError};

impl SafetensorsSource {
    /// Opens one `.safetensors` file, whatever its name.
    ///
    /// # Errors
    /// As [`open`](SafetensorsSource::open).
    #[deprecated(
        since = "0.1.0",
        note = "use burnpack::interop::open_any_with (told by content) or SafetensorsSource::open_with"
    )]
    pub fn open_file(path: impl AsRef<Path>, limits: &Limits) -> Result<Self, SourceError> {
        Self::open_file_for(path.as_ref(), None, &OpenOptions::new().limits(*limits))
    }

    /// Opens an index JSON (whatever its name) and the shards its `weight_map` names.
    ///
    /// # Errors
    /// As [`open`](SafetensorsSource::open).
    #[deprecated(
        since = "0.1.0",
        note = "use burnpack::interop::open_any_with (told by content) or SafetensorsSource::open_with"
    )]
    pub fn open_index(path: impl AsRef<Path>, limits: &Limits) -> Result<Self, SourceError> {
        Self::open_index_for(path.as_ref(), &OpenOptions::new().limits(*limits))
    }

    /// [`from_bytes`](SafetensorsSource::from_bytes) with the limits on tensor count and size.
    ///
    /// # Errors
    /// As [`from_bytes`](SafetensorsSource::from_bytes).
    #[deprecated(
        since = "0.1.0",
        note = "use SafetensorsSource::from_bytes(bytes, &OpenOptions::new().limits(limits))"
    )]
    pub fn from_bytes_with(bytes: Bytes, limits: &Limits) -> Result<Self, SourceError> {
        Self::from_bytes(bytes, limits)
    }
}
