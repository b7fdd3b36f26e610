//! The writer: plans a pack and writes it to a file or to memory.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::Bytes;

use super::chunk::{Checksums, Chunk};
use super::commit::Target;
use super::entry::{Entry, materialize};
use super::error::WriteError;
use super::options::WriteOptions;
use super::plan::Plan;
use super::slots::{batches, fill, pipeline, run, write_slots};
use crate::format::{PRODUCER, Scalar};
use crate::platform::write_all_at;

/// Writes entries, string metadata and scalars as a burnpack file or buffer.
///
/// The writer plans the whole layout from lengths, sizes the destination once, then fills
/// every entry's 256-byte aligned slot: producer threads materialize entries and checksum them
/// in parallel, and one writer thread hands each chunk (an entry, or neighbouring small ones)
/// to the kernel with a vectored write, from where the bytes are (no assembly copy). The
/// head, which carries the checksums, goes last. At most [`threads`](Self::threads) produced
/// chunks exist at once, the one being written included: a producer takes its next entry only
/// once its last chunk is written and dropped. Peak memory is then about threads × the
/// largest deferred tensor (with `threads(1)`, one produced tensor at a time, as Burn's
/// writer guarantees), and nothing for entries whose bytes are in hand. Small neighbouring
/// entries travel together in chunks of up to 1 MiB. Small packs (under 64 MiB, nothing
/// deferred) are written by the calling thread alone.
///
/// With checksums on (the default) the metadata also carries `checksums` and a `producer`
/// entry ([`PRODUCER`] unless one is set). With [`checksums(false)`](Self::checksums), given
/// the same entries, metadata and scalars in the same order, the bytes are identical to Burn
/// 0.22's `burn_pack::Writer`.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("pack.bpk");
/// let entries = vec![Entry::resident("w", DType::F32, vec![2], Bytes::from_elems(vec![1.0f32, 2.0]))];
/// let written = Writer::new(entries).metadata("producer", "docs").write_to_file(&path).unwrap();
/// assert_eq!(written, std::fs::metadata(&path).unwrap().len());
/// let reader = Reader::open(&path).unwrap();
/// assert_eq!(reader.metadata()["producer"], "docs");
/// ```
pub struct Writer {
    pub(super) entries: Vec<Entry>,
    pub(super) metadata: BTreeMap<String, String>,
    scalars: BTreeMap<String, Scalar>,
    options: WriteOptions,
    progress: Option<Progress>,
}

