//! burn-train's plug-in point: one checkpointer for `SupervisedTraining::with_custom_checkpointers`
//! that writes **one** checkpoint file per epoch instead of burn-train's three.
//!
//! burn-train hands the model, optimizer and scheduler records of an epoch to three
//! checkpointers, each on its own thread ([`AsyncCheckpointer`](burn::train::checkpoint::AsyncCheckpointer)).
//! A [`PackCheckpointer`] is one value shared by the three: each record is validated as it
//! arrives (as the burnpack bytes Burn serializes it to). A part of at least 64 MiB of tensors
//! goes to the epoch's scratch file at once, on its own thread, while the other parts are still
//! being serialized (room for the head is reserved up front and filled with a
//! `burnpack.padding` metadata entry); smaller parts are held until a large one opens the file
//! or the epoch completes. The thread that brings the last part writes the head and publishes
//! the one checkpoint (`ckpt-00000000000000000001.bpk` for epoch 1: the epoch zero-padded to 20
//! digits, the width of any `u64`, so that names sort in epoch order; the layout of
//! [`checkpoint`](crate::checkpoint)), atomically: fsync, rename, directory fsync. A file is
//! therefore visible only complete and durable, and the tensors go from Burn's record bytes to
//! the file without another copy. A part that fails to write removes the scratch file, and the
//! epoch's other parts are refused with an error saying so.
//!
//! `delete` follows burn-train's checkpointing strategy: the file of an epoch is removed once
//! all three of its parts were deleted. `restore` serves each record from that file. The files
//! are ordinary checkpoints: [`CheckpointManager`],
//! [`Checkpoint`], `load_pack` and `bpk` read them.
//!
//! With [`incremental`](PackCheckpointer::incremental) on, an epoch's file is a small
//! manifest and only the tensors no kept epoch holds are written (a frozen base once, then
//! each epoch its adapters and the optimizer's state): the parts are held until the epoch is
//! complete, every tensor is hashed, and the new ones go to a data file beside the manifests.
//! A delete by burn-train's strategy also removes the data files no kept epoch names.
//!
//! # The one-line switch
//!
//! ```no_run
//! # use burn::train::{LearnerModel, SupervisedTraining};
//! # fn switch<M: LearnerModel>(training: SupervisedTraining<M>) -> std::io::Result<()> {
//! use burnpack::train::PackCheckpointer;
//! let pack = PackCheckpointer::new("artifacts/checkpoint")?;
//! let training = training.with_custom_checkpointers(pack.clone(), pack.clone(), pack);
//! # Ok(()) }
//! ```
//!
//! Fine-tuning (a frozen base, small adapters), incremental: each epoch writes what changed.
//!
//! ```no_run
//! # use burn::train::{LearnerModel, SupervisedTraining};
//! # fn switch<M: LearnerModel>(training: SupervisedTraining<M>) -> std::io::Result<()> {
//! # use burnpack::train::PackCheckpointer;
//! let pack = PackCheckpointer::new("artifacts/checkpoint")?.incremental(true);
//! let training = training.with_custom_checkpointers(pack.clone(), pack.clone(), pack);
//! # Ok(()) }
//! ```
//!
//! After a crash, [`PackCheckpointer::latest_epoch`] names the newest complete checkpoint to
//! resume from with `SupervisedTraining::checkpoint(epoch)`.
//!
//! ```
//! use burn::optim::{ModuleOptimizer, SgdConfig};
//! use burn::train::checkpoint::Checkpointer;
//! use burn::lr_scheduler::{LrScheduler, constant::ConstantLr};
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::train::PackCheckpointer;
//!
//! #[derive(Module, Debug)]
//! struct Tiny { w: Param<Tensor<1>> }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let pack = PackCheckpointer::new(dir.path()).unwrap();
//! let model = Tiny { w: Param::from_data([1.0, 2.0], &device) };
//! let optim: ModuleOptimizer = SgdConfig::new().init();
//! pack.save(1, model.clone().into_record()).unwrap();
//! pack.save(1, optim.to_record()).unwrap();
//! assert_eq!(pack.latest_epoch().unwrap(), None); // two parts of three: nothing visible yet
//! pack.save(1, ConstantLr::new(0.1).to_record()).unwrap();
//! assert_eq!(pack.latest_epoch().unwrap(), Some(1));
//!
//! let restored = Tiny { w: Param::from_data([0.0, 0.0], &device) }
//!     .load_record(Checkpointer::<burn::store::ModuleRecord>::restore(&pack, 1).unwrap());
//! assert_eq!(restored.w.val().into_data(), model.w.val().into_data());
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use burn::lr_scheduler::LrSchedulerRecord;
use burn::optim::OptimizerRecord;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use burn::train::checkpoint::{Checkpoint as TrainRecord, Checkpointer, CheckpointerError};

