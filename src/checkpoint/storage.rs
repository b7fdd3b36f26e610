//! Where a checkpoint manager keeps its checkpoints: the backend trait.

use std::fmt;

use super::error::CheckpointError;
use super::state::PreparedState;
use crate::source::PackSource;
use crate::write::Writer;

/// A place that holds checkpoint files by name: a directory
/// ([`Directory`](super::Directory)), a bucket prefix (feature `object-store`:
/// `interop::object_store::ObjectPrefix`), or anything else with these five operations.
/// [`Manager`](super::Manager) writes the checkpoint logic (names, retention, `latest`, the
/// newer-checkpoint refusal, rollback, background saves) once over it.
///
/// A backend is one small type. An in-memory one, for tests:
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::{Arc, Mutex};
/// use burn::module::{Module, Param};
/// use burn::tensor::{Bytes, Device, Tensor};
/// use burnpack::checkpoint::{CheckpointError, Manager, Progress, Storage, TrainingState};
/// use burnpack::read::Reader;
/// use burnpack::write::Writer;
///
/// #[derive(Clone, Default)]
/// struct Memory(Arc<Mutex<BTreeMap<String, Vec<u8>>>>);
///
/// impl Storage for Memory {
///     type Location = String;
///     type Source = Reader;
///     type Entry = (u64, String);
///     fn location(&self, name: &str) -> String { format!("mem://{name}") }
///     fn names(&self) -> Result<Vec<String>, CheckpointError> {
///         Ok(self.0.lock().unwrap().keys().map(|k| k["mem://".len()..].to_string()).collect())
///     }
///     fn open(&self, at: &String) -> Result<Reader, CheckpointError> {
///         let bytes = self.0.lock().unwrap().get(at).cloned().unwrap_or_default();
///         Ok(Reader::from_bytes(Bytes::from_bytes_vec(bytes))?.with_name(at.clone()))
///     }
///     fn write(&self, at: &String, writer: Writer) -> Result<(), CheckpointError> {
///         let bytes = writer.into_bytes()?.to_vec();
///         self.0.lock().unwrap().insert(at.clone(), bytes);
///         Ok(())
///     }
///     fn delete(&self, at: &String) -> Result<(), CheckpointError> {
///         self.0.lock().unwrap().remove(at);
///         Ok(())
///     }
///     fn describe(&self) -> String { "mem://".into() }
///     fn describe_location(&self, at: &String) -> String { at.clone() }
///     fn entry(step: u64, at: String) -> (u64, String) { (step, at) }
/// }
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let model = Tiny { w: Param::from_data([1.0], &Device::flex()) };
/// let manager = Manager::with_storage(Memory::default()).keep_last(2);
/// for step in [1, 2, 3] {
///     manager.save(TrainingState::new(&model, Progress::new(0, step))).unwrap();
/// }
/// assert_eq!(manager.list().unwrap(), [(2, "mem://ckpt-00000000000000000002.bpk".to_string()),
///                                       (3, "mem://ckpt-00000000000000000003.bpk".to_string())]);
/// assert_eq!(manager.latest().unwrap().unwrap().progress().step, 3);
/// ```
pub trait Storage: Clone + Send + Sync + 'static {
    /// Where one checkpoint is: a path, an object location.
    type Location: Clone + Send + Sync + fmt::Debug + 'static;
    /// What an opened checkpoint reads its tensors from.
    type Source: PackSource + Send + Sync + 'static;
    /// What [`Manager::list`](super::Manager::list) returns for one checkpoint.
    type Entry;

    /// The location of the file called `name` (a checkpoint name such as
    /// `ckpt-00000000000000000007.bpk`).
    fn location(&self, name: &str) -> Self::Location;

    /// The names of the files directly in this storage (any order; other names are skipped).
    ///
    /// # Errors
    /// The storage cannot be listed.
    fn names(&self) -> Result<Vec<String>, CheckpointError>;

    /// Opens the pack at `location` (validated: header and metadata).
    ///
    /// # Errors
    /// It cannot be read or is not a valid pack.
    fn open(&self, location: &Self::Location) -> Result<Self::Source, CheckpointError>;

    /// Opens the data file of an incremental checkpoint at `location` (a name a manifest
    /// gave): as [`open`](Self::open), but a backend with links refuses anything that is not
    /// a regular file of its own (the [`Directory`](super::Directory) refuses a symbolic
    /// link), so a manifest never leads a read outside the storage.
    ///
    /// # Errors
    /// As [`open`](Self::open), or the location is not a plain file of the storage.
    fn open_data(&self, location: &Self::Location) -> Result<Self::Source, CheckpointError> {
        self.open(location)
    }

    /// [`open_data`](Self::open_data), shared: a backend that can tell a file unchanged
    /// hands every checkpoint naming the same data file one source (one mapping, one parsed
    /// header) while any holds it. By default each call opens anew; the
    /// [`Directory`](super::Directory) shares mapped files (never a file replaced or rewritten
    /// since, nor one changed in the last seconds, whose times could miss a rewrite in place).
    ///
    /// ```
    /// use burnpack::checkpoint::{Directory, Storage};
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::Writer;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("data.bpk");
    /// Writer::new(Vec::new()).write_to_file(&path).unwrap();
    /// let storage = Directory::new(dir.path());
    /// let a = storage.open_data_shared(&path).unwrap();
    /// let b = storage.open_data_shared(&path).unwrap();
    /// assert_eq!(a.tensors().len(), b.tensors().len());
    /// ```
    ///
    /// # Errors
    /// As [`open_data`](Self::open_data).
    fn open_data_shared(
        &self,
        location: &Self::Location,
    ) -> Result<std::sync::Arc<Self::Source>, CheckpointError> {
        self.open_data(location).map(std::sync::Arc::new)
    }

    /// Opens the data file at `location` with `tensors` as its table, as a manifest recorded
    /// them, without decoding its metadata: its header and metadata must hash to `head` (the
    /// checksum the file stores, [`Layout::head_checksum`](crate::format::Layout::head_checksum),
    /// recorded by the save that wrote it). `None` where the backend does not (the default:
    /// the data file is then opened and decoded). The [`Directory`](super::Directory) does,
    /// refusing links as [`open_data`](Self::open_data) does, and hands out the reader of
    /// [`open_data_shared`](Self::open_data_shared) where one of the same, unchanged file is
    /// alive.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::checkpoint::{Directory, Storage};
    /// use burnpack::source::TensorSource;
    /// use burnpack::write::{Entry, Writer};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("data.bpk");
    /// let w = Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.5f32]));
    /// Writer::new(vec![w]).write_to_file(&path).unwrap();
    /// let storage = Directory::new(dir.path());
    /// let whole = storage.open_data(&path).unwrap();
    /// let head = whole.layout().head_checksum().unwrap();
    /// let opened = storage
    ///     .open_data_recorded(&path, head, whole.tensors().to_vec())
    ///     .unwrap()
    ///     .unwrap();
    /// assert_eq!(&opened.read(&opened.tensors()[0]).unwrap()[..], &1.5f32.to_le_bytes());
    /// // A record of another file is refused.
    /// assert!(storage.open_data_recorded(&path, head ^ 1, Vec::new()).unwrap().is_err());
    /// ```
    fn open_data_recorded(
        &self,
        location: &Self::Location,
        head: u64,
        tensors: Vec<crate::format::TensorInfo>,
    ) -> Option<Result<std::sync::Arc<Self::Source>, CheckpointError>> {
        let _ = (location, head, tensors);
        None
    }

    /// What tells the file at `location` unchanged: a value that differs once it is replaced,
    /// rewritten or removed, `None` where the backend cannot tell (the default). An incremental
    /// manager reads again, at its next save, only the manifests and data files whose
    /// fingerprint changed (without one: all of them). The [`Directory`](super::Directory)'s is
    /// the file's device, inode, length, modification and change times.
    ///
    /// ```
    /// use burnpack::checkpoint::{Directory, Storage};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("a.bpk");
    /// std::fs::write(&path, b"one").unwrap();
    /// let storage = Directory::new(dir.path());
    /// let before = storage.fingerprint(&path);
    /// assert_eq!(before, storage.fingerprint(&path));
    /// std::fs::write(&path, b"three").unwrap();
    /// assert_ne!(before, storage.fingerprint(&path));
    /// ```
    fn fingerprint(&self, location: &Self::Location) -> Option<u128> {
        let _ = location;
        None
    }

    /// [`fingerprint`](Self::fingerprint), for a file left unchanged for a few seconds only
    /// (`None` for one changed since: a coarse clock may leave its times as they were across
    /// a rewrite in place). A [`Manager`](super::Manager) that opens an incremental checkpoint
    /// it still holds from an earlier open, its manifest's and data files' settled
    /// fingerprints as they were before that open, shares the one held (its references
    /// parsed, its data files mapped) instead of opening it again. `None` where the backend
    /// cannot tell (the default); the [`Directory`](super::Directory) can.
    ///
    /// ```
    /// use burnpack::checkpoint::{Directory, Storage};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("a.bpk");
    /// std::fs::write(&path, b"one").unwrap();
    /// let storage = Directory::new(dir.path());
    /// // Just written: not settled yet.
    /// assert_eq!(storage.settled_fingerprint(&path), None);
    /// ```
    fn settled_fingerprint(&self, location: &Self::Location) -> Option<u128> {
        let _ = location;
        None
    }

    /// Writes `writer`'s pack at `location`, visible whole or not at all (a reader never sees
    /// part of it), replacing what was there.
    ///
    /// # Errors
    /// The write failed; what was at `location` is then unchanged.
    fn write(&self, location: &Self::Location, writer: Writer) -> Result<(), CheckpointError>;

    /// Writes a data file of an incremental checkpoint at `location`, a name no file of the
    /// storage had (each data file's name is new): as [`write`](Self::write), except that
    /// the file may be visible before it is complete and need not be durable before
    /// [`sync_data`](Self::sync_data) returns. No manifest names it until then, and a data
    /// file no manifest names is never read and is collected, complete or not. The
    /// [`Directory`](super::Directory) writes it in place under its name (no scratch file,
    /// no rename); by default it is [`write`](Self::write).
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::checkpoint::{Directory, Storage};
    /// use burnpack::{Entry, Writer};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let storage = Directory::new(dir.path());
    /// let at = storage.location("data-00000000000000000001-00000000000000aa.bpk");
    /// let w = Entry::resident("w", DType::F32, vec![2], Bytes::from_bytes_vec(vec![0u8; 8]));
    /// storage.write_data(&at, Writer::new(vec![w])).unwrap();
    /// storage.sync_data(&at).unwrap();
    /// assert_eq!(storage.open(&at).unwrap().tensors().len(), 1);
    /// ```
    ///
    /// # Errors
    /// The write failed, or a file of that name exists.
    fn write_data(&self, location: &Self::Location, writer: Writer) -> Result<(), CheckpointError> {
        self.write(location, writer)
    }

    /// Makes the data file [`write_data`](Self::write_data) wrote at `location` durable
    /// (nothing to do by default: `write` made it so). Its name is made durable by the next
    /// [`write_when`](Self::write_when) or [`write`](Self::write) in the storage (the
    /// directory's fsync).
    ///
    /// # Errors
    /// The file could not be synced.
    fn sync_data(&self, location: &Self::Location) -> Result<(), CheckpointError> {
        let _ = location;
        Ok(())
    }

    /// As [`write`](Self::write), `ready` called before the file becomes visible, its error
    /// returned with nothing written at `location`: what must be durable before the file can
    /// be named waits there. The [`Directory`](super::Directory) writes and syncs the file
    /// first, so that the wait overlaps its own; by default `ready` runs, then `write`.
    ///
    /// ```
    /// use burnpack::checkpoint::{Directory, Storage};
    /// use burnpack::Writer;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let storage = Directory::new(dir.path());
    /// let at = storage.location("manifest.bpk");
    /// let refused = storage.write_when(&at, Writer::new(Vec::new()), || {
    ///     Err(burnpack::checkpoint::CheckpointError::Panicked("not ready".into()))
    /// });
    /// assert!(refused.is_err() && !at.exists());
    /// storage.write_when(&at, Writer::new(Vec::new()), || Ok(())).unwrap();
    /// assert!(at.exists());
    /// ```
    ///
    /// # Errors
    /// `ready` failed, or the write failed; what was at `location` is then unchanged.
    fn write_when(
        &self,
        location: &Self::Location,
        writer: Writer,
        ready: impl FnOnce() -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        ready()?;
        self.write(location, writer)
    }

    /// Writes the checkpoint of a prepared training state at `location`, under the same
    /// contract as [`write`](Self::write). By default the state is serialized into a
    /// [`Writer`] for `write`; a backend that can overlap the two (the
    /// [`Directory`](super::Directory) writes the model while the optimizer's record is
    /// serialized, see [`PreparedState::write_to_file`]) overrides this.
    ///
    /// # Errors
    /// Burn refused to serialize a record, or the write failed.
    fn write_state(
        &self,
        location: &Self::Location,
        state: PreparedState,
    ) -> Result<(), CheckpointError> {
        self.write(location, state.into_writer()?)
    }

    /// Deletes the file at `location`.
    ///
    /// # Errors
    /// It could not be deleted.
    fn delete(&self, location: &Self::Location) -> Result<(), CheckpointError>;

    /// The storage as its user named it (a directory, a URL prefix), for messages.
    fn describe(&self) -> String;

    /// A location as its user would name it (a path, a URL), for messages.
    fn describe_location(&self, location: &Self::Location) -> String;

    /// The list entry of the checkpoint of `step` at `location`.
    fn entry(step: u64, location: Self::Location) -> Self::Entry;
}
