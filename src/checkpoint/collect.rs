//! What the data files of incremental checkpoints are kept for: the references each manifest
//! names (parsed once per manifest text), the listing a save keeps up to date, and the data
//! files no checkpoint names (collected after a save, after a delete).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::error::CheckpointError;
use super::refs::{self, REFS_KEY, Ref};
use super::storage::Storage;
use crate::source::PackSource;

/// The parsed references of the manifests a manager has read, by name, with the hash of the
/// text they were parsed from (a manifest rewritten since is parsed again). Shared by the
/// manager's clones.
#[derive(Default)]
pub(crate) struct Parsed(Mutex<HashMap<String, ParsedRefs>>);

impl Parsed {
    /// Forgets the manifests `listed` does not hold (the cache holds no more than the
    /// storage).
    pub(crate) fn forget_unlisted(&self, listed: &HashSet<&str>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|name, _| listed.contains(name.as_str()));
    }
}

/// The hash of a manifest's references text, and what it parses to.
type ParsedRefs = (u128, Arc<[Ref]>);

/// The checkpoints and data files of a storage as one save found them: what each manifest
/// names (`None`: it could not be read), by step. Kept up to date through the save and its
/// retention, so that collecting data files reads no manifest a second time.
pub(crate) struct Listing {
    pub(crate) manifests: HashMap<u64, Option<HashSet<String>>>,
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
        self.manifests.insert(step, Some(files));
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

/// The references of the manifest `name`: `None` when it does not open or parse, an empty list
/// for a checkpoint that holds its tensors itself. Taken from `parsed` when the manifest's
/// text is the one parsed before. With `opened`, the manifest is opened shared and kept there.
pub(crate) fn references<S: Storage>(
    storage: &S,
    name: &str,
    parsed: Option<&Parsed>,
    opened: Option<&mut Vec<Arc<S::Source>>>,
) -> Option<Arc<[Ref]>> {
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
        return Some(Arc::from(Vec::new()));
    };
    let Some(parsed) = parsed else {
        return refs::parse(text).ok().map(Arc::from);
    };
    let key = refs::content_hash(text.as_bytes());
    let mut cache = parsed
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((k, list)) = cache.get(name)
        && *k == key
    {
        return Some(Arc::clone(list));
    }
    let list: Arc<[Ref]> = refs::parse(text).ok()?.into();
    cache.insert(name.to_string(), (key, Arc::clone(&list)));
    Some(list)
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
        let Some(list) = references(storage, name, None, None) else {
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
