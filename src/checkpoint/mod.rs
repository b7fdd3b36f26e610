//! Training checkpoints: the model, the optimizer state, the LR scheduler record and the
//! training progress in one crash-safe file; a manager for a directory of them (latest, keep
//! last N / best), and asynchronous saves.
//!
//! # Layout
//!
//! One burnpack file, namespaced so each part is readable on its own:
//!
//! | entry | holds |
//! |---|---|
//! | tensors `model.<path>` | model parameters, with their `ParamId`s (as `save_pack` writes them) |
//! | tensors `optim.<param id>.<field>` | optimizer state (`ModuleOptimizer::to_record`), dtypes kept |
//! | scalars `optim.<key>`, metadata `optim.<param id>` | optimizer scalars and parameter paths |
//! | scalars `scheduler.<key>` | the LR scheduler record |
//! | scalars `progress.epoch`, `progress.step`, `progress.<name>` | training progress |
//! | metadata `burnpack.kind` = `checkpoint`, `producer`, user keys | |
//!
//! A checkpoint loads as a plain model with [`PackModule::load_pack`]: the module loader sees
//! `burnpack.kind` and reads only the `model.` namespace.
//!
//! ```
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::checkpoint::{Checkpoint, Progress, TrainingState};
//! use burnpack::module::PackModule;
//!
//! #[derive(Module, Debug)]
//! struct Tiny { w: Param<Tensor<1>> }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("ckpt.bpk");
//! let model = Tiny { w: Param::from_data([1.0, 2.0], &device) };
//! TrainingState::new(&model, Progress::new(3, 1200)).save(&path).unwrap();
//!
//! let ckpt = Checkpoint::open(&path).unwrap();
//! assert_eq!((ckpt.progress().epoch, ckpt.progress().step), (3, 1200));
//! let restored = ckpt.load_model(Tiny { w: Param::from_data([0.0, 0.0], &device) }).unwrap();
//! // The same file loads as a plain model.
//! let plain = Tiny { w: Param::from_data([0.0, 0.0], &device) }.load_pack(&path).unwrap();
//! assert_eq!(restored.w.val().into_data(), plain.w.val().into_data());
//! ```

mod async_save;
mod error;
mod manager;

use std::collections::BTreeMap;
use std::path::Path;

use burn::lr_scheduler::LrSchedulerRecord;
use burn::module::Module;
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::tensor::Bytes;

pub use async_save::{AsyncSaver, WhenBusy};
pub use error::CheckpointError;
pub use manager::{CheckpointEntry, CheckpointManager};

use crate::format::Scalar;
use crate::module::{LoadOptions, PackModule, SaveOptions};
use crate::read::Reader;
use crate::write::{Entry, Writer};

pub use crate::module::{
    CHECKPOINT_KIND as KIND, CHECKPOINT_KIND_KEY as KIND_KEY,
    CHECKPOINT_MODEL_PREFIX as MODEL_PREFIX,
};
const OPTIM_PREFIX: &str = "optim.";
/// Metadata key listing the optional parts a checkpoint holds (`optim`, `scheduler`), so a
/// part that is present but empty (a fresh optimizer that has not stepped yet) is told from
/// one that is absent.
pub const PARTS_KEY: &str = "burnpack.parts";
const SCHEDULER_PREFIX: &str = "scheduler.";
const PROGRESS_PREFIX: &str = "progress.";

/// Where training stands: epoch, step and any named values (a loss, a metric, a seed).
///
/// ```
/// use burnpack::checkpoint::Progress;
/// let p = Progress::new(2, 500).with("val_loss", 0.31).with("seed", 42u64);
/// assert_eq!(p.scalars["seed"], burnpack::Scalar::UInt(42));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// The epoch.
    pub epoch: u64,
    /// The global step.
    pub step: u64,
    /// Named values.
    pub scalars: BTreeMap<String, Scalar>,
}

impl Progress {
    /// Progress at `epoch` and `step`.
    #[must_use]
    pub fn new(epoch: u64, step: u64) -> Self {
        Self {
            epoch,
            step,
            scalars: BTreeMap::new(),
        }
    }

