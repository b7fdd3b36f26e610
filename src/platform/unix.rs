//! Unix (Linux and macOS among them): positional reads and writes, the machine's memory, the
//! open-files limit, `madvise`, file identity by device and inode.

use std::fs::File;
use std::io;

/// Reads exactly `buf.len()` bytes at `offset`, without moving a shared cursor.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Writes all of `buf` at `offset`, without moving a shared cursor.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// This process's id, for names of scratch files.
pub(crate) fn process_id() -> u32 {
    std::process::id()
}

/// The machine's physical memory in bytes (`sysconf`).
pub(crate) fn physical_memory() -> Option<u64> {
    // SAFETY: `sysconf` reads constants.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let (pages, page) = (u64::try_from(pages).ok()?, u64::try_from(page).ok()?);
    pages.checked_mul(page)
}

/// How many files this process may hold open at once (the soft limit, `getrlimit`). (Used by
/// incremental checkpoints, feature `optim`.)
#[cfg(feature = "optim")]
pub(crate) fn open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the `rlimit` it is given a valid pointer to, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return None;
    }
    // `rlim_t` is narrower than `u64` on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    u64::try_from(limit.rlim_cur).ok()
}

/// Tells the kernel how a mapped file's `bytes` will be read: `random` (fetch only the pages
/// touched, no readahead: a walk over a file's structure that skips its tensor bytes) or back
/// to normal. A hint (`madvise`): errors are ignored. (For the format readers that walk a
/// mapped file; a build with none of them leaves it unused.)
#[allow(dead_code)]
pub(crate) fn advise_random(bytes: &[u8], random: bool) {
    if bytes.is_empty() {
        return;
    }
    // SAFETY: `sysconf` reads a constant.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let start = bytes.as_ptr() as usize;
    let aligned = start - start % page.max(1);
    let advice = if random {
        libc::MADV_RANDOM
    } else {
        libc::MADV_NORMAL
    };
    // SAFETY: the range (widened down to its page) lies in memory the caller holds mapped for
    // the whole call; these two advices change how pages are fetched, never their contents,
    // and on memory that is not a file mapping the kernel ignores or refuses them.
    unsafe {
        libc::madvise(
            aligned as *mut libc::c_void,
            start - aligned + bytes.len(),
            advice,
        );
    }
}

/// Whether `path` still names the open `file` (same device and inode): false once another
/// process removed or replaced it.
pub(crate) fn names(path: &std::path::Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// What a file system object only Unix has is (a FIFO, a socket, a device), for errors.
pub(super) fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_block_device() || file_type.is_char_device() {
        Some("a device")
    } else {
        None
    }
}

/// Opens without blocking (`O_NONBLOCK`): a path swapped for a FIFO after it was checked does
/// not block the open.
pub(super) fn open_without_blocking(options: &mut std::fs::OpenOptions) {
    use std::os::unix::fs::OpenOptionsExt;
    options.custom_flags(libc::O_NONBLOCK);
}

/// Back to blocking reads on a file opened by [`open_without_blocking`] (no effect on a
/// regular file's reads, but keep the default).
pub(super) fn reads_blocking(file: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: fcntl on a descriptor the caller owns; no memory is passed.
    unsafe {
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// Whether a file may be deleted or renamed over while this process maps it (Unix: yes, the
/// mapping keeps the old inode). (For the checkpoint manager, feature `optim`;
/// a build without it leaves it unused.)
#[allow(dead_code)]
pub(crate) const MAPPED_FILES_REMOVABLE: bool = true;
