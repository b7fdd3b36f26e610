//! Incremental checkpoints a manager opened, weakly: opened again while one is still held,
//! with its manifest and data files unchanged and settled, an incremental checkpoint is the
//! one held (its references parsed once, its data files mapped once), not opened anew.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::chain::Chain;
use super::storage::Storage;
use crate::source::PackSource;

/// The incremental checkpoints a manager (and its clones) opened and someone still holds.
pub(super) struct Opened<St: Storage> {
    chains: Mutex<Vec<Entry<St::Source>>>,
}

struct Entry<Src: PackSource> {
    /// The manifest, as the storage describes its location.
    manifest: String,
    /// Its settled fingerprint, taken before it was opened.
    fingerprint: u128,
    chain: Weak<Chain<Src>>,
}

impl<St: Storage> Default for Opened<St> {
    fn default() -> Self {
        Self {
            chains: Mutex::default(),
        }
    }
}

impl<St: Storage> Opened<St> {
    /// The chain of the manifest at `location` opened earlier and still held, when the
    /// manifest's settled fingerprint is still `fingerprint` and each data file's is the one
    /// taken before it was opened.
    pub(super) fn find(
        &self,
        storage: &St,
        location: &St::Location,
        fingerprint: u128,
    ) -> Option<Arc<Chain<St::Source>>> {
        let manifest = storage.describe_location(location);
        // Every live open of this manifest as it is: one whose data file was replaced since
        // may sit beside one opened after (each is checked, outside the lock).
        let candidates: Vec<Arc<Chain<St::Source>>> = self
            .chains
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| e.fingerprint == fingerprint && e.manifest == manifest)
            .filter_map(|e| e.chain.upgrade())
            .collect();
        candidates.into_iter().find(|chain| {
            chain.data_fingerprints().all(|(name, was)| {
                was.is_some() && storage.settled_fingerprint(&storage.location(name)) == was
            })
        })
    }

    /// Offers `chain`, opened from the manifest at `location` whose settled fingerprint was
    /// `fingerprint` before it was opened, to later opens (when each of its data files had a
    /// settled fingerprint too). Entries no one holds any more are dropped.
    pub(super) fn keep(
        &self,
        storage: &St,
        location: &St::Location,
        fingerprint: u128,
        chain: &Arc<Chain<St::Source>>,
    ) {
        if chain.data_fingerprints().any(|(_, was)| was.is_none()) {
            return;
        }
        let mut chains = self.chains.lock().unwrap_or_else(PoisonError::into_inner);
        chains.retain(|e| e.chain.strong_count() > 0);
        chains.push(Entry {
            manifest: storage.describe_location(location),
            fingerprint,
            chain: Arc::downgrade(chain),
        });
    }
}
