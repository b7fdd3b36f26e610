//! Windows: positional reads and writes (`seek_read` / `seek_write`, each naming its offset);
//! the rest is what Windows does not need or has no call for in reach.

use std::fs::File;
use std::io;
use std::os::windows::fs::FileExt;

/// Reads exactly `buf.len()` bytes at `offset` (`seek_read` loops; each call names its offset,
/// so concurrent callers do not disturb each other).
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset` (`seek_write` loops).
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_write(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// This process's id, for names of scratch files.
pub(crate) fn process_id() -> u32 {
    std::process::id()
}

/// The machine's physical memory: not asked here.
pub(crate) fn physical_memory() -> Option<u64> {
    None
}

/// How many files this process may hold open at once: no such limit to ask here.
#[cfg(feature = "optim")]
pub(crate) fn open_files_limit() -> Option<u64> {
    None
}

/// How a mapped file's bytes will be read: a hint that does nothing here.
#[allow(dead_code)]
pub(crate) fn advise_random(_bytes: &[u8], _random: bool) {}

/// Whether `path` still names the open `file`. Windows does not remove a file that is open
/// without delete sharing, so the name still existing is enough there.
pub(crate) fn names(path: &std::path::Path, _file: &File) -> bool {
    path.exists()
}

/// Windows has no FIFOs, sockets or devices among the files a path names here.
pub(super) fn special_kind(_file_type: std::fs::FileType) -> Option<&'static str> {
    None
}

/// Opening a file does not block here.
pub(super) fn open_without_blocking(_options: &mut std::fs::OpenOptions) {}

/// Reads block already.
pub(super) fn reads_blocking(_file: &File) {}