    /// Adds a named value.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Scalar>) -> Self {
        self.scalars.insert(name.into(), value.into());
        self
    }
}

/// What a checkpoint saves: the model, optionally the optimizer and the scheduler record, and
/// the progress.
pub struct TrainingState<'a, M: Module> {
    model: &'a M,
    optimizer: Option<&'a ModuleOptimizer>,
    scheduler: Option<LrSchedulerRecord>,
    progress: Progress,
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
                .map_err(|e| record_error("serialize the optimizer state", &e))?;
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
                .map_err(|e| record_error("serialize the scheduler record", &e))?;
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

fn record_error(context: &str, e: &impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Record {
        context: context.to_string(),
        message: e.to_string(),
    }
}

/// Moves a pack Burn serialized (an optimizer or scheduler record) under `prefix`: its tensors
/// become entries that are windows into `bytes`, its scalars and metadata prefixed keys.
fn absorb(
    bytes: Bytes,
    prefix: &str,
    entries: &mut Vec<Entry>,
    scalars: &mut BTreeMap<String, Scalar>,
    metadata: &mut BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    absorb_reader(
        &Reader::from_bytes(bytes)?,
        prefix,
        entries,
        scalars,
        metadata,
    )
}

/// [`absorb`] from an open reader.
fn absorb_reader(
    reader: &Reader,
    prefix: &str,
    entries: &mut Vec<Entry>,
    scalars: &mut BTreeMap<String, Scalar>,
    metadata: &mut BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    for info in reader.tensors_by_position() {
        let entry = Entry::resident(
            format!("{prefix}{}", info.name()),
            info.dtype(),
            info.shape().to_vec(),
            reader.read(info)?,
        );
        entries.push(match info.param_id() {
            Some(id) => entry.with_param_id(id),
            None => entry,
        });
    }
    for (k, v) in reader.scalars() {
        scalars.insert(format!("{prefix}{k}"), *v);
    }
    for (k, v) in reader.metadata() {
        metadata.insert(format!("{prefix}{k}"), v.clone());
    }
    Ok(())
}

/// An open checkpoint: progress, and the parts to restore.
#[derive(Debug)]
pub struct Checkpoint {
    reader: Reader,
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
        match reader.metadata().get(KIND_KEY) {
            Some(kind) if kind == KIND => Ok(Self { reader }),
            found => Err(CheckpointError::NotACheckpoint {
                file: reader.file().to_string(),
                found: found.cloned(),
            }),
        }
    }

    /// The underlying reader.
    #[must_use]
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The progress saved with the checkpoint.
    #[must_use]
    pub fn progress(&self) -> Progress {
        let mut progress = Progress::default();
        for (k, v) in self.reader.scalars() {
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
        match self.reader.metadata().get(PARTS_KEY) {
            Some(parts) => parts.split(',').any(|p| p == name),
            None => {
                self.reader.scalars().keys().any(|k| k.starts_with(prefix))
                    || self
                        .reader
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
        Ok(model.load_pack_reader(&self.reader, options)?)
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
                file: self.reader.file().to_string(),
                what: "the checkpoint holds no optimizer state".into(),
            });
        }
        optimizer
            .from_bytes(self.extract(OPTIM_PREFIX)?)
            .map_err(|e| {
                record_error(
                    &format!("{}: restore the optimizer state", self.reader.file()),
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
            record_error(
                &format!("{}: restore the scheduler record", self.reader.file()),
                &e,
            )
        })
    }

    /// The part under `prefix` as a stand-alone pack, as Burn wrote it (prefix removed).
    fn extract(&self, prefix: &str) -> Result<Bytes, CheckpointError> {
        Ok(self.part(prefix)?.into_bytes()?)
    }

    /// A writer for the part under `prefix` (prefix removed); tensors are windows into the
    /// checkpoint.
    fn part(&self, prefix: &str) -> Result<Writer, CheckpointError> {
        let mut entries = Vec::new();
        for info in self.reader.tensors_by_position() {
            let Some(name) = info.name().strip_prefix(prefix) else {
                continue;
            };
            let entry = Entry::resident(
                name,
                info.dtype(),
                info.shape().to_vec(),
                self.reader.read(info)?,
            );
            entries.push(match info.param_id() {
                Some(id) => entry.with_param_id(id),
                None => entry,
            });
        }
        let mut writer = Writer::new(entries);
        for (k, v) in self.reader.scalars() {
            if let Some(name) = k.strip_prefix(prefix) {
                writer = writer.with_scalar(name, *v);
            }
        }
        for (k, v) in self.reader.metadata() {
            if let Some(name) = k.strip_prefix(prefix) {
                writer = writer.with_metadata(name, v.clone());
            }
        }
        Ok(writer)
    }

    /// Writes the checkpoint in burn-train's layout: `<dir>/model-<epoch>.bpk` (as
    /// `Module::save_file` writes it), `optim-<epoch>.bpk` and `scheduler-<epoch>.bpk` (as
    /// Burn's records write them, when the checkpoint has them), each atomically.
    ///
    /// # Errors
    /// A file could not be written.
    pub fn export_burn_train(
        &self,
        dir: impl AsRef<Path>,
        epoch: u64,
    ) -> Result<(), CheckpointError> {
        let dir = dir.as_ref();
        self.part(MODEL_PREFIX)?
            .write_to_file(dir.join(format!("model-{epoch}.bpk")))?;
        if self.has_optimizer() {
            self.part(OPTIM_PREFIX)?
                .write_to_file(dir.join(format!("optim-{epoch}.bpk")))?;
        }
        if self.has_scheduler() {
            self.part(SCHEDULER_PREFIX)?
                .write_to_file(dir.join(format!("scheduler-{epoch}.bpk")))?;
        }
        Ok(())
    }
}

