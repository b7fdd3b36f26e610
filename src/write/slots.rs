//! The slot pipeline, whole: entries grouped into write jobs (`batches`); for a file, worker
//! threads that each materialize a job, checksum it and write it at its offset
//! (`write_slots`, `Chunk::write_at`) with early writeback; for a stream, producer threads
//! (`fill`, `materialize`, `produce`) handing chunks to one sink thread (`pipeline`) that
//! writes them in file order; the checksums collected for the head. The writer's public face
//! (`Writer`, its sinks: buffer, file, stream) is in `writer.rs` and calls into this.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, PoisonError};

use super::chunk::{Checksums, Chunk, Part};
use super::entry::{Entry, materialize};
use super::error::WriteError;
use super::plan::Slot;

/// Runs every job with `run`, on at most `workers` rayon tasks at once, in the given order.
///
/// Each task runs one job at a time (a job materializes its entries and drops their bytes
/// before the task takes the next), so at most `workers` jobs' bytes exist at any moment,
/// whatever the providers do (a provider that itself uses rayon may let its thread pick up
/// another task, but there are only `workers` tasks). The first error stops the remaining work
/// and is returned.
pub(crate) fn fill<J, R>(jobs: Vec<J>, workers: usize, run: R) -> Result<(), WriteError>
where
    J: Send,
    R: Fn(J) -> Result<(), WriteError> + Sync,
{
    let items = jobs;
    let workers = workers.clamp(1, items.len().max(1));
    let queue = Mutex::new(items.into_iter());
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<WriteError>> = Mutex::new(None);
    let work = || {
        while !failed.load(Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some(job) = next else { break };
            if let Err(e) = run(job) {
                failed.store(true, Ordering::Relaxed);
                failure
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(e);
            }
        }
    };
    rayon::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|_| work());
        }
    });
    match failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs the write pass with producers (rayon) that materialize entries and checksum them in
/// parallel, and one writer thread that issues every write, in the order chunks are ready:
/// parallel writes to one file only queue on its inode lock. A producer waits until the sink
/// is done with its chunk before it takes the next job, so at most one produced chunk per
/// producer is in memory, the one being written included (with one thread: one at a time).
pub(super) fn pipeline(
    jobs: Vec<Vec<(Entry, Slot, usize)>>,
    threads: Option<usize>,
    sums: &Checksums,
    mut sink: impl FnMut(Chunk) -> Result<(), WriteError> + Send,
) -> Result<(), WriteError> {
    // By default one producer per core but the one the writer thread keeps busy: on two
    // cores, a second producer only takes turns with the writer (and spins in rayon while it
    // waits), for the same wall time and more CPU.
    // Where the platform gives no thread (WebAssembly without threads), the calling thread
    // produces and writes each chunk in turn.
    if !crate::platform::threads_available() {
        for batch in jobs {
            sink(produce(batch, sums, true)?)?;
        }
        return Ok(());
    }
    let workers = threads.unwrap_or_else(|| rayon::current_num_threads().saturating_sub(1).max(1));
    // Each chunk travels with the sender its producer waits on: the producer takes its next
    // job only once the sink is done with this chunk (and has dropped it), so at most
    // `workers` produced chunks exist at once, the one being written included.
    let (chunks, ready) = std::sync::mpsc::sync_channel::<(Chunk, SyncSender<()>)>(0);
    let (written, produced) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            for (chunk, done) in ready {
                sink(chunk)?;
                // The producer may have stopped waiting (another one failed): nothing to tell.
                let _ = done.send(());
            }
            Ok(())
        });
        let produced = run(threads, || {
            fill(jobs, workers, |batch: Vec<(Entry, Slot, usize)>| {
                let chunk = produce(batch, sums, true)?;
                let (done, written) = std::sync::mpsc::sync_channel(1);
                // A closed channel means the writer failed; its error is the one returned.
                let stopped = || WriteError::Pipeline("the writer stopped".into());
                chunks.send((chunk, done)).map_err(|_| stopped())?;
                written.recv().map_err(|_| stopped())
            })
        });
        drop(chunks);
        let written = writer.join().unwrap_or_else(|panic| {
            Err(WriteError::Pipeline(format!(
                "the writer thread panicked: {}",
                crate::panic::message(&*panic)
            )))
        });
        (written, produced)
    });
    written.and(produced)
}

/// Total size under which a pack of in-hand entries is written by the calling thread alone.
pub(super) const PIPELINE_BYTES: u64 = 64 << 20;

