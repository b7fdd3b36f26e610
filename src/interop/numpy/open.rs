//! Reading a file's structure when it is opened: the `.npy` header of a file, or every
//! member of an `.npz` archive and its header, into the rows of the table.

use std::io::Read;
use std::path::Path;

use super::header::{self, Header, HeaderError, PREAMBLE_V2};
use super::zip::Member;
use crate::source::{OpenOptions, SourceError};

/// Where an array is and how it is stored.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    /// The zip member (`None` for a `.npy` file).
    pub member: Option<Member>,
    /// Its parsed `.npy` header.
    pub header: Header,
    /// Absolute start of the array's bytes (stored), or of the member's deflated stream.
    pub start: u64,
    /// A deflated member's array: its index in the source's inflated arrays.
    pub inflated: Option<usize>,
}

/// A file or bytes, read at offsets for the headers.
pub(super) enum Input<'a> {
    File(&'a std::fs::File, u64),
    Memory(&'a [u8]),
}

impl Input<'_> {
    fn len(&self) -> u64 {
        match self {
            Input::File(_, len) => *len,
            Input::Memory(all) => all.len() as u64,
        }
    }

    /// Up to `len` bytes at `start` (fewer at the end).
    pub(super) fn read(&self, start: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let end = start.saturating_add(len).min(self.len());
        let n = usize::try_from(end.saturating_sub(start)).map_err(std::io::Error::other)?;
        match self {
            Input::File(file, _) => {
                let mut out = vec![0u8; n];
                crate::platform::read_exact_at(file, &mut out, start)?;
                Ok(out)
            }
            Input::Memory(all) => Ok(all[start as usize..start as usize + n].to_vec()),
        }
    }
}

pub(super) fn is_zip(path: &Path, input: &Input<'_>) -> Result<bool, SourceError> {
    let head = input.read(0, 4).map_err(SourceError::io(path, "read"))?;
    Ok(head == super::zip::ZIP_MAGIC || head == super::zip::EMPTY_ZIP)
}

/// The header of the `.npy` data read by `next` (`size` bytes in all, when known).
fn npy_header(
    mut next: impl FnMut(u64) -> std::io::Result<Vec<u8>>,
    options: &OpenOptions,
) -> Result<Header, HeaderError> {
    let pre = next(PREAMBLE_V2 as u64).map_err(|e| HeaderError::Truncated(e.to_string()))?;
    let max = u64::from(options.limits.max_metadata_size);
    let (version, at, len) = header::preamble(&pre, max)?;
    let mut text = pre[at..].to_vec();
    let rest = len.saturating_sub(text.len() as u64);
    text.extend(next(rest).map_err(|e| HeaderError::Truncated(e.to_string()))?);
    if (text.len() as u64) < len {
        return Err(HeaderError::Truncated(format!(
            "the header says {len} bytes, {} are there",
            text.len()
        )));
    }
    text.truncate(usize::try_from(len).unwrap_or(usize::MAX));
    header::parse(version, at, &text)
}

fn header_error(path: &Path, tensor: Option<&str>, e: HeaderError) -> SourceError {
    let path = path.to_path_buf();
    match (tensor, e) {
        (Some(t), e) => SourceError::Tensor {
            path,
            tensor: t.to_string(),
            reason: e.to_string(),
        },
        (None, HeaderError::Truncated(reason)) => SourceError::Truncated { path, reason },
        (None, HeaderError::Unsupported(reason)) => SourceError::Unsupported { path, reason },
        (None, HeaderError::Invalid(reason)) => SourceError::Invalid { path, reason },
    }
}

/// The name of a `.npy` file's one tensor.
pub(super) const ARRAY: &str = "array";

/// The one array of a `.npy` file.
pub(super) fn npy_rows(
    path: &Path,
    input: &Input<'_>,
    options: &OpenOptions,
) -> Result<Vec<(String, Stored)>, SourceError> {
    let mut at = 0u64;
    let header = npy_header(
        |n| {
            let bytes = input.read(at, n)?;
            at += bytes.len() as u64;
            Ok(bytes)
        },
        options,
    )
    .map_err(|e| header_error(path, None, e))?;
    check_length(path, None, &header, input.len())?;
    // One name whatever the door (a path, an opened file, bytes): the table of a file does
    // not depend on what it is called.
    let name = ARRAY.to_string();
    let start = header.data_start;
    Ok(vec![(
        name,
        Stored {
            member: None,
            header,
            start,
            inflated: None,
        },
    )])
}

