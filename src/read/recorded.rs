//! Packs opened from a record of their tensors (an incremental checkpoint's references): the
//! file's header and metadata hashed against the recorded checksum, never decoded at open
//! (`shared::open_recorded`). The record is checked against the file's own table once,
//! decoded through the reader's own source (its mapping or its descriptor, never the path
//! again), before the first checksum check, and by `verify_structure`.

use std::borrow::Cow;
use std::sync::OnceLock;

use super::errors::{invalid_error, io_error};
use crate::format::{Layout, Limits, OpenError};
use crate::source::ReadError;
use crate::source::data::Source;

/// A reader's record, and whether it describes the file (checked once).
#[derive(Default)]
pub(crate) struct Record {
    /// Unset while unchecked; then the tensor the record misdescribes and how, if any.
    checked: OnceLock<Option<(String, String)>>,
}

impl Record {
    /// The record describes the file (decoded and compared at the first call).
    ///
    /// # Errors
    /// [`ReadError::Reference`] naming the tensor the record misdescribes.
    /// `file`'s record is `record`, its bytes `source`.
    pub(super) fn holds(
        &self,
        file: &str,
        record: &Layout,
        source: &Source,
    ) -> Result<(), ReadError> {
        let outcome = self
            .checked
            .get_or_init(|| match decoded(file, record, source) {
                Ok(layout) => misdescribed(record, &layout),
                Err(e) => Some((String::new(), e.to_string())),
            });
        match outcome {
            None => Ok(()),
            Some((tensor, what)) => Err(ReadError::Reference {
                file: file.to_string(),
                tensor: tensor.clone(),
                what: what.clone(),
            }),
        }
    }

    /// `verify_structure` of a reader opened from a record: the file decoded and checked as
    /// any pack (`structure`), then the record against it.
    pub(super) fn verify(
        &self,
        file: &str,
        record: &Layout,
        source: &Source,
        structure: impl FnOnce(&Layout) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let layout = decoded(file, record, source)?;
        structure(&layout)?;
        match misdescribed(record, &layout) {
            None => Ok(()),
            Some((tensor, what)) => Err(ReadError::Reference {
                file: file.to_string(),
                tensor,
                what,
            }),
        }
    }
}

/// The file's own table, decoded through the reader's source (default limits).
fn decoded(file: &str, record: &Layout, source: &Source) -> Result<Layout, ReadError> {
    let file_len = record.file_len();
    let read = |range: std::ops::Range<u64>| {
        let end = range.end.min(file_len);
        let bytes = source.read(range.start, end.saturating_sub(range.start), 1)?;
        Ok::<_, std::io::Error>((Cow::Owned(bytes.to_vec()), file_len))
    };
    Layout::read(&Limits::default(), read).map_err(|e| match e {
        OpenError::Read(e) => io_error(file, "read")(e),
        OpenError::Invalid(e) => invalid_error(file, e),
    })
}

/// The first tensor of the record that the file's table does not describe as it does, with
/// what differs.
fn misdescribed(record: &Layout, layout: &Layout) -> Option<(String, String)> {
    record.tensors().iter().find_map(|t| {
        let same = layout.tensor(t.name()).is_some_and(|o| {
            (o.offset(), o.len(), o.dtype(), o.shape(), o.checksum())
                == (t.offset(), t.len(), t.dtype(), t.shape(), t.checksum())
        });
        (!same).then(|| {
            (
                t.name().to_string(),
                "the record it was opened with does not describe it as the file does".to_string(),
            )
        })
    })
}
