//! Large saves past the page cache (Linux `O_DIRECT`).
//!
//! A buffered write costs the kernel a copy of every byte into page-cache pages it allocates
//! for them, then writeback; with the checksum's own read of every byte, that made a save cost
//! about 1.6x the CPU of writing a ready buffer. Written direct, the bytes go from a worker's
//! staging buffer to the disk (DMA): the worker reads each piece of a tensor once, hashing it
//! and copying it into the stage while it is in its cache, and the kernel copies nothing. The
//! stage lies on huge pages, so a request can carry megabytes (a device takes a bounded number
//! of segments per request: 4 KiB pages capped requests near 1 MiB here).
//!
//! Only the block-aligned interior of a chunk goes direct: the partial blocks at its two ends
//! (it starts and ends on 256-byte slot boundaries) are written buffered, so no two workers
//! ever write one block direct, and no direct write touches a page the page cache holds data
//! for. A filesystem that refuses direct I/O (tmpfs, some network filesystems) is found at the
//! first open or write, and the save goes on buffered. The commit's fsync covers both ways
//! alike (one inode).
//!
//! Those buffered pieces (the ends, and chunks too small to hold a whole block) are kept
//! aside, copied, and written after the last direct write ([`Direct::finish`]), up to
//! [`LATER_BYTES`]. Written at once they cost the disk its work: a direct write into a file's
//! holes holds the inode lock exclusively until the disk answers (ext4), so one write of the
//! file is in flight at a time, and a buffered write waits its turn on that lock. Traced on a
//! 512 MiB save, each of these small writes waited about 1 ms for the other worker's 2 MiB
//! write, and while it waited its own worker could not stage the next window: the disk then
//! idled for the copy of a window, once per tensor.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::chunk::{Checksums, Chunk, PIECE, ZEROS};

/// Alignment of direct writes: offsets, lengths and addresses (the page size, a multiple of
/// every logical block size Linux filesystems use on 4 KiB-page machines).
const BLOCK: u64 = 4096;

/// Bytes a worker stages before one direct write, at most. A direct write into a new file's
/// holes holds the file's inode lock until the disk answers (ext4), so the workers' writes go
/// one at a time: what keeps a fast disk busy is the size of each, which the block layer
/// splits into requests it sends together (4 MiB each here). Measured on this machine while
/// its disk was fast (1 GiB, 2 threads copying into huge-page stages, medians of 10 and 8
/// alternating rounds, x the pipelined floor's): writes of 2 MiB 1.25x (16 MiB 1.06x in the
/// same rounds); then 8 MiB 1.02x, 16 MiB 0.99x, 32 MiB 1.05x.
const STAGE_MAX: usize = 16 << 20;

/// One huge page: the smallest stage, and what a stage is a whole number of.
const HUGE_PAGE: usize = 2 << 20;

/// The staging window of a worker writing a file of `total` bytes: a sixteenth of the file in
/// whole huge pages, from 2 to 16 MiB, so that the stages stay small beside the file (at most
/// one per worker, and each touched only as far as its job's bytes reach).
pub(super) fn stage_bytes(total: u64) -> usize {
    let sixteenth = usize::try_from(total / 16).unwrap_or(usize::MAX);
    (sixteenth / HUGE_PAGE * HUGE_PAGE).clamp(HUGE_PAGE, STAGE_MAX)
}

/// Files smaller than this are written buffered: their few writes gain nothing, and a load
/// right after the save finds them in the page cache.
pub(super) const DIRECT_BYTES: u64 = 64 << 20;

/// The file reopened for direct writes, and the workers' staging buffers.
pub(super) struct Direct {
    file: File,
    /// Set when a direct write was refused: every later chunk is written buffered.
    refused: AtomicBool,
    stages: Mutex<Vec<Stage>>,
    /// Bytes of each stage ([`stage_bytes`] of the file).
    stage: usize,
    /// The buffered pieces kept for [`Direct::finish`], and their bytes.
    later: Mutex<(Vec<Piece>, usize)>,
}

