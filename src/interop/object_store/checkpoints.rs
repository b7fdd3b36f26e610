//! Checkpoints under a bucket prefix: save by step, list, latest, retention.

use std::path::PathBuf;
use std::sync::Arc;

use ::object_store::path::Path as ObjectPath;
use burn::module::Module;

use super::{Bucket, ObjectLocation, ObjectSource, RemoteError, UploadOptions, block_on, upload};
use crate::checkpoint::async_save::{InFlight, InFlightGuard, target::Target};
use crate::checkpoint::manager::{Retention, checkpoint_name, newer_valid, step_of};
use crate::checkpoint::{Checkpoint, CheckpointError, PreparedState, TrainingState};

/// One checkpoint object under a managed prefix.
#[derive(Debug, Clone)]
pub struct RemoteCheckpointEntry {
    /// The training step it was saved at.
    pub step: u64,
    /// The object.
    pub location: ObjectLocation,
}

/// Keeps checkpoints under a prefix of a bucket as `<prefix>/ckpt-00000000000000000007.bpk`
/// for step 7 (zero-padded to 20 digits, so that the store's lexical listing is step order): the
/// [`CheckpointManager`](crate::checkpoint::CheckpointManager) of object storage, with the
/// same names, the same retention (keep the last N, the newest valid one, optionally the best
/// by a progress metric) and the same refusal to save behind a newer checkpoint.
///
/// Crash safety comes from the store: each checkpoint is [`upload`]ed, so its object exists
/// only once complete (a single PUT, or a multipart upload completed after its last part); a
/// saver killed mid-upload leaves no object, and [`latest`](Self::latest) keeps returning the
/// previous checkpoint. Retention runs only after a successful save. What such a saver does
/// leave is an incomplete multipart upload, which S3 keeps (and bills) until aborted: a
/// bucket lifecycle rule (`AbortIncompleteMultipartUpload`) removes those.
///
/// [`latest`](Self::latest) returns a [`Checkpoint`] over an [`ObjectSource`]: opening it reads
/// only header and metadata; restoring the model fetches only the model's tensors, the
/// optimizer only its own, each in parallel ranged requests.
///
/// An [`AsyncSaver`](crate::checkpoint::AsyncSaver) over this manager uploads in the
/// background: the training thread hands the state over (parameter handles, the optimizer's
/// record) and goes on while the upload runs.
///
/// ```
/// use std::sync::Arc;
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::checkpoint::{Progress, TrainingState};
/// use burnpack::interop::object_store::RemoteCheckpointManager;
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let device = Device::flex();
/// let bucket = Arc::new(object_store::memory::InMemory::new());
/// let manager = RemoteCheckpointManager::new(bucket, "runs/7").keep_last(2);
/// let model = Tiny { w: Param::from_data([1.0], &device) };
/// for step in [10, 20, 30] {
///     manager.save(TrainingState::new(&model, Progress::new(0, step))).unwrap();
/// }
/// let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
/// assert_eq!(steps, [20, 30]);
/// let latest = manager.latest().unwrap().unwrap();
/// assert_eq!(latest.progress().step, 30);
/// let restored = latest.load_model(Tiny { w: Param::from_data([0.0], &device) }).unwrap();
/// assert_eq!(restored.w.val().into_data(), model.w.val().into_data());
/// ```
#[derive(Clone)]
pub struct RemoteCheckpointManager {
    store: Arc<dyn Bucket>,
    prefix: ObjectPath,
    /// The prefix as named in messages, ending with `/`.
    url: String,
    retention: Retention,
    upload: UploadOptions,
    /// Saves of this manager (and its clones) an [`AsyncSaver`] is still uploading.
    ///
    /// [`AsyncSaver`]: crate::checkpoint::AsyncSaver
    in_flight: Arc<InFlight>,
}

impl RemoteCheckpointManager {
    /// Manages `prefix` of `store` (a store the caller configured), keeping the last 3
    /// checkpoints by default.
    pub fn new(store: Arc<dyn Bucket>, prefix: &str) -> Self {
        let prefix = ObjectPath::from(prefix);
        let url = if prefix.as_ref().is_empty() {
            format!("{store}/")
        } else {
            format!("{store}/{prefix}/")
        };
        Self {
            store,
            prefix,
            url,
            retention: Retention::default(),
            upload: UploadOptions::new(),
            in_flight: Arc::default(),
        }
    }

