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

pub(crate) use super::not_unix::*;
