//! Where a reader's bytes come from: a memory map, bytes in memory, or a file read on demand.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::{AllocationProperty, Bytes};

use super::{CopyReason, ReadError};
use crate::format::TensorInfo;

/// A tensor's bytes in an owned allocation aligned for any element type (8 bytes).
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
}

/// A large tensor's bytes in anonymous memory of their own, laid on huge-page boundaries and
/// offered to the kernel for huge pages (Linux `madvise(MADV_HUGEPAGE)`): a copy into fresh
/// memory costs its page faults more than its bytes (512 per 2 MiB with 4 KiB pages; on a
/// virtual machine each can also cost the host a fault), and a huge page is one fault. On
/// this project's machine, reading 512 MiB from the page cache into fresh 4 MiB buffers took
/// 270-333 ms this way against 153-194 ms with huge pages (see docs/benchmarks.md). Where the
/// kernel has no huge page to give, it falls back to small pages by itself.
#[cfg(target_os = "linux")]
pub(crate) struct Fresh {
    map: memmap2::MmapMut,
    start: usize,
    len: usize,
}

/// The huge-page size [`Fresh`] aligns to, and the least length it is used for.
#[cfg(target_os = "linux")]
pub(crate) const HUGE_PAGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
impl Fresh {
    /// `len` zeroed bytes (fresh pages), or `None` when the kernel refuses the mapping (the
    /// caller then allocates as usual).
    pub(crate) fn new(len: usize) -> Option<Self> {
        // One huge page more than asked, so that a huge-page boundary lies inside; the pages
        // before it and after the end are never touched, so never backed.
        let mut map = memmap2::MmapMut::map_anon(len.checked_add(HUGE_PAGE)?).ok()?;
        let start = map.as_mut_ptr().align_offset(HUGE_PAGE);
        // A hint: where it is refused, the bytes are small pages, as for any allocation.
        let _ = map.advise_range(memmap2::Advice::HugePage, start, len);
        Some(Self { map, start, len })
    }

    /// The bytes, to fill.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.start..self.start + self.len]
    }
}

#[cfg(target_os = "linux")]
impl AsRef<[u8]> for Fresh {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }
}

/// Runs `fill` over a zeroed, 8-byte aligned buffer of `len` bytes and wraps it as [`Bytes`]
/// (on Linux, a buffer of at least 2 MiB is a [`Fresh`] mapping on huge-page boundaries).
/// Memory the system refuses is an error made by `refused` (an `OutOfMemory` I/O error
/// saying how much), never an abort.
pub(crate) fn aligned_bytes<E>(
    len: usize,
    refused: impl FnOnce(std::io::Error) -> E,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Bytes, E> {
    #[cfg(target_os = "linux")]
    if len >= HUGE_PAGE
        && let Some(mut fresh) = Fresh::new(len)
    {
        fill(fresh.as_mut())?;
        return Ok(Bytes::from_shared(
            bytes::Bytes::from_owner(fresh),
            AllocationProperty::Native,
        ));
    }
    let Some(mut words) = zeroed_words(len.div_ceil(8)) else {
        return Err(refused(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("cannot allocate {len} bytes"),
        )));
    };
    fill(&mut bytemuck::cast_slice_mut(&mut words)[..len])?;
    Ok(aligned_words(words, len, AllocationProperty::Native))
}

/// `len` zeroed words, or `None` when the allocator cannot give them (the caller names what it
/// was for). Zeroed by the allocator (`alloc_zeroed`: fresh pages from the kernel for a large
/// buffer), so no page is touched here: the first write faults each one in, on whichever
/// thread writes it.
pub(crate) fn zeroed_words(len: usize) -> Option<Vec<u64>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(len).ok()?;
    // SAFETY: `layout` has a non-zero size; a null pointer is the allocator's refusal. Zeroed
    // memory is `len` valid `u64`s, and the vector owns the allocation with the layout (same
    // element type, capacity `len`) it was made with. The pointer is aligned for `u64`: the
    // layout asked for it.
    #[allow(clippy::cast_ptr_alignment, clippy::same_length_and_capacity)]
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<u64>();
        if ptr.is_null() {
            return None;
        }
        Some(Vec::from_raw_parts(ptr, len, len))
    }
}

