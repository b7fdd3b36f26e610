//! The checkpoint manager, written once over a [`Storage`] backend: save by step, list,
//! latest, retention, the refusal to save behind a newer checkpoint, rollback, and the count
//! of background saves that `latest` waits for.

use std::sync::{Arc, PoisonError};

use burn::module::Module;

use super::collect;
use super::error::{CheckpointError, Skipped};
use super::file::Checkpoint;
use super::in_flight::{InFlight, InFlightGuard};
use super::incremental;
use super::known::Known;
use super::opened::Opened;
use super::phases::Phases;
pub use super::phases::SaveReport;
use super::refs::{self, checkpoint_name, step_of};
use super::retention::{Retention, newer_valid};
use super::sightings::Sightings;
use super::state::{PreparedState, TrainingState};
use super::storage::Storage;
use crate::source::{PackSource, TensorSource};

/// Keeps checkpoints in a [`Storage`] as `ckpt-00000000000000000007.bpk` for step 7 (the step
/// zero-padded to 20 digits, so that names sort in step order): saves refuse to land behind a
/// newer valid checkpoint, retention runs after each successful save (the last `keep_last`,
/// the newest valid one, optionally the best by a progress metric), [`latest`](Self::latest)
/// skips what does not open as a checkpoint and waits for saves still running in the
/// background. [`CheckpointManager`](super::CheckpointManager) is this over a directory;
/// `RemoteCheckpointManager` (feature `object-store`) over a bucket prefix; see [`Storage`]
/// for a backend of one's own.
#[derive(Clone)]
pub struct Manager<S: Storage> {
    storage: S,
    retention: Retention,
    /// Whether saves write only the tensors kept checkpoints do not hold already.
    incremental: bool,
    /// The tensors the last incremental save saw (shared by clones: the async saver's).
    seen: Arc<Sightings>,
    /// What the last incremental save knew of the storage (shared by clones): the next reads
    /// only what changed since.
    known: Arc<std::sync::Mutex<Known>>,
    /// Saves of this manager (and its clones) still being written in the background.
    in_flight: Arc<InFlight>,
    /// Held by whichever save, retention or rollback of this manager (or of a clone) is
    /// changing the storage: a background save and a save on the calling thread never
    /// interleave, so one's retention never collects the data file the other has written and
    /// not yet named.
    writing: Arc<std::sync::Mutex<()>>,
    /// The manifests and data files the last incremental save opened (shared: see
    /// [`Storage::open_data_shared`]), held until the next save: that save, and the opens of
    /// this process, find their heads parsed and their mappings made.
    held: Arc<std::sync::Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>>,
    /// The incremental checkpoints this manager (or a clone) opened, weakly: one opened again
    /// while held, unchanged, is shared.
    opened: Arc<Opened<S>>,
}

impl<S: Storage> Manager<S> {
    /// A manager of `storage`, keeping the last 3 checkpoints by default.
    #[must_use]
    pub fn with_storage(storage: S) -> Self {
        Self {
            storage,
            retention: Retention::default(),
            incremental: false,
            seen: Arc::default(),
            known: Arc::default(),
            in_flight: Arc::default(),
            writing: Arc::default(),
            held: Arc::default(),
            opened: Arc::default(),
        }
    }

