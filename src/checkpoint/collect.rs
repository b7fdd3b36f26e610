//! What the data files of incremental checkpoints are kept for: the references each manifest
//! names, the listing a save keeps up to date, and the data
//! files no checkpoint names (collected after a save, after a delete).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::error::CheckpointError;
use super::refs::{self, REFS_KEY, Ref};
use super::storage::Storage;
use crate::source::PackSource;

/// The checkpoints and data files of a storage as one save found them: what each manifest
/// names (`None`: it could not be read), by step. Kept up to date through the save and its
/// retention, so that collecting data files reads no manifest a second time.
pub(crate) struct Listing {
    pub(crate) manifests: HashMap<u64, Option<Arc<HashSet<String>>>>,
    pub(crate) data: Vec<(u64, String)>,
}

impl Listing {
    /// The save of `step` wrote its manifest, naming `files`, some of them new.
    pub(crate) fn saved(&mut self, step: u64, files: HashSet<String>) {
        for file in &files {
            if let Some(s) = refs::data_step(file)
                && !self.data.iter().any(|(_, n)| n == file)
            {
                self.data.push((s, file.clone()));
            }
        }
        self.manifests.insert(step, Some(Arc::new(files)));
    }

    /// The checkpoint of `step` was deleted.
    pub(crate) fn deleted(&mut self, step: u64) {
        self.manifests.remove(&step);
    }

    /// The data files no checkpoint names (see [`garbage`]).
    pub(crate) fn garbage(&self) -> Vec<String> {
        let Some(newest) = self.manifests.keys().max().copied() else {
            return Vec::new();
        };
        let mut in_use: HashSet<&str> = HashSet::new();
        for files in self.manifests.values() {
            // What a manifest that cannot be read names is unknown: keep everything.
            let Some(files) = files else {
                return Vec::new();
            };
            in_use.extend(files.iter().map(String::as_str));
        }
        self.data
            .iter()
            .filter(|(step, name)| *step <= newest && !in_use.contains(name.as_str()))
            .map(|(_, name)| name.clone())
            .collect()
    }
}

/// The references of the manifest `name` with the hash of their text: `None` when it does not
/// open or parse, an empty list for a checkpoint that holds its tensors itself. Taken from
/// `previous` (a text hash and what it parsed to) when the text is the same. With `opened`,
/// the manifest is opened shared and kept there.
pub(crate) fn references<S: Storage>(
    storage: &S,
    name: &str,
    previous: Option<&(u128, Option<Arc<[Ref]>>)>,
    opened: Option<&mut Vec<Arc<S::Source>>>,
) -> Option<(u128, Arc<[Ref]>)> {
    let source = match opened {
        // Shared: the manager holds it until its next save.
        Some(opened) => {
            let source = storage.open_data_shared(&storage.location(name)).ok()?;
            opened.push(Arc::clone(&source));
            source
        }
        None => Arc::new(storage.open(&storage.location(name)).ok()?),
    };
    let Some(text) = source.layout().metadata().get(REFS_KEY) else {
        return Some((0, Arc::from(Vec::new())));
    };
    let key = refs::content_hash(text.as_bytes());
    if let Some((k, Some(list))) = previous
        && *k == key
    {
        return Some((key, Arc::clone(list)));
    }
    Some((key, refs::parse(text).ok()?.into()))
}

/// The data files of `storage` that no checkpoint names: `(name, location)`. Nothing when a
/// checkpoint cannot be read (what it names is unknown, so everything is kept), and never a
/// data file of a step after the newest checkpoint's (a save still writing its manifest).
pub(crate) fn garbage<S: Storage>(storage: &S) -> Result<Vec<S::Location>, CheckpointError> {
    unnamed(storage, None)
}

/// [`garbage`] once the checkpoint of step `deleted` was deleted by its owner's own strategy,
/// the storage held alone (no save of this manager in flight): the data files of that step
/// and before are collected too when no newer checkpoint is left (the last epoch deleted).
#[cfg(feature = "train")]
pub(crate) fn garbage_after_delete<S: Storage>(
    storage: &S,
    deleted: u64,
) -> Result<Vec<S::Location>, CheckpointError> {
    unnamed(storage, Some(deleted))
}

/// The data files no checkpoint names, of a step not after the newest checkpoint's (or
/// `deleted`, where later).
fn unnamed<S: Storage>(
    storage: &S,
    deleted: Option<u64>,
) -> Result<Vec<S::Location>, CheckpointError> {
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
        .filter(|n| refs::step_of(n).is_some())
        .collect();
    let newest = manifests.iter().filter_map(|n| refs::step_of(n)).max();
    let Some(newest) = newest.max(deleted) else {
        return Ok(Vec::new());
    };
    let mut in_use: HashSet<String> = HashSet::new();
    for name in manifests {
        // What a manifest that cannot be read names is unknown: keep everything.
        let Some((_, list)) = references(storage, name, None, None) else {
            return Ok(Vec::new());
        };
        in_use.extend(list.iter().map(|r| r.file.clone()));
    }
    Ok(data
        .into_iter()
        .filter(|(step, name)| *step <= newest && !in_use.contains(*name))
        .map(|(_, name)| storage.location(name))
        .collect())
}
