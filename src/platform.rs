//! The few operating-system calls that differ between platforms: positional reads and writes
//! (Unix `pread`/`pwrite`, Windows `ReadFile`/`WriteFile` at an offset), early writeback
//! (Linux `sync_file_range`) and whether a path still names an open file. Everything else in
//! the crate is portable `std`.

use std::fs::File;
use std::io;

mod page_cache;
pub(crate) use page_cache::*;

/// Reads exactly `buf.len()` bytes at `offset`, without moving a shared cursor on Unix.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Writes all of `buf` at `offset`, without moving a shared cursor on Unix.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// Reads exactly `buf.len()` bytes at `offset` (`seek_read` loops; each call names its offset,
/// so concurrent callers do not disturb each other).
#[cfg(windows)]
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
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
#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
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

/// Reads exactly `buf.len()` bytes at `offset` where the platform has no positional read in
/// stable `std` (WASI): a seek, then a read, through the file's one cursor. Callers on such a
/// platform run on one thread (WebAssembly without threads), so no other read moves the
/// cursor between the two.
#[cfg(not(any(unix, windows)))]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Writes all of `buf` at `offset`: a seek, then a write (see [`read_exact_at`]).
#[cfg(not(any(unix, windows)))]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(buf)
}

/// Writes every byte of `slices`, in order, from `offset` on, without moving a shared cursor:
/// one `pwritev` per call on Linux, else each slice with [`write_all_at`].
#[cfg(target_os = "linux")]
pub(crate) fn write_vectored_all_at(
    file: &File,
    mut slices: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
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

/// Writes every byte of `slices`, in order, from `offset` on (each slice with
/// [`write_all_at`]; this platform has no positional vectored write in reach).
#[cfg(not(target_os = "linux"))]
pub(crate) fn write_vectored_all_at(
    file: &File,
    slices: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    for slice in slices.iter() {
        write_all_at(file, slice, offset)?;
        offset += slice.len() as u64;
    }
    Ok(())
}

/// Whether this platform starts threads (not WebAssembly without its threads proposal): asked
/// once, by starting one.
pub(crate) fn threads_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::thread::Builder::new()
            .spawn(|| ())
            .is_ok_and(|handle| handle.join().is_ok())
    })
}

/// This process's id, for names of scratch files; 0 where the platform has none (WASI, whose
/// `std::process::id` panics).
pub(crate) fn process_id() -> u32 {
    #[cfg(target_os = "wasi")]
    {
        0
    }
    #[cfg(not(target_os = "wasi"))]
    {
        std::process::id()
    }
}

/// Asks the kernel to start writing `file`'s dirty pages back now, without waiting for them
/// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`). Durability still comes from fsync; this
/// only lets the disk work while the writer is still copying. Errors are ignored: it is a hint.
#[cfg(target_os = "linux")]
pub(crate) fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_file: &File) {}

/// `file` opened again, for writing past the page cache (`O_DIRECT`), through
/// `/proc/self/fd` (the very file, whatever its path has become since); `None` where the
/// filesystem refuses direct I/O or `/proc` is not there.
#[cfg(target_os = "linux")]
pub(crate) fn reopen_direct(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
}

/// Waits until `file`'s bytes in `offset..offset + len` are written back (starting what is
/// not yet), then drops them from the page cache (Linux `sync_file_range` with
/// `WAIT_BEFORE | WRITE | WAIT_AFTER`, then `posix_fadvise(POSIX_FADV_DONTNEED)`): a write
/// larger than memory then reuses the pages of what it wrote long ago instead of taking every
/// free page first. Durability still comes from the final fsync; a hint otherwise (errors are
/// ignored, and elsewhere it does nothing).
#[cfg(target_os = "linux")]
pub(crate) fn release_written(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
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

#[cfg(not(target_os = "linux"))]
pub(crate) fn release_written(_file: &File, _offset: u64, _len: u64) {}

/// The machine's physical memory in bytes, where the platform says (Unix `sysconf`).
#[cfg(unix)]
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

#[cfg(not(unix))]
pub(crate) fn physical_memory() -> Option<u64> {
    None
}

/// How many files this process may hold open at once (the soft limit), where the platform
/// has one (Unix `getrlimit`). (Used by incremental checkpoints, feature `optim`.)
#[cfg(all(unix, feature = "optim"))]
pub(crate) fn open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the `rlimit` it is given a valid pointer to, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    u64::try_from(limit.rlim_cur).ok()
}

#[cfg(all(not(unix), feature = "optim"))]
pub(crate) fn open_files_limit() -> Option<u64> {
    None
}

/// Whether `path` still names the open `file` (same device and inode): false once another
/// process removed or replaced it.
#[cfg(unix)]
pub(crate) fn names(path: &std::path::Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Whether `path` still names the open `file`. Windows does not remove a file that is open
/// without delete sharing, so the name still existing is enough there.
#[cfg(not(unix))]
pub(crate) fn names(path: &std::path::Path, _file: &File) -> bool {
    path.exists()
}

/// What kind of file system object a non-regular file is, for errors.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a named pipe (FIFO)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return "a device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "of another kind"
    }
}

/// The metadata of `path` (links followed) when it is a regular file; an
/// [`io::ErrorKind::InvalidInput`] error saying what it is otherwise (a FIFO, a device, a
/// directory), without opening it: opening a FIFO blocks until a writer comes.
pub(crate) fn regular_file(path: &std::path::Path) -> io::Result<std::fs::Metadata> {
    let metadata = std::fs::metadata(path)?;
    if metadata.is_file() {
        Ok(metadata)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a regular file: it is {}",
                kind_of(metadata.file_type())
            ),
        ))
    }
}

/// Opens `path` for reading when it is a regular file (links followed), refusing anything
/// else before it is opened; on Unix the open does not block even if the path is swapped
/// for a FIFO between the check and the open, and the opened file is checked again.
pub(crate) fn open_regular(path: &std::path::Path) -> io::Result<File> {
    regular_file(path)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a regular file: it is {}",
                kind_of(metadata.file_type())
            ),
        ));
    }
    #[cfg(unix)]
    {
        // Back to blocking reads (no effect on a regular file's reads, but keep the default).
        use std::os::unix::io::AsRawFd;
        // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
        unsafe {
            let fd = file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(file)
}
