//! The page cache (Linux): read-ahead hints, which pages a file has cached, dropping what a
//! reader cached itself, populating a mapping. Elsewhere the hints do nothing
//! (`not_linux.rs`), and the rest is not there: its callers ask it on Linux only.

use std::fs::File;
use std::io;

/// Asks the kernel to start reading `len` bytes of `file` at `offset` into the page cache
/// now (Linux `posix_fadvise(POSIX_FADV_WILLNEED)`), so that a buffered read of a file not in
/// the cache runs at the disk's sequential speed instead of one readahead window at a time.
/// Linux reads at most the larger of the device's readahead window and its largest request
/// for one such hint (the rest of a larger range is silently not read), so the range is asked
/// in page-aligned pieces of that size ([`will_need_piece`]). Each returns once its reads are
/// queued, which waits while the device's queue is full; `stop` is looked at between pieces
/// (set: the rest is not asked). A hint: errors are ignored, and elsewhere it does nothing.
pub(crate) fn will_need(file: &File, offset: u64, len: u64, stop: &std::sync::atomic::AtomicBool) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    let page = page_size();
    let piece = will_need_piece(file);
    let end = offset.saturating_add(len);
    // From the page holding `offset`, one whole number of pages at a time: each piece is
    // then exactly the pages the kernel reads for it.
    let mut at = offset - offset % page;
    while at < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let this = piece.min(end - at);
        // SAFETY: a plain system call on an open descriptor; no memory is passed.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), at, this, libc::POSIX_FADV_WILLNEED);
        }
        at += this;
    }
}

/// Which pages of a file the page cache held before a reader touched them (Linux `mincore`
/// over a mapping of the file that is never read through), so that the few small reads of a
/// file's structure (a zip archive's local headers, one per tensor) can be dropped from the
/// cache again afterwards ([`drop_cached`]): pages cached one at a time in the middle of the
/// tensors' bytes keep the kernel from reading those bytes into large folios when the load
/// maps them (measured: 8800 page faults and 280 ms of CPU for a cold 512 MiB `.pt` with its
/// 256 header pages cached, 750 faults and 110 ms without). Pages that were cached before are
/// left alone (someone else uses them). Elsewhere it knows nothing and nothing is dropped.
/// Nor here for a file this process neither owns nor may write: Linux then reports every page
/// of it as cached (`mincore`'s rule since 5.0), so nothing counts as new.
pub(crate) struct CacheProbe(memmap2::Mmap);

impl CacheProbe {
    /// A probe of `file`, or `None` where it cannot be mapped (then nothing is dropped).
    pub(crate) fn new(file: &File) -> Option<Self> {
        // SAFETY: the mapping is never read or written through; it only gives `mincore` an
        // address range, so a file changed or cut meanwhile cannot fault here.
        unsafe { memmap2::Mmap::map(file) }.ok().map(Self)
    }

    /// Which pages of the whole file are in the page cache, one byte a page (bit 0 set:
    /// cached); `None` where the kernel does not say.
    pub(crate) fn residency(&self) -> Option<Vec<u8>> {
        let page = page_size().unsigned_abs() as usize;
        let mut vec = vec![0u8; self.0.len().div_ceil(page)];
        if vec.is_empty() {
            return Some(vec);
        }
        // SAFETY: the whole mapping is mapped; `vec` has one byte per page of it.
        let done = unsafe {
            libc::mincore(
                self.0.as_ptr().cast_mut().cast(),
                self.0.len(),
                vec.as_mut_ptr(),
            )
        };
        (done == 0).then_some(vec)
    }

