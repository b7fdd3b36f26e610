//! An incremental checkpoint opened whole: its manifest's scalars and metadata, and each tensor
//! read from the data file that holds it (a view of that file's mapping, as any pack's).

use burn::tensor::Bytes;

use super::error::CheckpointError;
use super::manifest::{checked_references, recorded_tables, short};
use super::namespace::KIND_KEY;
use super::refs::{self, DATA_KIND, INCREMENTAL_KEY, REFS_KEY};
use super::storage::Storage;
use crate::format::{Layout, TensorInfo};
use crate::source::{CopyReason, PackSource, ReadError, TensorSource, from_table};

/// The tensors of an incremental checkpoint, each where a data file holds it: a
/// [`PackSource`] like a whole checkpoint's, for loading, verifying and converting. Opened by
/// [`Checkpoint::open`](super::Checkpoint::open) and by the manager for a manifest (metadata
/// `burnpack.incremental`); see docs/format.md, "Incremental checkpoints".
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let dir = tempfile::tempdir().unwrap();
/// let manager = CheckpointManager::new(dir.path()).unwrap().incremental(true);
/// let model = Tiny { w: Param::from_data([1.0, 2.0], &Device::flex()) };
/// manager.save(TrainingState::new(&model, Progress::new(0, 1))).unwrap();
/// manager.save(TrainingState::new(&model, Progress::new(0, 2))).unwrap();
/// let latest = manager.latest().unwrap().unwrap();
/// let chain = latest.chain().unwrap();
/// // Step 2 changed nothing: its one tensor is the bytes step 1 wrote.
/// assert_eq!(chain.held().count(), 0);
/// assert!(chain.location("model.w").unwrap().starts_with("data-00000000000000000001-"));
/// ```
#[derive(Debug)]
pub struct Chain<S: PackSource> {
    /// The manifest, as its storage names it.
    file: String,
    /// The manifest: progress, scalars, metadata, the references.
    manifest: S,
    /// The checkpoint's step (a tensor whose data file is of this step is held by it).
    step: Option<u64>,
    /// The checkpoint as one pack: the manifest's scalars and metadata (less the references),
    /// the tensors as the data files describe them, under their checkpoint names.
    layout: Layout,
    /// The data files, by name (each shared with the other checkpoints of the process that
    /// name it, where the storage shares them).
    data: Vec<(String, std::sync::Arc<S>)>,
    /// Each data file's settled fingerprint, taken before it was opened (`None` where the
    /// storage has none): what tells the checkpoint still the one on storage.
    fingerprints: Vec<Option<u128>>,
    /// Where each tensor of `layout` (same order: by name) is.
    targets: Vec<Target>,
    /// The stored tensors already checked against a hash, `(data file, offset, hash)`: a
    /// tensor named by many references is read and hashed once.
    checked: std::sync::Mutex<std::collections::HashSet<(usize, u64, u128)>>,
}

#[derive(Debug)]
struct Target {
    /// Index into `data`.
    data: usize,
    /// The tensor's position in its data file's tensors (as the data file describes it).
    stored: usize,
    /// XXH3-128 of its bytes, as the manifest records it.
    hash: u128,
}

impl<S: PackSource> Chain<S> {
    /// The data files this checkpoint names, as opened (shared between the checkpoints of
    /// a process that name the same unchanged file).
    pub(crate) fn data_sources(&self) -> impl Iterator<Item = &std::sync::Arc<S>> {
        self.data.iter().map(|(_, source)| source)
    }

