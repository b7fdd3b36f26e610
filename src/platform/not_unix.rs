//! What Windows and the platforms with neither Unix nor Windows share: no memory size, no
//! open-files limit, no hints, no special files (`windows.rs` and `other.rs` re-export it).

use std::fs::File;

/// The machine's physical memory: not asked here.
pub(crate) fn physical_memory() -> Option<u64> {
    None
}

/// How many files this process may hold open at once: not known here.
#[cfg(feature = "optim")]
pub(crate) fn open_files_limit() -> Option<u64> {
    None
}

/// How a mapped file's bytes will be read: a hint that does nothing here.
#[allow(dead_code)]
pub(crate) fn advise_random(_bytes: &[u8], _random: bool) {}

/// Whether `path` still names the open `file`: the name still existing is all that can be
/// asked here.
pub(crate) fn names(path: &std::path::Path, _file: &File) -> bool {
    path.exists()
}

/// No special files to tell apart here.
pub(super) fn special_kind(_file_type: std::fs::FileType) -> Option<&'static str> {
    None
}

/// Opening a file does not block here.
pub(super) fn open_without_blocking(_options: &mut std::fs::OpenOptions) {}

/// Reads block already.
pub(super) fn reads_blocking(_file: &File) {}

/// Whether a file may be deleted or renamed over while this process maps it (Windows refuses
/// to delete a mapped file; elsewhere nothing is assumed). (For the checkpoint manager, feature `optim`;
/// a build without it leaves it unused.)
#[allow(dead_code)]
pub(crate) const MAPPED_FILES_REMOVABLE: bool = false;