    /// Drops from the page cache the pages of `file` (the probed file) cached now that were
    /// not in `before` (a [`residency`](Self::residency) taken earlier): what a reader of the
    /// file's structure cached itself. A page mapped in a process stays in the cache, so where
    /// the reader read through `mapped` (a mapping of the whole file, shared and read-only),
    /// those pages are unmapped from it first (`madvise(MADV_DONTNEED)`: a later read faults
    /// them in again, from the cache or the file, with the same bytes).
    pub(crate) fn drop_cached_since(&self, file: &File, before: &[u8], mapped: Option<&[u8]>) {
        let Some(now) = self.residency() else {
            return;
        };
        let page = page_size().unsigned_abs();
        let fresh = |i: usize| now[i] & 1 == 1 && before.get(i).is_some_and(|b| b & 1 == 0);
        let mut i = 0;
        while i < now.len() {
            if !fresh(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < now.len() && fresh(i) {
                i += 1;
            }
            let (from, len) = (start as u64 * page, (i - start) as u64 * page);
            if let Some(mapped) = mapped {
                unmap_pages(mapped, from, len);
            }
            drop_cached(file, from, len);
        }
    }
}

/// Unmaps the pages holding `offset..offset + len` of `mapped` (a shared, read-only mapping of
/// a file) from this process (`madvise(MADV_DONTNEED)`), so that the page cache can let them
/// go: their bytes are the file's, faulted in again on the next read.
fn unmap_pages(mapped: &[u8], offset: u64, len: u64) {
    let page = page_size().unsigned_abs() as usize;
    let (Ok(offset), Ok(len)) = (usize::try_from(offset), usize::try_from(len)) else {
        return;
    };
    let end = offset.saturating_add(len).min(mapped.len());
    let base = mapped.as_ptr() as usize;
    if offset >= end || !base.is_multiple_of(page) {
        return;
    }
    // SAFETY: `base + offset..base + end` lies in the mapping (page-aligned start: `base` is a
    // mapping's start and `offset` a multiple of the page); on a shared file mapping,
    // `MADV_DONTNEED` only drops this process's page-table entries, and every later read of
    // those addresses faults the file's same bytes back in, so no reference into the mapping
    // sees its contents change.
    unsafe {
        libc::madvise(
            (base + offset) as *mut libc::c_void,
            end - offset,
            libc::MADV_DONTNEED,
        );
    }
}

/// Drops the pages holding `offset..offset + len` of `file` from the page cache (Linux
/// `posix_fadvise(POSIX_FADV_DONTNEED)`, whole pages around the range): for pages a reader
/// cached itself and will not read again (see [`CacheProbe`]). A hint: clean pages only,
/// errors ignored, elsewhere nothing.
pub(crate) fn drop_cached(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let page = page_size().unsigned_abs();
    let start = offset - offset % page;
    let end = offset
        .saturating_add(len)
        .div_ceil(page)
        .saturating_mul(page);
    let (Ok(start), Ok(len)) = (i64::try_from(start), i64::try_from(end - start)) else {
        return;
    };
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), start, len, libc::POSIX_FADV_DONTNEED);
    }
}

/// Tells the kernel that `file`'s reads through this open file are random (no readahead past
/// what each read asks), or no longer (Linux `POSIX_FADV_RANDOM` / `POSIX_FADV_NORMAL`): for
/// the small reads of a file's structure, whose readahead would cache bytes the load maps
/// later (see [`CacheProbe`]). A hint: errors ignored, elsewhere nothing.
pub(crate) fn reads_random(file: &File, random: bool) {
    use std::os::fd::AsRawFd;
    let advice = if random {
        libc::POSIX_FADV_RANDOM
    } else {
        libc::POSIX_FADV_NORMAL
    };
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice);
    }
}

/// Reads the pages of `range` of a mapping into the page cache and maps them, as page faults
/// would (so the kernel's readahead reads them into large folios, mapped 2 MiB at a time
/// where it can), without reading through the mapping: Linux `madvise(MADV_POPULATE_READ)`
/// (5.14 and later), whose failure (a file cut meanwhile) is an error returned here, never a
/// `SIGBUS`. `None` where the kernel does not have it; `Some(Err)` when it failed.
pub(crate) fn populate(mapping: &[u8], range: std::ops::Range<usize>) -> Option<io::Result<()>> {
    let page = page_size().unsigned_abs() as usize;
    let end = range.end.min(mapping.len());
    let start = range.start.min(end);
    let base = mapping.as_ptr() as usize;
    let from = (base + start) - (base + start) % page;
    let len = base + end - from;
    if len == 0 || end == start {
        return Some(Ok(()));
    }
    // SAFETY: `from..from + len` lies in pages of the mapping (`from` is the start of the page
    // holding `start`, which is inside it); `MADV_POPULATE_READ` only faults them in, reading
    // and writing no memory of this process.
    let done = unsafe { libc::madvise(from as *mut libc::c_void, len, libc::MADV_POPULATE_READ) };
    if done == 0 {
        return Some(Ok(()));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS) => None,
        _ => Some(Err(error)),
    }
}

