//! Incremental saves: every tensor of a checkpoint hashed (XXH3-128), the ones a kept
//! checkpoint already holds referred to, the others written into one new data file, then the
//! manifest; and the collection of data files no kept checkpoint names.
//!
//! Order is what makes a crash harmless: the data file is complete (written atomically)
//! before the manifest that names it exists, data files are never rewritten (each name is
//! new), and a data file is deleted only when no manifest in the storage names it.

use std::collections::{BTreeMap, HashMap, HashSet};

use burn::tensor::DType;

use super::chain::Chain;
use super::error::CheckpointError;
use super::namespace::{KIND_KEY, head};
use super::refs::{self, DATA_KIND, INCREMENTAL_KEY, REFS_KEY, Ref};
use super::state::PreparedState;
use super::storage::Storage;
use crate::read::PackSource;
use crate::write::{Entry, Writer};

/// The tensors kept checkpoints hold, by content: dtype, shape and XXH3-128 of the bytes.
#[derive(Default)]
pub(crate) struct Index {
    by_hash: HashMap<u128, Vec<Known>>,
}

struct Known {
    dtype: DType,
    shape: Vec<usize>,
    file: String,
    stored_as: String,
}

impl Index {
    /// Adds every tensor of an opened chain (a later chain's entry wins: it is the newest
    /// file holding those bytes, the last one retention deletes).
    pub(crate) fn add<S: PackSource>(&mut self, chain: &Chain<S>) {
        for (info, file, stored_as, hash) in chain.known() {
            let known = self.by_hash.entry(hash).or_default();
            known.retain(|k| !(k.dtype == info.dtype() && k.shape == info.shape()));
            known.push(Known {
                dtype: info.dtype(),
                shape: info.shape().to_vec(),
                file: file.to_string(),
                stored_as: stored_as.to_string(),
            });
        }
    }

    fn find(&self, dtype: DType, shape: &[usize], hash: u128) -> Option<&Known> {
        self.by_hash
            .get(&hash)?
            .iter()
            .find(|k| k.dtype == dtype && k.shape == shape)
    }
}

/// A tensor of the save, hashed: its bytes kept only when it must be written.
struct Hashed {
    entry: Entry,
    hash: u128,
}

/// Materializes and hashes `entries`, in parallel where there are threads.
fn hash_all(entries: Vec<Entry>) -> Result<Vec<Hashed>, CheckpointError> {
    let one = |entry: Entry| -> Result<Hashed, CheckpointError> {
        let entry = entry.materialized()?;
        let hash = refs::content_hash(entry.bytes().unwrap_or_default());
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
    data_file: String,
    refs: Vec<Ref>,
    held: Vec<Entry>,
    /// This save's own new tensors, by content (two equal tensors of one save are written
    /// once).
    fresh: Index,
}

impl<'a> Batch<'a> {
    fn new(known: &'a Index, data_file: String) -> Self {
        Self {
            known,
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
        for Hashed { entry, hash } in hash_all(entries)? {
            let (dtype, shape) = (entry.dtype(), entry.shape().to_vec());
            let known = self
                .known
                .find(dtype, &shape, hash)
                .or_else(|| self.fresh.find(dtype, &shape, hash));
            let (file, stored_as) = if let Some(k) = known {
                (k.file.clone(), k.stored_as.clone())
            } else {
                self.fresh.by_hash.entry(hash).or_default().push(Known {
                    dtype,
                    shape,
                    file: self.data_file.clone(),
                    stored_as: entry.name().to_string(),
                });
                (self.data_file.clone(), entry.name().to_string())
            };
            self.refs.push(Ref {
                name: entry.name().to_string(),
                file,
                stored_as,
                param_id: entry.param_id(),
                hash,
            });
            if self
                .refs
                .last()
                .is_some_and(|r| r.file == self.data_file && r.stored_as == r.name)
            {
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
/// not hold into a new data file, then the manifest. Returns the data file's name, when one
/// was written.
pub(crate) fn write<S: Storage>(
    storage: &S,
    location: &S::Location,
    known: &Index,
    state: PreparedState,
) -> Result<Option<String>, CheckpointError> {
    let step = state.step();
    let at = storage.describe_location(location);
    let (model, records, options) = state.into_parts();
    let mut batch = Batch::new(known, refs::data_name(step, nonce()));
    // The model's tensors are hashed while Burn serializes the optimizer's record.
    let parts = if crate::platform::threads_available() {
        std::thread::scope(|scope| {
            let serializer = scope.spawn(move || records.serialize());
            let model = batch.add(&at, model);
            let parts = serializer.join().unwrap_or_else(|panic| {
                Err(CheckpointError::Panicked(crate::panic::message(&*panic)))
            });
            model.and(parts)
        })
    } else {
        batch.add(&at, model).and_then(|()| records.serialize())
    };
    let (rest, scalars, metadata) = parts?;
    batch.add(&at, rest)?;
    let Batch {
        data_file,
        refs,
        held,
        ..
    } = batch;
    let wrote = if held.is_empty() {
        None
    } else {
        let data = Writer::new(held)
            .options(options.write)
            .metadata(KIND_KEY, DATA_KIND);
        storage.write(&storage.location(&data_file), data)?;
        Some(data_file)
    };
    let (mut metadata, scalars) = head(&options, scalars, metadata);
    metadata.insert(INCREMENTAL_KEY.to_string(), "1".to_string());
    metadata.insert(REFS_KEY.to_string(), refs::encode(&refs));
    storage.write(location, manifest(&options, metadata, scalars))?;
    Ok(wrote)
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

/// The data files of `storage` that no checkpoint names: `(name, location)`. Nothing when a
/// checkpoint cannot be read (what it names is unknown, so everything is kept), and never a
/// data file of a step after the newest checkpoint's (a save still writing its manifest).
pub(crate) fn garbage<S: Storage>(storage: &S) -> Result<Vec<S::Location>, CheckpointError> {
    let names = storage.names()?;
    let data: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| Some((refs::data_step(n)?, n)))
        .collect();
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let manifests: Vec<&String> = names
        .iter()
        .filter(|n| super::manager::step_of(n).is_some())
        .collect();
    let Some(newest) = manifests
        .iter()
        .filter_map(|n| super::manager::step_of(n))
        .max()
    else {
        return Ok(Vec::new());
    };
    let mut in_use: HashSet<String> = HashSet::new();
    for name in manifests {
        let Ok(source) = storage.open(&storage.location(name)) else {
            return Ok(Vec::new());
        };
        if let Some(text) = source.layout().metadata().get(REFS_KEY) {
            let Ok(list) = refs::parse(text) else {
                return Ok(Vec::new());
            };
            in_use.extend(list.into_iter().map(|r| r.file));
        }
    }
    Ok(data
        .into_iter()
        .filter(|(step, name)| *step <= newest && !in_use.contains(*name))
        .map(|(_, name)| storage.location(name))
        .collect())
}
