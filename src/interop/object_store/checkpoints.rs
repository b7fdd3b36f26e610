//! The object-storage backend of the checkpoint manager: checkpoints under a bucket prefix,
//! each uploaded whole (a single PUT, or a multipart upload completed after its last part).

use std::sync::Arc;

use ::object_store::path::Path as ObjectPath;

use super::{Bucket, ObjectLocation, ObjectSource, RemoteError, UploadOptions, block_on, upload};
use crate::checkpoint::refs::checkpoint_name;
use crate::checkpoint::{CheckpointError, Manager, Storage};
use crate::write::Writer;

/// One checkpoint object under a managed prefix.
#[derive(Debug, Clone)]
pub struct RemoteCheckpointEntry {
    /// The training step it was saved at.
    pub step: u64,
    /// The object.
    pub location: ObjectLocation,
}

/// A prefix of a bucket holding checkpoint objects: the [`Storage`] of a
/// [`RemoteCheckpointManager`].
///
/// ```
/// use std::sync::Arc;
/// use burnpack::checkpoint::Storage;
/// use burnpack::interop::object_store::ObjectPrefix;
/// let prefix = ObjectPrefix::new(Arc::new(object_store::memory::InMemory::new()), "runs/7");
/// assert!(prefix.describe().ends_with("runs/7/"));
/// ```
#[derive(Clone)]
pub struct ObjectPrefix {
    store: Arc<dyn Bucket>,
    prefix: ObjectPath,
    /// The prefix as named in messages, ending with `/`.
    url: String,
    upload: UploadOptions,
}

impl ObjectPrefix {
    /// `prefix` of `store` (a store the caller configured).
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
            upload: UploadOptions::new(),
        }
    }

    /// The prefix of an `s3://bucket/prefix` URL (configured as [`ObjectLocation::parse`] is),
    /// named by that URL in messages.
    ///
    /// # Errors
    /// [`RemoteError::Url`] for another scheme or a URL without a bucket,
    /// [`RemoteError::Store`] for a configuration the S3 client refuses.
    pub fn parse(url: &str) -> Result<Self, RemoteError> {
        let (store, prefix) = super::s3_store(url)?;
        let mut storage = Self::new(store, prefix);
        storage.url = format!("{}/", url.trim_end_matches('/'));
        Ok(storage)
    }

    fn failed(
        action: &'static str,
        location: String,
    ) -> impl FnOnce(RemoteError) -> CheckpointError {
        move |e| CheckpointError::Storage {
            action,
            location,
            source: Box::new(e),
        }
    }
}

impl Storage for ObjectPrefix {
    type Location = ObjectLocation;
    type Source = ObjectSource;
    type Entry = RemoteCheckpointEntry;

    fn location(&self, name: &str) -> ObjectLocation {
        ObjectLocation::new(
            Arc::clone(&self.store),
            self.prefix.clone().join(name).as_ref(),
        )
        .with_url(format!("{}{name}", self.url))
    }

    /// The objects directly under the prefix (not below it).
    fn names(&self) -> Result<Vec<String>, CheckpointError> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed = block_on(self.store.list_with_delimiter(prefix))
            .map_err(Self::failed("list", self.url.clone()))?
            .map_err(|source| RemoteError::Store {
                url: self.url.clone(),
                action: "list",
                source: Box::new(source),
            })
            .map_err(Self::failed("list", self.url.clone()))?;
        Ok(listed
            .objects
            .iter()
            .filter_map(|meta| meta.location.filename().map(str::to_string))
            .collect())
    }

    /// Header and metadata, two ranged requests.
    fn open(&self, location: &ObjectLocation) -> Result<ObjectSource, CheckpointError> {
        ObjectSource::open(location).map_err(Self::failed("open", location.to_string()))
    }

    /// One upload: the object appears whole or not at all.
    fn write(&self, location: &ObjectLocation, writer: Writer) -> Result<(), CheckpointError> {
        upload(writer, location, &self.upload)
            .map(drop)
            .map_err(Self::failed("upload", location.to_string()))
    }

    fn delete(&self, location: &ObjectLocation) -> Result<(), CheckpointError> {
        location
            .delete()
            .map_err(Self::failed("delete", location.to_string()))
    }

    fn describe(&self) -> String {
        self.url.clone()
    }

    fn describe_location(&self, location: &ObjectLocation) -> String {
        location.to_string()
    }

    fn entry(step: u64, location: ObjectLocation) -> RemoteCheckpointEntry {
        RemoteCheckpointEntry { step, location }
    }
}

/// Keeps checkpoints under a prefix of a bucket as `<prefix>/ckpt-00000000000000000007.bpk`
/// for step 7 (zero-padded to 20 digits, so that the store's lexical listing is step order): the
/// [`CheckpointManager`](crate::checkpoint::CheckpointManager) of object storage, with the
/// same names, the same retention (keep the last N, the newest valid one, optionally the best
/// by a progress metric) and the same refusal to save behind a newer checkpoint: the same
/// [`Manager`] over the [`ObjectPrefix`] backend.
///
/// Crash safety comes from the store: each checkpoint is [`upload`]ed, so its object exists
/// only once complete (a single PUT, or a multipart upload completed after its last part); a
/// saver killed mid-upload leaves no object, and [`latest`](Self::latest) keeps returning the
/// previous checkpoint. Retention runs only after a successful save. What such a saver does
/// leave is an incomplete multipart upload, which S3 keeps (and bills) until aborted: a
/// bucket lifecycle rule (`AbortIncompleteMultipartUpload`) removes those.
///
/// [`latest`](Self::latest) returns a [`Checkpoint`](crate::checkpoint::Checkpoint) over an [`ObjectSource`]: opening it reads
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
pub type RemoteCheckpointManager = Manager<ObjectPrefix>;

impl Manager<ObjectPrefix> {
    /// Manages `prefix` of `store` (a store the caller configured), keeping the last 3
    /// checkpoints by default.
    pub fn new(store: Arc<dyn Bucket>, prefix: &str) -> Self {
        Self::with_storage(ObjectPrefix::new(store, prefix))
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
        Ok(Self::with_storage(ObjectPrefix::parse(url)?))
    }

    /// How checkpoints are uploaded (part size, parts in flight). Overwrite stays on: saving
    /// a step again (after resuming from an earlier one) replaces its object atomically.
    #[must_use]
    pub fn upload_options(mut self, options: UploadOptions) -> Self {
        self.storage_mut().upload = options.overwrite(true);
        self
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn location_for(&self, step: u64) -> ObjectLocation {
        self.storage().location(&checkpoint_name(step))
    }
}
