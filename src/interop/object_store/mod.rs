//! Packs on object storage (S3 and compatibles, and every other store of the `object_store`
//! crate that has multipart uploads): ranged reads of only what a load needs, and saves
//! streamed as multipart uploads that become visible only when complete (feature
//! `object-store`).
//!
//! - [`ObjectLocation`]: where an object is: parsed from `s3://bucket/key` with the usual
//!   `AWS_*` environment variables (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, credentials, region), or
//!   any store value the caller built.
//! - [`ObjectSource`]: a [`TensorSource`](crate::source::TensorSource) over an object: header and
//!   metadata with two ranged GETs (never the whole object), validated exactly as for files;
//!   the module loader then hands it the list of tensors it will read, which it fetches in
//!   parallel, neighbouring ones coalesced into one request, each checked against its
//!   checksum as it arrives.
//! - [`upload`]: a [`Writer`](crate::write::Writer)'s pack as a multipart upload whose parts follow
//!   the layout, produced front to back in bounded memory; a failed save aborts the upload and
//!   leaves no object (and the previous one, if any, untouched).
//! - [`RemoteCheckpointManager`]: training checkpoints under a bucket prefix (list, latest,
//!   keep-last-N, keep-best), each saved by one upload, restored part by part through a
//!   [`Checkpoint`](crate::checkpoint::Checkpoint) over an [`ObjectSource`].
//!
//! The API is blocking, like the rest of this crate: it runs its requests on a runtime of its
//! own. Called from inside an async runtime it refuses ([`RemoteError::AsyncContext`]); call
//! it from `spawn_blocking` there.
//!
//! ```no_run
//! use burn::module::Module;
//! use burnpack::interop::object_store::{ObjectLocation, ObjectSource, UploadOptions, upload};
//! use burnpack::module::{LoadOptions, PackModule, SaveOptions};
//! # #[derive(Module, Debug)] struct Net { w: burn::module::Param<burn::tensor::Tensor<1>> }
//! # fn run(model: Net, fresh: Net) -> Result<(), Box<dyn std::error::Error>> {
//! let location = ObjectLocation::parse("s3://models/run-7/model.bpk")?;
//! upload(model.pack_writer(&SaveOptions::new())?, &location, &UploadOptions::new())?;
//! let source = ObjectSource::open(&location)?;
//! let model = fresh.load_from_source(&source, &LoadOptions::new())?;
//! println!("fetched {} bytes", source.fetched_bytes());
//! # Ok(()) }
//! ```

#[cfg(feature = "optim")]
mod checkpoints;
mod source;
mod upload;

use std::future::Future;
use std::sync::{Arc, OnceLock};

use ::object_store::multipart::MultipartStore;
use ::object_store::path::Path as ObjectPath;
use ::object_store::{ObjectStore, ObjectStoreExt};

use crate::format::FormatError;
use crate::source::ReadError;
use crate::write::WriteError;

#[cfg(feature = "optim")]
pub use checkpoints::{ObjectPrefix, RemoteCheckpointEntry, RemoteCheckpointManager};
pub use source::ObjectSource;
pub use upload::{UploadOptions, upload};

/// A store that can both serve ranged reads and take multipart uploads with numbered parts
/// (S3, GCS, Azure and `object_store`'s `InMemory`); every such store is one.
pub trait Bucket: ObjectStore + MultipartStore {}

impl<T: ObjectStore + MultipartStore> Bucket for T {}

/// Where a pack lives on object storage: a store and a path in it, with the URL used in
/// messages.
///
/// ```
/// use std::sync::Arc;
/// use burnpack::interop::object_store::ObjectLocation;
/// let memory = Arc::new(object_store::memory::InMemory::new());
/// let location = ObjectLocation::new(memory.clone(), "runs/7/model.bpk");
/// assert_eq!(location.to_string(), "InMemory/runs/7/model.bpk");
/// let named = ObjectLocation::new(memory, "runs/7/model.bpk").with_url("mem://runs/7/model.bpk");
/// assert_eq!(named.to_string(), "mem://runs/7/model.bpk");
/// ```
#[derive(Clone)]
pub struct ObjectLocation {
    store: Arc<dyn Bucket>,
    path: ObjectPath,
    url: String,
}

