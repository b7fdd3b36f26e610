//! What a checkpoint saves, taken on the training thread and written elsewhere.

use std::collections::BTreeMap;
use std::path::Path;

use burn::lr_scheduler::LrSchedulerRecord;
use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Bytes;

use super::error::CheckpointError;
use super::namespace::{
    MODEL_PREFIX, OPTIM_PREFIX, PARTS_KEY, PROGRESS_PREFIX, SCHEDULER_PREFIX, absorb,
    absorb_reader, assemble, head,
};
use super::progress::Progress;
use crate::format::Scalar;
use crate::module::{PackModule, SaveOptions};
use crate::read::Reader;
use crate::write::staged::{STAGED_BYTES, Staged};
use crate::write::{Entry, Writer};

/// What a checkpoint saves: the model, optionally the optimizer and the scheduler record, and
/// the progress.
pub struct TrainingState<'a, M: Module> {
    model: &'a M,
    optimizer: Option<&'a ModuleOptimizer>,
    optimizer_bytes: Option<Bytes>,
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
            optimizer_bytes: None,
            scheduler: None,
            progress,
            options: SaveOptions::new(),
        }
    }

    /// Includes the optimizer's state.
    #[must_use]
    pub fn optimizer(mut self, optimizer: &'a ModuleOptimizer) -> Self {
        self.optimizer = Some(optimizer);
        self.optimizer_bytes = None;
        self
    }

    /// Includes the optimizer's state as Burn serialized it: the bytes of
    /// `ModuleOptimizer::into_bytes` (or `to_record()` then `OptimizerRecord::into_bytes`), a
    /// burnpack, read as it is (its tensors are windows of `bytes`, nothing is copied). For a
    /// state already serialized elsewhere (burn-train hands its checkpointers records); takes
    /// the place of [`optimizer`](Self::optimizer). Bytes that are not a burnpack fail the save,
    /// naming the optimizer part.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::optim::{ModuleOptimizer, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::checkpoint::{Checkpoint, Progress, TrainingState};
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let model = Tiny { w: Param::from_data([1.0, 2.0], &Device::flex()) };
    /// let optim: ModuleOptimizer = SgdConfig::new().init();
    /// let bytes = optim.into_bytes().unwrap();
    /// let path = dir.path().join("ckpt.bpk");
    /// TrainingState::new(&model, Progress::new(0, 1)).optimizer_bytes(bytes).save(&path).unwrap();
    /// assert!(Checkpoint::open(&path).unwrap().has_optimizer());
    /// ```
    #[must_use]
    pub fn optimizer_bytes(mut self, bytes: Bytes) -> Self {
        self.optimizer = None;
        self.optimizer_bytes = Some(bytes);
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
    /// entries (tensor handles; no bytes are read) and a clone of the optimizer (its state is
    /// a map of shared, immutable tensor handles, so the clone copies no tensor byte; later
    /// steps create new states). The result is `Send`; the optimizer's record
    /// (`ModuleOptimizer::to_record`, Burn's only access to its state, which copies every state
    /// tensor) is taken and serialized where it is written.
    ///
    /// # Errors
    /// A quantized parameter could not be read.
    pub fn prepare(self) -> Result<PreparedState, CheckpointError> {
        // The model's floats cast where the options say (`SaveOptions::float_dtype`).
        let entries = self
            .options
            .cast(self.model.pack_entries()?)
            .into_iter()
            .map(|e| e.prefixed(MODEL_PREFIX))
            .collect();
        let step = self.progress.step;
        Ok(PreparedState {
            entries,
            records: Records::Pending {
                optimizer: match (self.optimizer, self.optimizer_bytes) {
                    (Some(optimizer), _) => Optimizer::Handles(optimizer.clone()),
                    (None, Some(bytes)) => Optimizer::Bytes(bytes),
                    (None, None) => Optimizer::None,
                },
                scheduler: self.scheduler,
                progress: self.progress,
            },
            step,
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
    /// the file size. See [`PreparedState::write_to_file`].
    ///
    /// # Errors
    /// See [`into_writer`](Self::into_writer) and [`Writer::write_to_file`].
    pub fn save(self, path: impl AsRef<Path>) -> Result<u64, CheckpointError> {
        self.prepare()?.write_to_file(path)
    }
}

/// A checkpoint's state detached from the training thread, ready to be written.
pub struct PreparedState {
    entries: Vec<Entry>,
    records: Records,
    options: SaveOptions,
    /// The step whose checkpoint this is (where a manager saves it).
    step: u64,
}

impl PreparedState {
    /// A state whose parts besides the model are serialized already (burn-train's records, as
    /// its checkpointers receive them): `entries` the model's (under `model.`), `parts` the
    /// rest with the progress scalars and the parts' metadata, saved as the checkpoint of
    /// `step`.
    #[cfg(feature = "train")]
    pub(crate) fn serialized(
        step: u64,
        entries: Vec<Entry>,
        parts: Parts,
        options: SaveOptions,
    ) -> Self {
        Self {
            entries,
            records: Records::Ready(parts),
            options,
            step,
        }
    }

    /// The training step this state was taken at.
    #[must_use]
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The model's entries (deferred), the records still to serialize, the options.
    pub(crate) fn into_parts(self) -> (Vec<Entry>, Records, SaveOptions) {
        (self.entries, self.records, self.options)
    }

    /// Serializes the records (Burn's own encoding, then windows into it) and assembles the
    /// checkpoint writer: model entries deferred, progress as scalars.
    ///
    /// # Errors
    /// Burn refused to serialize a record.
    pub fn into_writer(self) -> Result<Writer, CheckpointError> {
        let (mut entries, records) = (self.entries, self.records);
        let (rest, scalars, metadata) = records.serialize()?;
        entries.extend(rest);
        Ok(assemble(&self.options, entries, scalars, metadata))
    }

    /// Writes the checkpoint to `path` (atomically unless the options say in place); returns
    /// the file size.
    ///
    /// The model's tensors go to the file while the optimizer's record is being taken and
    /// serialized on another thread (Burn's `to_record` and `into_bytes`: two copies of the
    /// state, which Burn's API leaves no way around); its tensors follow, then the head. Room
    /// for the head is reserved up front and filled with padding (metadata
    /// `burnpack.padding`); see [`CheckpointManager::save`](super::CheckpointManager::save).
    /// Small models, or a state without optimizer, are written in one pass.
    ///
    /// # Errors
    /// As [`into_writer`](Self::into_writer) and [`Writer::write_to_file`].
    pub fn write_to_file(self, path: impl AsRef<Path>) -> Result<u64, CheckpointError> {
        let model_bytes: u64 = self.entries.iter().map(Entry::len).sum();
        if !self.records.serializes_optimizer() || model_bytes < STAGED_BYTES {
            return Ok(self.into_writer()?.write_to_file(path)?);
        }
        let (entries, records, options) = (self.entries, self.records, self.options);
        // Adam keeps two moments and a few scalars per parameter: room for three more
        // tensors per parameter, and the options' own metadata.
        let extra: u64 = options
            .metadata
            .iter()
            .map(|(k, v)| (k.len() + v.len() + 8) as u64)
            .sum::<u64>()
            + 64 * (options.scalars.len() as u64 + 8)
            + 4096;
        let known = entries.iter().map(|e| (e.name().len(), e.shape().len()));
        let reserve = Staged::estimate(known, 3 * entries.len(), extra);
        let mut staged = Staged::create(path.as_ref(), options.write, reserve)?;
        let (model, parts) = if crate::platform::threads_available() {
            std::thread::scope(|scope| {
                let serializer = scope.spawn(move || records.serialize());
                let model = staged.append(entries);
                let parts = serializer.join().unwrap_or_else(|panic| {
                    Err(CheckpointError::Panicked(crate::panic::message(&*panic)))
                });
                (model, parts)
            })
        } else {
            // Without threads (WebAssembly): one after the other.
            let parts = records.serialize();
            (staged.append(entries), parts)
        };
        model?;
        let (rest, scalars, metadata) = parts?;
        staged.append(rest)?;
        let (metadata, scalars) = head(&options, scalars, metadata);
        Ok(staged.finish(&metadata, &scalars)?)
    }
}

/// What a checkpoint holds besides the model, as handed over: the optimizer (a clone, or its
/// bytes), the scheduler's record, the progress; or all of it serialized already.
pub(crate) enum Records {
    Pending {
        optimizer: Optimizer,
        scheduler: Option<LrSchedulerRecord>,
        progress: Progress,
    },
    /// Serialized already (burn-train's records: built only with `train`).
    #[cfg(feature = "train")]
    Ready(Parts),
}

/// The optimizer's state as handed over.
pub(crate) enum Optimizer {
    None,
    /// A clone of the optimizer: its record is taken and serialized where it is written.
    Handles(ModuleOptimizer),
    /// Its record serialized already (`into_bytes`).
    Bytes(Bytes),
}

/// Entries, scalars and metadata of a checkpoint's parts besides the model.
pub(crate) type Parts = (
    Vec<Entry>,
    BTreeMap<String, Scalar>,
    BTreeMap<String, String>,
);

impl Records {
    /// Whether serializing takes the optimizer's record (Burn's `to_record` + `into_bytes`:
    /// the time a checkpoint overlaps with writing the model).
    fn serializes_optimizer(&self) -> bool {
        matches!(
            self,
            Records::Pending {
                optimizer: Optimizer::Handles(_),
                ..
            }
        )
    }

    /// The records serialized by Burn (`into_bytes`), their tensors as windows into those
    /// bytes under the parts' prefixes, and the progress as scalars.
    pub(crate) fn serialize(self) -> Result<Parts, CheckpointError> {
        let (optimizer, scheduler, progress) = match self {
            #[cfg(feature = "train")]
            Records::Ready(parts) => return Ok(parts),
            Records::Pending {
                optimizer,
                scheduler,
                progress,
            } => (optimizer, scheduler, progress),
        };
        let mut entries = Vec::new();
        let mut scalars: BTreeMap<String, Scalar> = BTreeMap::new();
        let mut metadata: BTreeMap<String, String> = BTreeMap::new();
        let parts: Vec<&str> = [
            (!matches!(optimizer, Optimizer::None)).then_some("optim"),
            scheduler.is_some().then_some("scheduler"),
        ]
        .into_iter()
        .flatten()
        .collect();
        metadata.insert(PARTS_KEY.to_string(), parts.join(","));
        let bytes = match optimizer {
            Optimizer::None => None,
            Optimizer::Handles(optimizer) => Some(
                optimizer
                    .into_bytes()
                    .map_err(|e| CheckpointError::record("serialize the optimizer state", &e))?,
            ),
            Optimizer::Bytes(bytes) => Some(bytes),
        };
        if let Some(bytes) = bytes {
            let reader = Reader::from_bytes(bytes).map_err(|e| {
                CheckpointError::record("read the optimizer's bytes as a burnpack", &e)
            })?;
            // Burn's optimizer record carries no marker of its own; what this crate writes
            // (a checkpoint, a manifest, a model saved here) does, and is refused.
            if let Some(key) = reader
                .metadata()
                .keys()
                .find(|k| crate::format::is_reserved_key(k))
            {
                return Err(CheckpointError::record(
                    "read the optimizer's bytes",
                    &format!(
                        "a pack this crate wrote (metadata '{key}'), not an optimizer record as \
                         `ModuleOptimizer::into_bytes` gives it"
                    ),
                ));
            }
            absorb_reader(
                &reader,
                OPTIM_PREFIX,
                &mut entries,
                &mut scalars,
                &mut metadata,
            )?;
        }
        if let Some(record) = scheduler {
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
            Scalar::UInt(progress.epoch),
        );
        scalars.insert(
            format!("{PROGRESS_PREFIX}step"),
            Scalar::UInt(progress.step),
        );
        for (k, v) in progress.scalars {
            scalars.insert(format!("{PROGRESS_PREFIX}{k}"), v);
        }
        Ok((entries, scalars, metadata))
    }
}