/// Materializes a job's entries; records their checksums when `hash` (else the chunk's
/// [`Chunk::write_at`] does, as it writes them).
pub(super) fn produce(
    batch: Vec<(Entry, Slot, usize)>,
    sums: &Checksums,
    hash: bool,
) -> Result<Chunk, WriteError> {
    let offset = batch[0].1.offset;
    let tensor = batch[0].0.name.clone();
    let mut parts = Vec::with_capacity(batch.len());
    let mut batch = batch.into_iter().peekable();
    while let Some((entry, slot, rank)) = batch.next() {
        let known = entry.known_checksum;
        let bytes = materialize(entry)?;
        debug_assert!(
            known.is_none_or(|sum| sum == crate::format::checksum(&bytes)),
            "a known checksum that is not the bytes'"
        );
        match known {
            Some(sum) if sums.enabled => sums.set(rank, sum),
            _ if hash => sums.record(rank, &bytes),
            _ => {}
        }
        let pad = batch
            .peek()
            .map_or(0, |(_, next, _)| next.offset - slot.offset - slot.len);
        parts.push(Part {
            bytes,
            pad: pad as usize,
            rank,
            summed: known.is_some(),
        });
    }
    Ok(Chunk {
        offset,
        parts,
        tensor,
        hashed: hash,
    })
}

/// Starts the kernel's writeback of written ranges early (Linux `sync_file_range`), so the
/// final fsync finds most of the file already on its way to the disk; and, for a file larger
/// than half the machine's memory, releases what lies more than [`KEEP_BYTES`] behind the
/// write front from the page cache once it is on the disk, so the write reuses those pages
/// (and waits for the disk, as any write that outruns it must). Elsewhere a no-op; the commit's
/// fsync is what makes the file durable either way.
pub(super) struct Writeback<'a> {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    file: &'a File,
    pending: AtomicU64,
    /// Whether written ranges are released behind the front.
    release: bool,
    /// The highest end written, and how far the file is released.
    front: Mutex<(u64, u64)>,
}

/// Bytes written between two writeback requests.
const WRITEBACK_BYTES: u64 = 32 << 20;

/// Bytes behind the write front a large write keeps in the page cache.
const KEEP_BYTES: u64 = 1 << 30;

/// Bytes released at a time.
const RELEASE_BYTES: u64 = 256 << 20;

impl<'a> Writeback<'a> {
    /// Early writeback for a file of `total` bytes.
    pub(super) fn new(file: &'a File, total: u64) -> Self {
        let release = crate::platform::physical_memory().is_some_and(|memory| total > memory / 2);
        Self {
            file,
            pending: AtomicU64::new(0),
            release,
            front: Mutex::new((0, 0)),
        }
    }

    /// Notes `len` more bytes written (by any thread), ending at `end`; every
    /// [`WRITEBACK_BYTES`], asks the kernel to start writing back.
    pub(super) fn wrote(&self, end: u64, len: u64) {
        if self.pending.fetch_add(len, Ordering::Relaxed) + len >= WRITEBACK_BYTES {
            self.pending.store(0, Ordering::Relaxed);
            crate::platform::start_writeback(self.file);
        }
        if !self.release {
            return;
        }
        let range = {
            let mut front = self.front.lock().unwrap_or_else(PoisonError::into_inner);
            front.0 = front.0.max(end);
            let upto = front.0.saturating_sub(KEEP_BYTES);
            if upto < front.1 + RELEASE_BYTES {
                return;
            }
            let range = (front.1, upto - front.1);
            front.1 = upto;
            range
        };
        crate::platform::release_written(self.file, range.0, range.1);
    }
}

/// Bytes up to which neighbouring small entries are written with one positional write.
const BATCH_BYTES: u64 = 1 << 20;

/// Groups entries (in file order) into write jobs: an entry of at least [`BATCH_BYTES`] alone,
/// smaller neighbours together while their span stays under it. Thousands of small tensors
/// then cost tens of system calls instead of thousands, and a job still holds at most about
/// `max(BATCH_BYTES, largest entry)` bytes.
/// `rank` gives each entry's place among the checksums (its position in the tensors map).
pub(super) fn batches(
    entries: Vec<Entry>,
    slots: &[Slot],
    rank: impl Fn(usize) -> usize,
) -> Vec<Vec<(Entry, Slot, usize)>> {
    let ranked = entries
        .into_iter()
        .zip(slots.iter().copied())
        .enumerate()
        .map(|(i, (entry, slot))| (entry, slot, rank(i)));
    group(ranked, BATCH_BYTES)
}