use crate::checkpoint::{
    Checkpoint, CheckpointError, CheckpointManager, MODEL_PREFIX, OPTIM_PREFIX, PARTS_KEY,
    PROGRESS_PREFIX, SCHEDULER_PREFIX, absorb_reader, assemble, head,
};
use crate::format::Scalar;
use crate::format::TensorInfo;
use crate::module::SaveOptions;
use crate::read::Reader;
use crate::write::Entry;
use crate::write::staged::{STAGED_BYTES, Staged};

mod incremental;

/// One of the three records burn-train checkpoints each epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Model = 0,
    Optim = 1,
    Scheduler = 2,
}

impl Part {
    const ALL: u8 = 0b111;

    fn bit(self) -> u8 {
        1 << self as u8
    }

    fn name(self) -> &'static str {
        match self {
            Part::Model => "model",
            Part::Optim => "optimizer",
            Part::Scheduler => "scheduler",
        }
    }
}

/// A record burn-train checkpoints, and which part of the file it is.
trait PartRecord: TrainRecord {
    const PART: Part;
    fn from_pack(bytes: Bytes) -> Result<Self, String>;
}

impl PartRecord for ModuleRecord {
    const PART: Part = Part::Model;
    fn from_pack(bytes: Bytes) -> Result<Self, String> {
        ModuleRecord::from_bytes(bytes).map_err(|e| e.to_string())
    }
}

impl PartRecord for OptimizerRecord {
    const PART: Part = Part::Optim;
    fn from_pack(bytes: Bytes) -> Result<Self, String> {
        OptimizerRecord::from_bytes(bytes).map_err(|e| e.to_string())
    }
}

impl PartRecord for LrSchedulerRecord {
    const PART: Part = Part::Scheduler;
    fn from_pack(bytes: Bytes) -> Result<Self, String> {
        LrSchedulerRecord::from_bytes(bytes).map_err(|e| e.to_string())
    }
}

/// One epoch in assembly: its file (once a large part arrived), the parts received, which
/// parts were deleted.
#[derive(Default)]
struct Epoch {
    assembly: Arc<Mutex<Assembly>>,
    deleted: u8,
}

/// The parts of one epoch received so far. A part of at least [`STAGED_BYTES`] of tensors
/// opens the epoch's file and goes to it at once (parts that came before it with it), while
/// the other parts are still being serialized on their own threads; a smaller part is held
/// until then. The part that completes the epoch writes the head and publishes the file.
#[derive(Default)]
struct Assembly {
    /// Parts received (bits of [`Part`]).
    received: u8,
    /// Parts held in memory, not yet in a file.
    held: Vec<(Part, Reader)>,
    /// The file being written, once a large part arrived.
    staged: Option<Staged>,
    /// Scalars and metadata of the parts already in the file.
    scalars: BTreeMap<String, Scalar>,
    metadata: BTreeMap<String, String>,
    /// Why an earlier part's write failed (the epoch's file is gone).
    failed: Option<String>,
}

fn prefix(part: Part) -> &'static str {
    match part {
        Part::Model => MODEL_PREFIX,
        Part::Optim => OPTIM_PREFIX,
        Part::Scheduler => SCHEDULER_PREFIX,
    }
}

impl Assembly {
    /// Writes `reader`'s tensors to the epoch's open file and keeps its scalars and metadata.
    fn append(
        &mut self,
        part: Part,
        reader: &Reader,
        options: &SaveOptions,
    ) -> Result<(), CheckpointError> {
        let mut entries = Vec::new();
        absorb_reader(
            reader,
            prefix(part),
            &mut entries,
            &mut self.scalars,
            &mut self.metadata,
        )?;
        let entries = cast_model(part, entries, options);
        if let Some(staged) = &mut self.staged {
            staged.append(entries)?;
        }
        Ok(())
    }
}

