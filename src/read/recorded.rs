//! Packs opened from a record of their tensors (an incremental checkpoint's references): the
//! file's header and metadata hashed against the recorded checksum, never decoded at open
//! ([`ReadOptions::open_recorded`]). The record is checked against the file's own table once,
//! decoded through the reader's own source (its mapping or its descriptor, never the path
//! again), before the first checksum check, and by `verify_structure`.

use std::borrow::Cow;
use std::path::Path;
use std::sync::OnceLock;

use super::reader::{ReadMode, ReadOptions, Reader, invalid_error, io_error};
use crate::format::{FormatError, Layout, Limits, OpenError, TensorInfo};
use crate::platform::read_exact_at;
use crate::source::ReadError;
use crate::source::data::file_data;

/// A reader's record, and whether it describes the file (checked once).
pub(crate) struct Record {
    /// `None` while unchecked; then the tensor the record misdescribes and how, if any.
    checked: OnceLock<Option<(String, String)>>,
}

impl ReadOptions {
    /// Opens `path` (opened as `file`) with `tensors` as its table, as a record made when it
    /// was written says (an incremental checkpoint's references): its header and metadata are
    /// read and hashed, never decoded, and must hash to `head` (the file's header and metadata
    /// checksum the record keeps), so the file is the one recorded. The reader lists only
    /// `tensors`; its first checksum check and its
    /// [`verify_structure`](Reader::verify_structure) decode the file and check them against
    /// it.
    ///
    /// # Errors
    /// [`ReadError::Invalid`] when the file is not the one recorded or a tensor is out of
    /// place, [`ReadError::Io`].
    pub(crate) fn open_recorded(
        &self,
        path: &Path,
        file: &std::fs::File,
        head: u64,
        tensors: Vec<TensorInfo>,
    ) -> Result<Reader, ReadError> {
        let name = path.display().to_string();
        let (io, invalid) = (
            |action| io_error(&name, action),
            |e| invalid_error(&name, e),
        );
        let file_len = file.metadata().map_err(io("stat"))?.len();
        let mut first = [0u8; crate::format::HEADER_SIZE];
        if file_len < first.len() as u64 {
            return Err(invalid(FormatError::Truncated {
                what: "header",
                needed: first.len() as u64,
                available: file_len,
            }));
        }
        read_exact_at(file, &mut first, 0).map_err(io("read"))?;
        let header = crate::format::Header::parse(&first).map_err(invalid)?;
        Layout::check_header(&header, file_len, &self.limits).map_err(invalid)?;
        // Bounded by the limit on metadata checked above.
        let mut bytes = vec![0u8; first.len() + header.metadata_size as usize];
        read_exact_at(file, &mut bytes, 0).map_err(io("read"))?;
        let header = crate::format::vouched::check_head(&bytes, head).map_err(invalid)?;
        let layout = crate::format::vouched::layout(header, file_len, tensors, head, &self.limits)
            .map_err(invalid)?;
        let source = file_data(file, self.mode == ReadMode::Buffered)
            .map_err(|(action, e)| io(action)(e))?;
        Ok(Reader {
            file: name.clone(),
            layout,
            source,
            recorded: Some(Record {
                checked: OnceLock::new(),
            }),
        })
    }
}

impl Record {
    /// The record describes the file (decoded and compared at the first call).
    ///
    /// # Errors
    /// [`ReadError::Reference`] naming the tensor the record misdescribes.
    pub(super) fn holds(&self, reader: &Reader) -> Result<(), ReadError> {
        let outcome = self.checked.get_or_init(|| match decoded(reader) {
            Ok(layout) => misdescribed(reader, &layout),
            Err(e) => Some((String::new(), e.to_string())),
        });
        match outcome {
            None => Ok(()),
            Some((tensor, what)) => Err(ReadError::Reference {
                file: reader.file.clone(),
                tensor: tensor.clone(),
                what: what.clone(),
            }),
        }
    }

    /// `verify_structure` of a reader opened from a record: the file decoded and checked as
    /// any pack, then the record against it.
    pub(super) fn verify(&self, reader: &Reader) -> Result<(), ReadError> {
        let layout = decoded(reader)?;
        reader.structure(&layout)?;
        match misdescribed(reader, &layout) {
            None => Ok(()),
            Some((tensor, what)) => Err(ReadError::Reference {
                file: reader.file.clone(),
                tensor,
                what,
            }),
        }
    }
}

/// The file's own table, decoded through the reader's source (default limits).
fn decoded(reader: &Reader) -> Result<Layout, ReadError> {
    let file_len = reader.layout.file_len();
    let read = |range: std::ops::Range<u64>| {
        let end = range.end.min(file_len);
        let bytes = reader
            .source
            .read(range.start, end.saturating_sub(range.start), 1)?;
        Ok::<_, std::io::Error>((Cow::Owned(bytes.to_vec()), file_len))
    };
    Layout::read(&Limits::default(), read).map_err(|e| match e {
        OpenError::Read(e) => io_error(&reader.file, "read")(e),
        OpenError::Invalid(e) => invalid_error(&reader.file, e),
    })
}

/// The first tensor of the record that the file's table does not describe as it does, with
/// what differs.
fn misdescribed(reader: &Reader, layout: &Layout) -> Option<(String, String)> {
    reader.layout.tensors().iter().find_map(|t| {
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