/// Jobs as [`batches`] makes them, of entries already placed and ranked, with `span` in place
/// of [`BATCH_BYTES`].
fn group(
    items: impl IntoIterator<Item = (Entry, Slot, usize)>,
    span: u64,
) -> Vec<Vec<(Entry, Slot, usize)>> {
    let mut jobs: Vec<Vec<(Entry, Slot, usize)>> = Vec::new();
    for (entry, slot, rank) in items {
        let joins = jobs.last().is_some_and(|job| {
            let start = job[0].1.offset;
            slot.len < span && job[0].1.len < span && slot.offset + slot.len - start <= span
        });
        match jobs.last_mut() {
            Some(job) if joins => job.push((entry, slot, rank)),
            _ => jobs.push(vec![(entry, slot, rank)]),
        }
    }
    jobs
}

/// Runs `f` on a dedicated pool of `threads` threads, or on rayon's global pool.
pub(super) fn run<R: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> Result<R, WriteError> + Send,
) -> Result<R, WriteError> {
    match threads {
        // Without threads (WebAssembly), the calling thread does the work.
        None => f(),
        Some(_) if !crate::platform::threads_available() => f(),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| WriteError::ThreadPool {
                threads: n,
                reason: e.to_string(),
            })?
            .install(f),
    }
}

/// Writes `jobs` into their slots of `target`'s file, already sized: by the calling thread
/// alone when the bytes are in hand and the pack is small (`total` under [`PIPELINE_BYTES`]:
/// threads cost more than they save there), else by every worker thread at once, each
/// materializing, checksumming and writing one job at a time ([`Chunk::write_at`]; the
/// file's inode lock orders the kernel's copies, the checksums run beside them), with early
/// writeback; a file of at least [`DIRECT_BYTES`](super::direct::DIRECT_BYTES) of entries in
/// hand (none deferred) on Linux past the page cache where the filesystem allows
/// ([`super::direct`]; its small buffered pieces are written after the workers are done).
/// Checksums go to `sums`.
pub(super) fn write_slots(
    jobs: Vec<Vec<(Entry, Slot, usize)>>,
    total: u64,
    target: &super::commit::Target,
    threads: Option<usize>,
    sums: &Checksums,
    progress: Option<&(dyn Fn(u64) + Send + Sync)>,
) -> Result<(), WriteError> {
    let (file, path) = (target.file(), target.path());
    let writeback = Writeback::new(file, total);
    let turn = Mutex::new(());
    let deferred = jobs.iter().flatten().any(|(e, ..)| e.is_deferred());
    #[cfg(target_os = "linux")]
    let direct = super::direct::Direct::open(file, total);
    #[cfg(target_os = "linux")]
    let direct_opened = direct.is_some();
    #[cfg(not(target_os = "linux"))]
    let direct_opened = false;
    // Entries in hand written direct: neighbours go together up to a stage, so that the disk
    // gets writes of the stage's size (a deferred entry's bytes exist only while its job runs:
    // those jobs stay small).
    #[cfg(target_os = "linux")]
    let jobs = match &direct {
        Some(direct) if !deferred => group(jobs.into_iter().flatten(), direct.span()),
        _ => jobs,
    };
    let job = |batch: Vec<(Entry, Slot, usize)>| {
        let chunk = produce(batch, sums, false)?;
        let failed = |source| WriteError::Io {
            action: "write",
            path: path.to_path_buf(),
            tensor: Some(chunk.tensor.clone()),
            source,
        };
        #[cfg(target_os = "linux")]
        let written = match &direct {
            Some(direct) => direct.write(&chunk, file, sums).map_err(failed)?,
            None => false,
        };
        #[cfg(not(target_os = "linux"))]
        let written = false;
        if !written {
            chunk.write_at(file, sums, &turn).map_err(failed)?;
        }
        writeback.wrote(chunk.offset + chunk.len(), chunk.len());
        if let Some(progress) = progress {
            progress(chunk.len());
        }
        Ok(())
    };
    let sequential = total < PIPELINE_BYTES && !deferred;
    let workers = threads.unwrap_or_else(rayon::current_num_threads).max(1);
    if sequential || !crate::platform::threads_available() {
        jobs.into_iter().try_for_each(job)?;
    } else if cfg!(target_os = "linux") && deferred && direct_opened {
        // A direct write waits for the disk where a buffered one returns at once: with
        // deferred entries (a GPU module's read-back, a layer copied out) a worker spends long
        // stretches producing, and the disk would idle meanwhile. Twice as many workers as
        // cores then keep one writing while another produces (memory: twice the jobs in
        // flight, still bounded by the threads, never by the model).
        let doubled = workers * 2;
        run(Some(doubled), || fill(jobs, doubled, job))?;
    } else {
        run(threads, || fill(jobs, workers, job))?;
    }
    #[cfg(target_os = "linux")]
    if let Some(direct) = &direct {
        direct.finish(file).map_err(|source| WriteError::Io {
            action: "write",
            path: path.to_path_buf(),
            tensor: None,
            source,
        })?;
    }
    Ok(())
}