    /// The storage to change alone (see `writing`).
    fn alone(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The backend.
    #[must_use]
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The backend, to change its settings.
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Keeps the `n` most recent checkpoints (at least 1).
    #[must_use]
    pub fn keep_last(mut self, n: usize) -> Self {
        self.retention = self.retention.keep_last(n);
        self
    }

    /// Also keeps the checkpoint with the best `progress.<metric>` (lowest if
    /// `lower_is_better`, else highest).
    #[must_use]
    pub fn keep_best(mut self, metric: impl Into<String>, lower_is_better: bool) -> Self {
        self.retention = self.retention.keep_best(metric, lower_is_better);
        self
    }

    /// Turns incremental saves on or off (off by default). An incremental save hashes every
    /// tensor (XXH3-128 of its bytes; with its dtype and shape, its identity) and writes only
    /// those that no checkpoint in the storage holds already (a frozen base under trained
    /// adapters is written once), into a data file `data-<step>-<nonce>.bpk`; the checkpoint
    /// (`ckpt-00000000000000000007.bpk` for step 7) is then a small manifest naming where each
    /// tensor is. Retention deletes a data file only when no checkpoint names it; a checkpoint
    /// loads (zero-copy)
    /// from the data files it names, and `bpk convert` turns it into one self-contained pack.
    ///
    /// Off by default: a full checkpoint is one file that stands alone (copied by itself,
    /// read by Burn's own reader), and where every tensor changes (full training) skipping
    /// saves nothing. Turn it on for fine-tuning. See docs/format.md, "Incremental
    /// checkpoints".
    ///
    /// ```
    /// use burnpack::checkpoint::CheckpointManager;
    /// let dir = tempfile::tempdir().unwrap();
    /// let manager = CheckpointManager::new(dir.path()).unwrap().incremental(true);
    /// assert!(manager.is_incremental());
    /// ```
    #[must_use]
    pub fn incremental(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// Whether saves are incremental.
    #[must_use]
    pub fn is_incremental(&self) -> bool {
        self.incremental
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn location(&self, step: u64) -> S::Location {
        self.storage.location(&checkpoint_name(step))
    }

    /// Saves `state` as the checkpoint of its progress step (visible whole or not at all),
    /// checks that what it wrote opens as a checkpoint, then applies retention. Returns what
    /// it wrote: where, how many bytes, how many tensors it held and referred to.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let manager = CheckpointManager::new(dir.path()).unwrap().incremental(true);
    /// let model = Tiny { w: Param::from_data([1.0, 2.0], &Device::flex()) };
    /// let first = manager.save(TrainingState::new(&model, Progress::new(0, 1))).unwrap();
    /// assert_eq!((first.tensors_written, first.tensors_referred), (1, 0));
    /// // Nothing changed: the second checkpoint refers to the first one's bytes.
    /// let second = manager.save(TrainingState::new(&model, Progress::new(0, 2))).unwrap();
    /// assert_eq!((second.tensors_written, second.tensors_referred), (0, 1));
    /// assert!(second.data_files_written.is_empty());
    /// assert_eq!(second.location, manager.path_for(2));
    /// ```
    ///
    /// # Errors
    /// [`CheckpointError::NewerExists`] when the storage holds a valid checkpoint of a later
    /// step (retention would delete the new one at once; nothing is written then), the save
    /// failed (nothing is deleted then), what it wrote does not open as a checkpoint (nothing
    /// is deleted then either, and [`latest`](Self::latest) names it as passed over), or
    /// retention could not delete a checkpoint.
    pub fn save<M: Module>(
        &self,
        state: TrainingState<'_, M>,
    ) -> Result<SaveReport<S::Location>, CheckpointError> {
        let start = std::time::Instant::now();
        self.check_newer(state.progress.step)?;
        let checked = start.elapsed();
        let prepared = state.prepare()?;
        let prepare = start.elapsed() - checked;
        let mut report = self.write(prepared)?;
        if !report.phases.is_empty() {
            let mut phases = vec![
                ("newer checkpoint check", checked),
                ("state prepare", prepare),
            ];
            phases.append(&mut report.phases);
            report.phases = phases;
        }
        Ok(report)
    }

    /// Writes a prepared state as the checkpoint of its step, checks that it opens, then
    /// applies retention (the newer-checkpoint check was made by the caller).
    pub(crate) fn write(
        &self,
        state: PreparedState,
    ) -> Result<SaveReport<S::Location>, CheckpointError> {
        let step = state.step();
        let location = self.location(step);
        let _alone = self.alone();
        if self.incremental {
            let mut since = std::time::Instant::now();
            // What is known is put back only by a save that succeeds: after a failure, the
            // next save reads everything again.
            let mut kept = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            let mut known = std::mem::take(&mut *kept);
            let mut opened = Vec::new();
            let (index, mut listing) = known.refresh(&self.storage, step, &mut opened)?;
            let index_time = since.elapsed();
            let written = incremental::write(&self.storage, &location, index, &self.seen, state)?;
            let mut phases = Phases::default();
            phases.add("listing + changed manifests read (index)", index_time);
            phases.0.extend(written.phases.0);
            since = std::time::Instant::now();
            // The manifest's fingerprint before it is read back: kept only where what is read
            // is what this save wrote (another writer may have saved the same step since).
            let print = self.storage.fingerprint(&location);
            let checkpoint = self.reopen(&location)?;
            let ours = checkpoint
                .source()
                .layout()
                .metadata()
                .get(refs::REFS_KEY)
                .is_some_and(|text| refs::content_hash(text.as_bytes()) == written.refs.0);
            if let Some(chain) = checkpoint.chain() {
                opened.extend(chain.data_sources().cloned());
            }
            // Held only where a mapped file can be deleted: retention and the collection
            // below (and the next save's) delete files these map.
            let held = if crate::platform::MAPPED_FILES_REMOVABLE {
                opened
                    .into_iter()
                    .map(|source| source as Arc<dyn std::any::Any + Send + Sync>)
                    .collect()
            } else {
                Vec::new()
            };
            *self.held.lock().unwrap_or_else(PoisonError::into_inner) = held;
            phases.lap("reopen check", &mut since);
            let report = SaveReport {
                location: location.clone(),
                step,
                bytes_written: written.new_files.iter().map(|(_, n)| n).sum::<u64>()
                    + checkpoint.source().layout().file_len(),
                tensors_written: written.held,
                tensors_referred: written.referred,
                data_files_written: written.new_files.into_iter().map(|(n, _)| n).collect(),
                phases: Vec::new(),
            };
            let new = report
                .data_files_written
                .iter()
                .map(|name| {
                    let print = self.storage.fingerprint(&self.storage.location(name));
                    (name.clone(), print)
                })
                .collect();
            let (text, refs) = written.refs;
            known.saved(
                step,
                checkpoint_name(step),
                print.filter(|_| ours),
                text,
                refs,
                new,
            );
            listing.saved(step, written.files);
            // Retention as `retain`, with the manifests read once, above; the checkpoint just
            // saved, opened above, is not opened again.
            let all = self.steps()?;
            let mut saved = Some(checkpoint);
            let open = |c: &(u64, S::Location)| {
                if c.0 == step
                    && let Some(checkpoint) = saved.take()
                {
                    return Some(checkpoint);
                }
                self.open(&c.1)
            };
            for (step, location) in self.retention.doomed(&all, |c| c.0, open) {
                self.storage.delete(location)?;
                listing.deleted(*step);
            }
            phases.lap("retention", &mut since);
            for name in listing.garbage() {
                self.storage.delete(&self.storage.location(&name))?;
            }
            phases.lap("collection", &mut since);
            *kept = known;
            drop(listing);
            Ok(SaveReport {
                phases: phases.0,
                ..report
            })
        } else {
            self.storage.write_state(&location, state)?;
            let checkpoint = self.reopen(&location)?;
            let report = SaveReport {
                location,
                step,
                bytes_written: checkpoint.source().layout().file_len(),
                tensors_written: checkpoint.source().tensors().len(),
                tensors_referred: 0,
                data_files_written: Vec::new(),
                phases: Vec::new(),
            };
            self.retain_alone()?;
            Ok(report)
        }
    }

    /// Opens the checkpoint a save just wrote at `location`: a save that wrote what does not
    /// open fails, naming why, rather than return `Ok` for a checkpoint `latest` would pass
    /// over.
    fn reopen(&self, location: &S::Location) -> Result<Checkpoint<S::Source>, CheckpointError> {
        self.open_anew(location)
            .map_err(|e| CheckpointError::Invalid {
                file: self.storage.describe_location(location),
                what: format!(
                    "the checkpoint just saved does not open ({e}); it is left in place, \
                     retention did not run, and `latest` passes over it"
                ),
            })
    }

    /// Refuses `step` when a valid checkpoint of a later step is in the storage.
    pub(crate) fn check_newer(&self, step: u64) -> Result<(), CheckpointError> {
        let all = self.steps()?;
        match newer_valid(&all, step, |c| c.0, |c| self.open(&c.1)) {
            Some((newer_step, newer)) => Err(CheckpointError::NewerExists {
                dir: self.storage.describe(),
                step,
                newer_step: *newer_step,
                newer: self.storage.describe_location(newer),
            }),
            None => Ok(()),
        }
    }

    /// Counts a background save as in flight until the guard is dropped; [`latest`](Self::latest)
    /// waits for it.
    pub(crate) fn begin_background(&self) -> InFlightGuard {
        self.in_flight.begin()
    }

    /// The checkpoints in the storage, oldest step first.
    ///
    /// # Errors
    /// The storage cannot be listed.
    pub fn list(&self) -> Result<Vec<S::Entry>, CheckpointError> {
        Ok(self
            .steps()?
            .into_iter()
            .map(|(step, location)| S::entry(step, location))
            .collect())
    }

    /// `(step, location)` of every checkpoint, oldest step first.
    fn steps(&self) -> Result<Vec<(u64, S::Location)>, CheckpointError> {
        let mut out: Vec<(u64, S::Location)> = self
            .storage
            .names()?
            .iter()
            .filter_map(|name| Some((step_of(name)?, self.storage.location(name))))
            .collect();
        out.sort_by_key(|c| c.0);
        Ok(out)
    }

    /// The checkpoint at `location`, when it opens as one.
    fn open(&self, location: &S::Location) -> Option<Checkpoint<S::Source>> {
        self.try_open(location).ok()
    }

    /// The checkpoint at `location`, or why it does not open as one. An incremental
    /// checkpoint held since an earlier open, its files unchanged and settled
    /// ([`Storage::settled_fingerprint`]), is shared, not opened again.
    fn try_open(&self, location: &S::Location) -> Result<Checkpoint<S::Source>, CheckpointError> {
        let Some(fingerprint) = self.storage.settled_fingerprint(location) else {
            return self.open_anew(location);
        };
        if let Some(chain) = self.opened.find(&self.storage, location, fingerprint) {
            return Ok(Checkpoint::from_chain(chain));
        }
        let checkpoint = self.open_anew(location)?;
        if let Some(chain) = checkpoint.shared_chain() {
            self.opened
                .keep(&self.storage, location, fingerprint, chain);
        }
        Ok(checkpoint)
    }

    /// The checkpoint at `location` as the storage holds it now, opened.
    fn open_anew(&self, location: &S::Location) -> Result<Checkpoint<S::Source>, CheckpointError> {
        Checkpoint::from_storage(&self.storage, self.storage.open(location)?)
    }

    /// The newest checkpoint that opens and validates, if any. A newer one that does not open
    /// (damaged, or an incremental checkpoint whose data file is gone) is passed over, never
    /// silently: the checkpoint returned lists each with its error
    /// ([`Checkpoint::skipped`]), and when checkpoints are listed but none opens, that is an
    /// error ([`CheckpointError::NoneOpens`]), not `None`. A save that an
    /// [`AsyncSaver`](super::AsyncSaver) of this manager (or of a clone) is still writing is
    /// waited for first, so the checkpoint just handed over is the one returned.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let manager = CheckpointManager::new(dir.path()).unwrap();
    /// let model = Tiny { w: Param::from_data([1.0], &Device::flex()) };
    /// for step in [1, 2] {
    ///     manager.save(TrainingState::new(&model, Progress::new(0, step))).unwrap();
    /// }
    /// std::fs::write(manager.path_for(2), b"damaged").unwrap();
    /// let latest = manager.latest().unwrap().unwrap();
    /// assert_eq!(latest.progress().step, 1);
    /// assert_eq!(latest.skipped()[0].step, 2); // with the reason, in `error`
    /// ```
    ///
    /// # Errors
    /// The storage cannot be listed, or it lists checkpoints and none opens.
    pub fn latest(&self) -> Result<Option<Checkpoint<S::Source>>, CheckpointError> {
        self.in_flight.wait();
        let mut skipped = Vec::new();
        for (step, location) in self.steps()?.into_iter().rev() {
            match self.try_open(&location) {
                Ok(checkpoint) => return Ok(Some(checkpoint.with_skipped(skipped))),
                Err(error) => skipped.push(Skipped {
                    step,
                    location: self.storage.describe_location(&location),
                    error,
                }),
            }
        }
        if skipped.is_empty() {
            Ok(None)
        } else {
            Err(CheckpointError::NoneOpens {
                storage: self.storage.describe(),
                skipped,
            })
        }
    }

    /// The checkpoint of `step`, any of those [`list`](Self::list) names (the best one kept
    /// by [`keep_best`](Self::keep_best), an older one to roll back to), from any storage: a
    /// directory, object storage, a backend of one's own. An incremental checkpoint opens with
    /// its data files from the same storage. Waits for background saves as `latest` does.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let manager = CheckpointManager::new(dir.path()).unwrap().incremental(true);
    /// for step in [1, 2, 3] {
    ///     let model = Tiny { w: Param::from_data([step as f32], &Device::flex()) };
    ///     manager.save(TrainingState::new(&model, Progress::new(0, step))).unwrap();
    /// }
    /// let second = manager.checkpoint(2).unwrap();
    /// let model = second.load_model(Tiny { w: Param::from_data([0.0], &Device::flex()) }).unwrap();
    /// assert_eq!(model.w.val().into_data().to_vec::<f32>().unwrap(), [2.0]);
    /// ```
    ///
    /// # Errors
    /// No checkpoint of `step` is in the storage, or it does not open.
    pub fn checkpoint(&self, step: u64) -> Result<Checkpoint<S::Source>, CheckpointError> {
        self.in_flight.wait();
        let location = self.location(step);
        if !self.steps()?.iter().any(|(s, _)| *s == step) {
            return Err(CheckpointError::Invalid {
                file: self.storage.describe_location(&location),
                what: format!(
                    "no checkpoint of step {step} in {}",
                    self.storage.describe()
                ),
            });
        }
        self.try_open(&location)
    }

    /// Deletes checkpoints outside the retention policy. The newest valid checkpoint is never
    /// deleted.
    ///
    /// # Errors
    /// A checkpoint could not be deleted.
    pub fn retain(&self) -> Result<(), CheckpointError> {
        let _alone = self.alone();
        self.retain_alone()
    }

    /// [`retain`](Self::retain), the storage already held alone.
    fn retain_alone(&self) -> Result<(), CheckpointError> {
        let all = self.steps()?;
        for (_, location) in self.retention.doomed(&all, |c| c.0, |c| self.open(&c.1)) {
            self.storage.delete(location)?;
        }
        for location in collect::garbage(&self.storage)? {
            self.storage.delete(&location)?;
        }
        Ok(())
    }

    /// Deletes the checkpoint of `step` when the storage lists it, then the data files no
    /// checkpoint names (the collection rule of retention: never a data file of a step after
    /// the newest checkpoint's), holding the storage alone as a save does: for a checkpointer
    /// whose own strategy picks what to delete (burn-train's). Returns whether it was listed.
    #[cfg(feature = "train")]
    pub(crate) fn delete_step(&self, step: u64) -> Result<bool, CheckpointError> {
        let _alone = self.alone();
        let listed = self.steps()?.into_iter().find(|(s, _)| *s == step);
        if let Some((_, location)) = &listed {
            self.storage.delete(location)?;
        }
        for location in collect::garbage_after_delete(&self.storage, step)? {
            self.storage.delete(&location)?;
        }
        Ok(listed.is_some())
    }

    /// Deletes every checkpoint of a step after `step` (to roll a run back and train on from
    /// `step`). Returns how many were deleted.
    ///
    /// # Errors
    /// The storage cannot be listed or a checkpoint cannot be deleted.
    pub fn discard_after(&self, step: u64) -> Result<usize, CheckpointError> {
        let _alone = self.alone();
        let mut removed = 0;
        for (_, location) in self.steps()?.into_iter().filter(|c| c.0 > step) {
            self.storage.delete(&location)?;
            removed += 1;
        }
        // The data files those saves wrote (only checkpoints of their step or later, all
        // gone now, could name them).
        for name in self.storage.names()? {
            if refs::data_step(&name).is_some_and(|s| s > step) {
                self.storage.delete(&self.storage.location(&name))?;
            }
        }
        Ok(removed)
    }
}

impl<S: Storage> std::fmt::Debug for Manager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("storage", &self.storage.describe())
            .field("retention", &self.retention)
            .field("incremental", &self.incremental)
            .finish_non_exhaustive()
    }
}