impl ObjectLocation {
    /// `path` in `store` (a store the caller configured), named in messages as the store
    /// shows itself followed by the path (`AmazonS3(bucket)/key`); give it a URL of your
    /// choice with [`with_url`](Self::with_url).
    pub fn new(store: Arc<dyn Bucket>, path: &str) -> Self {
        let path = ObjectPath::from(path);
        let url = format!("{store}/{path}");
        Self { store, path, url }
    }

    /// Names the object `url` in messages and [`Display`](std::fmt::Display).
    #[must_use]
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// An `s3://bucket/key` URL, configured from the `AWS_*` environment variables
    /// (`AWS_ENDPOINT` and `AWS_ALLOW_HTTP=true` for a local S3-compatible server such as
    /// `MinIO`; credentials and region as the AWS tools read them).
    ///
    /// ```
    /// use burnpack::interop::object_store::ObjectLocation;
    /// let location = ObjectLocation::parse("s3://models/run-7/model.bpk").unwrap();
    /// assert_eq!(location.key(), "run-7/model.bpk");
    /// assert!(ObjectLocation::parse("ftp://x/y").is_err());
    /// ```
    ///
    /// # Errors
    /// [`RemoteError::Url`] for another scheme or a URL without a bucket or key,
    /// [`RemoteError::Store`] for a configuration the S3 client refuses.
    pub fn parse(url: &str) -> Result<Self, RemoteError> {
        let (store, key) = s3_store(url)?;
        if key.is_empty() {
            return Err(RemoteError::Url {
                url: url.to_string(),
                message: "expected s3://bucket/key".into(),
            });
        }
        Ok(Self::new(store, key).with_url(url))
    }

    /// Whether `url` names an object (`s3://`) rather than a local path.
    #[must_use]
    pub fn is_url(url: &str) -> bool {
        super::is_object_url(url)
    }

    /// The object's key in its store.
    #[must_use]
    pub fn key(&self) -> &str {
        self.path.as_ref()
    }

    /// The object's size, or `None` when there is no object.
    ///
    /// # Errors
    /// [`RemoteError::Store`] when the store cannot be asked.
    pub fn size(&self) -> Result<Option<u64>, RemoteError> {
        match block_on(self.store.head(&self.path))? {
            Ok(meta) => Ok(Some(meta.size)),
            Err(::object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.error("stat", source)),
        }
    }

    /// The whole object in memory (one GET): for copying it elsewhere, e.g. to a local file.
    ///
    /// # Errors
    /// [`RemoteError::Store`] when it cannot be read.
    pub fn read_all(&self) -> Result<Vec<u8>, RemoteError> {
        let bytes = block_on(async {
            let got = self.store.get(&self.path).await?;
            got.bytes().await
        })?
        .map_err(|e| self.error("read", e))?;
        // No copy when the body arrived into one buffer of its own.
        Ok(Vec::from(bytes))
    }

    /// Replaces the object with `bytes` in one PUT (atomic): for copying a local pack up as
    /// it is. [`upload`] is the way to save a pack without holding it in memory.
    ///
    /// # Errors
    /// [`RemoteError::Store`] when the store refuses.
    pub fn put_all(&self, bytes: Vec<u8>) -> Result<(), RemoteError> {
        block_on(
            self.store
                .put(&self.path, ::object_store::PutPayload::from(bytes)),
        )?
        .map_err(|e| self.error("put", e))?;
        Ok(())
    }

