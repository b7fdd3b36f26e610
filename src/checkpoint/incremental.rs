//! Incremental saves: every tensor of a checkpoint hashed (XXH3-128), the ones a kept
//! checkpoint already holds referred to, the others written into one new data file, then the
//! manifest; and the collection of data files no kept checkpoint names.
//!
//! Order is what makes a crash harmless: the data file is complete and durable (written in
//! place under its new name, fsynced) before the manifest that names it exists, data files are never rewritten (each name is
//! new), and a data file is deleted only when no manifest in the storage names it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::CheckpointError;
use super::known::{Index, Place};
use super::namespace::{KIND_KEY, head};
use super::phases::Phases;
use super::refs::{self, DATA_KIND, INCREMENTAL_KEY, REFS_KEY, Ref, Where};
use super::sightings::Sightings;
use super::state::PreparedState;
use super::storage::Storage;
use crate::source::{PackSource, TensorSource};
use crate::write::staged::STAGED_BYTES;
use crate::write::{Entry, Writer};

/// A tensor of the save, hashed: its bytes kept only when it must be written.
struct Hashed {
    entry: Entry,
    hash: u128,
    /// The hash was computed from these bytes now (not remembered from an earlier save).
    read: bool,
}

/// Materializes and hashes `entries`, in parallel where there are threads; a tensor whose
/// bytes provably did not change since the last save keeps its hash unread.
fn hash_all(entries: Vec<Entry>, seen: &Sightings) -> Result<Vec<Hashed>, CheckpointError> {
    /// Below this many bytes to hash, one thread does it: handing a few megabytes of small
    /// tensors to the pool costs more than it saves (measured by the incremental benchmark).
    const PARALLEL_BYTES: u64 = 64 << 20;
    let entries = entries
        .into_iter()
        .map(Entry::materialized)
        .collect::<Result<Vec<_>, _>>()?;
    let known = seen.unchanged_all(&entries);
    let bytes: u64 = entries
        .iter()
        .zip(&known)
        .filter(|(_, hash)| hash.is_none())
        .map(|(entry, _)| entry.len())
        .sum();
    let found: Vec<(Entry, Option<u128>)> = entries.into_iter().zip(known).collect();
    let one = |(entry, hash): (Entry, Option<u128>)| {
        let read = hash.is_none();
        let hash = hash.unwrap_or_else(|| refs::content_hash(entry.bytes().unwrap_or_default()));
        Hashed { entry, hash, read }
    };
    if bytes >= PARALLEL_BYTES && crate::platform::threads_available() {
        use rayon::prelude::*;
        Ok(found.into_par_iter().map(one).collect())
    } else {
        Ok(found.into_iter().map(one).collect())
    }
}

/// What one save writes: the references of all its tensors, and the entries of the new data
/// file.
struct Batch<'a> {
    known: &'a Index,
    seen: &'a Sightings,
    data_file: String,
    refs: Vec<Ref>,
    held: Vec<Entry>,
    /// This save's own new tensors, by content (two equal tensors of one save are written
    /// once).
    fresh: Index,
    /// The dtype text last made.
    dtype: Option<(burn::tensor::DType, String)>,
}

impl<'a> Batch<'a> {
    fn new(known: &'a Index, seen: &'a Sightings, data_file: String) -> Self {
        Self {
            known,
            seen,
            data_file,
            refs: Vec::new(),
            held: Vec::new(),
            fresh: Index::default(),
            dtype: None,
        }
    }

    fn add(&mut self, location: &str, entries: Vec<Entry>) -> Result<(), CheckpointError> {
        if let Some(bad) = entries.iter().find(|e| !refs::nameable(e.name())) {
            return Err(CheckpointError::Invalid {
                file: location.to_string(),
                what: format!(
                    "tensor {:?}: a name with a tab or a line break cannot be recorded by an incremental checkpoint",
                    bad.name()
                ),
            });
        }
        let hashed = hash_all(entries, self.seen)?;
        let mut written = Vec::with_capacity(hashed.len());
        for Hashed { entry, hash, .. } in &hashed {
            let dtype = self.dtype_text(entry.dtype());
            let shape = entry.shape();
            let known = self
                .known
                .find(&dtype, shape, *hash)
                .or_else(|| self.fresh.find(&dtype, shape, *hash));
            let (file, stored_as, checksum, at) = if let Some(k) = known {
                let (file, stored_as, checksum, at) = k.place();
                (file.to_string(), stored_as.to_string(), checksum, at)
            } else {
                self.fresh.insert(
                    *hash,
                    Place::Fresh {
                        dtype: dtype.clone(),
                        shape: shape.to_vec(),
                        file: self.data_file.clone(),
                        stored_as: entry.name().to_string(),
                    },
                );
                (self.data_file.clone(), entry.name().to_string(), None, None)
            };
            written.push(file == self.data_file && stored_as == entry.name());
            self.refs.push(Ref {
                name: entry.name().to_string(),
                file,
                stored_as,
                param_id: entry.param_id(),
                dtype,
                shape: shape.to_vec(),
                hash: *hash,
                checksum,
                at,
            });
        }
        self.seen.record_all(
            hashed
                .iter()
                .zip(&written)
                .map(|(h, &written)| (&h.entry, h.hash, written)),
        );
        for (h, written) in hashed.into_iter().zip(written) {
            if written {
                let mut entry = h.entry;
                // Past 240 bytes, XXH3-64 of the bytes is the low half of their XXH3-128 (the
                // same accumulators, merged with the same secret): the data file's checksum
                // is taken from the content hash, the bytes are hashed once. Only a hash of
                // these bytes, read now: a remembered one leaves the writer its own check.
                if h.read && entry.len() > 240 {
                    entry.known_checksum = Some(h.hash as u64);
                }
                self.held.push(entry);
            }
        }
        Ok(())
    }

