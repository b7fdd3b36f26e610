//! What every [`read_range`](super::TensorSource::read_range) shares: the range checked against
//! the tensor, and a window of bytes read whole.

use std::ops::Range;

use burn::tensor::Bytes;

use super::error::ReadError;
use crate::format::TensorInfo;

/// `range` (offsets into `info`'s bytes) is inside the tensor; else [`ReadError::Unsupported`]
/// naming the file and the tensor.
pub(crate) fn check_range(
    file: &str,
    info: &TensorInfo,
    range: &Range<u64>,
) -> Result<(), ReadError> {
    if range.start <= range.end && range.end <= info.len() {
        Ok(())
    } else {
        Err(unsupported(
            file,
            info,
            format!(
                "bytes {}..{} asked, outside the tensor's {} bytes",
                range.start,
                range.end,
                info.len()
            ),
        ))
    }
}

/// The window `range` of `whole` (the bytes of `info`, read whole): a zero-copy view where
/// `whole` can give one, else a copy of those bytes only.
pub(crate) fn window(
    file: &str,
    info: &TensorInfo,
    whole: Bytes,
    range: Range<u64>,
) -> Result<Bytes, ReadError> {
    check_range(file, info, &range)?;
    let too_big = || unsupported(file, info, "range does not fit in memory".to_string());
    let start = usize::try_from(range.start).map_err(|_| too_big())?;
    let end = usize::try_from(range.end).map_err(|_| too_big())?;
    if end > whole.len() {
        return Err(unsupported(
            file,
            info,
            format!("bytes {start}..{end} asked, but {} were read", whole.len()),
        ));
    }
    if start == 0 && end == whole.len() {
        return Ok(whole);
    }
    // A view where the bytes give one (a mapping, shared memory); a plain allocation is
    // shared first (no copy), and only what can give no view is copied, the window alone.
    if let Ok(view) = whole.view(start, end) {
        return Ok(view);
    }
    let shared = whole.shared();
    match shared.view(start, end) {
        Ok(view) => Ok(view),
        Err(_) => Ok(Bytes::from_bytes_vec(shared[start..end].to_vec())),
    }
}

fn unsupported(file: &str, info: &TensorInfo, reason: String) -> ReadError {
    ReadError::Unsupported {
        file: file.to_string(),
        tensor: info.name().to_string(),
        reason,
    }
}