    /// Opens the data files a manifest names, through `storage` (each once, shared with the
    /// other checkpoints of the process that name it where the storage can), and checks that
    /// each holds the tensor it is said to. Nothing is read but the data files' heads.
    pub(crate) fn open<St: Storage<Source = S>>(
        storage: &St,
        manifest: S,
    ) -> Result<Self, CheckpointError> {
        let file = manifest.file().to_string();
        let invalid = |what: String| CheckpointError::Invalid {
            file: file.clone(),
            what,
        };
        let table = checked_references(&manifest, &file)?;
        // The checkpoint's names are ranges of one buffer of them (not of the whole text).
        let (names, ranges) = table.names();
        let limits = crate::format::Limits::default();
        let step = refs::step_of(file.rsplit(['/', '\\']).next().unwrap_or(&file));
        let steps: Vec<Option<u64>> = table.files().iter().map(|f| refs::data_step(f)).collect();
        // What the checkpoint amounts to, whole: bounded as a file would be (a manifest that
        // names one tensor a million times is not a terabyte to read).
        let mut total: u64 = 0;
        let mut data: Vec<(String, std::sync::Arc<S>)> = Vec::new();
        let mut fingerprints = Vec::new();
        // Each named data file's index in `data`, once opened (opened in the order the sorted
        // references first name them, so an error names the first tensor it concerns).
        let mut opened: Vec<Option<usize>> = vec![None; table.files().len()];
        // Per opened data file, the position after the tensor last found in it.
        let mut cursor: Vec<usize> = Vec::new();
        let mut tensors = Vec::with_capacity(table.len());
        let mut targets = Vec::with_capacity(table.len());
        let mut recorded = recorded_tables(&table, &names, &ranges);
        // The last dtype found to match its line's text (runs of lines share one).
        let mut matched: Option<(burn::tensor::DType, &str)> = None;
        for i in 0..table.len() {
            let (name, data_file, stored_as) = (table.name(i), table.file(i), table.stored_as(i));
            // Names as errors show them (made only for an error).
            let (name_, stored_) = (|| short(name), || short(stored_as));
            if let (Some(own), Some(theirs)) = (step, steps[table.file_index(i)])
                && theirs > own
            {
                return Err(invalid(format!(
                    "tensor '{}': refers to '{data_file}', a data file of step {theirs}, \
                     after this checkpoint's ({own})",
                    name_()
                )));
            }
            let index = if let Some(at) = opened[table.file_index(i)] {
                at
            } else {
                // From the manifest's record where it has one (the data file's metadata
                // hashed, not decoded); decoded otherwise, and where the record's open fails
                // (a file replaced, damaged or gone: the decoded open says how).
                // Taken before the open: a file replaced after it is found changed later.
                fingerprints.push(storage.settled_fingerprint(&storage.location(data_file)));
                let rec = recorded[table.file_index(i)].take();
                let from_record = rec.and_then(|(head, infos)| {
                    storage
                        .open_data_recorded(&storage.location(data_file), head, infos)?
                        .ok()
                });
                let source = match from_record {
                    Some(source) => source,
                    None => open_data_file(storage, data_file)
                        .map_err(|e| invalid(format!("tensor '{}': {e}", name_())))?,
                };
                data.push((data_file.to_string(), source));
                cursor.push(0);
                opened[table.file_index(i)] = Some(data.len() - 1);
                data.len() - 1
            };
            let held = data[index].1.tensors();
            // The references are sorted by name, as a data file's tensors are: the next tensor
            // of this file is most often the one after the last found (one comparison).
            let next = cursor[index];
            let position = match held.get(next) {
                Some(t) if t.name() == stored_as => Some(next),
                _ => crate::format::position(held, stored_as),
            }
            .ok_or_else(|| {
                invalid(format!(
                    "tensor '{}': data file '{data_file}' holds no tensor '{}'",
                    name_(),
                    stored_()
                ))
            })?;
            cursor[index] = position + 1;
            let stored = &held[position];
            let (dtype, shape) = (table.dtype(i), table.shape(i));
            let dtype_matches = matched == Some((stored.dtype(), dtype))
                || refs::dtype_is(stored.dtype(), dtype) && {
                    matched = Some((stored.dtype(), dtype));
                    true
                };
            if !dtype_matches || stored.shape() != shape {
                return Err(invalid(format!(
                    "tensor '{}': the checkpoint says '{}' {shape:?}, data file \
                     '{data_file}' holds '{}' as '{:?}' {:?}",
                    name_(),
                    short(dtype),
                    stored_(),
                    stored.dtype(),
                    stored.shape()
                )));
            }
            // The data file's own checksum of the tensor, as the save recorded it: a data file
            // swapped for another of the same name (another run's, a damaged copy) is refused
            // here, without reading its bytes. (The parameter id is the reference's: a tensor
            // whose bytes were stored for a parameter of another id, such as a frozen base
            // loaded again into a rebuilt model, keeps the id this checkpoint gave it.)
            if let Some(recorded) = table.checksum(i)
                && stored.checksum() != Some(recorded)
            {
                let found = stored
                    .checksum()
                    .map_or_else(|| "none".to_string(), |c| format!("{c:016x}"));
                // Damage the checkpoint's own record finds (exit 1 under `bpk`'s contract).
                return Err(CheckpointError::Read(ReadError::Reference {
                    file: file.clone(),
                    tensor: name_().into_owned(),
                    what: format!(
                        "data file '{data_file}' holds '{}' with checksum {found}, the \
                         checkpoint recorded {recorded:016x}: the data file was replaced or \
                         damaged",
                        stored_()
                    ),
                }));
            }
            total = total.saturating_add(stored.len());
            if total > limits.max_file_size {
                return Err(invalid(format!(
                    "the tensors referred to amount to more than {} bytes, the largest file \
                     allowed",
                    limits.max_file_size
                )));
            }
            tensors.push(stored.renamed_in(&names, ranges[i].name, table.param_id(i)));
            targets.push(Target {
                data: index,
                stored: position,
                hash: table.hash(i),
            });
        }
        // The table is sorted by name, as `assembled` sorts `tensors`: `targets` stays
        // parallel.
        let mut layout = manifest
            .layout()
            .assembled(tensors, &[REFS_KEY, INCREMENTAL_KEY]);
        if !manifest.layout().has_checksums() {
            // A manifest without checksums: nothing vouches for its references.
            layout = layout.without_checksums();
        }
        Ok(Self {
            file,
            manifest,
            step,
            layout,
            data,
            fingerprints,
            targets,
            checked: std::sync::Mutex::default(),
        })
    }

