//! An open checkpoint: its progress, and each part to restore.

use std::path::Path;

use burn::lr_scheduler::LrSchedulerRecord;
use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Bytes;

use super::chain::Chain;
use super::error::CheckpointError;
use super::namespace::{
    KIND, KIND_KEY, OPTIM_PREFIX, PARTS_KEY, PROGRESS_PREFIX, SCHEDULER_PREFIX,
};
use super::progress::Progress;
use super::refs::INCREMENTAL_KEY;
use super::storage::Storage;
use crate::module::{LoadOptions, PackModule};
use crate::read::Reader;
use crate::source::PackSource;
use crate::write::Writer;

/// An open checkpoint: progress, and the parts to restore.
///
/// Read from a file (mapped: [`open`](Checkpoint::open)) by default, or from any
/// [`PackSource`], such as a pack on object storage (feature `object-store`), where each part
/// fetches only its own tensors.
#[derive(Debug)]
pub struct Checkpoint<S: PackSource = Reader> {
    body: Body<S>,
    /// Newer checkpoints [`Manager::latest`](super::Manager::latest) passed over to reach this
    /// one.
    skipped: Vec<super::error::Skipped>,
}

/// A checkpoint's file alone, or an incremental checkpoint's manifest with its data files.
#[derive(Debug)]
enum Body<S: PackSource> {
    Whole(S),
    Chain(std::sync::Arc<Chain<S>>),
}

impl Checkpoint {
    /// Opens (maps) a checkpoint file and checks that it is one. An incremental checkpoint
    /// (see [`Manager::incremental`](super::Manager::incremental)) maps the data files it
    /// names, from the same directory.
    ///
    /// # Errors
    /// [`CheckpointError::Read`] or [`CheckpointError::NotACheckpoint`];
    /// [`CheckpointError::Invalid`] when an incremental checkpoint's data file is missing or
    /// does not hold a tensor it should.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        let dir = super::chain::data_dir(path);
        Self::from_storage(&super::Directory::new(dir), Reader::open(path)?)
    }

    /// Wraps an open reader.
    ///
    /// # Errors
    /// [`CheckpointError::NotACheckpoint`].
    pub fn from_reader(reader: Reader) -> Result<Self, CheckpointError> {
        Self::from_source(reader)
    }

    /// The underlying reader (for an incremental checkpoint, its manifest's: its tensors are
    /// read through [`chain`](Checkpoint::chain)).
    #[must_use]
    pub fn reader(&self) -> &Reader {
        self.source()
    }
}

impl<S: PackSource> Checkpoint<S> {
    /// Wraps an open pack source, checking that it is a checkpoint.
    ///
    /// # Errors
    /// [`CheckpointError::NotACheckpoint`].
    pub fn from_source(source: S) -> Result<Self, CheckpointError> {
        match source.layout().metadata().get(KIND_KEY) {
            Some(kind) if kind == KIND => Ok(Self {
                body: Body::Whole(source),
                skipped: Vec::new(),
            }),
            found => Err(CheckpointError::NotACheckpoint {
                file: source.file().to_string(),
                found: found.cloned(),
            }),
        }
    }

    /// Wraps a pack source opened from `storage`, checking that it is a checkpoint; an
    /// incremental one opens the data files it names from the same storage.
    ///
    /// # Errors
    /// As [`from_source`](Self::from_source), and [`CheckpointError::Invalid`] for a data file
    /// that is missing or does not hold a tensor it should.
    pub(crate) fn from_storage<St: Storage<Source = S>>(
        storage: &St,
        source: S,
    ) -> Result<Self, CheckpointError> {
        let checkpoint = Self::from_source(source)?;
        match checkpoint.body {
            Body::Whole(source) if checkpoint_is_incremental(&source) => Ok(Self {
                body: Body::Chain(std::sync::Arc::new(Chain::open(storage, source)?)),
                skipped: Vec::new(),
            }),
            body => Ok(Self {
                body,
                skipped: Vec::new(),
            }),
        }
    }

    /// The incremental checkpoint `chain`, opened before and held (shared with whoever holds
    /// it).
    pub(crate) fn from_chain(chain: std::sync::Arc<Chain<S>>) -> Self {
        Self {
            body: Body::Chain(chain),
            skipped: Vec::new(),
        }
    }

    /// The chain of an incremental checkpoint, to share.
    pub(crate) fn shared_chain(&self) -> Option<&std::sync::Arc<Chain<S>>> {
        match &self.body {
            Body::Chain(chain) => Some(chain),
            Body::Whole(_) => None,
        }
    }

    /// This checkpoint, returned by `latest` after passing over `skipped`.
    pub(crate) fn with_skipped(self, skipped: Vec<super::error::Skipped>) -> Self {
        Self { skipped, ..self }
    }

    /// The newer checkpoints that [`Manager::latest`](super::Manager::latest) passed over to
    /// return this one, newest first, each with why it does not open (empty when this is the
    /// newest listed, or when it was opened otherwise). See `latest`'s example.
    #[must_use]
    pub fn skipped(&self) -> &[super::error::Skipped] {
        &self.skipped
    }