/// The `.npy` data of `len` bytes holds exactly the array its header states.
fn check_length(
    path: &Path,
    tensor: Option<&str>,
    header: &Header,
    len: u64,
) -> Result<(), SourceError> {
    let end = header.data_start.checked_add(header.data_len);
    match end {
        Some(end) if end == len => Ok(()),
        Some(end) if end < len => Err(header_error(
            path,
            tensor,
            HeaderError::Invalid(format!(
                "{} bytes after the array's {} bytes of data",
                len - end,
                header.data_len
            )),
        )),
        _ => Err(header_error(
            path,
            tensor,
            HeaderError::Truncated(format!(
                "the array of shape {:?} ({}) needs {} bytes of data, {} are there",
                header.shape,
                header.descr,
                header.data_len,
                len.saturating_sub(header.data_start)
            )),
        )),
    }
}

/// Every member of a `.npz` archive: its header (inflated for a deflated member, within
/// `max_inflation`), its tensor name (the member's name without `.npy`).
pub(super) fn npz_rows(
    path: &Path,
    input: &Input<'_>,
    members: Vec<Member>,
    options: &OpenOptions,
) -> Result<Vec<(String, Stored)>, SourceError> {
    let mut rows = Vec::with_capacity(members.len());
    // `max_inflation` bounds the archive's deflated members together (what all of them
    // inflate to, against what all of them take in the file, from the central directory
    // before anything is inflated): many small members, each within the bound, must not add
    // up past it.
    let deflated = members.iter().filter(|m| m.deflated);
    let compressed = deflated
        .clone()
        .fold(0u64, |n, m| n.saturating_add(m.compressed));
    let inflated = deflated.fold(0u64, |n, m| n.saturating_add(m.size));
    let bound = compressed
        .saturating_mul(options.limits.max_inflation)
        .saturating_add(1 << 20);
    if inflated > bound {
        // Named by the member that inflates most (the tensor of the error).
        let largest = members
            .iter()
            .filter(|m| m.deflated)
            .max_by_key(|m| m.size)
            .map(|m| m.name.as_str())
            .unwrap_or_default();
        return Err(header_error(
            path,
            Some(largest.strip_suffix(".npy").unwrap_or(largest)),
            HeaderError::Invalid(format!(
                "its deflated members say they inflate from {compressed} to {inflated} bytes \
                 (the most, member '{largest}'), over the inflation limit ({}x their size plus \
                 1 MiB, Limits::max_inflation; raise it for a file you trust)",
                options.limits.max_inflation
            )),
        ));
    }
    for member in members {
        let Some(name) = member.name.strip_suffix(".npy").filter(|n| !n.is_empty()) else {
            return Err(SourceError::invalid(path)(format!(
                "zip member '{}' is not a .npy array (an .npz holds <name>.npy members)",
                member.name
            )));
        };
        let name = name.to_string();
        let header = if member.deflated {
            if member.size > options.limits.max_tensor_size.saturating_add(1 << 20) {
                return Err(header_error(
                    path,
                    Some(&name),
                    HeaderError::Invalid(format!(
                        "member '{}' says it inflates to {} bytes, over the tensor-size limit \
                         of {}",
                        member.name, member.size, options.limits.max_tensor_size
                    )),
                ));
            }
            let raw = input
                .read(member.start, member.compressed.min(64 << 10))
                .map_err(SourceError::io(path, "read"))?;
            let mut decoder = flate2::read::DeflateDecoder::new(&raw[..]);
            let mut failed = None;
            let header = npy_header(
                |n| {
                    let mut out = Vec::new();
                    (&mut decoder)
                        .take(n)
                        .read_to_end(&mut out)
                        .inspect_err(|e| failed = Some(e.to_string()))?;
                    Ok(out)
                },
                options,
            );
            if let (Err(_), Some(e)) = (&header, failed) {
                return Err(SourceError::Damaged {
                    path: path.to_path_buf(),
                    tensor: Some(name),
                    reason: format!("member '{}': cannot inflate it: {e}", member.name),
                });
            }
            header
        } else {
            let mut at = member.start;
            let end = member.start + member.size;
            npy_header(
                |n| {
                    let bytes = input.read(at, n.min(end - at))?;
                    at += bytes.len() as u64;
                    Ok(bytes)
                },
                options,
            )
        }
        .map_err(|e| header_error(path, Some(&name), e))?;
        check_length(path, Some(&name), &header, member.size)?;
        let start = if member.deflated {
            member.start
        } else {
            member.start + header.data_start
        };
        rows.push((
            name,
            Stored {
                member: Some(member),
                header,
                start,
                inflated: None,
            },
        ));
    }
    Ok(rows)
}
