//! A directory of checkpoints: save by step, latest, retention, scratch cleanup.

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;

use super::error::CheckpointError;
use super::{Checkpoint, TrainingState};
use crate::write::is_stale_scratch;

const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".bpk";

/// One checkpoint file of a managed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointEntry {
    /// The training step it was saved at.
    pub step: u64,
    /// Its path.
    pub path: PathBuf,
}

/// Keeps checkpoints in a directory as `ckpt-<step>.bpk`.
///
/// A checkpoint becomes visible under its name only once durable (atomic write: fsync, rename,
/// directory fsync), so [`latest`](Self::latest) never sees a partial file; it also skips any
/// file that does not open as a checkpoint. After each successful save, retention keeps the last
/// `keep_last` checkpoints and, optionally, the best by a progress metric; a failed save deletes
/// nothing, so the last good checkpoint always survives. Scratch files left by a killed process
/// are removed when the manager is created.
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
#[derive(Debug, Clone)]
pub struct CheckpointManager {
    dir: PathBuf,
    keep_last: usize,
    best: Option<(String, bool)>,
}

impl CheckpointManager {
    /// Manages `dir` (created if needed), keeping the last 3 checkpoints by default. Removes
    /// scratch files whose writing process no longer runs.
    ///
    /// # Errors
    /// The directory cannot be created or listed.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|source| CheckpointError::Io {
            action: "create",
            path: dir.clone(),
            source,
        })?;
        let manager = Self {
            dir,
            keep_last: 3,
            best: None,
        };
        manager.clean_scratch()?;
        Ok(manager)
    }

    /// Keeps the `n` most recent checkpoints (at least 1).
    #[must_use]
    pub fn keep_last(mut self, n: usize) -> Self {
        self.keep_last = n.max(1);
        self
    }

    /// Also keeps the checkpoint with the best `progress.<metric>` (lowest if
    /// `lower_is_better`, else highest).
    #[must_use]
    pub fn keep_best(mut self, metric: impl Into<String>, lower_is_better: bool) -> Self {
        self.best = Some((metric.into(), lower_is_better));
        self
    }

    /// The managed directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{step:020}{SUFFIX}"))
    }

    /// Saves `state` as the checkpoint of its progress step, then applies retention.
    ///
    /// # Errors
    /// The save failed (nothing is deleted then) or retention could not delete a file.
    pub fn save<M: Module>(&self, state: TrainingState<'_, M>) -> Result<PathBuf, CheckpointError> {
        let path = self.path_for(state.progress.step);
        state.save(&path)?;
        self.retain()?;
        Ok(path)
    }

    /// Checkpoint files in the directory, oldest step first.
    ///
    /// # Errors
    /// The directory cannot be listed.
    pub fn list(&self) -> Result<Vec<CheckpointEntry>, CheckpointError> {
        let mut out = Vec::new();
        for entry in self.read_dir()? {
            let name = entry.file_name();
            let Some(step) = name
                .to_str()
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            out.push(CheckpointEntry {
                step,
                path: entry.path(),
            });
        }
        out.sort_by_key(|c| c.step);
        Ok(out)
    }

    /// The newest checkpoint that opens and validates, if any (a damaged newer file is
    /// skipped, not fatal).
    ///
    /// # Errors
    /// The directory cannot be listed.
    pub fn latest(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        Ok(self
            .list()?
            .iter()
            .rev()
            .find_map(|c| Checkpoint::open(&c.path).ok()))
    }

    /// Deletes checkpoints outside the retention policy. The newest valid checkpoint is never
    /// deleted.
    ///
    /// # Errors
    /// A file could not be deleted.
    pub fn retain(&self) -> Result<(), CheckpointError> {
        let all = self.list()?;
        let mut keep: Vec<u64> = all
            .iter()
            .rev()
            .take(self.keep_last)
            .map(|c| c.step)
            .collect();
        if let Some(newest_valid) = all.iter().rev().find(|c| Checkpoint::open(&c.path).is_ok()) {
            keep.push(newest_valid.step);
        }
        if let Some((metric, lower)) = &self.best {
            let key = format!("progress.{metric}");
            let scored = all.iter().filter_map(|c| {
                let ckpt = Checkpoint::open(&c.path).ok()?;
                let value = ckpt.reader().scalars().get(&key).copied()?;
                Some((c.step, f64::try_from(value).ok()?))
            });
            let best = if *lower {
                scored.min_by(|a, b| a.1.total_cmp(&b.1))
            } else {
                scored.max_by(|a, b| a.1.total_cmp(&b.1))
            };
            keep.extend(best.map(|(step, _)| step));
        }
        for c in all.iter().filter(|c| !keep.contains(&c.step)) {
            fs::remove_file(&c.path).map_err(|source| CheckpointError::Io {
                action: "delete",
                path: c.path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Removes scratch files (`.<name>.<pid>-<n>.bpk-tmp`) whose process is gone. Returns how
    /// many were removed.
    ///
    /// # Errors
    /// The directory cannot be listed or a file cannot be removed.
    pub fn clean_scratch(&self) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        for entry in self.read_dir()? {
            let name = entry.file_name();
            if !name.to_str().is_some_and(is_stale_scratch) {
                continue;
            }
            fs::remove_file(entry.path()).map_err(|source| CheckpointError::Io {
                action: "remove scratch file",
                path: entry.path(),
                source,
            })?;
            removed += 1;
        }
        Ok(removed)
    }

    fn read_dir(&self) -> Result<Vec<fs::DirEntry>, CheckpointError> {
        let io = |source| CheckpointError::Io {
            action: "list",
            path: self.dir.clone(),
            source,
        };
        fs::read_dir(&self.dir)
            .map_err(io)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(io)
    }
}
