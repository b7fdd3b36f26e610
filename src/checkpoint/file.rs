//! An open checkpoint: its progress, and each part to restore.

use std::path::Path;

use burn::lr_scheduler::LrSchedulerRecord;
use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Bytes;

use super::error::CheckpointError;
use super::namespace::{
    KIND, KIND_KEY, OPTIM_PREFIX, PARTS_KEY, PROGRESS_PREFIX, SCHEDULER_PREFIX,
};
use super::progress::Progress;
use crate::module::{LoadOptions, PackModule};
use crate::read::{PackSource, Reader};
use crate::write::Writer;

/// An open checkpoint: progress, and the parts to restore.
///
/// Read from a file (mapped: [`open`](Checkpoint::open)) by default, or from any
/// [`PackSource`], such as a pack on object storage (feature `object-store`), where each part
/// fetches only its own tensors.
#[derive(Debug)]
pub struct Checkpoint<S: PackSource = Reader> {
    source: S,
}

impl Checkpoint {
    /// Opens (maps) a checkpoint file and checks that it is one.
    ///
    /// # Errors
    /// [`CheckpointError::Read`] or [`CheckpointError::NotACheckpoint`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Self::from_reader(Reader::open(path)?)
    }

    /// Wraps an open reader.
    ///
    /// # Errors
    /// [`CheckpointError::NotACheckpoint`].
    pub fn from_reader(reader: Reader) -> Result<Self, CheckpointError> {
        Self::from_source(reader)
    }

    /// The underlying reader.
    #[must_use]
    pub fn reader(&self) -> &Reader {
        &self.source
    }
}

impl<S: PackSource> Checkpoint<S> {
    /// Wraps an open pack source, checking that it is a checkpoint.
    ///
    /// # Errors
    /// [`CheckpointError::NotACheckpoint`].
    pub fn from_source(source: S) -> Result<Self, CheckpointError> {
        match source.layout().metadata().get(KIND_KEY) {
            Some(kind) if kind == KIND => Ok(Self { source }),
            found => Err(CheckpointError::NotACheckpoint {
                file: source.file().to_string(),
                found: found.cloned(),
            }),
        }
    }

    /// The underlying source.
    #[must_use]
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The progress saved with the checkpoint.
    #[must_use]
    pub fn progress(&self) -> Progress {
        let mut progress = Progress::default();
        for (k, v) in self.source.layout().scalars() {
            let Some(name) = k.strip_prefix(PROGRESS_PREFIX) else {
                continue;
            };
            match (name, u64::try_from(*v)) {
                ("epoch", Ok(n)) => progress.epoch = n,
                ("step", Ok(n)) => progress.step = n,
                _ => {
                    progress.scalars.insert(name.to_string(), *v);
                }
            }
        }
        progress
    }

    /// Whether the checkpoint holds optimizer state (possibly empty: an optimizer saved
    /// before its first step).
    #[must_use]
    pub fn has_optimizer(&self) -> bool {
        self.has_part("optim", OPTIM_PREFIX)
    }

    /// Whether the checkpoint holds an LR scheduler record.
    #[must_use]
    pub fn has_scheduler(&self) -> bool {
        self.has_part("scheduler", SCHEDULER_PREFIX)
    }

    /// Whether part `name` was saved: listed under [`PARTS_KEY`], or (checkpoints written
    /// before that key) some entry lives under `prefix`.
    fn has_part(&self, name: &str, prefix: &str) -> bool {
        let layout = self.source.layout();
        match layout.metadata().get(PARTS_KEY) {
            Some(parts) => parts.split(',').any(|p| p == name),
            None => {
                layout.scalars().keys().any(|k| k.starts_with(prefix))
                    || layout
                        .tensors()
                        .iter()
                        .any(|t| t.name().starts_with(prefix))
            }
        }
    }

    /// Loads the model part into `model` (strict, dtypes as stored, zero-copy).
    ///
    /// # Errors
    /// [`CheckpointError::Module`] listing every mismatch.
    pub fn load_model<M: Module>(&self, model: M) -> Result<M, CheckpointError> {
        self.load_model_with(model, &LoadOptions::new())
    }

    /// Loads the model part with `options`.
    ///
    /// # Errors
    /// [`CheckpointError::Module`] listing every mismatch.
    pub fn load_model_with<M: Module>(
        &self,
        model: M,
        options: &LoadOptions,
    ) -> Result<M, CheckpointError> {
        Ok(model.load_from_source(&self.source, options)?)
    }

    /// Restores the optimizer state into `optimizer` (built with the same configuration).
    ///
    /// # Errors
    /// [`CheckpointError::Invalid`] when the checkpoint has no optimizer state,
    /// [`CheckpointError::Record`] when Burn refuses it.
    pub fn load_optimizer(
        &self,
        optimizer: ModuleOptimizer,
    ) -> Result<ModuleOptimizer, CheckpointError> {
        if !self.has_optimizer() {
            return Err(CheckpointError::Invalid {
                file: self.source.file().to_string(),
                what: "the checkpoint holds no optimizer state".into(),
            });
        }
        optimizer
            .from_bytes(self.extract(OPTIM_PREFIX)?)
            .map_err(|e| {
                CheckpointError::record(
                    &format!("{}: restore the optimizer state", self.source.file()),
                    &e,
                )
            })
    }

    /// The LR scheduler record, for `LrScheduler::load_record`.
    ///
    /// # Errors
    /// [`CheckpointError::Record`] when Burn refuses it.
    pub fn scheduler_record(&self) -> Result<LrSchedulerRecord, CheckpointError> {
        LrSchedulerRecord::from_bytes(self.extract(SCHEDULER_PREFIX)?).map_err(|e| {
            CheckpointError::record(
                &format!("{}: restore the scheduler record", self.source.file()),
                &e,
            )
        })
    }

    /// The part under `prefix` as a stand-alone pack, as Burn wrote it (prefix removed).
    pub(crate) fn extract(&self, prefix: &str) -> Result<Bytes, CheckpointError> {
        Ok(Writer::from_part(&self.source, prefix)?.into_bytes()?)
    }
}
