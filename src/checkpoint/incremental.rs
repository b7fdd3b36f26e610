//! Incremental saves: every tensor of a checkpoint hashed (XXH3-128), the ones a kept
//! checkpoint already holds referred to, the others written into one new data file, then the
//! manifest; and the collection of data files no kept checkpoint names.
//!
//! Order is what makes a crash harmless: the data file is complete and durable (written in
//! place under its new name, fsynced) before the manifest that names it exists, data files are never rewritten (each name is
//! new), and a data file is deleted only when no manifest in the storage names it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::collect::{Listing, Parsed, references};
use super::error::CheckpointError;
use super::namespace::{KIND_KEY, head};
use super::phases::Phases;
use super::refs::{self, DATA_KIND, INCREMENTAL_KEY, REFS_KEY, Ref};
use super::sightings::Sightings;
use super::state::PreparedState;
use super::storage::Storage;
use crate::source::{PackSource, TensorSource};
use crate::write::staged::STAGED_BYTES;
use crate::write::{Entry, Writer};

/// The tensors kept checkpoints hold, by content: dtype, shape and XXH3-128 of the bytes.
#[derive(Default)]
pub(crate) struct Index {
    by_hash: HashMap<u128, Vec<Known>>,
}

/// Where a tensor's bytes are: a line of a manifest's references, or a tensor this save
/// writes.
enum Known {
    Stored(Arc<[Ref]>, usize),
    Fresh {
        dtype: String,
        shape: Vec<usize>,
        file: String,
        stored_as: String,
    },
}

impl Known {
    fn is(&self, dtype: &str, shape: &[usize]) -> bool {
        match self {
            Known::Stored(refs, i) => refs[*i].dtype == dtype && refs[*i].shape == shape,
            Known::Fresh {
                dtype: d, shape: s, ..
            } => d == dtype && s == shape,
        }
    }

    /// Its data file, its name there, and the data file's checksum of it where known (a
    /// tensor this save writes has none until its data file is written).
    fn place(&self) -> (&str, &str, Option<u64>) {
        match self {
            Known::Stored(refs, i) => (&refs[*i].file, &refs[*i].stored_as, refs[*i].checksum),
            Known::Fresh {
                file, stored_as, ..
            } => (file, stored_as, None),
        }
    }
}

impl Index {
    /// The tensors of every checkpoint in `storage` that a save of `step` may refer to: those
    /// of the manifests' references whose data file the storage lists, is of a step not after
    /// `step` (a save below a newer checkpoint never leans on its files), opens, and holds the
    /// tensor as the reference records it, its checksum included. A reference without a
    /// recorded checksum (a manifest of the first layout) is not offered: nothing says its data
    /// file is the one it was written with, so the tensor is written again. A damaged or
    /// swapped data file thus costs one save that writes its tensors anew, never a save that
    /// refers to it. Each data file's head is read once. A manifest that does not open or
    /// parse adds nothing; a newer manifest's entry wins (its data file is the last one
    /// retention deletes). Also returns the manifests and data files it opened, shared
    /// ([`Storage::open_data_shared`]): a manager holds them until its next save, which then
    /// reads none of their heads again.
    pub(crate) fn of<S: Storage>(
        storage: &S,
        parsed: &Parsed,
        step: u64,
    ) -> Result<(Self, Listing, Vec<Arc<S::Source>>), CheckpointError> {
        let names = storage.names()?;
        let listed: HashSet<&str> = names.iter().map(String::as_str).collect();
        let mut manifests: Vec<(u64, &String)> = names
            .iter()
            .filter_map(|n| Some((refs::step_of(n)?, n)))
            .collect();
        manifests.sort_unstable();
        let mut index = Self::default();
        let mut listing = Listing {
            data: names
                .iter()
                .filter_map(|n| Some((refs::data_step(n)?, n.clone())))
                .collect(),
            manifests: HashMap::new(),
        };
        // Each data file's descriptors, as read once: `None` when it does not open.
        let mut heads: HashMap<String, Option<Arc<S::Source>>> = HashMap::new();
        let mut opened: Vec<Arc<S::Source>> = Vec::new();
        for (manifest_step, name) in manifests {
            let list = references(storage, name, Some(parsed), Some(&mut opened));
            let files = list
                .as_ref()
                .map(|l| l.iter().map(|r| r.file.clone()).collect());
            listing.manifests.insert(manifest_step, files);
            let Some(list) = list else { continue };
            for (i, r) in list.iter().enumerate() {
                if r.checksum.is_none() {
                    continue;
                }
                // Each data file is looked at once: listed, of a step not after `step`, and
                // its head (no name copied, no text made per reference).
                if !heads.contains_key(r.file.as_str()) {
                    let usable = listed.contains(r.file.as_str())
                        && refs::data_step(&r.file).is_some_and(|s| s <= step);
                    let head = usable
                        .then(|| storage.open_data_shared(&storage.location(&r.file)).ok())
                        .flatten();
                    heads.insert(r.file.clone(), head);
                }
                let holds = heads[r.file.as_str()].as_ref().is_some_and(|source| {
                    source.tensor(&r.stored_as).is_some_and(|t| {
                        t.checksum() == r.checksum
                            && t.shape() == r.shape.as_slice()
                            && refs::dtype_is(t.dtype(), &r.dtype)
                    })
                });
                if holds {
                    index.insert(r.hash, Known::Stored(Arc::clone(&list), i));
                }
            }
        }
        // Forget the manifests that are gone (the cache holds no more than the storage).
        parsed.forget_unlisted(&listed);
        opened.extend(heads.into_values().flatten());
        Ok((index, listing, opened))
    }

