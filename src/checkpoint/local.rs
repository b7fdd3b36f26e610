//! [`CheckpointManager`]: the checkpoint manager of a directory, with what only a directory
//! has (its path, the scratch files a killed process left).

use std::fs;
use std::path::{Path, PathBuf};

use super::directory::Directory;
use super::error::CheckpointError;
use super::manager::Manager;
use crate::write::commit::{is_scratch_name, is_stale_scratch};

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
        fs::create_dir_all(storage.path()).map_err(Directory::io("create", storage.path()))?;
        let manager = Self::with_storage(storage);
        manager.clean_scratch()?;
        Ok(manager)
    }

    /// The managed directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.storage().path()
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.location(step)
    }

    /// Removes scratch files (`.<name>.<pid>-<n>-<nanos>.bpk-tmp`) whose writer is gone:
    /// nobody holds their lock (see [`Writer::write_to_file`](crate::write::Writer::write_to_file)).
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
