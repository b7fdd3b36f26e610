//! Calls only Linux has: `pwritev`, early writeback and its release from the page cache
//! (`sync_file_range`, `posix_fadvise`), `O_DIRECT` through `/proc/self/fd`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Writes every byte of `slices`, in order, from `offset` on, without moving a shared cursor:
/// one `pwritev` per call.
pub(crate) fn write_vectored_all_at(
    file: &File,
    mut slices: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    // The kernel takes at most IOV_MAX (1024) slices per call.
    const MAX_SLICES: usize = 1024;
    while !slices.is_empty() {
        let count = slices.len().min(MAX_SLICES);
        let at =
            libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset past off_t"))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` (std guarantees it on Unix), the
        // pointer and count describe `count` live slices, and the call only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                slices.as_ptr().cast::<libc::iovec>(),
                libc::c_int::try_from(count).unwrap_or(libc::c_int::MAX),
                at,
            )
        };
        match n {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => {
                let n = n.unsigned_abs();
                offset += n as u64;
                io::IoSlice::advance_slices(&mut slices, n);
            }
        }
    }
    Ok(())
}

/// Asks the kernel to start writing `file`'s dirty pages back now, without waiting for them
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Durability still comes from fsync; this only
/// lets the disk work while the writer is still copying. Errors are ignored: it is a hint.
pub(crate) fn start_writeback(file: &File) {
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// `file` opened again, for writing past the page cache (`O_DIRECT`), through
/// `/proc/self/fd` (the very file, whatever its path has become since); `None` where the
/// filesystem refuses direct I/O or `/proc` is not there.
pub(crate) fn reopen_direct(file: &File) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
}

/// Waits until `file`'s bytes in `offset..offset + len` are written back (starting what is
/// not yet), then drops them from the page cache (`sync_file_range` with
/// `WAIT_BEFORE | WRITE | WAIT_AFTER`, then `posix_fadvise(POSIX_FADV_DONTNEED)`): a write
/// larger than memory then reuses the pages of what it wrote long ago instead of taking every
/// free page first. Durability still comes from the final fsync; a hint otherwise (errors are
/// ignored).
pub(crate) fn release_written(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: plain system calls on an open descriptor; no memory is passed.
    unsafe {
        if libc::sync_file_range(file.as_raw_fd(), offset, len, flags) == 0 {
            libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED);
        }
    }
}