/// The size of a page of memory (4 KiB where the system does not say).
fn page_size() -> i64 {
    // SAFETY: a plain query of a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page } else { 4096 }
}

/// The most one `WILLNEED` hint reads of `file` ([`device_cap`]), remembered per device;
/// 128 KiB (Linux's default readahead window, the least a device has unless told otherwise)
/// where sysfs does not say (a network, layered or pooled filesystem).
fn will_need_piece(file: &File) -> i64 {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static PIECES: OnceLock<Mutex<HashMap<u64, i64>>> = OnceLock::new();
    let least = (128 << 10).max(page_size());
    let Ok(device) = file.metadata().map(|m| m.dev()) else {
        return least;
    };
    let pieces = PIECES.get_or_init(Mutex::default);
    if let Some(&piece) = pieces
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&device)
    {
        return piece;
    }
    let piece = device_cap(device).unwrap_or(least);
    pieces
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(device, piece);
    piece
}

/// What Linux reads at most for one `WILLNEED` hint on block device `device` (a file's
/// `st_dev`): the larger of its readahead window and its largest request, in whole pages
/// (`queue/read_ahead_kb`, `queue/max_sectors_kb` in sysfs, the disk's for a partition), from
/// one page to 64 MiB; `None` where sysfs has no such device (major 0: a network, layered or
/// pooled filesystem).
fn device_cap(device: u64) -> Option<i64> {
    let major = libc::major(device);
    if major == 0 {
        return None;
    }
    let block = format!("/sys/dev/block/{major}:{}", libc::minor(device));
    let kib = |dir: &str, name: &str| -> Option<i64> {
        std::fs::read_to_string(format!("{dir}/queue/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let page = page_size();
    [block.clone(), format!("{block}/..")]
        .iter()
        .find_map(|dir| {
            let window = kib(dir, "read_ahead_kb")?;
            Some(window.max(kib(dir, "max_sectors_kb").unwrap_or(0)) << 10)
        })
        .map(|cap| (cap - cap % page).clamp(page, 64 << 20))
}

/// Starts the kernel's readahead of `file` at `offset` with one hint (Linux
/// `posix_fadvise(POSIX_FADV_WILLNEED)` over `len` bytes, of which it reads at most one
/// readahead window or largest request of the device), without waiting for more than that
/// window's reads to be queued: what a reader on the hot path asks before a positional read
/// far from the last one, the kernel's own readahead carrying on as the reads go. A hint:
/// errors are ignored, and elsewhere it does nothing.
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

/// A test's file made cold (written back, then dropped from the page cache), and which of its
/// pages are cached since.
#[cfg(test)]
pub(crate) struct ColdFile {
    file: File,
    probe: CacheProbe,
    populates: bool,
}

#[cfg(test)]
impl ColdFile {
    /// `path` made cold. A page mapped anywhere stays cached: open a source after this.
    pub(crate) fn new(path: &std::path::Path) -> Self {
        let file = File::open(path).unwrap();
        file.sync_all().unwrap();
        let populates = {
            // SAFETY: the test's own file, unchanged while mapped.
            let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
            populate(&map, 0..1).is_some()
        };
        drop_cached(&file, 0, file.metadata().unwrap().len());
        let probe = CacheProbe::new(&file).unwrap();
        Self {
            file,
            probe,
            populates,
        }
    }

    /// Whether the kernel populates a mapping (`MADV_POPULATE_READ`, Linux 5.14): where it
    /// does not, hints through a mapping stop when their source is dropped.
    pub(crate) fn populates(&self) -> bool {
        self.populates
    }

    /// Whether a page `gap` bytes before a range read through a mapping lies beyond the
    /// kernel's readahead around the range's first fault (half its window before it, the
    /// window at most the device's cap): then only a hint can have read it.
    pub(crate) fn beyond_readahead(&self, gap: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        let device = self.file.metadata().unwrap().dev();
        device_cap(device).is_some_and(|cap| gap > cap.unsigned_abs())
    }

    /// Whether the page holding byte `at` is cached.
    pub(crate) fn cached(&self, at: u64) -> bool {
        let page = page_size().unsigned_abs();
        self.probe.residency().unwrap()[usize::try_from(at / page).unwrap()] & 1 == 1
    }

    /// Whether the page holding each offset of `at` is cached within 30 seconds (a read-ahead
    /// thread's pace).
    pub(crate) fn wait_cached(&self, at: &[u64]) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !at.iter().all(|&at| self.cached(at)) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    /// The file, open.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// Pages of `map` in the page cache (`mincore`).
    fn resident(map: &memmap2::Mmap) -> usize {
        let page = page_size();
        let mut present = vec![0u8; map.len().div_ceil(page)];
        // SAFETY: `map` is a live mapping of `map.len()` bytes at a page-aligned address, and
        // `present` has a byte for each of its pages.
        let done = unsafe {
            libc::mincore(
                map.as_ptr().cast_mut().cast(),
                map.len(),
                present.as_mut_ptr(),
            )
        };
        assert_eq!(done, 0, "mincore: {}", std::io::Error::last_os_error());
        present.iter().filter(|&&p| p & 1 == 1).count()
    }

    fn page_size() -> usize {
        usize::try_from(super::page_size()).unwrap()
    }

    /// The probe tells pages nobody cached from cached ones, and what a reader cached itself
    /// is dropped again, leaving the file as cold as it was.
    #[test]
    fn pages_a_reader_cached_are_dropped_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold");
        std::fs::write(&path, vec![7u8; 64 << 10]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        super::drop_cached(&file, 0, 64 << 10);
        let probe = super::CacheProbe::new(&file).unwrap();
        let cached = |page: usize| probe.residency().unwrap()[page] & 1 == 1;
        if (0..16).any(cached) {
            // A filesystem whose pages cannot be dropped (tmpfs): nothing to show here.
            return;
        }
        let mut header = [0u8; 30];
        crate::platform::read_exact_at(&file, &mut header, 20_000).unwrap();
        assert!(cached(4), "the page read is cached");
        super::drop_cached(&file, 20_000, 30);
        assert!(!(0..16).any(cached), "dropped again");
        // What a reader cached since a residency was taken goes; what was cached before stays.
        crate::platform::read_exact_at(&file, &mut header, 0).unwrap();
        let before = probe.residency().unwrap();
        crate::platform::read_exact_at(&file, &mut header, 50_000).unwrap();
        assert!(cached(12));
        probe.drop_cached_since(&file, &before, None);
        assert!(cached(0), "cached before: kept");
        assert!(!cached(12), "cached since: dropped");
        // A page read through a mapping is unmapped, then dropped.
        let before = probe.residency().unwrap();
        // SAFETY: the file is this test's own; nothing changes it while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        assert_eq!(std::hint::black_box(map[40_000]), 7);
        assert!(cached(9));
        probe.drop_cached_since(&file, &before, None);
        assert!(cached(9), "a mapped page stays without the mapping");
        probe.drop_cached_since(&file, &before, Some(&map));
        assert!(!cached(9), "unmapped, then dropped");
        assert_eq!(map[40_000], 7, "and read again through the mapping");
    }

    /// A hint for more than the kernel reads for one (its readahead window, or the device's
    /// largest request) reads all of it: a cold file of 3 such caps, asked for from inside its
    /// first page to inside its last, ends up in the page cache, every page of it.
    #[test]
    fn will_need_reads_the_whole_range() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold");
        let file = std::fs::File::create(&path).unwrap();
        let Some(cap) = super::device_cap(file.metadata().unwrap().dev()) else {
            // No block device behind this filesystem (a network, layered or pooled one): its
            // cap is not known, nothing to show here.
            return;
        };
        let len = 3 * usize::try_from(cap).unwrap();
        std::fs::write(&path, vec![7u8; len]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: a plain system call on an open descriptor; no memory is passed.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // SAFETY: the file is this test's own; nothing changes it while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let pages = len.div_ceil(page_size());
        if resident(&map) == pages {
            // A filesystem whose pages cannot be dropped (tmpfs): nothing to show here.
            return;
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        super::will_need(&file, 100, len as u64 - 200, &stop);
        let deadline = Instant::now() + Duration::from_secs(30);
        while resident(&map) < pages && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(resident(&map), pages, "every page of the range is read");
    }
}