    /// The underlying source (for an incremental checkpoint: its manifest, which holds the
    /// progress, scalars and metadata; its tensors are in [`chain`](Self::chain)).
    #[must_use]
    pub fn source(&self) -> &S {
        match &self.body {
            Body::Whole(source) => source,
            Body::Chain(chain) => chain.manifest(),
        }
    }

    /// Whether this is an incremental checkpoint: a manifest whose tensors are held by data
    /// files beside it.
    #[must_use]
    pub fn is_incremental(&self) -> bool {
        checkpoint_is_incremental(self.source())
    }

    /// An incremental checkpoint's tensors, where they are held (`None` for a checkpoint that
    /// holds its own, or one opened without its storage by [`from_source`](Self::from_source)).
    #[must_use]
    pub fn chain(&self) -> Option<&Chain<S>> {
        match &self.body {
            Body::Chain(chain) => Some(chain),
            Body::Whole(_) => None,
        }
    }

    /// Reads every tensor and checks it: the structure of each file (padding, checksums
    /// present), each tensor's checksum, and for an incremental checkpoint the content hash
    /// it recorded for each tensor it refers to. Returns how many tensors were checked.
    ///
    /// # Errors
    /// The first damage found, naming the file and the tensor.
    pub fn verify(&self) -> Result<usize, CheckpointError> {
        let pack = self.pack()?;
        pack.verify_structure()?;
        let mut checked = 0;
        for info in pack.tensors() {
            let bytes = pack.read(info)?;
            checked += usize::from(pack.check(info, &bytes)?);
        }
        Ok(checked)
    }

    /// The checkpoint's tensors, scalars and metadata as one pack: the file itself, or an
    /// incremental checkpoint's chain.
    pub(crate) fn pack(&self) -> Result<&dyn PackSource, CheckpointError> {
        match &self.body {
            Body::Chain(chain) => Ok(&**chain),
            Body::Whole(source) if checkpoint_is_incremental(source) => {
                Err(CheckpointError::Invalid {
                    file: source.file().to_string(),
                    what:
                        "an incremental checkpoint, opened without the storage of its data files \
                       (open it with Checkpoint::open or its manager)"
                            .into(),
                })
            }
            Body::Whole(source) => Ok(source),
        }
    }

    /// The progress saved with the checkpoint.
    #[must_use]
    pub fn progress(&self) -> Progress {
        let mut progress = Progress::default();
        for (k, v) in self.source().layout().scalars() {
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
        let layout = self.source().layout();
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
        Ok(model.load_from_source(self.pack()?, options)?)
    }

    /// [`load_model_with`](Self::load_model_with), also returning the
    /// [`LoadReport`](crate::module::LoadReport): what a partial load applied, left missing,
    /// skipped, renamed, cast or left unused.
    ///
    /// ```no_run
    /// # use burn::module::{Module, Param};
    /// # use burn::tensor::{Device, Tensor};
    /// # #[derive(Module, Debug)]
    /// # struct Net { w: Param<Tensor<1>> }
    /// use burnpack::checkpoint::Checkpoint;
    /// use burnpack::module::LoadOptions;
    /// # let device = Device::default();
    /// # let net = Net { w: Param::from_data([0.0], &device) };
    /// let checkpoint = Checkpoint::open("checkpoints/step-000100.bpk")?;
    /// let options = LoadOptions::new().allow_partial(true);
    /// let (net, report) = checkpoint.load_model_with_report(net, &options)?;
    /// println!("{report}");
    /// # Ok::<(), burnpack::checkpoint::CheckpointError>(())
    /// ```
    ///
    /// # Errors
    /// [`CheckpointError::Module`] listing every mismatch.
    pub fn load_model_with_report<M: Module>(
        &self,
        model: M,
        options: &LoadOptions,
    ) -> Result<(M, crate::module::LoadReport), CheckpointError> {
        Ok(model.load_from_source_with_report(self.pack()?, options)?)
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
                file: self.source().file().to_string(),
                what: "the checkpoint holds no optimizer state".into(),
            });
        }
        optimizer
            .from_bytes(self.extract(OPTIM_PREFIX)?)
            .map_err(|e| {
                CheckpointError::record(
                    &format!("{}: restore the optimizer state", self.source().file()),
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
                &format!("{}: restore the scheduler record", self.source().file()),
                &e,
            )
        })
    }

    /// The part under `prefix` as a stand-alone pack, as Burn wrote it (prefix removed).
    pub(crate) fn extract(&self, prefix: &str) -> Result<Bytes, CheckpointError> {
        Ok(Writer::from_part(self.pack()?, prefix)?.into_bytes()?)
    }
}

/// Whether a checkpoint's file is an incremental checkpoint's manifest.
fn checkpoint_is_incremental(source: &impl PackSource) -> bool {
    source.layout().metadata().contains_key(INCREMENTAL_KEY)
}
