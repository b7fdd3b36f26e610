//! The few operating-system calls that differ between platforms: positional reads and writes
//! (Unix `pread`/`pwrite`, Windows `ReadFile`/`WriteFile` at an offset), early writeback
//! (Linux `sync_file_range`), the page-cache hints, and whether a path still names an open
//! file. Everything else in the crate is portable `std`.
//!
//! The platform is chosen once per file, as `memmap2` does: the `mod` lines below pick
//! `unix.rs` (Linux and macOS among them), `windows.rs` or `other.rs` (WASI and whatever has
//! neither), and `linux.rs` with `page_cache.rs` (calls only Linux has) or `not_linux.rs`
//! (what those calls are elsewhere: nothing, or the plain way). Each offers the same
//! functions; no function body here holds a platform `cfg` (`tests/layering.rs` holds it so).

use std::fs::File;
use std::io;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod not_linux;
#[cfg(not(unix))]
mod not_unix;
#[cfg(not(any(unix, windows)))]
mod other;
// The page-cache hints serve the format readers (whichever are built), and the tests'
// `ColdFile`; a build with no format reader has none to give.
#[cfg(target_os = "linux")]
#[allow(dead_code)]
mod page_cache;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(target_os = "linux")]
pub(crate) use linux::*;
#[cfg(not(target_os = "linux"))]
pub(crate) use not_linux::*;
#[cfg(not(any(unix, windows)))]
use other as os;
#[cfg(target_os = "linux")]
pub(crate) use page_cache::*;
#[cfg(unix)]
use unix as os;
#[cfg(windows)]
use windows as os;

pub(crate) use os::*;

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

/// What kind of file system object a non-regular file is, for errors.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    if let Some(special) = os::special_kind(file_type) {
        special
    } else if file_type.is_dir() {
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
    os::open_without_blocking(&mut options);
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
    os::reads_blocking(&file);
    Ok(file)
}