/// The model part's floats cast where the options say (`SaveOptions::float_dtype`); the
/// optimizer's and scheduler's as they are (to resume from).
fn cast_model(part: Part, entries: Vec<Entry>, options: &SaveOptions) -> Vec<Entry> {
    if part == Part::Model {
        options.cast(entries)
    } else {
        entries
    }
}

/// The head every epoch's checkpoint carries: the parts it holds, the progress (`step` is 0:
/// burn-train hands checkpointers only the epoch), no model metadata (Burn's record metadata
/// of the model part is not the checkpoint's).
fn epoch_head(
    epoch: usize,
    scalars: &mut BTreeMap<String, Scalar>,
    metadata: &mut BTreeMap<String, String>,
) {
    metadata.retain(|k, _| !k.starts_with(MODEL_PREFIX));
    metadata.insert(PARTS_KEY.to_string(), "optim,scheduler".to_string());
    scalars.insert(
        format!("{PROGRESS_PREFIX}epoch"),
        Scalar::UInt(epoch as u64),
    );
    scalars.insert(format!("{PROGRESS_PREFIX}step"), Scalar::UInt(0));
}

fn tensor_bytes(reader: &Reader) -> u64 {
    reader.tensors().iter().map(TensorInfo::len).sum()
}

/// Writes burn-train's three checkpoint records of an epoch as one checkpoint file
/// (`<dir>/ckpt-00000000000000000001.bpk` for epoch 1, zero-padded to 20 digits so that names
/// sort in epoch order), and serves them back. Clones share the epochs in assembly: give
/// one clone to each of `with_custom_checkpointers`' three arguments.
///
/// The file holds the model under `model.` (with its `ParamId`s), the optimizer state under
/// `optim.`, the scheduler record under `scheduler.`, and the progress `epoch` (`step` is 0:
/// burn-train hands checkpointers only the epoch). See the [module docs](self) for an example,
/// and [`incremental`](Self::incremental) for checkpoints that write only what changed.
#[derive(Clone)]
pub struct PackCheckpointer {
    manager: CheckpointManager,
    options: SaveOptions,
    pending: Arc<Mutex<BTreeMap<usize, Epoch>>>,
}

impl std::fmt::Debug for PackCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackCheckpointer")
            .field("dir", &self.manager.dir())
            .finish_non_exhaustive()
    }
}

impl PackCheckpointer {
    /// Checkpoints in `dir` (created if needed). Scratch files a killed process left there are
    /// removed.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let pack = burnpack::train::PackCheckpointer::new(dir.path().join("ckpt")).unwrap();
    /// assert!(pack.dir().is_dir());
    /// ```
    ///
    /// # Errors
    /// The directory cannot be created or listed.
    pub fn new(dir: impl AsRef<Path>) -> std::io::Result<Self> {
        // burn-train's strategy picks what to delete: the manager keeps everything (its
        // retention runs after each incremental save, and must delete nothing).
        let manager = CheckpointManager::new(dir)
            .map_err(std::io::Error::other)?
            .keep_last(usize::MAX);
        Ok(Self {
            manager,
            options: SaveOptions::new(),
            pending: Arc::default(),
        })
    }

    /// Save options for the files (checksums, metadata, durability; see [`SaveOptions`]).
    ///
    /// ```
    /// use burnpack::module::SaveOptions;
    /// use burnpack::train::PackCheckpointer;
    /// let dir = tempfile::tempdir().unwrap();
    /// let pack = PackCheckpointer::new(dir.path()).unwrap()
    ///     .with_options(SaveOptions::new().metadata("run", "baseline"));
    /// ```
    #[must_use]
    pub fn with_options(mut self, options: SaveOptions) -> Self {
        self.options = options;
        self
    }

