//! The directory backend of the checkpoint manager: files written atomically (scratch file,
//! fsync, rename, directory fsync), stale scratch files of dead writers removed.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::CheckpointError;
use super::manager::Manager;
use super::state::PreparedState;
use super::storage::Storage;
use crate::read::Reader;
use crate::write::Writer;
use crate::write::commit::{is_scratch_name, is_stale_scratch};

/// A directory of checkpoint files: the [`Storage`] of a [`CheckpointManager`].
///
/// ```
/// use burnpack::checkpoint::{Directory, Storage};
/// let dir = tempfile::tempdir().unwrap();
/// let storage = Directory::new(dir.path());
/// assert_eq!(storage.location("a.bpk"), dir.path().join("a.bpk"));
/// ```
#[derive(Debug, Clone)]
pub struct Directory {
    dir: PathBuf,
    /// How files are opened: mapped (the default), or read into memory of their own
    /// (`ReadMode::Buffered`: a verification that must survive a file changed under it).
    mode: crate::read::ReadMode,
}

impl Directory {
    /// The same directory, its files read into memory of their own instead of mapped (what
    /// `bpk verify` and `convert` use: a file rewritten in place by another program while it
    /// is read cannot fault the reader).
    #[must_use]
    pub(crate) fn buffered(mut self) -> Self {
        self.mode = crate::read::ReadMode::Buffered;
        self
    }

    /// The directory `dir` (not created: [`CheckpointManager::new`] creates it).
    #[must_use]
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Self {
            dir: dir.as_ref().to_path_buf(),
            mode: crate::read::ReadMode::default(),
        }
    }

    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io {
            action,
            path,
            source,
        }
    }

    fn read_dir(&self) -> Result<Vec<fs::DirEntry>, CheckpointError> {
        fs::read_dir(&self.dir)
            .and_then(Iterator::collect)
            .map_err(Self::io("list", &self.dir))
    }
}

/// One checkpoint file of a managed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointEntry {
    /// The training step it was saved at.
    pub step: u64,
    /// Its path.
    pub path: PathBuf,
}

impl Storage for Directory {
    type Location = PathBuf;
    type Source = Reader;
    type Entry = CheckpointEntry;

    fn location(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn names(&self) -> Result<Vec<String>, CheckpointError> {
        Ok(self
            .read_dir()?
            .into_iter()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    fn open(&self, path: &PathBuf) -> Result<Reader, CheckpointError> {
        Ok(crate::read::ReadOptions::new().mode(self.mode).open(path)?)
    }

    fn open_data(&self, path: &PathBuf) -> Result<Reader, CheckpointError> {
        let meta = fs::symlink_metadata(path).map_err(Self::io("open", path))?;
        if !meta.file_type().is_file() {
            return Err(CheckpointError::Io {
                action: "open",
                path: path.clone(),
                source: std::io::Error::other(
                    "not a regular file of the checkpoint directory (a link, a directory or a \
                     device is not followed)",
                ),
            });
        }
        self.open(path)
    }

    fn write(&self, path: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
        writer.write_to_file(path)?;
        Ok(())
    }

    fn write_state(&self, path: &PathBuf, state: PreparedState) -> Result<(), CheckpointError> {
        state.write_to_file(path)?;
        Ok(())
    }

    fn delete(&self, path: &PathBuf) -> Result<(), CheckpointError> {
        fs::remove_file(path).map_err(Self::io("delete", path))
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn describe_location(&self, path: &PathBuf) -> String {
        path.display().to_string()
    }

    fn entry(step: u64, path: PathBuf) -> CheckpointEntry {
        CheckpointEntry { step, path }
    }
}

/// Keeps checkpoints in a directory as `ckpt-00000000000000000007.bpk` for step 7: the step
/// zero-padded to 20 digits (the width of any `u64`), so that a plain listing sorts in step
/// order.
///
/// A checkpoint becomes visible under its name only once durable (atomic write: fsync, rename,
/// directory fsync), so [`latest`](Manager::latest) never sees a partial file; it also skips
/// any file that does not open as a checkpoint. After each successful save, retention keeps
/// the last `keep_last` checkpoints and, optionally, the best by a progress metric; a failed
/// save deletes nothing, so the last good checkpoint always survives. Scratch files left by a
/// killed process are removed when the manager is created (a live writer's, locked, never
/// are). The logic is [`Manager`]'s, over the [`Directory`] backend.
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let device = Device::flex();
/// let dir = tempfile::tempdir().unwrap();
/// let manager = CheckpointManager::new(dir.path()).unwrap().keep_last(2);
/// let model = Tiny { w: Param::from_data([1.0], &device) };
/// for step in [10, 20, 30] {
///     manager.save(TrainingState::new(&model, Progress::new(0, step))).unwrap();
/// }
/// let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
/// assert_eq!(steps, [20, 30]);
/// assert_eq!(manager.latest().unwrap().unwrap().progress().step, 30);
/// ```
pub type CheckpointManager = Manager<Directory>;

impl Manager<Directory> {
    /// Manages `dir` (created if needed), keeping the last 3 checkpoints by default. Removes
    /// scratch files whose writing process no longer runs.
    ///
    /// # Errors
    /// The directory cannot be created or listed.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let storage = Directory::new(dir);
        fs::create_dir_all(&storage.dir).map_err(Directory::io("create", &storage.dir))?;
        let manager = Self::with_storage(storage);
        manager.clean_scratch()?;
        Ok(manager)
    }

    /// The managed directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.storage().dir
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.location(step)
    }

    /// Removes scratch files (`.<name>.<pid>-<n>-<nanos>.bpk-tmp`) whose writer is gone:
    /// nobody holds their lock (see [`Writer::write_to_file`](crate::Writer::write_to_file)).
    /// A live writer's file is left alone, whatever process namespace, container or host it
    /// writes from. Returns how many were removed.
    ///
    /// # Errors
    /// The directory cannot be listed or a file cannot be removed.
    pub fn clean_scratch(&self) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        for entry in self.storage().read_dir()? {
            let path = entry.path();
            if entry.file_name().to_str().is_some_and(is_scratch_name) && is_stale_scratch(&path) {
                fs::remove_file(&path).map_err(Directory::io("remove scratch file", &path))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}
