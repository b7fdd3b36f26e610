//! What the calls only Linux has (`linux.rs`, `page_cache.rs`) are elsewhere: the plain way
//! (a vectored write as one positional write a slice), or nothing (the hints).

use std::fs::File;
use std::io;

/// Writes every byte of `slices`, in order, from `offset` on (each slice with
/// [`write_all_at`](super::write_all_at); this platform has no positional vectored write in
/// reach).
pub(crate) fn write_vectored_all_at(
    file: &File,
    slices: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    for slice in slices.iter() {
        super::write_all_at(file, slice, offset)?;
        offset += slice.len() as u64;
    }
    Ok(())
}

/// Early writeback: a hint that does nothing here.
pub(crate) fn start_writeback(_file: &File) {}

/// Dropping written pages from the page cache: a hint that does nothing here.
pub(crate) fn release_written(_file: &File, _offset: u64, _len: u64) {}

/// Reading ahead at an offset: a hint that does nothing here.
pub(crate) fn start_reading_ahead(_file: &File, _offset: u64, _len: u64) {}

/// Reading a range into the page cache: a hint that does nothing here. (For the format
/// readers that hint; a build with none of them leaves it unused.)
#[allow(dead_code)]
pub(crate) fn will_need(
    _file: &File,
    _offset: u64,
    _len: u64,
    _stop: &std::sync::atomic::AtomicBool,
) {
}