/// The first `len` bytes of `words` (filled by the caller) as [`Bytes`], without copying.
pub(crate) fn aligned_words(words: Vec<u64>, len: usize, property: AllocationProperty) -> Bytes {
    debug_assert!(len <= words.len() * 8);
    let len = len.min(words.len() * 8);
    Bytes::from_shared(bytes::Bytes::from_owner(Aligned { words, len }), property)
}

/// A vector's bytes as Burn [`Bytes`] without copying them: pack bytes a program received (a
/// web page's fetch, a socket) handed to [`PackModule::load_pack_bytes`](crate::module::PackModule::load_pack_bytes)
/// or [`ReadOptions::from_bytes`](crate::read::ReadOptions::from_bytes) stay where they are, and
/// every tensor is a window of them. (Burn's `Bytes::from_bytes_vec` copies the vector into
/// an allocation of its own.)
///
/// ```
/// let vec: Vec<u8> = burnpack::write::Writer::new(vec![]).into_bytes().unwrap().to_vec();
/// let at = vec.as_ptr();
/// let bytes = burnpack::source::bytes_from_vec(vec);
/// assert_eq!(bytes.as_ptr(), at);
/// ```
#[must_use]
pub fn bytes_from_vec(vec: Vec<u8>) -> Bytes {
    Bytes::from_shared(bytes::Bytes::from(vec), AllocationProperty::Other)
}

/// `bytes` made view-capable (tensors are windows of it) without copying: a plain vector
/// becomes a shared `bytes::Bytes` (property `Other`, so ndarray borrows from it rather than
/// copying). Every source opened from bytes takes them through here.
pub(crate) fn view_capable(bytes: Bytes) -> Bytes {
    match bytes.try_into_vec::<u8>() {
        Ok(vec) => bytes_from_vec(vec),
        Err(bytes) if bytes.view(0, 0).is_ok() => bytes,
        Err(bytes) => bytes.shared(),
    }
}