    /// The checkpoint directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.manager.dir()
    }

    /// Where the checkpoint of `epoch` is written.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let pack = burnpack::train::PackCheckpointer::new(dir.path()).unwrap();
    /// assert!(pack.path_for(3).ends_with("ckpt-00000000000000000003.bpk"));
    /// ```
    #[must_use]
    pub fn path_for(&self, epoch: usize) -> PathBuf {
        self.manager.path_for(epoch as u64)
    }

    /// The newest epoch whose checkpoint is complete (it opens, its header and metadata
    /// validate against their checksum, and it holds the optimizer and scheduler parts): what
    /// to pass to `SupervisedTraining::checkpoint` after a crash. A damaged or foreign newer
    /// file is skipped. Tensor data is not read here; `restore` checks every tensor it serves
    /// against its checksum.
    ///
    /// # Errors
    /// The directory cannot be listed.
    pub fn latest_epoch(&self) -> Result<Option<usize>, CheckpointError> {
        Ok(self.manager.list()?.iter().rev().find_map(|entry| {
            let ckpt = Checkpoint::open(&entry.path).ok()?;
            (ckpt.has_optimizer() && ckpt.has_scheduler())
                .then(|| usize::try_from(entry.step).ok())?
        }))
    }

    fn epochs(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Epoch>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `bytes` as `part` of `epoch`: to the epoch's file at once when it is large (or
    /// the file is open), held otherwise; the part that completes the epoch publishes it.
    fn receive(&self, epoch: usize, part: Part, bytes: Bytes) -> Result<(), CheckpointError> {
        let reader = Reader::from_bytes(bytes)?;
        let assembly = Arc::clone(&self.epochs().entry(epoch).or_default().assembly);
        let mut assembly = assembly.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(why) = &assembly.failed {
            return Err(CheckpointError::Invalid {
                file: self.path_for(epoch).display().to_string(),
                what: format!("an earlier part of epoch {epoch} failed: {why}"),
            });
        }
        if assembly.received & part.bit() != 0 {
            // The same part again before the epoch is complete: a held part is replaced; one
            // already in the epoch's file cannot be.
            if let Some(held) = assembly.held.iter_mut().find(|(p, _)| *p == part) {
                held.1 = reader;
                return Ok(());
            }
            return Err(CheckpointError::Invalid {
                file: self.path_for(epoch).display().to_string(),
                what: format!(
                    "the {} part of epoch {epoch} was saved twice while the epoch was being \
                     written (its first copy is in the file already)",
                    part.name()
                ),
            });
        }
        assembly.received |= part.bit();
        let result = self.take(epoch, &mut assembly, part, reader);
        if let Err(e) = &result {
            // The scratch file goes with the staged writer; later parts are refused.
            assembly.staged = None;
            assembly.held.clear();
            assembly.failed = Some(e.to_string());
        }
        if assembly.received == Part::ALL {
            drop(assembly);
            let mut epochs = self.epochs();
            // burn-train's three threads run apart: a part's delete of this epoch may have come
            // while another part was still on its way. Those marks are kept (the epoch is
            // deleted once all three parts are); a new save of the epoch starts afresh.
            if let Some(state) = epochs.get_mut(&epoch) {
                if state.deleted == 0 {
                    epochs.remove(&epoch);
                } else {
                    state.assembly = Arc::default();
                }
            }
        }
        result
    }

    fn take(
        &self,
        epoch: usize,
        assembly: &mut Assembly,
        part: Part,
        reader: Reader,
    ) -> Result<(), CheckpointError> {
        // Incremental: every part is held until the epoch completes (its tensors are hashed
        // before anything is written).
        if !self.is_incremental()
            && assembly.staged.is_none()
            && tensor_bytes(&reader) >= STAGED_BYTES
        {
            // Room for the head: every name known so far, three more tensors per tensor for
            // parts not here yet (Adam's moments and scalars per parameter), the metadata.
            let parts: Vec<&Reader> = assembly
                .held
                .iter()
                .map(|(_, r)| r)
                .chain([&reader])
                .collect();
            let known: Vec<(usize, usize)> = parts
                .iter()
                .flat_map(|r| r.tensors().iter())
                .map(|t| (t.name().len() + OPTIM_PREFIX.len(), t.shape().len()))
                .collect();
            let extra: u64 = 4096
                + parts
                    .iter()
                    .map(|r| {
                        64 * r.scalars().len() as u64
                            + r.metadata()
                                .iter()
                                .map(|(k, v)| (k.len() + v.len() + 16) as u64)
                                .sum::<u64>()
                    })
                    .sum::<u64>();
            let more = 3 * known.len() + 64;
            let reserve = Staged::estimate(known.into_iter(), more, 4 * extra);
            let options = self.options.clone().overwrite(true);
            assembly.staged = Some(Staged::create(
                &self.path_for(epoch),
                options.write,
                reserve,
            )?);
            assembly.append(part, &reader, &self.options)?;
            for (held, r) in std::mem::take(&mut assembly.held) {
                assembly.append(held, &r, &self.options)?;
            }
        } else if assembly.staged.is_some() {
            assembly.append(part, &reader, &self.options)?;
        } else {
            assembly.held.push((part, reader));
        }
        if assembly.received == Part::ALL {
            self.publish(epoch, assembly)?;
        }
        Ok(())
    }

    /// Writes the complete epoch: the head of the open file, or (every part small) the whole
    /// file from the parts held.
    fn publish(&self, epoch: usize, assembly: &mut Assembly) -> Result<(), CheckpointError> {
        if self.is_incremental() {
            let held = std::mem::take(&mut assembly.held);
            return self.publish_incremental(epoch, held);
        }
        let mut entries = Vec::new();
        let mut scalars = std::mem::take(&mut assembly.scalars);
        let mut metadata = std::mem::take(&mut assembly.metadata);
        for (part, reader) in &assembly.held {
            let mut part_entries = Vec::new();
            absorb_reader(
                reader,
                prefix(*part),
                &mut part_entries,
                &mut scalars,
                &mut metadata,
            )?;
            entries.extend(cast_model(*part, part_entries, &self.options));
        }
        epoch_head(epoch, &mut scalars, &mut metadata);
        let options = self.options.clone().overwrite(true);
        match assembly.staged.take() {
            Some(mut staged) => {
                staged.append(entries)?;
                let (metadata, scalars) = head(&options, scalars, metadata);
                staged.finish(&metadata, &scalars)?;
            }
            None => {
                assemble(&options, entries, scalars, metadata)
                    .write_to_file(self.path_for(epoch))?;
            }
        }
        assembly.held.clear();
        Ok(())
    }

    /// Marks `part` of `epoch` deleted; removes the file once all three parts are.
    fn forget(&self, epoch: usize, part: Part) -> Result<(), CheckpointError> {
        let gone = {
            let mut epochs = self.epochs();
            let state = epochs.entry(epoch).or_default();
            state.deleted |= part.bit();
            let gone = state.deleted == Part::ALL;
            if gone {
                epochs.remove(&epoch);
            }
            gone
        };
        if gone {
            // The file, then (incremental checkpoints) the data files no kept epoch names.
            self.manager.delete_step(epoch as u64)?;
        }
        Ok(())
    }

    fn restore_part<R: PartRecord>(&self, epoch: usize) -> Result<R, CheckpointError> {
        let path = self.path_for(epoch);
        let ckpt = Checkpoint::open(&path)?;
        let prefix = match R::PART {
            Part::Model => MODEL_PREFIX,
            Part::Optim if ckpt.has_optimizer() => OPTIM_PREFIX,
            Part::Scheduler if ckpt.has_scheduler() => SCHEDULER_PREFIX,
            part => {
                return Err(CheckpointError::Invalid {
                    file: path.display().to_string(),
                    what: format!(
                        "the checkpoint of epoch {epoch} holds no {} part",
                        part.name()
                    ),
                });
            }
        };
        R::from_pack(ckpt.extract(prefix)?).map_err(|message| CheckpointError::Record {
            context: format!(
                "{}: restore the {} record of epoch {epoch}",
                path.display(),
                R::PART.name()
            ),
            message,
        })
    }
}

/// burn-train's error for one of ours: I/O errors keep their kind, the rest their message
/// (which names the file).
fn to_train(err: CheckpointError) -> CheckpointerError {
    match err {
        CheckpointError::Io {
            action,
            path,
            source,
        } => CheckpointerError::IOError(std::io::Error::new(
            source.kind(),
            format!("{action} '{}': {source}", path.display()),
        )),
        other => CheckpointerError::Unknown(other.to_string()),
    }
}

#[allow(private_bounds)]
impl<R: PartRecord> Checkpointer<R> for PackCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        let bytes = record
            .checkpoint_into_bytes()
            .map_err(CheckpointerError::Record)?;
        self.receive(epoch, R::PART, bytes).map_err(to_train)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        self.forget(epoch, R::PART).map_err(to_train)
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        self.restore_part(epoch).map_err(to_train)
    }
}