    fn insert(&mut self, hash: u128, known: Known) {
        let same = self.by_hash.entry(hash).or_default();
        match &known {
            Known::Stored(refs, i) => {
                let (dtype, shape) = (&refs[*i].dtype, &refs[*i].shape);
                same.retain(|k| !k.is(dtype, shape));
            }
            Known::Fresh { dtype, shape, .. } => same.retain(|k| !k.is(dtype, shape)),
        }
        same.push(known);
    }

    fn find(&self, dtype: &str, shape: &[usize], hash: u128) -> Option<&Known> {
        self.by_hash.get(&hash)?.iter().find(|k| k.is(dtype, shape))
    }
}

/// A tensor of the save, hashed: its bytes kept only when it must be written.
struct Hashed {
    entry: Entry,
    hash: u128,
}

/// Materializes and hashes `entries`, in parallel where there are threads; a tensor whose
/// bytes provably did not change since the last save keeps its hash unread.
fn hash_all(entries: Vec<Entry>, seen: &Sightings) -> Result<Vec<Hashed>, CheckpointError> {
    let one = |entry: Entry| -> Result<Hashed, CheckpointError> {
        let entry = entry.materialized()?;
        let hash = match seen.unchanged(&entry) {
            Some(hash) => hash,
            None => refs::content_hash(entry.bytes().unwrap_or_default()),
        };
        Ok(Hashed { entry, hash })
    };
    if crate::platform::threads_available() {
        use rayon::prelude::*;
        entries.into_par_iter().map(one).collect()
    } else {
        entries.into_iter().map(one).collect()
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
        for Hashed { entry, hash } in hash_all(entries, self.seen)? {
            let (dtype, shape) = (refs::dtype_text(entry.dtype()), entry.shape().to_vec());
            let known = self
                .known
                .find(&dtype, &shape, hash)
                .or_else(|| self.fresh.find(&dtype, &shape, hash));
            let (file, stored_as, checksum) = if let Some(k) = known {
                let (file, stored_as, checksum) = k.place();
                (file.to_string(), stored_as.to_string(), checksum)
            } else {
                self.fresh.insert(
                    hash,
                    Known::Fresh {
                        dtype: dtype.clone(),
                        shape: shape.clone(),
                        file: self.data_file.clone(),
                        stored_as: entry.name().to_string(),
                    },
                );
                (self.data_file.clone(), entry.name().to_string(), None)
            };
            self.refs.push(Ref {
                name: entry.name().to_string(),
                file,
                stored_as,
                param_id: entry.param_id(),
                dtype,
                shape,
                hash,
                checksum,
            });
            let written = self
                .refs
                .last()
                .is_some_and(|r| r.file == self.data_file && r.stored_as == r.name);
            self.seen.record(&entry, hash, written);
            if written {
                self.held.push(entry);
            }
        }
        Ok(())
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
    let mut written = Written::default();
    record_checksums(storage, &wrote, &mut batch.refs, &mut written)?;
    phases.lap("data file checksums", &mut since);
    let (mut metadata, scalars) = head(&options, scalars, metadata);
    metadata.insert(INCREMENTAL_KEY.to_string(), "1".to_string());
    metadata.insert(REFS_KEY.to_string(), refs::encode(&batch.refs));
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
    written.files = batch.refs.into_iter().map(|r| r.file).collect();
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
#[derive(Default)]
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
