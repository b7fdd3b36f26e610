//! What an incremental save remembers of the tensors it saw: the buffer each was borrowed from
//! (weakly) and its hash, so that a tensor provably unchanged is not hashed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use burn::tensor::{Bytes, DType};

use crate::write::Entry;

/// What the manager remembers of the tensors it last saw, by name: the CPU buffer a tensor
/// was borrowed from (weakly: the buffer is not kept alive) and the hash of its bytes then.
///
/// # Why a sighting proves the bytes unchanged
///
/// A CPU tensor's buffer (Burn's flex backend) is an `Arc`; the backend writes into one only
/// through `Arc::make_mut` (which, when weak references exist, moves the value to a new
/// allocation, so that they no longer upgrade) or `Arc::get_mut` (which refuses while a weak
/// reference exists). So while a `Weak` to the buffer upgrades to the very allocation the
/// tensor holds now, no byte of it was written since it was hashed: the hash is reused
/// without reading the buffer. Anything else (GPU tensors, read back at each save; ndarray's;
/// a buffer replaced or written) is hashed. A sighting is kept only for tensors a save found
/// unchanged (or saw for the first time): a tensor found changed is marked so for good (a
/// trained parameter), and its in-place updates are not turned into copies after that.
#[derive(Default)]
pub(crate) struct Sightings(Mutex<HashMap<String, Sighting>>);

enum Sighting {
    /// Its buffer when it was hashed, and the hash.
    Seen {
        storage: Weak<Bytes>,
        len: usize,
        dtype: DType,
        shape: Vec<usize>,
        hash: u128,
    },
    /// It changed between two saves: hashed at every save, never watched again.
    Changes,
}

impl Sightings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sighting>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The hash of each of `entries`' bytes where they provably did not change since it was
    /// taken, under one lock.
    pub(crate) fn unchanged_all<'e>(
        &self,
        entries: impl IntoIterator<Item = &'e Entry>,
    ) -> Vec<Option<u128>> {
        let seen = self.lock();
        entries.into_iter().map(|e| unchanged(&seen, e)).collect()
    }

    /// Records what a save found, under one lock: each entry hashed to its hash; `written`
    /// when its bytes were new (after an earlier sighting: a tensor that changes, never watched
    /// again).
    pub(crate) fn record_all<'e>(&self, found: impl IntoIterator<Item = (&'e Entry, u128, bool)>) {
        let mut seen = self.lock();
        for (entry, hash, written) in found {
            record(&mut seen, entry, hash, written);
        }
    }
}

fn unchanged(seen: &HashMap<String, Sighting>, entry: &Entry) -> Option<u128> {
    let (storage, len) = entry.shared_storage()?;
    let Some(Sighting::Seen {
        storage: then,
        len: then_len,
        dtype,
        shape,
        hash,
    }) = seen.get(entry.name())
    else {
        return None;
    };
    let same = *then_len == len
        && *dtype == entry.dtype()
        && shape == entry.shape()
        && then.upgrade().is_some_and(|now| Arc::ptr_eq(&now, storage));
    same.then_some(*hash)
}

fn record(seen: &mut HashMap<String, Sighting>, entry: &Entry, hash: u128, written: bool) {
    let Some((storage, len)) = entry.shared_storage() else {
        seen.remove(entry.name());
        return;
    };
    let sighting = || Sighting::Seen {
        storage: Arc::downgrade(storage),
        len,
        dtype: entry.dtype(),
        shape: entry.shape().to_vec(),
        hash,
    };
    // Updated in place where known (no name allocated again at every save).
    match seen.get_mut(entry.name()) {
        Some(Sighting::Changes) => {}
        Some(then @ Sighting::Seen { .. }) if written => *then = Sighting::Changes,
        Some(then) => *then = sighting(),
        None => {
            seen.insert(entry.name().to_string(), sighting());
        }
    }
}