/// Bytes to write at an offset.
type Piece = (u64, Vec<u8>);

/// Bytes of buffered pieces kept aside for the end of a save; past it, a piece is written at
/// once. Each piece is under two blocks (a chunk's end, or a chunk with no whole block), so
/// this holds at least a thousand of them.
const LATER_BYTES: usize = 8 << 20;

impl Direct {
    /// `file` (a pack being written, `total` bytes) reopened for direct writes, where the
    /// platform and filesystem take them and the file is large enough to gain; `None` means
    /// buffered writes.
    pub(super) fn open(file: &File, total: u64) -> Option<Self> {
        if total < DIRECT_BYTES {
            return None;
        }
        Some(Self {
            file: crate::platform::reopen_direct(file)?,
            refused: AtomicBool::new(false),
            stages: Mutex::new(Vec::new()),
            stage: stage_bytes(total),
            later: Mutex::new((Vec::new(), 0)),
        })
    }

    /// Bytes a write job of entries in hand may span: one stage, so that neighbouring
    /// tensors go to the disk in writes of the stage's size.
    pub(super) fn span(&self) -> u64 {
        self.stage as u64
    }

    /// Writes `chunk`: its aligned interior direct, through a stage, its ends through
    /// `buffered` (the same file opened for ordinary writes); checksums computed on the way.
    /// A chunk with no whole block is kept for [`Direct::finish`] (checksummed now) while
    /// there is room. Returns whether it took the chunk; `false` (direct writes refused, or
    /// no room left for a chunk with no whole block) leaves the chunk to the buffered path.
    pub(super) fn write(
        &self,
        chunk: &Chunk,
        buffered: &File,
        sums: &Checksums,
    ) -> std::io::Result<bool> {
        let (start, end) = (chunk.offset, chunk.offset + chunk.len());
        let interior = (start.next_multiple_of(BLOCK), end / BLOCK * BLOCK);
        if self.refused.load(Ordering::Relaxed) {
            return Ok(false);
        }
        if interior.0 >= interior.1 {
            return Ok(self.keep_small(chunk, sums));
        }
        let taken = self
            .stages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let Some(mut stage) = taken.or_else(|| Stage::new(self.stage)) else {
            return Ok(false);
        };
        let result = self.write_through(chunk, buffered, sums, interior, &mut stage);
        self.stages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stage);
        match result {
            // EINVAL: this filesystem (or its alignment) refuses direct writes after all. No
            // byte of the chunk was written buffered yet (ends go last), and a direct write
            // that failed wrote nothing the buffered rewrite does not cover.
            Err(e) if e.raw_os_error() == Some(EINVAL) => {
                self.refused.store(true, Ordering::Relaxed);
                Ok(false)
            }
            other => other.map(|()| true),
        }
    }

    fn write_through(
        &self,
        chunk: &Chunk,
        buffered: &File,
        sums: &Checksums,
        (first, last): (u64, u64),
        stage: &mut Stage,
    ) -> std::io::Result<()> {
        let mut out = Out {
            at: chunk.offset,
            first,
            last,
            head: Vec::new(),
            tail: Vec::new(),
            staged: 0,
        };
        for part in &chunk.parts {
            let bytes: &[u8] = &part.bytes;
            let hash = sums.enabled && !part.summed;
            let mut hasher = twox_hash::XxHash3_64::new();
            for piece in bytes.chunks(PIECE) {
                if hash {
                    std::hash::Hasher::write(&mut hasher, piece);
                }
                out.emit(piece, stage, &self.file)?;
            }
            if hash {
                sums.set(part.rank, std::hash::Hasher::finish(&hasher));
            }
            out.emit(&ZEROS[..part.pad], stage, &self.file)?;
        }
        out.flush(stage, &self.file)?;
        for (bytes, at) in [(out.head, chunk.offset), (out.tail, last)] {
            if bytes.is_empty() {
                continue;
            }
            if let Err(bytes) = self.keep(at, bytes) {
                crate::platform::write_all_at(buffered, &bytes, at)?;
            }
        }
        Ok(())
    }

    /// Keeps `bytes`, to be written at `at` by [`Direct::finish`], if there is room; else
    /// gives them back.
    fn keep(&self, at: u64, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        #[cfg(test)]
        let room = tests::LATER_ROOM.load(Ordering::SeqCst);
        #[cfg(not(test))]
        let room = LATER_BYTES;
        let mut later = self.later.lock().unwrap_or_else(PoisonError::into_inner);
        if later.1 + bytes.len() > room {
            #[cfg(test)]
            tests::AT_ONCE.fetch_add(1, Ordering::SeqCst);
            return Err(bytes);
        }
        later.1 += bytes.len();
        later.0.push((at, bytes));
        Ok(())
    }

    /// Keeps a chunk with no whole block (under two blocks) for [`Direct::finish`], its parts'
    /// checksums recorded; `false` when there is no room.
    fn keep_small(&self, chunk: &Chunk, sums: &Checksums) -> bool {
        let mut bytes = Vec::new();
        for part in &chunk.parts {
            bytes.extend_from_slice(&part.bytes);
            bytes.extend_from_slice(&ZEROS[..part.pad]);
        }
        if self.keep(chunk.offset, bytes).is_err() {
            return false;
        }
        for part in chunk.parts.iter().filter(|p| !p.summed) {
            sums.record(part.rank, &part.bytes);
        }
        true
    }

    /// Writes the pieces kept aside, buffered, in file order, neighbours in one write; called
    /// once every worker is done, before the commit's fsync.
    pub(super) fn finish(&self, buffered: &File) -> std::io::Result<()> {
        let (mut pieces, _) =
            std::mem::take(&mut *self.later.lock().unwrap_or_else(PoisonError::into_inner));
        pieces.sort_unstable_by_key(|(at, _)| *at);
        #[cfg(test)]
        if tests::FAIL_FINISH.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other(
                "injected failure of the kept pieces' write",
            ));
        }
        let mut run: Vec<std::io::IoSlice<'_>> = Vec::new();
        let (mut start, mut end) = (0, 0);
        for (at, bytes) in &pieces {
            if *at != end && !run.is_empty() {
                crate::platform::write_vectored_all_at(buffered, &mut run, start)?;
                run.clear();
            }
            if run.is_empty() {
                start = *at;
            }
            run.push(std::io::IoSlice::new(bytes));
            end = at + bytes.len() as u64;
        }
        crate::platform::write_vectored_all_at(buffered, &mut run, start)
    }
}