    /// Manages the prefix of an `s3://bucket/prefix` URL (configured as
    /// [`ObjectLocation::parse`] is).
    ///
    /// ```
    /// use burnpack::interop::object_store::RemoteCheckpointManager;
    /// let manager = RemoteCheckpointManager::parse("s3://checkpoints/run-7/").unwrap();
    /// assert_eq!(manager.location_for(3).to_string(), "s3://checkpoints/run-7/ckpt-00000000000000000003.bpk");
    /// assert!(RemoteCheckpointManager::parse("/local/dir").is_err());
    /// ```
    ///
    /// # Errors
    /// [`RemoteError::Url`] for another scheme or a URL without a bucket,
    /// [`RemoteError::Store`] for a configuration the S3 client refuses.
    pub fn parse(url: &str) -> Result<Self, RemoteError> {
        let (store, prefix) = super::s3_store(url)?;
        let mut manager = Self::new(store, prefix);
        manager.url = format!("{}/", url.trim_end_matches('/'));
        Ok(manager)
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

    /// How checkpoints are uploaded (part size, parts in flight). Overwrite stays on: saving
    /// a step again (after resuming from an earlier one) replaces its object atomically.
    #[must_use]
    pub fn upload_options(mut self, options: UploadOptions) -> Self {
        self.upload = options.overwrite(true);
        self
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn location_for(&self, step: u64) -> ObjectLocation {
        let name = checkpoint_name(step);
        ObjectLocation::new(
            Arc::clone(&self.store),
            self.prefix.clone().join(name.as_str()).as_ref(),
        )
        .with_url(format!("{}{name}", self.url))
    }

    /// Saves `state` as the checkpoint of its progress step (one upload: the object appears
    /// whole or not at all), then applies retention.
    ///
    /// # Errors
    /// [`CheckpointError::NewerExists`] when the prefix holds a valid checkpoint of a later
    /// step (nothing is uploaded then), the save failed (nothing is deleted then), or a
    /// request failed.
    pub fn save<M: Module>(
        &self,
        state: TrainingState<'_, M>,
    ) -> Result<ObjectLocation, CheckpointError> {
        self.check_newer(state.progress.step)?;
        self.save_prepared(state.prepare()?)
    }

    /// Checkpoint objects under the prefix (not below it), oldest step first.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn list(&self) -> Result<Vec<RemoteCheckpointEntry>, CheckpointError> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed = block_on(self.store.list_with_delimiter(prefix))
            .map_err(Box::new)?
            .map_err(|source| {
                Box::new(RemoteError::Store {
                    url: self.url.clone(),
                    action: "list",
                    source: Box::new(source),
                })
            })?;
        let mut out: Vec<RemoteCheckpointEntry> = listed
            .objects
            .iter()
            .filter_map(|meta| {
                let step = meta.location.filename().and_then(step_of)?;
                Some(RemoteCheckpointEntry {
                    step,
                    location: self.location_for(step),
                })
            })
            .collect();
        out.sort_by_key(|c| c.step);
        Ok(out)
    }

    /// The newest checkpoint that opens and validates (header and metadata, two ranged
    /// requests), if any; a damaged newer object is skipped, not fatal. A save that an
    /// [`AsyncSaver`](crate::checkpoint::AsyncSaver) of this manager (or of a clone) is still
    /// uploading is waited for first, so the checkpoint just handed over is the one returned.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn latest(&self) -> Result<Option<Checkpoint<ObjectSource>>, CheckpointError> {
        self.in_flight.wait();
        Ok(self.list()?.iter().rev().find_map(|c| open(&c.location)))
    }

    /// Deletes checkpoints outside the retention policy. The newest valid checkpoint is never
    /// deleted.
    ///
    /// # Errors
    /// A request failed.
    pub fn retain(&self) -> Result<(), CheckpointError> {
        let all = self.list()?;
        for c in self
            .retention
            .doomed(&all, |c| c.step, |c| open(&c.location))
        {
            c.location.delete().map_err(Box::new)?;
        }
        Ok(())
    }

    /// Deletes every checkpoint of a step after `step` (to roll a run back and train on from
    /// `step`). Returns how many were deleted.
    ///
    /// # Errors
    /// A request failed.
    pub fn discard_after(&self, step: u64) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        for c in self.list()?.into_iter().filter(|c| c.step > step) {
            c.location.delete().map_err(Box::new)?;
            removed += 1;
        }
        Ok(removed)
    }
}

impl Target for RemoteCheckpointManager {
    type Saved = ObjectLocation;

    /// Refuses `step` when the prefix holds a valid checkpoint of a later step.
    fn check_newer(&self, step: u64) -> Result<(), CheckpointError> {
        let all = self.list()?;
        match newer_valid(&all, step, |c| c.step, |c| open(&c.location)) {
            Some(c) => Err(CheckpointError::NewerExists {
                dir: PathBuf::from(&self.url),
                step,
                newer_step: c.step,
                newer: PathBuf::from(c.location.to_string()),
            }),
            None => Ok(()),
        }
    }

    /// Uploads the checkpoint of `state`'s step, then applies retention.
    fn save_prepared(&self, state: PreparedState) -> Result<ObjectLocation, CheckpointError> {
        let location = self.location_for(state.step());
        upload(state.into_writer()?, &location, &self.upload).map_err(Box::new)?;
        self.retain()?;
        Ok(location)
    }

    fn begin_background(&self) -> InFlightGuard {
        self.in_flight.begin()
    }
}

/// The checkpoint at `location`, when it opens as one.
fn open(location: &ObjectLocation) -> Option<Checkpoint<ObjectSource>> {
    Checkpoint::from_source(ObjectSource::open(location).ok()?).ok()
}

impl std::fmt::Debug for RemoteCheckpointManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCheckpointManager")
            .field("prefix", &self.url)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}