    /// [`refs::dtype_text`] of `dtype`, made once for a run of tensors of one dtype.
    fn dtype_text(&mut self, dtype: burn::tensor::DType) -> String {
        match &self.dtype {
            Some((last, text)) if *last == dtype => text.clone(),
            _ => {
                let text = refs::dtype_text(dtype);
                self.dtype = Some((dtype, text.clone()));
                text
            }
        }
    }
}

/// A number that makes a data file's name unique among the saves of one step.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(crate::platform::process_id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// Writes `state` as an incremental checkpoint at `location`: the tensors that `known` does
/// not hold into new data files (the model's while Burn serializes the optimizer's record on
/// another thread, then the optimizer's: the two overlap as in a full checkpoint), then the
/// manifest. Returns what it wrote.
pub(crate) fn write<S: Storage>(
    storage: &S,
    location: &S::Location,
    known: &Index,
    seen: &Sightings,
    state: PreparedState,
) -> Result<Written, CheckpointError> {
    let step = state.step();
    let at = storage.describe_location(location);
    let (model, records, options) = state.into_parts();
    let mut batch = Batch::new(known, seen, refs::data_name(step, nonce()));
    let mut phases = Phases::default();
    // The data files this save wrote, by name, and their syncs under way.
    let mut wrote: Vec<String> = Vec::new();
    let mut syncs: Vec<Syncing> = Vec::new();
    // Adds a part's tensors to the batch; writes the new ones into a data file of their own
    // when `last` or when there are enough of them to be worth writing while the optimizer's
    // record is still being serialized (a few megabytes of adapters wait for the optimizer's
    // tensors and share their file: one atomic write fewer).
    let part = |batch: &mut Batch<'_>, entries: Vec<Entry>, last: bool| {
        let mut since = Instant::now();
        batch.add(&at, entries)?;
        phases.lap("hashing + lookup", &mut since);
        let bytes: u64 = batch.held.iter().map(Entry::len).sum();
        if batch.held.is_empty() || !last && bytes < STAGED_BYTES {
            return Ok::<(), CheckpointError>(());
        }
        let held = std::mem::take(&mut batch.held);
        let file = std::mem::replace(&mut batch.data_file, refs::data_name(step, nonce()));
        let data = Writer::new(held)
            .options(options.write)
            .metadata(KIND_KEY, DATA_KIND);
        let at = storage.location(&file);
        storage.write_data(&at, data)?;
        phases.lap("data file write", &mut since);
        // Its fsync overlaps what follows (the manifest's write and fsync), which waits
        // for it before the manifest is published.
        syncs.push(sync_data(storage, at));
        wrote.push(file);
        Ok(())
    };
    let mut part = part;
    // The time the save waited for the optimizer's record after the model's part.
    let mut waited = Duration::ZERO;
    let parts = if crate::platform::threads_available() {
        std::thread::scope(|scope| {
            let serializer = scope.spawn(move || records.serialize());
            let model = part(&mut batch, model, false);
            let since = Instant::now();
            let parts = serializer.join().unwrap_or_else(|panic| {
                Err(CheckpointError::Panicked(crate::panic::message(&*panic)))
            });
            waited = since.elapsed();
            model.and(parts)
        })
    } else {
        part(&mut batch, model, false).and_then(|()| {
            let since = Instant::now();
            let parts = records.serialize();
            waited = since.elapsed();
            parts
        })
    };
    let (rest, scalars, metadata) = parts?;
    part(&mut batch, rest, true)?;
    drop(part);
    phases.add("optimizer record (waited for)", waited);
    let mut since = Instant::now();
    let mut written = Written {
        files: HashSet::new(),
        new_files: Vec::new(),
        held: 0,
        referred: 0,
        phases: Phases::default(),
        refs: (0, Arc::from(Vec::new())),
    };
    record_checksums(storage, &wrote, &mut batch.refs, &mut written)?;
    phases.lap("data file checksums", &mut since);
    let (mut metadata, scalars) = head(&options, scalars, metadata);
    metadata.insert(INCREMENTAL_KEY.to_string(), "1".to_string());
    // Sorted by name, as a reader wants them (it then checks the order in one pass).
    batch.refs.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let text = refs::encode(&batch.refs);
    let text_hash = refs::content_hash(text.as_bytes());
    metadata.insert(REFS_KEY.to_string(), text);
    // The manifest's own write and fsync overlap the data files'; it is published (renamed,
    // then the directory synced: the data files' names with it) once they are durable.
    let mut synced = Duration::ZERO;
    storage.write_when(location, manifest(&options, metadata, scalars), || {
        let start = Instant::now();
        let all = syncs.into_iter().try_for_each(Syncing::wait);
        synced = start.elapsed();
        all
    })?;
    phases.lap("manifest write + fsync + commit", &mut since);
    phases.add("  of which waiting for the data file fsync", synced);
    written.files = batch.refs.iter().map(|r| r.file.clone()).collect();
    written.refs = (text_hash, batch.refs.into());
    written.phases = phases;
    Ok(written)
}