/// `EINVAL`, the error of a direct write a filesystem or device does not take.
const EINVAL: i32 = libc::EINVAL;

/// Where a chunk's bytes go as they come: before `first`, the head (buffered); from `first`
/// to `last`, the stage (direct, a stage's bytes at a time); from `last`, the tail.
struct Out {
    at: u64,
    first: u64,
    last: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    staged: usize,
}

impl Out {
    fn emit(&mut self, mut bytes: &[u8], stage: &mut Stage, file: &File) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let n = if self.at < self.first {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.first - self.at).unwrap_or(usize::MAX));
                self.head.extend_from_slice(&bytes[..n]);
                n
            } else if self.at < self.last {
                let room = stage.bytes().len() - self.staged;
                let left = usize::try_from(self.last - self.at).unwrap_or(usize::MAX);
                let n = bytes.len().min(room).min(left);
                stage.bytes()[self.staged..self.staged + n].copy_from_slice(&bytes[..n]);
                self.staged += n;
                if n == room || n == left {
                    self.at += n as u64;
                    self.flush(stage, file)?;
                    bytes = &bytes[n..];
                    continue;
                }
                n
            } else {
                self.tail.extend_from_slice(bytes);
                bytes.len()
            };
            self.at += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Writes what is staged (a whole number of blocks: the stage fills up, or up
    /// to `last`) direct, ending at `at`.
    fn flush(&mut self, stage: &mut Stage, file: &File) -> std::io::Result<()> {
        if self.staged > 0 {
            let offset = self.at - self.staged as u64;
            #[cfg(test)]
            if tests::refuse_now() {
                return Err(std::io::Error::from_raw_os_error(EINVAL));
            }
            crate::platform::write_all_at(file, &stage.bytes()[..self.staged], offset)?;
            self.staged = 0;
        }
        Ok(())
    }
}

