//! Split sets (`model-00001-of-00003.gguf`): the parts a first part names, and each part's
//! `split.no` / `split.count` checked as it is opened.

use std::path::{Path, PathBuf};

use super::value::Value;
use crate::source::SourceError;

/// The `split.count` of a file's metadata (1 without one; a `split.no` without it is refused).
pub(super) fn split_count(metadata: &[(String, Value)], path: &Path) -> Result<u64, SourceError> {
    let find = |key: &str| metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    match find("split.count") {
        None if find("split.no").is_some() => Err(SourceError::invalid(path)(
            "a part of a split set (split.no) that does not say how many parts there are \
             (split.count)"
                .into(),
        )),
        None => Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|&n| (1..=9999).contains(&n))
            .ok_or_else(|| {
                SourceError::invalid(path)(format!(
                    "split.count is {v}: a count of parts is expected"
                ))
            }),
    }
}

/// The parts of a split set, from its first part's name (`<stem>-00001-of-0000M.gguf`).
pub(super) fn split_parts(path: &Path, count: u64) -> Result<Vec<PathBuf>, SourceError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let suffix = format!("-00001-of-{count:05}.gguf");
    let stem = name.strip_suffix(&suffix).ok_or_else(|| {
        SourceError::invalid(path)(format!(
            "the first of a split set of {count} parts, but not named <name>{suffix}: open \
             the set from its first part"
        ))
    })?;
    let folder = path.parent().unwrap_or(Path::new(""));
    Ok((1..=count)
        .map(|i| folder.join(format!("{stem}-{i:05}-of-{count:05}.gguf")))
        .collect())
}

/// A part of a split set must say it is part `no` (0-based) of `count`.
pub(super) fn check_part(
    path: &Path,
    metadata: &[(String, Value)],
    no: u64,
    count: u64,
) -> Result<(), SourceError> {
    if count == 1 {
        return Ok(());
    }
    let get = |key: &str| {
        metadata
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_u64())
    };
    if get("split.no") != Some(no) || get("split.count") != Some(count) {
        let shown = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
        return Err(SourceError::invalid(path)(format!(
            "not part {} of {count} of its set (split.no {}, split.count {})",
            no + 1,
            shown(get("split.no")),
            shown(get("split.count"))
        )));
    }
    Ok(())
}