/// The bytes behind a reader.
/// Maps `file` read-only, as a Burn [`Bytes`] with the `File` allocation property (so windows
/// of it reach flex and ndarray without a copy). The one place this crate maps files.
///
/// The mapping is only sound while nobody truncates or rewrites the file in place (see
/// [`ReadOptions::open`](crate::read::ReadOptions::open)); callers document that contract.
///
/// Where the platform has no memory maps (WASI), the file is read into memory of its own
/// instead, aligned, with ordinary reads: the same bytes, one copy.
pub(crate) fn map_file(file: &File) -> std::io::Result<Bytes> {
    // SAFETY: read-only private mapping; the caller's side of the contract (no in-place
    // truncation or rewrite while mapped) is documented where the mapping is offered.
    match unsafe { memmap2::Mmap::map(file) } {
        Ok(map) => Ok(Bytes::from_shared(
            bytes::Bytes::from_owner(map),
            AllocationProperty::File,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => read_whole(file),
        Err(e) => Err(e),
    }
}

/// Refuses a file (or bytes) of `len` bytes over [`Limits::max_file_size`](crate::format::Limits),
/// naming it: every source checks its input's size here, from a path or from bytes, before
/// anything is read or allocated for it.
pub(crate) fn within_file_size(
    path: &std::path::Path,
    len: u64,
    limits: &crate::format::Limits,
) -> Result<(), crate::source::SourceError> {
    if len > limits.max_file_size {
        return Err(crate::source::SourceError::invalid(path)(format!(
            "{len} bytes, over the file-size limit of {}",
            limits.max_file_size
        )));
    }
    Ok(())
}

/// The file at `path` (opened here as a regular file, unless the registry already opened it:
/// `file`) and its length, refused over [`Limits::max_file_size`](crate::format::Limits)
/// before anything is read: how a source opened by path starts.
pub(crate) fn opened_within_limits(
    path: &std::path::Path,
    file: Option<File>,
    limits: &crate::format::Limits,
) -> Result<(File, u64), crate::source::SourceError> {
    use crate::source::SourceError;
    let file = match file {
        Some(file) => file,
        None => crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?,
    };
    let len = file
        .metadata()
        .map_err(SourceError::io(path, "stat"))?
        .len();
    within_file_size(path, len, limits)?;
    Ok((file, len))
}

/// The data of an opened file for a source: its mapping, or, opened for a verification that
/// reads every byte (`verify`), the file itself read with ordinary reads, so that a file cut
/// or rewritten meanwhile is an error to report rather than a fault of the mapping
/// (`SIGBUS`). `Err` names the action that failed.
pub(crate) fn file_data(
    file: &File,
    verify: bool,
) -> Result<Source, (&'static str, std::io::Error)> {
    if verify {
        let reads = file.try_clone().map_err(|e| ("open", e))?;
        return Ok(Source::Buffered(reads, AtomicU64::new(0)));
    }
    map_file(file).map(Source::Memory).map_err(|e| ("map", e))
}

/// `file`'s bytes read into aligned memory of their own.
fn read_whole(file: &File) -> std::io::Result<Bytes> {
    let len = usize::try_from(file.metadata()?.len())
        .map_err(|_| std::io::Error::other("the file is larger than this platform's memory"))?;
    let mut words = zeroed_words(len.div_ceil(8)).ok_or_else(|| {
        std::io::Error::other(format!("cannot allocate {len} bytes to read the file"))
    })?;
    crate::platform::read_exact_at(file, &mut bytemuck::cast_slice_mut(&mut words)[..len], 0)?;
    Ok(aligned_words(words, len, AllocationProperty::Native))
}

/// Bytes past a buffered read that the kernel is asked to fetch with it.
const READ_AHEAD: u64 = 32 << 20;

pub(crate) enum Source {
    /// The whole file or buffer as one view-capable [`Bytes`] (a mapping, `File` property; or
    /// the caller's bytes). Tensors are windows into it.
    Memory(Bytes),
    /// An open file read with positional reads, one tensor at a time, and how far the kernel
    /// was already asked to read ahead.
    Buffered(File, AtomicU64),
}

impl Source {
    /// `range` of the tensor `info` stored from `start` in this data: only those bytes (a
    /// window of the mapping, or one positional read), its booleans checked, the file named
    /// `file` in errors. What every source whose tensors are stored as listed answers
    /// [`read_range`](super::TensorSource::read_range) with; not held to the tensor's checksum
    /// (a window is not the whole).
    pub(crate) fn read_window(
        &self,
        file: &str,
        info: &TensorInfo,
        start: u64,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        let bytes = self
            .read(
                start + range.start,
                range.end - range.start,
                crate::format::element_align(info.dtype()),
            )
            .map_err(|e| ReadError::reading(file, info.name(), &e))?;
        checked_bools(file, info, bytes, |_| Ok(false))
    }

    /// The bytes of `start..start + len`: a zero-copy window when the source is in memory and
    /// the window is aligned to `align`, otherwise an aligned copy.
    pub(crate) fn read(&self, start: u64, len: u64, align: usize) -> std::io::Result<Bytes> {
        let too_big = || std::io::Error::other("range does not fit in memory");
        let len = usize::try_from(len).map_err(|_| too_big())?;
        match self {
            Source::Memory(all) => {
                let start = usize::try_from(start).map_err(|_| too_big())?;
                let end = start.checked_add(len).ok_or_else(too_big)?;
                let window = all.view(start, end).map_err(|e| {
                    std::io::Error::other(format!("cannot view {start}..{end}: {e:?}"))
                })?;
                if (window.as_ptr() as usize).is_multiple_of(align) {
                    Ok(window)
                } else {
                    aligned_bytes(
                        len,
                        |e| e,
                        |out| {
                            out.copy_from_slice(&window);
                            Ok(())
                        },
                    )
                }
            }
            Source::Buffered(file, requested) => {
                // The kernel's readahead is started at this tensor when it lies past what was
                // asked (loads go through a file in order, several threads at once, which the
                // kernel's own heuristics do not follow); small tensors inside a range already
                // asked ask nothing more. Not every tensor at once (`WILLNEED` on the file):
                // that waits here on a full device queue, and its pages are small ones,
                // measured slower for a buffered pack and a Burn record (docs/benchmarks.md).
                let end = start + len as u64;
                if end > requested.load(Ordering::Relaxed) {
                    crate::platform::start_reading_ahead(file, start, len as u64 + READ_AHEAD);
                    requested.fetch_max(end + READ_AHEAD, Ordering::Relaxed);
                }
                aligned_bytes(
                    len,
                    |e| e,
                    |out| crate::platform::read_exact_at(file, out, start),
                )
            }
        }
    }

    /// The bytes of the tensor `info` (at its [`offset`](TensorInfo::offset), aligned for its
    /// dtype; see [`read`](Self::read)): every source's read of a tensor stored as it is. An
    /// I/O error names `file` (told only then) and the tensor.
    pub(crate) fn read_tensor(
        &self,
        file: impl std::fmt::Display,
        info: &TensorInfo,
    ) -> Result<Bytes, super::ReadError> {
        self.read(
            info.offset(),
            info.len(),
            crate::format::element_align(info.dtype()),
        )
        .map_err(|source| super::ReadError::reading(file.to_string(), info.name(), &source))
    }

    /// Why the tensor `info` (its bytes at [`offset`](TensorInfo::offset), aligned for its
    /// dtype) is served as a copy, or `None` for a zero-copy window: every source's answer for
    /// a tensor stored as it is.
    pub(crate) fn tensor_copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        self.copy_reason(info.offset(), crate::format::element_align(info.dtype()))
    }

    /// Why `start` (an absolute offset) is served as a copy at alignment `align`, or `None`
    /// when it is a zero-copy window.
    pub(crate) fn copy_reason(&self, start: u64, align: usize) -> Option<CopyReason> {
        match self {
            Source::Memory(all) => {
                let aligned = usize::try_from(start).is_ok_and(|at| {
                    (all.as_ptr() as usize)
                        .wrapping_add(at)
                        .is_multiple_of(align)
                });
                (!aligned).then_some(CopyReason::Unaligned {
                    offset: start,
                    align,
                })
            }
            Source::Buffered(..) => Some(CopyReason::Buffered),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::aligned_bytes;

    /// Large buffers (a huge-page mapping on Linux) and small ones (the allocator) hold what
    /// `fill` wrote, aligned for any element type, and a failing `fill` is the error.
    #[test]
    fn aligned_bytes_hold_what_was_written_at_every_size() {
        for len in [0, 5, 4096, (2 << 20) - 1, 2 << 20, (3 << 20) + 7] {
            let bytes = aligned_bytes::<()>(
                len,
                |_| (),
                |out| {
                    assert!(out.iter().all(|&b| b == 0), "fresh memory is zeroed");
                    for (i, b) in out.iter_mut().enumerate() {
                        *b = (i % 251) as u8;
                    }
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(bytes.len(), len);
            assert!((bytes.as_ptr() as usize).is_multiple_of(8));
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        }
        let failed = aligned_bytes(4 << 20, |_| "refused", |_| Err("no")).map(|_| ());
        assert_eq!(failed, Err("no"));
        // More than the address space: an error saying how much, not an abort.
        #[cfg(target_pointer_width = "64")]
        {
            let refused = aligned_bytes(1 << 60, |e| e, |_| Ok(())).map(|_| ());
            let err = refused.expect_err("no machine has an exbibyte");
            assert_eq!(err.kind(), std::io::ErrorKind::OutOfMemory);
            assert!(err.to_string().contains(&(1u64 << 60).to_string()), "{err}");
        }
    }
}

/// `bytes`, the stored bytes of `info` read from `file`, where `info` is no native bool, or a
/// native bool whose every byte is 0 or 1; else [`ReadError::Unsupported`] naming the first
/// element that is not (a byte of 2 read as a Rust `bool` is undefined behaviour, and a
/// writer that normalised it would change the tensor). Damage comes first: where the bytes
/// are not 0 or 1, `integrity` (the source's own checksum of them, if it keeps one) is asked,
/// and its error, a flipped byte, is the answer.
pub(crate) fn checked_bools(
    file: &str,
    info: &TensorInfo,
    bytes: Bytes,
    integrity: impl FnOnce(&[u8]) -> Result<bool, ReadError>,
) -> Result<Bytes, ReadError> {
    if !matches!(
        info.dtype(),
        burn::tensor::DType::Bool(burn::tensor::BoolStore::Native)
    ) {
        return Ok(bytes);
    }
    match bytes.iter().position(|&b| b > 1) {
        None => Ok(bytes),
        Some(i) => {
            integrity(&bytes)?;
            Err(ReadError::Unsupported {
                file: file.to_string(),
                tensor: info.name().to_string(),
                reason: format!(
                    "element {i} holds the byte {}, which is no bool value (0 or 1)",
                    bytes[i]
                ),
            })
        }
    }
}