    /// Deletes the object (no error when there is none).
    ///
    /// # Errors
    /// [`RemoteError::Store`] when the store refuses.
    pub fn delete(&self) -> Result<(), RemoteError> {
        match block_on(self.store.delete(&self.path))? {
            Ok(()) | Err(::object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(self.error("delete", source)),
        }
    }

    fn error(&self, action: &'static str, source: ::object_store::Error) -> RemoteError {
        RemoteError::Store {
            url: self.url.clone(),
            action,
            source: Box::new(source),
        }
    }
}

impl std::fmt::Display for ObjectLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl std::fmt::Debug for ObjectLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ObjectLocation").field(&self.url).finish()
    }
}

/// The S3 bucket of an `s3://bucket/key` URL, configured from the `AWS_*` environment
/// variables, and the key (possibly empty).
fn s3_store(url: &str) -> Result<(Arc<dyn Bucket>, &str), RemoteError> {
    let bad = |message: &str| RemoteError::Url {
        url: url.to_string(),
        message: message.to_string(),
    };
    let rest = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))
        .ok_or_else(|| bad("only s3:// URLs are read here; build other stores yourself"))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad("expected s3://bucket/key"));
    }
    let store = ::object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|source| RemoteError::Store {
            url: url.to_string(),
            action: "configure",
            source: Box::new(source),
        })?;
    Ok((Arc::new(store), key))
}

/// An error of a pack on object storage, naming the object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The URL is not one this crate can open.
    #[error("{url}: {message}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The store refused or failed a request.
    #[error("{url}: cannot {action}: {source}")]
    Store {
        /// The object.
        url: String,
        /// What was being done.
        action: &'static str,
        /// The store's error.
        source: Box<::object_store::Error>,
    },
    /// The object is not a valid pack.
    #[error("{url}: {source}")]
    Invalid {
        /// The object.
        url: String,
        /// What the format check found.
        source: Box<FormatError>,
    },
    /// Reading or checking a tensor failed.
    #[error(transparent)]
    Read(#[from] Box<ReadError>),
    /// Producing the pack failed (a deferred entry, the layout); the upload was aborted.
    #[error("{url}: {source}")]
    Write {
        /// The object.
        url: String,
        /// The writer's error.
        source: Box<WriteError>,
    },
    /// The object exists and the upload was asked not to replace it.
    #[error("{url}: already exists (overwrite is off)")]
    AlreadyExists {
        /// The object.
        url: String,
    },
    /// The runtime for the requests could not be started (threads).
    #[error("cannot start the object-store runtime: {message}")]
    Runtime {
        /// The system's reason.
        message: String,
    },
    /// A blocking call was made from inside an async runtime.
    #[error(
        "burnpack's object-store calls block; from async code, run them in tokio's spawn_blocking"
    )]
    AsyncContext,
}

/// The runtime every request of this module runs on (two worker threads: requests are I/O).
fn runtime() -> Result<&'static tokio::runtime::Runtime, RemoteError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("burnpack-object-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|message| RemoteError::Runtime {
            message: message.clone(),
        })
}

/// Runs `future` to completion on this module's runtime.
fn block_on<F: Future>(future: F) -> Result<F::Output, RemoteError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(RemoteError::AsyncContext);
    }
    Ok(runtime()?.block_on(future))
}

impl From<RemoteError> for crate::source::SourceError {
    /// An object that could not be opened, as the error of every source: a bad URL is a
    /// [`Location`](crate::source::SourceError::Location) error, an invalid pack a
    /// [`Format`](crate::source::SourceError::Format) one, a failed request an `Io` one.
    fn from(e: RemoteError) -> Self {
        match e {
            RemoteError::Url { url, message } => Self::Location {
                path: url.into(),
                reason: message,
            },
            RemoteError::Invalid { url, source } => Self::Format {
                path: url.into(),
                source: *source,
            },
            RemoteError::Read(read) => (*read).into(),
            RemoteError::Store {
                url,
                action,
                source,
            } => Self::Io {
                path: url.into(),
                action,
                source: std::io::Error::other(source.to_string()),
            },
            other => Self::Io {
                path: std::path::PathBuf::new(),
                action: "reach object storage",
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}
