//! What opening a file checks of its metadata before the layout is built: the metadata decoded
//! with the tensors as one table, a `checksums` entry found where decoding did not, and a file
//! cut inside its data section named by the tensor the cut falls in.

#[allow(unused_imports)]
use super::prelude::*;

use super::canonical;
use super::error::FormatError;
use super::limits::Limits;
use super::metadata::{Extras, Metadata};
use super::table::Table;

/// The CBOR encoding of the top-level key `checksums` (a text string of 9 bytes).
const CHECKSUMS_KEY: &[u8] = b"\x69checksums";

/// Whether `metadata` holds the bytes of this crate's `checksums` entry (the key, then a byte
/// string: CBOR major type 2) anywhere, decoded or not. A tensor or metadata key of that
/// name is followed by a map or a text, not by a byte string.
pub(super) fn has_checksums_entry(metadata: &[u8]) -> bool {
    metadata.windows(CHECKSUMS_KEY.len() + 1).any(|w| {
        w[..CHECKSUMS_KEY.len()] == *CHECKSUMS_KEY
            && (0x40..=0x5f).contains(&w[CHECKSUMS_KEY.len()])
    })
}

/// [`Metadata::decode_lenient`] with the tensors as a [`Table`] (one buffer for every name)
/// and `tensors` left empty: what opening a file uses.
pub(super) fn decode_metadata(
    bytes: &[u8],
    limits: &Limits,
) -> Result<(Table, Metadata, Extras), FormatError> {
    // Metadata as Burn and this crate write it takes the direct path; anything else
    // (other encodings of the same values, unknown keys, quantized dtypes, damage) is
    // decoded, or refused with its reason, by the general decoder below.
    if let Some((table, meta, end)) = canonical::decode_table(bytes, limits)
        && end == bytes.len()
    {
        return Ok((table, meta, Extras::default()));
    }
    let (mut meta, extras) = Metadata::decode_general(bytes, limits)?;
    let table = Table::from_pairs(core::mem::take(&mut meta.tensors));
    Ok((table, meta, extras))
}

/// A file cut inside its data section, named by the tensor the cut falls in: of the tensors
/// that reach past the end of the file, the first in the file (not the first by name, which
/// may lie wholly past the cut).
pub(super) fn cut_inside(
    names: &super::table::Names,
    rows: &[super::table::Row],
    data_start: u64,
    file_len: u64,
) -> Option<FormatError> {
    let (_, end, row) = rows
        .iter()
        .filter_map(|row| {
            let (start, end) = row.data_offsets;
            let end = data_start.checked_add(end)?;
            (start <= row.data_offsets.1 && end > file_len).then_some((start, end, row))
        })
        .min_by_key(|(start, _, _)| *start)?;
    Some(FormatError::PastEnd {
        tensor: names.name(row.name).to_string(),
        end,
        file_len,
    })
}