    /// Each data file's name with its settled fingerprint taken before it was opened.
    pub(crate) fn data_fingerprints(&self) -> impl Iterator<Item = (&str, Option<u128>)> {
        self.data
            .iter()
            .zip(&self.fingerprints)
            .map(|((name, _), fingerprint)| (name.as_str(), *fingerprint))
    }

    /// The manifest (the checkpoint's own file).
    #[must_use]
    pub fn manifest(&self) -> &S {
        &self.manifest
    }

    /// Each tensor's name with the data file that holds it.
    pub fn locations(&self) -> impl Iterator<Item = (&str, &str)> {
        self.layout
            .tensors()
            .iter()
            .zip(&self.targets)
            .map(|(t, target)| (t.name(), self.data[target.data].0.as_str()))
    }

    /// The data file that holds `tensor`.
    #[must_use]
    pub fn location(&self, tensor: &str) -> Option<&str> {
        let i = crate::format::position(self.layout.tensors(), tensor)?;
        Some(&self.data[self.targets[i].data].0)
    }

    /// The name under which `tensor`'s data file holds it (its own name, unless an equal
    /// tensor of another name was stored first).
    #[must_use]
    pub fn stored_as(&self, tensor: &str) -> Option<&str> {
        let i = crate::format::position(self.layout.tensors(), tensor)?;
        Some(self.stored(&self.targets[i]).name())
    }

    /// The tensors this checkpoint wrote itself (in its own data files), with their files.
    pub fn held(&self) -> impl Iterator<Item = (&str, &str)> {
        self.locations()
            .filter(|(_, file)| self.step.is_some() && refs::data_step(file) == self.step)
    }

    /// The tensors this checkpoint refers to in data files of earlier saves, with their files.
    pub fn referred(&self) -> impl Iterator<Item = (&str, &str)> {
        self.locations()
            .filter(|(_, file)| self.step.is_none() || refs::data_step(file) != self.step)
    }