/// Builds one checkpoint at `out` from burn-train's files for `epoch` in `dir`:
/// `model-<epoch>.bpk` (required), `optim-<epoch>.bpk` and `scheduler-<epoch>.bpk` (when
/// present). Tensors are copied from the mapped files straight into the new one; the progress
/// is `epoch` (burn-train's files carry no step: it is 0). Returns the size written.
///
/// # Errors
/// A file is missing or invalid, or the checkpoint could not be written.
pub fn import_burn_train(
    dir: impl AsRef<Path>,
    epoch: u64,
    out: impl AsRef<Path>,
) -> Result<u64, CheckpointError> {
    let dir = dir.as_ref();
    let mut entries = Vec::new();
    let mut scalars = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    let model = Reader::open(dir.join(format!("model-{epoch}.bpk")))?;
    absorb_reader(
        &model,
        MODEL_PREFIX,
        &mut entries,
        &mut scalars,
        &mut metadata,
    )?;
    let mut parts = Vec::new();
    for (name, prefix) in [("optim", OPTIM_PREFIX), ("scheduler", SCHEDULER_PREFIX)] {
        let path = dir.join(format!("{name}-{epoch}.bpk"));
        if path.exists() {
            parts.push(name);
            absorb_reader(
                &Reader::open(&path)?,
                prefix,
                &mut entries,
                &mut scalars,
                &mut metadata,
            )?;
        }
    }
    // The model file's own metadata (burn-store's `producer`...) is not the checkpoint's.
    metadata.retain(|k, _| !k.starts_with(MODEL_PREFIX));
    metadata.insert(PARTS_KEY.to_string(), parts.join(","));
    scalars.insert(format!("{PROGRESS_PREFIX}epoch"), Scalar::UInt(epoch));
    scalars.insert(format!("{PROGRESS_PREFIX}step"), Scalar::UInt(0));
    Ok(assemble(&SaveOptions::new(), entries, scalars, metadata).write_to_file(out)?)
}

/// A checkpoint writer: `options` applied, namespaced scalars and metadata, the kind marker.
fn assemble(
    options: &SaveOptions,
    entries: Vec<Entry>,
    scalars: BTreeMap<String, Scalar>,
    metadata: BTreeMap<String, String>,
) -> Writer {
    let mut writer = options.configure(Writer::new(entries));
    for (k, v) in metadata {
        writer = writer.with_metadata(k, v);
    }
    for (k, v) in scalars {
        writer = writer.with_scalar(k, v);
    }
    writer.with_metadata(KIND_KEY, KIND)
}
