//! A directory of checkpoints: save by step, latest, retention, scratch cleanup.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::module::Module;

use super::async_save::{InFlight, InFlightGuard};
use super::error::CheckpointError;
use super::file::Checkpoint;
use super::state::TrainingState;
use crate::read::PackSource;
use crate::write::{is_scratch_name, is_stale_scratch};

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

/// Keeps checkpoints in a directory as `ckpt-00000000000000000007.bpk` for step 7: the step
/// zero-padded to 20 digits (the width of any `u64`), so that a plain listing sorts in step
/// order.
///
/// A checkpoint becomes visible under its name only once durable (atomic write: fsync, rename,
/// directory fsync), so [`latest`](Self::latest) never sees a partial file; it also skips any
/// file that does not open as a checkpoint. After each successful save, retention keeps the last
/// `keep_last` checkpoints and, optionally, the best by a progress metric; a failed save deletes
/// nothing, so the last good checkpoint always survives. Scratch files left by a killed process
/// are removed when the manager is created (a live writer's, locked, never are).
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
    retention: Retention,
    /// Saves of this manager (and its clones) still being written in the background.
    in_flight: Arc<InFlight>,
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
            retention: Retention::default(),
            in_flight: Arc::default(),
        };
        manager.clean_scratch()?;
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

    /// The managed directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the checkpoint of `step` is saved.
    #[must_use]
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.dir.join(checkpoint_name(step))
    }

    /// Saves `state` as the checkpoint of its progress step, then applies retention.
    ///
    /// # Errors
    /// [`CheckpointError::NewerExists`] when the directory holds a valid checkpoint of a later
    /// step (retention would delete the new file at once; nothing is written then), the save
    /// failed (nothing is deleted then) or retention could not delete a file.
    pub fn save<M: Module>(&self, state: TrainingState<'_, M>) -> Result<PathBuf, CheckpointError> {
        let step = state.progress.step;
        self.commit(step, |path| state.save(path))
    }

    /// The one way a checkpoint enters the directory (synchronous and background saves):
    /// refuse when a newer valid checkpoint exists, write the file for `step` with `write`,
    /// then apply retention.
    pub(crate) fn commit(
        &self,
        step: u64,
        write: impl FnOnce(&Path) -> Result<u64, CheckpointError>,
    ) -> Result<PathBuf, CheckpointError> {
        self.check_newer(step)?;
        let path = self.path_for(step);
        write(&path)?;
        self.retain()?;
        Ok(path)
    }

    /// Refuses `step` when a valid checkpoint of a later step is in the directory.
    pub(crate) fn check_newer(&self, step: u64) -> Result<(), CheckpointError> {
        let all = self.list()?;
        match newer_valid(&all, step, |c| c.step, |c| Checkpoint::open(&c.path).ok()) {
            Some(c) => Err(CheckpointError::NewerExists {
                dir: self.dir.clone(),
                step,
                newer_step: c.step,
                newer: c.path.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Deletes every checkpoint of a step after `step` (to roll a run back and train on from
    /// `step`). Returns how many were deleted.
    ///
    /// # Errors
    /// The directory cannot be listed or a file cannot be deleted.
    pub fn discard_after(&self, step: u64) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        for c in self.list()?.into_iter().filter(|c| c.step > step) {
            fs::remove_file(&c.path).map_err(|source| CheckpointError::Io {
                action: "delete",
                path: c.path.clone(),
                source,
            })?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Counts a background save as in flight until the guard is dropped; [`latest`](Self::latest)
    /// waits for it.
    pub(crate) fn begin_background(&self) -> InFlightGuard {
        self.in_flight.begin()
    }

    /// Checkpoint files in the directory, oldest step first.
    ///
    /// # Errors
    /// The directory cannot be listed.
    pub fn list(&self) -> Result<Vec<CheckpointEntry>, CheckpointError> {
        let mut out = Vec::new();
        for entry in self.read_dir()? {
            let Some(step) = entry.file_name().to_str().and_then(step_of) else {
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
    /// skipped, not fatal). A save that an [`AsyncSaver`](super::AsyncSaver) of this manager
    /// (or of a clone) is still writing is waited for first, so the checkpoint just handed
    /// over is the one returned.
    ///
    /// # Errors
    /// The directory cannot be listed.
    pub fn latest(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        self.in_flight.wait();
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
        for c in self
            .retention
            .doomed(&all, |c| c.step, |c| Checkpoint::open(&c.path).ok())
        {
            fs::remove_file(&c.path).map_err(|source| CheckpointError::Io {
                action: "delete",
                path: c.path.clone(),
                source,
            })?;
        }
        Ok(())
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
        for entry in self.read_dir()? {
            let name = entry.file_name();
            if !name.to_str().is_some_and(is_scratch_name) || !is_stale_scratch(&entry.path()) {
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

/// The object or file name of the checkpoint of `step` (zero-padded, so names sort by step).
pub(crate) fn checkpoint_name(step: u64) -> String {
    format!("{PREFIX}{step:020}{SUFFIX}")
}

/// The step of a checkpoint name, `None` for other names.
pub(crate) fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// Which checkpoints a manager keeps: the last `keep_last`, the newest valid one, and
/// optionally the best by a progress metric.
#[derive(Debug, Clone)]
pub(crate) struct Retention {
    pub(crate) keep_last: usize,
    /// The metric's name, and whether lower is better.
    pub(crate) best: Option<(String, bool)>,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_last: 3,
            best: None,
        }
    }
}

impl Retention {
    /// Keeps the `n` most recent checkpoints (at least 1).
    pub(crate) fn keep_last(self, n: usize) -> Self {
        Self {
            keep_last: n.max(1),
            ..self
        }
    }

    /// Also keeps the best by `progress.<metric>`.
    pub(crate) fn keep_best(self, metric: impl Into<String>, lower_is_better: bool) -> Self {
        Self {
            best: Some((metric.into(), lower_is_better)),
            ..self
        }
    }

    /// The checkpoints of `all` (sorted by `step`, oldest first) to delete. `open` opens one
    /// (`None` when it does not open as a checkpoint), each at most once: the newest that
    /// opens is always kept, and with a `best` policy each is opened for its metric.
    pub(crate) fn doomed<'e, E, S: PackSource>(
        &self,
        all: &'e [E],
        step: impl Fn(&E) -> u64,
        mut open: impl FnMut(&E) -> Option<Checkpoint<S>>,
    ) -> Vec<&'e E> {
        let mut keep: Vec<u64> = all.iter().rev().take(self.keep_last).map(&step).collect();
        match &self.best {
            None => keep.extend(all.iter().rev().find(|e| open(e).is_some()).map(&step)),
            Some((metric, lower)) => {
                // Every valid checkpoint, oldest first, with its metric when it has one.
                let valid: Vec<(u64, Option<f64>)> = all
                    .iter()
                    .filter_map(|e| {
                        let value = open(e)?.progress().scalars.get(metric).copied();
                        Some((step(e), value.and_then(|v| f64::try_from(v).ok())))
                    })
                    .collect();
                keep.extend(valid.last().map(|(step, _)| *step));
                let scored = valid.iter().filter_map(|(step, v)| Some((*step, (*v)?)));
                let best = if *lower {
                    scored.min_by(|a, b| a.1.total_cmp(&b.1))
                } else {
                    scored.max_by(|a, b| a.1.total_cmp(&b.1))
                };
                keep.extend(best.map(|(step, _)| step));
            }
        }
        all.iter().filter(|e| !keep.contains(&step(e))).collect()
    }
}

/// The newest entry of `all` (sorted by `step`, oldest first) of a step after `after` that
/// opens as a checkpoint: what a save of step `after` would land behind.
pub(crate) fn newer_valid<E, S: PackSource>(
    all: &[E],
    after: u64,
    step: impl Fn(&E) -> u64,
    mut open: impl FnMut(&E) -> Option<Checkpoint<S>>,
) -> Option<&E> {
    all.iter()
        .rev()
        .take_while(|e| step(e) > after)
        .find(|e| open(e).is_some())
}