    /// The data files, by name, with their sources.
    pub fn data_files(&self) -> impl Iterator<Item = (&str, &S)> {
        self.data.iter().map(|(n, s)| (n.as_str(), &**s))
    }

    /// The content hash (XXH3-128) the manifest records for `tensor`.
    #[must_use]
    pub fn content_hash(&self, tensor: &str) -> Option<u128> {
        let i = crate::format::position(self.layout.tensors(), tensor)?;
        Some(self.targets[i].hash)
    }

    /// The tensor `target` as its data file describes it.
    fn stored(&self, target: &Target) -> &TensorInfo {
        &self.data[target.data].1.tensors()[target.stored]
    }

    fn target(&self, info: &TensorInfo) -> Result<&Target, ReadError> {
        crate::format::owned(self.layout.tensors(), info)
            .map(|i| &self.targets[i])
            .ok_or_else(|| ReadError::NotMine {
                file: self.file.clone(),
                tensor: info.name().to_string(),
            })
    }
}

impl Chain<crate::read::Reader> {
    /// The chain of the manifest at `path` (opened as `manifest`), its data files read from
    /// the same directory: how `bpk` and the format registry open an incremental checkpoint.
    ///
    /// # Errors
    /// A data file is missing, is not one, or does not hold a tensor it should.
    pub(crate) fn open_file(
        path: &std::path::Path,
        manifest: crate::read::Reader,
        buffered: bool,
    ) -> Result<Self, crate::source::SourceError> {
        let storage = super::Directory::new(data_dir(path));
        // Buffered data files hold a descriptor each: a chain of more data files than the
        // process may hold open (less a margin for the rest) is mapped instead.
        let fits = || {
            let files = manifest
                .layout()
                .metadata()
                .get(REFS_KEY)
                .and_then(|text| refs::Table::parse(text).ok())
                .map_or(0, |table| table.files().len() as u64);
            crate::platform::open_files_limit().is_none_or(|limit| files + 128 <= limit)
        };
        let storage = if buffered && fits() {
            storage.buffered()
        } else {
            storage
        };
        Self::open(&storage, manifest).map_err(|e| match e {
            CheckpointError::Read(e) => e.into(),
            CheckpointError::Invalid { what, .. } => crate::source::SourceError::Invalid {
                path: path.to_path_buf(),
                reason: what,
            },
            e => crate::source::SourceError::Invalid {
                path: path.to_path_buf(),
                reason: e.to_string(),
            },
        })
    }
}

/// The directory of the data files of the manifest at `path`: the one it is in, or, where
/// `path` is a symbolic link (a `latest.bpk` pointing into a checkpoint directory), the one
/// the file it points to is in.
pub(crate) fn data_dir(path: &std::path::Path) -> std::path::PathBuf {
    let linked = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let real = linked.then(|| std::fs::canonicalize(path).ok()).flatten();
    real.as_deref().unwrap_or(path).parent().map_or_else(
        || std::path::PathBuf::from("."),
        std::path::Path::to_path_buf,
    )
}

/// The data file `name` of `storage`, checked to be one (the error says why it is not).
fn open_data_file<St: Storage>(
    storage: &St,
    name: &str,
) -> Result<std::sync::Arc<St::Source>, String> {
    let source = storage
        .open_data_shared(&storage.location(name))
        .map_err(|e| format!("data file '{name}': {e}"))?;
    let kind = source.layout().metadata().get(KIND_KEY);
    if kind.map(String::as_str) != Some(DATA_KIND) {
        return Err(format!(
            "'{name}' is not a checkpoint data file ('{KIND_KEY}' is {})",
            kind.map_or_else(|| "absent".into(), |k| format!("'{}'", short(k)))
        ));
    }
    Ok(source)
}

