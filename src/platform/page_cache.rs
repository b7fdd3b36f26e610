//! The page cache as the core reads it: starting the kernel's readahead before a positional
//! read (Linux; elsewhere this does nothing). What only the foreign formats ask of the page
//! cache (probing, dropping, populating, read-ahead hints for whole ranges) is theirs
//! (`interop/page_cache.rs`).

use std::fs::File;

/// Starts the kernel's readahead of `file` at `offset` with one hint (Linux
/// `posix_fadvise(POSIX_FADV_WILLNEED)` over `len` bytes, of which it reads at most one
/// readahead window or largest request of the device), without waiting for more than that
/// window's reads to be queued: what a reader on the hot path asks before a positional read
/// far from the last one, the kernel's own readahead carrying on as the reads go. A hint:
/// errors are ignored, and elsewhere it does nothing.
#[cfg(target_os = "linux")]
pub(crate) fn start_reading_ahead(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_reading_ahead(_file: &File, _offset: u64, _len: u64) {}
