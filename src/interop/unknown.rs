//! What a file of no format this build reads is, as far as its first bytes tell: a Git LFS
//! pointer left where the weights should be, an HTML page saved by a failed download, an HDF5
//! file, a file a container recognises but refuses (a bincode record of Burn 0.14-0.21, which
//! does not describe itself), zero bytes. The registry's answer for a file no
//! [`Container`](super::Container) takes; its first bytes are shown (a format this build leaves
//! out is not named: only its folder knows it, and [`containers`](super::containers) lists what
//! the build reads).

use std::path::Path;

use super::container::Container;
use crate::source::SourceError;

/// The error for `path`, of no format this build reads (none of `containers` takes it), whose
/// first bytes are `head`.
pub(super) fn unknown(path: &Path, head: &[u8], containers: &[Container]) -> SourceError {
    // A file of a format's family that the format recognises but does not read.
    if let Some(refused) = containers
        .iter()
        .find_map(|c| c.refuse.and_then(|refuse| refuse(path, head)))
    {
        return refused;
    }
    let shown = &head[..head.len().min(16)];
    let start = if head.is_empty() {
        "nothing: it is empty".to_string()
    } else {
        format!("\"{}\"", shown.escape_ascii())
    };
    let hint = what_it_is(head)
        .or_else(|| crate::format::looks_like(head).map(str::to_string))
        .map_or_else(String::new, |hint| format!(": {hint}"));
    SourceError::UnknownFormat {
        path: path.to_path_buf(),
        start,
        hint,
    }
}

/// What a file that is not weights at all is, told by its first bytes.
fn what_it_is(head: &[u8]) -> Option<String> {
    if let Some(pointer) = head.strip_prefix(b"version https://git-lfs.github.com/spec/") {
        // `size <bytes>` is one of the pointer's few lines.
        let size = pointer
            .split(|&b| b == b'\n')
            .find_map(|line| line.strip_prefix(b"size "))
            .and_then(|size| std::str::from_utf8(size).ok()?.trim().parse::<u64>().ok())
            .map(|size| format!(" ({} in the repository)", crate::source::human_bytes(size)))
            .unwrap_or_default();
        return Some(format!(
            "a Git LFS pointer, not the file{size}: run `git lfs pull`"
        ));
    }
    let text = head
        .strip_prefix(b"\xef\xbb\xbf")
        .unwrap_or(head)
        .trim_ascii_start();
    let lower: Vec<u8> = text.iter().take(16).map(u8::to_ascii_lowercase).collect();
    let html = [&b"<!doctype html"[..], b"<html", b"<head", b"<body"]
        .iter()
        .any(|tag| lower.starts_with(tag));
    if html {
        return Some("an HTML page, not weights: the download failed?".to_string());
    }
    head.starts_with(b"\x89HDF")
        .then(|| "an HDF5 (Keras) file, which burnpack does not read".to_string())
}
