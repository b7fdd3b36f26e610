//! Read-ahead hints for the foreign formats' sources (safetensors, `torch.save`, `.npz` files): a
//! load's byte ranges asked of the disk at once, from a thread of their own, through a file or
//! a mapping. Only those formats hint this way; the pack reader's buffered reads start the
//! kernel's readahead per read (`source/data.rs`).

use std::fs::File;
use std::sync::atomic::Ordering;

use burn::tensor::{AllocationProperty, Bytes};

use crate::source::data::Source;

/// A source's mapping of a file, if it is one (not bytes in memory, not a file read): what
/// [`Hinted::Mapped`] reads ahead through.
pub(crate) fn file_mapping(source: &Source) -> Option<&Bytes> {
    match source {
        Source::Memory(bytes) if bytes.property() == AllocationProperty::File => Some(bytes),
        _ => None,
    }
}

/// `ranges` (`key`, `start`, `end`) in order, neighbours of one key under 1 MiB apart merged:
/// what a load will read, as the few large requests the kernel is asked to read ahead
/// ([`ReadHints::ask`]). `key` tells files apart (a shard).
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
#[derive(Default)]
pub(crate) struct ReadHints(std::sync::Mutex<Option<Asked>>);

/// The running hints' flags: stop (asked again, or dropped where that stops them), and
/// dropped (the source is gone), with whether dropping stops them.
type Asked = (Flag, Flag, bool);

type Flag = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// What one file's hints go through, with its byte ranges.
pub(crate) enum Hinted<'a> {
    /// A file read with ordinary reads: the kernel is asked to read the ranges into the page
    /// cache ([`crate::platform::will_need`]). (Only `.pt` files opened buffered are hinted
    /// this way.)
    // Hinted only by the formats that read files buffered (`.pt` today).
    #[allow(dead_code)]
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

enum Owned {
    File(File),
    Mapped(Bytes),
}

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

#[cfg(test)]
mod tests {
    /// Hints on a mapping read its ranges into the page cache from their own thread, the
    /// hints and the mapping dropped right after asking (a load's tensors are windows of the
    /// mapping, read after the source is gone).
    #[cfg(target_os = "linux")]
    #[test]
    fn hints_on_a_mapping_read_it_and_outlive_the_source() {
        use super::{Hinted, ReadHints};
        use crate::source::data::map_file;
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
}
