//! A pack opened from a record of its tensors made when it was written (an incremental
//! checkpoint's references), vouched for by the file's header and metadata checksum: the
//! file's own metadata is hashed, never decoded. The checksum covers every descriptor of the
//! file, so a file whose checksum is the one recorded holds what the record says; a record
//! that lies about a tensor's place is caught by the tensor's checksum when it is read, and by
//! [`Reader::verify_structure`](crate::read::Reader::verify_structure), which decodes.

#[allow(unused_imports)]
use super::prelude::*;

use super::dtype::metadata_checksum;
use super::error::FormatError;
use super::header::{HEADER_SIZE, Header};
use super::layout::Layout;
use super::limits::Limits;
use super::tensor::TensorInfo;

/// Checks a file's first bytes (its header and its whole metadata blob, `head`) against the
/// header and metadata checksum `expected`, recorded when it was written: the blob must end
/// with that checksum, and the header and blob must hash to it. Returns the header.
///
/// # Errors
/// [`FormatError::MetadataChecksum`] (`expected` the recorded value) when the file is not the
/// one recorded, or the header's own errors.
pub(crate) fn check_head(head: &[u8], expected: u64) -> Result<Header, FormatError> {
    let header = Header::parse(head)?;
    let metadata = &head[HEADER_SIZE.min(head.len())..];
    let size = header.metadata_size as usize;
    if metadata.len() != size || size < 8 {
        return Err(FormatError::Truncated {
            what: "metadata",
            needed: (HEADER_SIZE + size.max(8)) as u64,
            available: head.len() as u64,
        });
    }
    let (covered, stored) = metadata.split_at(size - 8);
    let stored = u64::from_le_bytes(stored.try_into().unwrap_or_default());
    let actual = metadata_checksum(&header.to_bytes(), covered);
    if actual != stored || actual != expected {
        return Err(FormatError::MetadataChecksum { expected, actual });
    }
    Ok(header)
}

/// The layout of a file of `file_len` bytes whose head [`check_head`] accepted, holding
/// `tensors` (each inside the data section and the file, within the size limit, names
/// unique).
///
/// # Errors
/// The first tensor out of place, or a name given twice.
pub(crate) fn layout(
    header: Header,
    file_len: u64,
    mut tensors: Vec<TensorInfo>,
    head_checksum: u64,
    limits: &Limits,
) -> Result<Layout, FormatError> {
    let data_start = header.data_start();
    for t in &tensors {
        let end = t.offset().checked_add(t.len());
        if t.offset() < data_start || end.is_none_or(|end| end > file_len) {
            return Err(FormatError::PastEnd {
                tensor: t.name().to_string(),
                end: end.unwrap_or(u64::MAX),
                file_len,
            });
        }
        if t.len() > limits.max_tensor_size {
            return Err(FormatError::LimitExceeded {
                what: "tensor size",
                size: t.len(),
                limit: limits.max_tensor_size,
            });
        }
    }
    if let Some((first, _)) = super::sort_unique(&mut tensors, TensorInfo::name) {
        return Err(FormatError::DuplicateKey {
            map: "tensors",
            key: tensors[first].name().to_string(),
        });
    }
    Ok(Layout::from_record(
        header,
        file_len,
        tensors,
        head_checksum,
    ))
}