/// A data file's fsync: on a thread of its own where there are threads, done already
/// otherwise.
enum Syncing {
    Thread(std::thread::JoinHandle<Result<(), CheckpointError>>),
    Done(Result<(), CheckpointError>),
}

impl Syncing {
    /// Waits for the sync; its error, or the panic of its thread as one.
    fn wait(self) -> Result<(), CheckpointError> {
        match self {
            Self::Thread(handle) => handle.join().unwrap_or_else(|panic| {
                Err(CheckpointError::Panicked(crate::panic::message(&*panic)))
            }),
            Self::Done(result) => result,
        }
    }
}

/// Starts the fsync of the data file at `at` (see [`Storage::sync_data`]).
fn sync_data<S: Storage>(storage: &S, at: S::Location) -> Syncing {
    if crate::platform::threads_available() {
        let (thread_storage, thread_at) = (storage.clone(), at.clone());
        let spawned = std::thread::Builder::new()
            .name("burnpack-sync".into())
            .spawn(move || thread_storage.sync_data(&thread_at));
        if let Ok(handle) = spawned {
            return Syncing::Thread(handle);
        }
    }
    // No threads here (or none could be started): sync at once.
    Syncing::Done(storage.sync_data(&at))
}

/// What an incremental save wrote: the data files its manifest names, the ones it wrote, and
/// how many tensors it held and referred to.
pub(crate) struct Written {
    /// Every data file the manifest names.
    pub(crate) files: HashSet<String>,
    /// The data files this save wrote, with their sizes.
    pub(crate) new_files: Vec<(String, u64)>,
    /// Tensors whose bytes this save wrote.
    pub(crate) held: usize,
    /// Tensors it refers to in data files of earlier saves.
    pub(crate) referred: usize,
    /// Where the save's time went, part by part.
    pub(crate) phases: Phases,
    /// The manifest's references, with the hash of their text.
    pub(crate) refs: (u128, Arc<[Ref]>),
}

/// Fills in the data file checksum of each tensor this save wrote (the new data files'
/// descriptors; the references it reuses carry theirs, checked by [`Index::of`]). Reads the
/// head of each new data file once; counts what the save wrote into `written`.
fn record_checksums<S: Storage>(
    storage: &S,
    wrote: &[String],
    refs: &mut [Ref],
    written: &mut Written,
) -> Result<(), CheckpointError> {
    let mut wanted: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in refs.iter().enumerate() {
        if wrote.contains(&r.file) {
            written.held += 1;
            wanted.entry(r.file.clone()).or_default().push(i);
        } else {
            written.referred += 1;
        }
    }
    for (file, lines) in wanted {
        let at = storage.location(&file);
        let source = storage
            .open_data(&at)
            .map_err(|e| CheckpointError::Invalid {
                file: storage.describe_location(&at),
                what: format!("a data file this save wrote does not open: {e}"),
            })?;
        written
            .new_files
            .push((file.clone(), source.layout().file_len()));
        for i in lines {
            let r = &mut refs[i];
            let stored = source
                .tensor(&r.stored_as)
                .ok_or_else(|| CheckpointError::Invalid {
                    file: storage.describe_location(&at),
                    what: format!("holds no tensor '{}'", r.stored_as),
                })?;
            r.checksum = stored.checksum();
            r.at = source.layout().head_checksum().map(|head| Where {
                offset: stored.offset(),
                head,
            });
        }
    }
    Ok(())
}

fn manifest(
    options: &crate::module::SaveOptions,
    metadata: BTreeMap<String, String>,
    scalars: BTreeMap<String, crate::format::Scalar>,
) -> Writer {
    let mut writer = Writer::new(Vec::new()).options(options.write);
    for (k, v) in metadata {
        writer = writer.metadata(k, v);
    }
    for (k, v) in scalars {
        writer = writer.scalar(k, v);
    }
    writer
}
