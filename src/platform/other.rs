//! Neither Unix nor Windows (WASI, and whatever else has `std` files): a positional read or
//! write is a seek then a read or write, on one thread; no process id, memory size or hints.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Reads exactly `buf.len()` bytes at `offset` where the platform has no positional read in
/// stable `std` (WASI): a seek, then a read, through the file's one cursor. Callers on such a
/// platform run on one thread (WebAssembly without threads), so no other read moves the
/// cursor between the two.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Writes all of `buf` at `offset`: a seek, then a write (see [`read_exact_at`]).
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(buf)
}

/// This process's id, for names of scratch files: 0, the platform has none (WASI's
/// `std::process::id` panics).
pub(crate) fn process_id() -> u32 {
    0
}

/// The machine's physical memory: not known here.
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