impl<S: PackSource> TensorSource for Chain<S> {
    from_table!(file, layout);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let target = self.target(info)?;
        self.data[target.data].1.read(self.stored(target))
    }

    /// Only these bytes, from the data file that holds the tensor.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        let target = self.target(info)?;
        self.data[target.data]
            .1
            .read_range(self.stored(target), range)
    }

    fn namespace(&self) -> Option<&str> {
        self.layout.namespace()
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let target = self.target(info).ok()?;
        self.data[target.data].1.copy_reason(self.stored(target))
    }

    /// The data file's checksum of the bytes, then the manifest's content hash: a data file
    /// replaced by another one of the same name is caught here.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        let target = self.target(info)?;
        let stored = self.stored(target);
        let key = (target.data, stored.offset(), target.hash);
        let lock = || {
            self.checked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if lock().contains(&key) && bytes.len() as u64 == stored.len() {
            return Ok(true);
        }
        let (data_file, source) = &self.data[target.data];
        source.check(stored, bytes)?;
        let actual = refs::content_hash(bytes);
        if actual != target.hash {
            return Err(ReadError::Reference {
                file: self.file.clone(),
                tensor: info.name().to_string(),
                what: format!(
                    "its bytes in '{data_file}' hash to {actual:032x}, the checkpoint recorded {:032x}",
                    target.hash
                ),
            });
        }
        lock().insert(key);
        Ok(true)
    }

    fn wants_prefetch(&self) -> bool {
        self.data.iter().any(|(_, s)| s.wants_prefetch())
    }

    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        for (i, (_, source)) in self.data.iter().enumerate() {
            let mine: Vec<&TensorInfo> = wanted
                .iter()
                .filter_map(|info| self.target(info).ok())
                .filter(|t| t.data == i)
                .map(|t| self.stored(t))
                .collect();
            if !mine.is_empty() {
                source.prefetch(&mine)?;
            }
        }
        Ok(())
    }

    fn verify_structure(&self) -> Result<(), ReadError> {
        self.manifest.verify_structure()?;
        self.data.iter().try_for_each(|(_, s)| s.verify_structure())
    }
}

impl<S: PackSource> PackSource for Chain<S> {
    fn layout(&self) -> &Layout {
        &self.layout
    }
}

impl crate::source::DescribedSource for Chain<crate::read::Reader> {
    fn describe(&self) -> crate::source::Description {
        let mut description = crate::read::describe_pack(&self.layout);
        let held = self.held().count();
        let referred = self.referred().count();
        let bytes: u64 = self.data.iter().map(|(_, s)| s.layout().file_len()).sum();
        description.summary = format!(
            "burnpack incremental checkpoint: {held} tensors held, {referred} referred to, in {} data files ({})",
            self.data.len(),
            crate::source::human_bytes(bytes)
        );
        description.lines = vec![format!(
            "tensors in data files beside the manifest; 'bpk convert' writes them into one self-contained pack"
        )];
        // Tensors per data file, counted in one pass (a manifest may name thousands of files).
        let mut counts = vec![0usize; self.data.len()];
        for target in &self.targets {
            counts[target.data] += 1;
        }
        for ((name, source), mine) in self.data.iter().zip(counts) {
            let role = if self.step.is_some() && refs::data_step(name) == self.step {
                "written by this checkpoint"
            } else {
                "of an earlier checkpoint"
            };
            description.lines.push(format!(
                "data file {name} ({role}): {mine} tensors, {} bytes",
                source.layout().file_len()
            ));
        }
        description.shards = self
            .data
            .iter()
            .map(|(_, s)| std::path::PathBuf::from(s.file()))
            .collect();
        description.fields.push(("held", (held as u64).into()));
        description
            .fields
            .push(("referred", (referred as u64).into()));
        description.column = Some("stored in");
        description
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        let i = crate::format::position(self.layout.tensors(), info.name())?;
        let file = &self.data[self.targets[i].data].0;
        let how = if self.step.is_some() && refs::data_step(file) == self.step {
            "held"
        } else {
            "refers to"
        };
        Some(format!("{how} {file}"))
    }

    fn as_pack(&self) -> Option<&dyn PackSource> {
        Some(self)
    }
}