/// Called with the bytes of each tensor (or piece of one) as it is written.
pub(crate) type Progress = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("entries", &self.entries)
            .field("metadata", &self.metadata)
            .field("scalars", &self.scalars)
            .field("options", &self.options)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Writer {
    /// A writer for `entries`, written in this order (the metadata map is sorted by name).
    #[must_use]
    pub fn new(entries: Vec<Entry>) -> Self {
        Self {
            entries,
            metadata: BTreeMap::new(),
            scalars: BTreeMap::new(),
            options: WriteOptions::default(),
            progress: None,
        }
    }

    /// Calls `progress` with the bytes of each tensor (or piece of one) as it is written to a
    /// file, from the writing threads: for a progress bar over a long write (`bpk convert`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::write::{Entry, Writer};
    /// let written = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&written);
    /// let dir = tempfile::tempdir().unwrap();
    /// Writer::new(vec![Entry::resident("w", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3]))])
    ///     .progress(move |bytes| { counter.fetch_add(bytes, Ordering::Relaxed); })
    ///     .write_to_file(dir.path().join("m.bpk"))
    ///     .unwrap();
    /// assert_eq!(written.load(Ordering::Relaxed), 3);
    /// ```
    #[must_use]
    pub fn progress(mut self, progress: impl Fn(u64) + Send + Sync + 'static) -> Self {
        self.progress = Some(std::sync::Arc::new(progress));
        self
    }

    /// A writer for the part of an open pack under `prefix` (prefix removed; `""` for the
    /// whole pack): its tensors in file order, with their parameter ids, as windows of the
    /// source's memory (fetched first, all at once, from a source that
    /// [wants it](crate::source::TensorSource::wants_prefetch)), each checked against its
    /// checksum; its scalars and metadata under the prefix. Copies a pack elsewhere (another
    /// file, an object store) or takes one part out of a checkpoint.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![
    ///     Entry::resident("model.w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1])),
    ///     Entry::resident("optim.m", DType::U8, vec![1], Bytes::from_bytes_vec(vec![2])),
    /// ])
    /// .scalar("optim.time", 3u64)
    /// .into_bytes()
    /// .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// let part = Reader::from_bytes(Writer::from_part(&reader, "optim.").unwrap().into_bytes().unwrap()).unwrap();
    /// assert_eq!(part.tensors()[0].name(), "m");
    /// assert_eq!(part.scalars().keys().collect::<Vec<_>>(), ["time"]);
    /// ```
    ///
    /// # Errors
    /// A tensor could not be read, or failed its checksum.
    pub fn from_part<S: crate::source::PackSource + ?Sized>(
        source: &S,
        prefix: &str,
    ) -> Result<Self, crate::source::ReadError> {
        let layout = source.layout();
        let wanted: Vec<&crate::format::TensorInfo> = layout
            .tensors_by_position()
            .filter(|info| info.name().starts_with(prefix))
            .collect();
        let mut writer = Self::new(read_entries(source, &wanted, prefix.len())?);
        for (k, v) in layout.scalars() {
            if let Some(name) = k.strip_prefix(prefix) {
                writer = writer.scalar(name, *v);
            }
        }
        for (k, v) in layout.metadata() {
            if let Some(name) = k.strip_prefix(prefix) {
                writer = writer.metadata(name, v.clone());
            }
        }
        Ok(writer)
    }

    /// A writer of every tensor of any [`TensorSource`](crate::source::TensorSource) (a
    /// safetensors file, a Burn 0.21 record, a `torch.save` file): in the source's file order,
    /// fetched first when the source [wants it](crate::source::TensorSource::wants_prefetch),
    /// each checked against its checksum where the source has one, views of the source's
    /// memory where it hands them out. No metadata or scalars: the caller adds the source's.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let copy = Writer::from_source(&Reader::from_bytes(pack).unwrap()).unwrap();
    /// assert_eq!(copy.into_entries()[0].name(), "w");
    /// ```
    ///
    /// # Errors
    /// A tensor could not be read, or failed its checksum, or the source
    /// [withholds](crate::source::TensorSource::withheld) one (named in the error).
    pub fn from_source<S: crate::source::TensorSource + ?Sized>(
        source: &S,
    ) -> Result<Self, crate::source::ReadError> {
        // A tensor the source cannot hand out would be missing from the copy.
        crate::source::refuse_withheld(source)?;
        let mut wanted: Vec<&crate::format::TensorInfo> = source.tensors().iter().collect();
        wanted.sort_by_key(|t| t.offset());
        Ok(Self::new(read_entries(source, &wanted, 0)?))
    }

    /// The entries, in write order, for a writer of another format (the safetensors writer
    /// takes them this way); metadata and scalars are dropped.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::write::{Entry, Writer};
    /// let writer = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))]);
    /// assert_eq!(writer.into_entries()[0].name(), "w");
    /// ```
    #[must_use]
    pub fn into_entries(self) -> Vec<Entry> {
        self.entries
    }

    /// The entries, in write order, and the string metadata, for a writer of another format
    /// that keeps metadata (safetensors' `__metadata__`); scalars are dropped.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::write::{Entry, Writer};
    /// let writer = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
    ///     .metadata("arch", "llama");
    /// let (entries, metadata) = writer.into_parts();
    /// assert_eq!((entries.len(), metadata["arch"].as_str()), (1, "llama"));
    /// ```
    #[must_use]
    pub fn into_parts(self) -> (Vec<Entry>, BTreeMap<String, String>) {
        (self.entries, self.metadata)
    }

    super::options::metadata_knobs!();

    /// The earlier spelling of [`metadata`](Self::metadata), kept for code written against it.
    #[doc(hidden)]
    #[must_use]
    pub fn with_metadata(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata(key, value)
    }

    /// The earlier spelling of [`scalar`](Self::scalar), kept for code written against it.
    #[doc(hidden)]
    #[must_use]
    pub fn with_scalar(self, key: impl Into<String>, value: impl Into<Scalar>) -> Self {
        self.scalar(key, value)
    }

    /// Sets all write options at once (see [`WriteOptions`]).
    #[must_use]
    pub fn options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }

    super::options::write_knobs!(options);

    /// The layout this writer will produce (feature `internals`: tests and benchmarks).
    ///
    /// # Errors
    /// See `Plan::new`.
    #[cfg(feature = "internals")]
    pub fn plan(&self) -> Result<Plan, WriteError> {
        self.layout()
    }

    /// The layout this writer will produce. A pack with checksums always names its producer
    /// ([`PRODUCER`] unless the caller set one), whichever path wrote it: verification then
    /// refuses a file of this crate whose `checksums` key was damaged away.
    fn layout(&self) -> Result<Plan, WriteError> {
        Plan::new(
            &self.entries,
            &self.stamped(),
            &self.scalars,
            self.options.checksums,
        )
    }

    /// Total size of the pack in bytes.
    ///
    /// # Errors
    /// [`WriteError::DuplicateName`], [`WriteError::LengthMismatch`] or [`WriteError::Layout`].
    pub fn size(&self) -> Result<u64, WriteError> {
        Ok(self.layout()?.total_size())
    }

    /// Writes the pack into the start of `buffer`, which must hold at least
    /// [`size`](Self::size) bytes. Returns the number of bytes written.
    ///
    /// # Errors
    /// [`WriteError::BufferTooSmall`], planning errors, or a failing deferred entry (the
    /// buffer's contents are then unspecified).
    pub fn write_into(self, buffer: &mut [u8]) -> Result<u64, WriteError> {
        let plan = self.layout()?;
        let needed = plan.total_size();
        let Some(buffer) = usize::try_from(needed)
            .ok()
            .and_then(|n| buffer.get_mut(..n))
        else {
            return Err(WriteError::BufferTooSmall {
                needed,
                available: buffer.len(),
            });
        };
        self.fill(&plan, buffer)?;
        Ok(needed)
    }

    /// Writes the pack laid out by `plan` into `buffer` (exactly `plan.total_size()` bytes):
    /// each entry gets the sub-slice of its slot, everything in between is zeroed.
    fn fill(self, plan: &Plan, buffer: &mut [u8]) -> Result<(), WriteError> {
        let (head, mut rest) = buffer.split_at_mut(plan.head().len());
        let mut position = plan.head().len() as u64;
        let mut targets = Vec::with_capacity(self.entries.len());
        for slot in plan.slots() {
            let (gap, after) = rest.split_at_mut((slot.offset - position) as usize);
            gap.fill(0);
            let (target, after) = after.split_at_mut(slot.len as usize);
            targets.push(target);
            rest = after;
            position = slot.offset + slot.len;
        }
        rest.fill(0);
        let threads = self.options.threads;
        let sums = Checksums::new(plan);
        let jobs: Vec<_> = self
            .entries
            .into_iter()
            .zip(targets)
            .enumerate()
            .map(|(i, (entry, target))| (entry, target, plan.rank(i)))
            .collect();
        run(threads, || {
            fill(
                jobs,
                threads.unwrap_or_else(rayon::current_num_threads),
                |(entry, target, rank)| {
                    let bytes = materialize(entry)?;
                    sums.record(rank, &bytes);
                    target.copy_from_slice(&bytes);
                    Ok(())
                },
            )
        })?;
        head.copy_from_slice(&plan.seal(&sums.values()));
        Ok(())
    }

    /// Writes the pack to a new buffer.
    ///
    /// # Errors
    /// Planning errors, a failing deferred entry, or a pack larger than this platform's
    /// address space.
    pub fn into_bytes(self) -> Result<Bytes, WriteError> {
        let plan = self.layout()?;
        let size = plan.total_size();
        let size = usize::try_from(size)
            .map_err(|_| WriteError::Layout(format!("{size} bytes do not fit in memory")))?;
        let mut buffer = vec![0u8; size];
        self.fill(&plan, &mut buffer)?;
        Ok(Bytes::from_bytes_vec(buffer))
    }

    /// Length of the pack's head (header and metadata), which [`stream`](Self::stream)
    /// returns at the end.
    ///
    /// # Errors
    /// Planning errors, as [`size`](Self::size).
    pub fn head_len(&self) -> Result<usize, WriteError> {
        Ok(self.layout()?.head().len())
    }

    /// Produces the pack front to back, for destinations that take bytes in order (a
    /// multipart upload): `data` receives every byte of the pack in file order, the head as
    /// zeros (entries produced in parallel as for files, reordered here, padding included);
    /// the head, which carries the checksums and so is known only at the end, is returned
    /// with the total size, to be put in place of those zeros.
    /// Produced chunks that arrive before their turn wait here in memory.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::write::{Entry, Writer};
    /// let entries = || vec![Entry::resident("w", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3]))];
    /// let mut out = Vec::new();
    /// let (head, total) = Writer::new(entries())
    ///     .stream(|bytes| {
    ///         out.extend_from_slice(bytes);
    ///         Ok(())
    ///     })
    ///     .unwrap();
    /// out[..head.len()].copy_from_slice(&head);
    /// assert_eq!(out.len() as u64, total);
    /// assert_eq!(out[..], Writer::new(entries()).into_bytes().unwrap()[..]);
    /// ```
    ///
    /// # Errors
    /// Planning errors, a failing deferred entry, or the first error `data` returned.
    pub fn stream(
        self,
        mut data: impl FnMut(&[u8]) -> Result<(), WriteError> + Send,
    ) -> Result<(Vec<u8>, u64), WriteError> {
        let plan = self.layout()?;
        let sums = Checksums::new(&plan);
        let total = plan.total_size();
        let jobs = batches(self.entries, plan.slots(), |i| plan.rank(i));
        let starts: Vec<u64> = jobs.iter().map(|job| job[0].1.offset).collect();
        let mut next = 0;
        let mut turn = 0;
        let mut waiting: BTreeMap<u64, Chunk> = BTreeMap::new();
        let zeros = |mut n: u64, data: &mut dyn FnMut(&[u8]) -> Result<(), WriteError>| {
            while n > 0 {
                let step = n.min(super::chunk::ZEROS.len() as u64);
                data(&super::chunk::ZEROS[..step as usize])?;
                n -= step;
            }
            Ok::<(), WriteError>(())
        };
        self::pipeline(jobs, self.options.threads, &sums, |chunk| {
            waiting.insert(chunk.offset, chunk);
            while let Some(chunk) = starts.get(turn).and_then(|at| waiting.remove(at)) {
                zeros(chunk.offset - next, &mut data)?;
                for part in &chunk.parts {
                    data(&part.bytes)?;
                    if part.pad > 0 {
                        data(&super::chunk::ZEROS[..part.pad])?;
                    }
                }
                next = chunk.offset + chunk.len();
                turn += 1;
            }
            Ok(())
        })?;
        zeros(total - next, &mut data)?;
        Ok((plan.seal(&sums.values()), total))
    }

    /// Writes the pack to `path` (atomically unless [`WriteMode::InPlace`]) and returns its
    /// size in bytes. The path is used exactly as given.
    ///
    /// In atomic mode, after an error (including a failing or panicking provider) `path` is
    /// exactly as it was and no scratch file remains; after `Ok` the new file and its
    /// directory entry are on disk. The permissions of a replaced file are kept.
    ///
    /// # Errors
    /// [`WriteError::AlreadyExists`] with `overwrite(false)`, I/O errors naming the file (and
    /// the tensor being written), planning and provider errors.
    pub fn write_to_file(self, path: impl AsRef<Path>) -> Result<u64, WriteError> {
        self.write_to_file_when(path.as_ref(), || Ok::<(), WriteError>(()))
    }

    /// As [`write_to_file`](Self::write_to_file), `ready` called once the file's bytes are
    /// durable and before it is published at `path` (atomic mode: between the scratch file's
    /// fsync and its rename; an error of `ready` leaves `path` as it was): what must be
    /// durable before the file is visible waits there, while this file was being written.
    pub(crate) fn write_to_file_when<E: From<WriteError>>(
        self,
        path: &Path,
        ready: impl FnOnce() -> Result<(), E>,
    ) -> Result<u64, E> {
        let plan = self.layout()?;
        let target = Target::open(path, &self.options)?;
        target
            .file()
            .set_len(plan.total_size())
            .map_err(|e| WriteError::io("size", target.path(), e))?;
        let sums = Checksums::new(&plan);
        let jobs = batches(self.entries, plan.slots(), |i| plan.rank(i));
        write_slots(
            jobs,
            plan.total_size(),
            &target,
            self.options.threads,
            &sums,
            self.progress.as_deref(),
        )?;
        // The head goes last: it carries the checksums of what was just written.
        write_all_at(target.file(), &plan.seal(&sums.values()), 0)
            .map_err(|e| WriteError::io("write", target.path(), e))?;
        target.finish_when(path, self.options.overwrite, ready)?;
        Ok(plan.total_size())
    }

    /// The pack's metadata as written: with checksums on, [`PRODUCER`] unless the caller
    /// named a producer.
    fn stamped(&self) -> std::borrow::Cow<'_, BTreeMap<String, String>> {
        stamped(&self.metadata, self.options.checksums)
    }
}

