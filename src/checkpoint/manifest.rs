//! What an incremental checkpoint's manifest says, checked before any data file is opened:
//! its markers and references, and the data files' tables as its references record them.

use super::error::CheckpointError;
use super::namespace::{KIND, KIND_KEY};
use super::refs::{self, INCREMENTAL_KEY, REFS_KEY};
use crate::format::TensorInfo;
use crate::source::PackSource;

/// Per data file a table recorded whole, the data file's header checksum with its tensors as
/// the references record them (each stored tensor once), named in `names` at `ranges` (from
/// [`refs::Table::names`]): `None` for a data file some line of which records no place
/// (manifests of earlier layouts), another header checksum, or a dtype whose length is not its
/// shape's (those are decoded).
pub(super) fn recorded_tables(
    table: &refs::Table<'_>,
    names: &std::sync::Arc<str>,
    ranges: &[refs::NameRanges],
) -> Vec<Option<(u64, Vec<TensorInfo>)>> {
    let files = table.files().len();
    let mut recorded: Vec<Option<(u64, Vec<TensorInfo>)>> = vec![None; files];
    let mut usable = vec![true; files];
    // Whether a data file's names came strictly increasing, as they do where lines name
    // tensors by their own names (nothing to sort or merge then).
    let mut in_order = vec![true; files];
    // Lines per data file (each table allocated once).
    let mut lines = vec![0usize; files];
    for i in 0..table.len() {
        lines[table.file_index(i)] += 1;
    }
    // The last dtype text matched (runs of lines share one).
    let mut last: Option<(&str, burn::tensor::DType)> = None;
    for i in 0..table.len() {
        let file = table.file_index(i);
        if !usable[file] {
            continue;
        }
        let text = table.dtype(i);
        let dtype = match last {
            Some((seen, dtype)) if seen == text => Some(dtype),
            _ => {
                let dtype = crate::format::dtype::PLAIN_DTYPES
                    .iter()
                    .copied()
                    .find(|d| refs::dtype_is(*d, text));
                last = dtype.map(|d| (text, d));
                dtype
            }
        };
        let info = table.located(i).zip(dtype).and_then(|(at, dtype)| {
            let info = TensorInfo::recorded(
                names,
                ranges[i].stored_as,
                dtype,
                table.shape(i),
                at.offset,
                table.checksum(i),
            )?;
            Some((at.head, info))
        });
        let Some((head, info)) = info else {
            usable[file] = false;
            continue;
        };
        let entry = recorded[file].get_or_insert_with(|| (head, Vec::new()));
        if entry.0 == head {
            if entry
                .1
                .last()
                .is_some_and(|before| before.name() >= info.name())
            {
                in_order[file] = false;
            }
            entry.1.push(info);
        } else {
            usable[file] = false;
        }
    }
    for ((slot, usable), in_order) in recorded.iter_mut().zip(usable).zip(in_order) {
        if !usable {
            *slot = None;
        } else if let Some((_, infos)) = slot
            && !in_order
        {
            // A tensor stored once and named by several lines is one tensor of the file.
            infos.sort_by(|a, b| a.name().cmp(b.name()));
            infos.dedup_by(|a, b| a == b);
        }
    }
    recorded
}

/// A manifest's references, checked before any data file is opened: the kind and layout
/// markers, the lines, their count, no name twice, no tensor of its own; sorted by name.
pub(super) fn checked_references<'a, S: PackSource>(
    manifest: &'a S,
    file: &str,
) -> Result<refs::Table<'a>, CheckpointError> {
    let invalid = |what: String| CheckpointError::Invalid {
        file: file.to_string(),
        what,
    };
    let metadata = manifest.layout().metadata();
    match metadata.get(KIND_KEY).map(String::as_str) {
        Some(KIND) => {}
        Some(other) => {
            return Err(invalid(format!(
                "'{KIND_KEY}' is '{}', not '{KIND}'",
                short(other)
            )));
        }
        None => return Err(invalid(format!("no '{KIND_KEY}': not a checkpoint"))),
    }
    match metadata.get(INCREMENTAL_KEY).map(String::as_str) {
        Some("1") => {}
        Some(other) => {
            return Err(invalid(format!(
                "'{INCREMENTAL_KEY}' is '{}': a layout this version does not read (1)",
                short(other)
            )));
        }
        None => return Err(invalid(format!("no '{INCREMENTAL_KEY}'"))),
    }
    let text = metadata
        .get(REFS_KEY)
        .ok_or_else(|| invalid(format!("an incremental checkpoint without '{REFS_KEY}'")))?;
    let mut table = refs::Table::parse(text).map_err(|e| invalid(short(&e).into_owned()))?;
    let limits = crate::format::Limits::default();
    if table.len() > limits.max_tensor_count {
        return Err(invalid(format!(
            "{} references, above the limit of {} tensors",
            table.len(),
            limits.max_tensor_count
        )));
    }
    if let Some(twice) = table.sort_by_name() {
        return Err(invalid(format!(
            "tensor '{}' is listed twice",
            short(twice)
        )));
    }
    if !manifest.tensors().is_empty() {
        return Err(invalid(format!(
            "an incremental checkpoint holds tensors of its own ('{}'): they would be hidden",
            short(manifest.tensors()[0].name())
        )));
    }
    Ok(table)
}

/// A name or text from a manifest as an error shows it: at most 200 characters (a hostile
/// manifest's 50 MB name is not echoed whole).
pub(super) fn short(text: &str) -> std::borrow::Cow<'_, str> {
    const MOST: usize = 200;
    match text.char_indices().nth(MOST) {
        None => std::borrow::Cow::Borrowed(text),
        Some((end, _)) => {
            std::borrow::Cow::Owned(format!("{}... ({} bytes)", &text[..end], text.len()))
        }
    }
}