/// A worker's staging buffer: `len` bytes on huge-page boundaries (so aligned for direct
/// writes).
struct Stage(crate::source::data::Fresh);

impl Stage {
    fn new(len: usize) -> Option<Self> {
        crate::source::data::Fresh::new(len).map(Self)
    }

    fn bytes(&mut self) -> &mut [u8] {
        self.0.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use burn::tensor::{Bytes, DType};

    use crate::read::Reader;
    use crate::write::{Entry, Writer};

    /// Direct writes to let through before one is refused with `EINVAL` (0: none is), and how
    /// many were refused. No other test of this crate's library writes a file large enough to
    /// write direct.
    static REFUSE_AFTER: AtomicUsize = AtomicUsize::new(0);
    static REFUSED: AtomicUsize = AtomicUsize::new(0);

    /// Bytes of buffered pieces a save may keep for its end (`LATER_BYTES` but in tests that
    /// change it), and how many pieces found no room and were written at once.
    pub(super) static LATER_ROOM: AtomicUsize = AtomicUsize::new(super::LATER_BYTES);
    pub(super) static AT_ONCE: AtomicUsize = AtomicUsize::new(0);

    /// Makes the next [`super::Direct::finish`] fail.
    pub(super) static FAIL_FINISH: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// The tests below change the statics above: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Whether this direct write is to be refused (see [`REFUSE_AFTER`]).
    pub(super) fn refuse_now() -> bool {
        let left = REFUSE_AFTER.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n > 0).then(|| n - 1)
        });
        let refused = left == Ok(1);
        if refused {
            REFUSED.fetch_add(1, Ordering::SeqCst);
        }
        refused
    }

    /// A filesystem that takes the first direct writes of a save and refuses a later one
    /// (`EINVAL` mid-save): the chunk it was part of and every later one are written
    /// buffered, and the file is byte for byte what the in-memory writer makes, every
    /// checksum verifying.
    #[test]
    fn a_direct_write_refused_mid_save_leaves_the_rest_to_buffered_writes() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("refused.bpk");
        let probe = std::fs::File::create(&path).unwrap();
        if crate::platform::reopen_direct(&probe).is_none() {
            // This filesystem takes no direct write at all: the open already chose buffered.
            return;
        }
        drop(probe);
        let sizes = [(20 << 20) + 4093, 300, 24 << 20, 7, (22 << 20) + 1];
        let entries = || -> Vec<Entry> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| {
                    let data = (0..len).map(|j: usize| (j.wrapping_mul(31) ^ (j >> 12) ^ i) as u8);
                    let bytes = Bytes::from_bytes_vec(data.collect());
                    Entry::resident(format!("t{i}"), DType::U8, vec![len], bytes)
                })
                .collect()
        };
        let expected = Writer::new(entries()).into_bytes().unwrap();
        REFUSE_AFTER.store(4, Ordering::SeqCst);
        Writer::new(entries())
            .threads(2)
            .write_to_file(&path)
            .unwrap();
        assert_eq!(
            REFUSE_AFTER.load(Ordering::SeqCst),
            0,
            "the save wrote direct"
        );
        assert_eq!(
            REFUSED.load(Ordering::SeqCst),
            1,
            "one direct write was refused"
        );
        assert_written(&path, &expected, sizes.len());
    }

    /// The file at `path` is `expected` byte for byte, and its `tensors` checksums verify.
    fn assert_written(path: &std::path::Path, expected: &[u8], tensors: usize) {
        let written = std::fs::read(path).unwrap();
        assert!(written == expected, "{}: the file differs", path.display());
        let reader = Reader::open(path).unwrap();
        assert_eq!(reader.verify_all().unwrap(), tensors);
    }

    /// The buffered pieces (a chunk's partial end blocks, chunks with no whole block) are kept
    /// for the end of the save while there is room, and written at once past it: the file is
    /// byte for byte the in-memory writer's either way, every checksum verifying.
    #[test]
    fn buffered_pieces_past_the_room_kept_for_the_end_are_written_at_once() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
        if crate::platform::reopen_direct(&probe).is_none() {
            return;
        }
        // Tensors of at least 1 MiB each are chunks of their own; odd lengths put partial
        // blocks at both ends of every chunk, and the 5-byte tensors are chunks with none.
        let sizes: Vec<usize> = (0..100)
            .map(|i| {
                if i % 3 == 2 {
                    5
                } else {
                    (1 << 20) + 1000 + 37 * i
                }
            })
            .collect();
        let entries = || -> Vec<Entry> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| {
                    let data = (0..len).map(|j: usize| (j.wrapping_mul(7) ^ (j >> 9) ^ i) as u8);
                    let bytes = Bytes::from_bytes_vec(data.collect());
                    Entry::resident(format!("t{i}"), DType::U8, vec![len], bytes)
                })
                .collect()
        };
        let expected = Writer::new(entries()).into_bytes().unwrap();
        assert!(expected.len() as u64 >= super::DIRECT_BYTES);
        for (room, some_at_once) in [(super::LATER_BYTES, false), (20_000, true)] {
            LATER_ROOM.store(room, Ordering::SeqCst);
            AT_ONCE.store(0, Ordering::SeqCst);
            let path = dir.path().join(format!("room-{room}.bpk"));
            let written = Writer::new(entries()).threads(2).write_to_file(&path);
            LATER_ROOM.store(super::LATER_BYTES, Ordering::SeqCst);
            written.unwrap();
            let at_once = AT_ONCE.load(Ordering::SeqCst);
            assert_eq!(at_once > 0, some_at_once, "room {room}: {at_once} at once");
            assert_written(&path, &expected, sizes.len());
        }
    }

    /// A save whose kept pieces cannot be written at the end fails naming the scratch file,
    /// leaves the previous file as it was and no scratch file behind.
    #[test]
    fn a_failed_write_of_the_kept_pieces_fails_the_save_and_keeps_the_old_file() {
        let _serial = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bpk");
        let probe = std::fs::File::create(&path).unwrap();
        if crate::platform::reopen_direct(&probe).is_none() {
            return;
        }
        drop(probe);
        std::fs::write(&path, b"the previous file").unwrap();
        let entries: Vec<Entry> = (0..3)
            .map(|i| {
                let len = (24 << 20) + 1001 * i;
                let bytes = Bytes::from_bytes_vec(vec![i as u8 + 1; len]);
                Entry::resident(format!("t{i}"), DType::U8, vec![len], bytes)
            })
            .collect();
        FAIL_FINISH.store(true, Ordering::SeqCst);
        let err = Writer::new(entries)
            .threads(2)
            .write_to_file(&path)
            .unwrap_err();
        let injected = FAIL_FINISH.swap(false, Ordering::SeqCst);
        assert!(!injected, "the save reached the kept pieces' write");
        let message = err.to_string();
        assert!(
            message.contains("injected failure") && message.contains("model.bpk"),
            "{message}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"the previous file");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["model.bpk"], "no scratch file remains");
    }

    /// A stage is a sixteenth of the file in whole huge pages, from 2 to 16 MiB.
    #[test]
    fn stages_grow_with_the_file_from_one_huge_page_to_sixteen_mib() {
        const MIB: u64 = 1 << 20;
        for (total, stage) in [(10, 2), (64, 4), (100, 6), (256, 16), (1 << 14, 16)] {
            assert_eq!(super::stage_bytes(total * MIB), stage << 20, "{total} MiB");
        }
        assert_eq!(super::stage_bytes(u64::MAX), 16 << 20);
    }
}
