//! What a checkpoint saves, taken on the training thread and written elsewhere.

use std::collections::BTreeMap;
use std::path::Path;

use burn::lr_scheduler::LrSchedulerRecord;
use burn::module::Module;
use burn::optim::{ModuleOptimizer, OptimizerRecord};

use super::error::CheckpointError;
use super::namespace::{
    MODEL_PREFIX, OPTIM_PREFIX, PARTS_KEY, PROGRESS_PREFIX, SCHEDULER_PREFIX, absorb, assemble,
};
use super::progress::Progress;
use crate::format::Scalar;
use crate::module::{PackModule, SaveOptions};
use crate::write::{Entry, Writer};

/// What a checkpoint saves: the model, optionally the optimizer and the scheduler record, and
/// the progress.
pub struct TrainingState<'a, M: Module> {
    model: &'a M,
    optimizer: Option<&'a ModuleOptimizer>,
    scheduler: Option<LrSchedulerRecord>,
    pub(crate) progress: Progress,
    options: SaveOptions,
}

impl<'a, M: Module> TrainingState<'a, M> {
    /// The state of `model` at `progress`.
    #[must_use]
    pub fn new(model: &'a M, progress: Progress) -> Self {
        Self {
            model,
            optimizer: None,
            scheduler: None,
            progress,
            options: SaveOptions::new(),
        }
    }

    /// Includes the optimizer's state.
    #[must_use]
    pub fn optimizer(mut self, optimizer: &'a ModuleOptimizer) -> Self {
        self.optimizer = Some(optimizer);
        self
    }

    /// Includes an LR scheduler's record (`LrScheduler::to_record()`).
    #[must_use]
    pub fn scheduler(mut self, record: LrSchedulerRecord) -> Self {
        self.scheduler = Some(record);
        self
    }

    /// Save options (metadata, threads, durability).
    #[must_use]
    pub fn options(mut self, options: SaveOptions) -> Self {
        self.options = options;
        self
    }

    /// Takes what must be taken on the training thread: the model's parameters as deferred
    /// entries (tensor handles; no bytes are read) and the optimizer's record
    /// (`ModuleOptimizer::to_record`, Burn's only access to its state). The result is `Send`
    /// and is serialized and written elsewhere.
    ///
    /// # Errors
    /// A quantized parameter could not be read.
    pub fn prepare(self) -> Result<PreparedState, CheckpointError> {
        let entries = self
            .model
            .pack_entries()?
            .into_iter()
            .map(|e| e.prefixed(MODEL_PREFIX))
            .collect();
        Ok(PreparedState {
            entries,
            optimizer: self.optimizer.map(ModuleOptimizer::to_record),
            scheduler: self.scheduler,
            progress: self.progress,
            options: self.options,
        })
    }

    /// [`prepare`](Self::prepare) then [`PreparedState::into_writer`].
    ///
    /// # Errors
    /// See both.
    pub fn into_writer(self) -> Result<Writer, CheckpointError> {
        self.prepare()?.into_writer()
    }

    /// Saves the checkpoint to `path` (atomically unless the options say in place). Returns
    /// the file size.
    ///
    /// # Errors
    /// See [`into_writer`](Self::into_writer) and [`Writer::write_to_file`].
    pub fn save(self, path: impl AsRef<Path>) -> Result<u64, CheckpointError> {
        Ok(self.into_writer()?.write_to_file(path)?)
    }
}

/// A checkpoint's state detached from the training thread, ready to be written.
pub struct PreparedState {
    entries: Vec<Entry>,
    optimizer: Option<OptimizerRecord>,
    scheduler: Option<LrSchedulerRecord>,
    progress: Progress,
    options: SaveOptions,
}

impl PreparedState {
    /// The training step this state was taken at.
    #[must_use]
    pub fn step(&self) -> u64 {
        self.progress.step
    }

    /// Serializes the records (Burn's own encoding, then windows into it) and assembles the
    /// checkpoint writer: model entries deferred, progress as scalars.
    ///
    /// # Errors
    /// Burn refused to serialize a record.
    pub fn into_writer(self) -> Result<Writer, CheckpointError> {
        let mut entries = self.entries;
        let mut scalars: BTreeMap<String, Scalar> = BTreeMap::new();
        let mut metadata: BTreeMap<String, String> = BTreeMap::new();
        let parts: Vec<&str> = [
            self.optimizer.is_some().then_some("optim"),
            self.scheduler.is_some().then_some("scheduler"),
        ]
        .into_iter()
        .flatten()
        .collect();
        metadata.insert(PARTS_KEY.to_string(), parts.join(","));
        if let Some(record) = self.optimizer {
            let bytes = record
                .into_bytes()
                .map_err(|e| CheckpointError::record("serialize the optimizer state", &e))?;
            absorb(
                bytes,
                OPTIM_PREFIX,
                &mut entries,
                &mut scalars,
                &mut metadata,
            )?;
        }
        if let Some(record) = self.scheduler {
            let bytes = record
                .into_bytes()
                .map_err(|e| CheckpointError::record("serialize the scheduler record", &e))?;
            absorb(
                bytes,
                SCHEDULER_PREFIX,
                &mut entries,
                &mut scalars,
                &mut metadata,
            )?;
        }
        scalars.insert(
            format!("{PROGRESS_PREFIX}epoch"),
            Scalar::UInt(self.progress.epoch),
        );
        scalars.insert(
            format!("{PROGRESS_PREFIX}step"),
            Scalar::UInt(self.progress.step),
        );
        for (k, v) in self.progress.scalars {
            scalars.insert(format!("{PROGRESS_PREFIX}{k}"), v);
        }
        Ok(assemble(&self.options, entries, scalars, metadata))
    }
}
