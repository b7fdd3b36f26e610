//! Where a reader's bytes come from: a memory map, bytes in memory, or a file read on demand.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::{AllocationProperty, Bytes};

use super::CopyReason;
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

/// The data of an opened file for a source: its mapping, or, opened for a verification that
/// reads every byte (`verify`), the file itself read with ordinary reads, so that a file cut
/// or rewritten meanwhile is an error to report rather than a fault of the mapping
/// (`SIGBUS`). `Err` names the action that failed.
#[cfg(any(feature = "safetensors", feature = "pytorch", feature = "gguf"))]
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

/// `ranges` (`key`, `start`, `end`) in order, neighbours of one key under 1 MiB apart merged:
/// what a load will read, as the few large requests the kernel is asked to read ahead
/// ([`ReadHints::ask`]). `key` tells files apart (a shard).
#[cfg(any(feature = "pytorch", feature = "safetensors"))]
fn merged_ranges<K: Ord + Copy>(mut ranges: Vec<(K, u64, u64)>) -> Vec<(K, u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(K, u64, u64)> = Vec::new();
    for (key, start, end) in ranges {
        match merged.last_mut() {
            Some(last) if last.0 == key && start <= last.2.saturating_add(1 << 20) => {
                last.2 = last.2.max(end);
            }
            _ => merged.push((key, start, end)),
        }
    }
    merged
}

/// Read-ahead hints running on a thread of their own, for a source that asks a load's byte
/// ranges of the disk at once ([`ask`](Self::ask)); asking again stops the thread between two
/// of its requests, and so does dropping it, for hints on files read with ordinary reads: so
/// that nothing goes on reading for a source that is gone and whose load is over. Hints
/// populating a mapping go on after the source is dropped ([`Hinted::Mapped`]).
#[cfg(any(feature = "pytorch", feature = "safetensors"))]
#[derive(Default)]
pub(crate) struct ReadHints(std::sync::Mutex<Option<Asked>>);

/// The running hints' flags: stop (asked again, or dropped where that stops them), and
/// dropped (the source is gone), with whether dropping stops them.
#[cfg(any(feature = "pytorch", feature = "safetensors"))]
type Asked = (Flag, Flag, bool);