/// `metadata` as a pack with checksums (`checksums`) writes it: naming its producer, so
/// verification refuses a file of this crate whose `checksums` key was damaged away.
pub(crate) fn stamped(
    metadata: &BTreeMap<String, String>,
    checksums: bool,
) -> std::borrow::Cow<'_, BTreeMap<String, String>> {
    if checksums && !metadata.contains_key("producer") {
        let mut with_producer = metadata.clone();
        with_producer.insert("producer".into(), PRODUCER.into());
        std::borrow::Cow::Owned(with_producer)
    } else {
        std::borrow::Cow::Borrowed(metadata)
    }
}

/// `wanted` (tensors of `source`, in the order to write them) as entries: fetched first when
/// the source wants it, each read and checked against its checksum, its name without its
/// first `strip` bytes (a prefix already matched).
fn read_entries<S: crate::source::TensorSource + ?Sized>(
    source: &S,
    wanted: &[&crate::format::TensorInfo],
    strip: usize,
) -> Result<Vec<Entry>, crate::source::ReadError> {
    if source.wants_prefetch() {
        source.prefetch(wanted)?;
    }
    let mut entries = Vec::with_capacity(wanted.len());
    for &info in wanted {
        let bytes = source.read(info)?;
        source.check(info, &bytes)?;
        let entry = Entry::from_stored(info, bytes);
        entries.push(if strip == 0 {
            entry
        } else {
            entry.renamed(&info.name()[strip..])
        });
    }
    Ok(entries)
}
