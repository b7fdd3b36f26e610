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

pub(crate) use super::not_unix::*;