#[cfg(any(feature = "pytorch", feature = "safetensors"))]
type Flag = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// What one file's hints go through, with its byte ranges.
#[cfg(any(feature = "pytorch", feature = "safetensors"))]
pub(crate) enum Hinted<'a> {
    /// A file read with ordinary reads: the kernel is asked to read the ranges into the page
    /// cache ([`crate::platform::will_need`]). (Only `.pt` files opened buffered are hinted
    /// this way.)
    #[cfg_attr(not(feature = "pytorch"), allow(dead_code))]
    File(&'a File),
    /// A file's mapping (a [`Source::Memory`] of `File` property): the ranges are faulted in
    /// through it ([`touch`]), as the load's own page faults would, so the kernel reads them
    /// with its readahead into large folios, mapped 2 MiB at a time where it can, ahead of
    /// the load (a `WILLNEED` hint reads into single pages, each then faulted in and unmapped
    /// on its own: measured on a cold 512 MiB `.pt`, 250-290 ms of CPU against 110).
    ///
    /// The thread holds the mapping and goes on after the source is dropped: a load's tensors
    /// are windows of it, read when the module is used, often after the source is gone; it
    /// ends when the ranges are read (at most half the memory, at the disk's pace). Where the
    /// kernel cannot populate a mapping (before Linux 5.14, other systems), the pages are read
    /// through it instead, and only until the source is dropped.
    Mapped(&'a Bytes),
}

#[cfg(any(feature = "pytorch", feature = "safetensors"))]
enum Owned {
    File(File),
    Mapped(Bytes),
}

#[cfg(any(feature = "pytorch", feature = "safetensors"))]
impl ReadHints {
    /// Asks the byte ranges of each file ahead ([`Hinted`]), file after file and each in the
    /// order given, from one thread (queueing a range's reads waits while the device's queue
    /// is full; the load meanwhile goes on and finds its pages read or in flight), where all
    /// of them together fit in half the machine's memory (a hint for more would evict its
    /// first pages before the load reached them; the reads' own hints then serve). What this
    /// asked before is stopped. Returns whether it asked: not where the platform has no such
    /// hint (ordinary reads off Linux), the ranges are too large, or no thread could be
    /// started.
    pub(crate) fn ask(&self, requests: &[(Hinted<'_>, Vec<(u64, u64)>)]) -> bool {
        self.stop();
        let total: u64 = requests
            .iter()
            .flat_map(|(_, ranges)| ranges)
            .map(|&(start, end)| end.saturating_sub(start))
            .sum();
        let mapped = requests.iter().any(|(h, _)| matches!(h, Hinted::Mapped(_)));
        if (!cfg!(target_os = "linux") && !mapped)
            || total == 0
            || crate::platform::physical_memory().is_some_and(|memory| total > memory / 2)
            || !crate::platform::threads_available()
        {
            return false;
        }
        let Ok(requests) = requests
            .iter()
            .map(|(hinted, ranges)| {
                Ok((
                    match hinted {
                        Hinted::File(file) => Owned::File(file.try_clone()?),
                        Hinted::Mapped(bytes) => Owned::Mapped((*bytes).clone()),
                    },
                    ranges.clone(),
                ))
            })
            .collect::<std::io::Result<Vec<_>>>()
        else {
            return false;
        };
        let stop = Flag::default();
        let dropped = Flag::default();
        let flags = (stop.clone(), dropped.clone(), !mapped);
        let started = std::thread::Builder::new()
            .name("burnpack-read-hints".into())
            .spawn(move || {
                for (owned, ranges) in requests {
                    for (start, end) in ranges {
                        let len = end.saturating_sub(start);
                        match &owned {
                            Owned::File(file) if !dropped.load(Ordering::Relaxed) => {
                                crate::platform::will_need(file, start, len, &stop);
                            }
                            Owned::File(_) => return,
                            Owned::Mapped(bytes) => touch(bytes, start, len, &stop, &dropped),
                        }
                    }
                }
            })
            .is_ok();
        if started {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(flags);
        }
        started
    }

    /// [`ask`](Self::ask) for the byte ranges `(shard, start, end)` of a source of one or more
    /// files: each shard's ranges in file order, neighbours merged ([`merged_ranges`]),
    /// through what `hinted` gives for that shard (`None`: the shard is not hinted).
    pub(crate) fn ask_shards<'a>(
        &self,
        ranges: Vec<(usize, u64, u64)>,
        hinted: impl Fn(usize) -> Option<Hinted<'a>>,
    ) -> bool {
        let merged = merged_ranges(ranges);
        let requests: Vec<(Hinted<'a>, Vec<(u64, u64)>)> = merged
            .chunk_by(|a, b| a.0 == b.0)
            .filter_map(|shard| {
                let ranges = shard.iter().map(|&(_, start, end)| (start, end)).collect();
                Some((hinted(shard[0].0)?, ranges))
            })
            .collect();
        self.ask(&requests)
    }

    /// Stops the hints asked before, if any are still running.
    fn stop(&self) {
        if let Some((stop, _, _)) = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Reads `mapping[start..start + len]` (clamped to it) into the page cache and maps it, 2 MiB
/// at a time, looking at `stop` between pieces: with [`crate::platform::populate`] on Linux
/// (which never reads through the mapping, and stops at a file changed under it), else as
/// page faults, one byte read a page, and then only while the source is not `dropped`: the
/// mapped source's contract (nobody cuts the file) holds while its user holds it, and a read
/// through the mapping of a file cut afterwards would be a `SIGBUS`.
#[cfg(any(feature = "pytorch", feature = "safetensors"))]
fn touch(
    mapping: &[u8],
    start: u64,
    len: u64,
    stop: &std::sync::atomic::AtomicBool,
    dropped: &std::sync::atomic::AtomicBool,
) {
    const PAGE: usize = 4096;
    const PIECE: usize = 2 << 20;
    let start = usize::try_from(start)
        .unwrap_or(usize::MAX)
        .min(mapping.len());
    let end = start
        .saturating_add(usize::try_from(len).unwrap_or(usize::MAX))
        .min(mapping.len());
    let mut sum = 0u8;
    for at in (start..end).step_by(PIECE) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let piece = at..(at + PIECE).min(end);
        #[cfg(target_os = "linux")]
        match crate::platform::populate(mapping, piece.clone()) {
            Some(Ok(())) => continue,
            Some(Err(_)) => return,
            None => {}
        }
        if dropped.load(Ordering::Relaxed) {
            break;
        }
        for page in piece.step_by(PAGE) {
            // SAFETY: `page` is inside `mapping`; a volatile read so that the touch is not
            // optimized away (its value is unused).
            sum ^= unsafe { std::ptr::read_volatile(mapping.as_ptr().add(page)) };
        }
    }
    std::hint::black_box(sum);
}

#[cfg(any(feature = "pytorch", feature = "safetensors"))]
impl Drop for ReadHints {
    fn drop(&mut self) {
        let asked = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some((stop, dropped, stops)) = asked {
            dropped.store(true, Ordering::Relaxed);
            if stops {
                stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

impl Source {
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

    /// Hints on a mapping read its ranges into the page cache from their own thread, the
    /// hints and the mapping dropped right after asking (a load's tensors are windows of the
    /// mapping, read after the source is gone).
    #[cfg(all(target_os = "linux", feature = "pytorch"))]
    #[test]
    fn hints_on_a_mapping_read_it_and_outlive_the_source() {
        use super::{Hinted, ReadHints, map_file};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold");
        let len = 8u64 << 20;
        std::fs::write(&path, vec![7u8; len as usize]).unwrap();
        let cold = crate::platform::ColdFile::new(&path);
        if (0..len).step_by(1 << 20).any(|at| cold.cached(at)) {
            return; // tmpfs: its pages cannot be dropped, nothing to show
        }
        let mapping = map_file(cold.file()).unwrap();
        let hints = ReadHints::default();
        assert!(hints.ask(&[(Hinted::Mapped(&mapping), vec![(4096, len - 4096)])]));
        // Where the kernel cannot populate a mapping, the hints stop with their source.
        let _held = if cold.populates() {
            drop(hints);
            drop(mapping);
            None
        } else {
            Some((hints, mapping))
        };
        assert!(cold.wait_cached(&[4096, len / 2, len - 4097]));
    }

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
