//! burn-store's plug-in point: [`PackStore`], a [`ModuleStore`](burn::store::ModuleStore) for `save_into` / `load_from`,
//! a drop-in for Burn's `BurnpackStore`.
//!
//! The builder is `BurnpackStore`'s (a file or bytes, filters, key remapping, adapters such as
//! `PyTorchToBurnAdapter`, metadata, overwrite, partial loads), and so are the load semantics:
//! parameters are matched, adapted and validated by burn-store's own applier, so the
//! [`ApplyResult`](burn::store::ApplyResult) (applied, skipped, missing, unused, errors) is the one Burn's store reports.
//! What changes is underneath:
//!
//! - **Saving** goes through this crate's writer: parameters are written in parallel into
//!   their aligned slots, with checksums, atomically (scratch file, fsync, rename, directory
//!   fsync). Without a filter or a save adapter, flex and ndarray parameters are written from
//!   their own storage (no copy; see [`module`](crate::module)); otherwise each tensor is
//!   produced by burn-store's collector when the writer reaches it.
//! - **Loading** maps the file and hands each tensor to the applier as a window of the mapping,
//!   so flex and ndarray parameters are built without copying a byte; nothing is read before a
//!   parameter's data is used. The header and metadata are checked against their checksum on
//!   every open; with [`verify_checksums`](PackStore::verify_checksums) each applied tensor is
//!   checked against its own as well (reading it once more).
//!
//! Files interchange with `BurnpackStore` both ways.
//!
//! ```
//! use burn::module::{Module, Param};
//! use burn::store::ModuleSnapshot;
//! use burn::tensor::{Device, Tensor};
//! use burnpack::store::PackStore;
//!
//! #[derive(Module, Debug)]
//! struct Tiny { w: Param<Tensor<1>> }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("tiny.bpk");
//! let model = Tiny { w: Param::from_data([1.0, 2.0], &device) };
//! // Where a Burn user wrote `BurnpackStore::from_file(&path)`:
//! model.save_into(&mut PackStore::from_file(&path)).unwrap();
//!
//! let mut fresh = Tiny { w: Param::from_data([0.0, 0.0], &device) };
//! let result = fresh.load_from(&mut PackStore::from_file(&path)).unwrap();
//! assert_eq!(result.applied, ["w"]);
//! assert_eq!(fresh.w.val().into_data(), model.w.val().into_data());
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::store::burn_pack::Tensor as StoreTensor;
use burn::store::{IdentityAdapter, KeyRemapper, ModuleAdapter, ModuleSnapshot, PathFilter};
use burn::tensor::Bytes;

use crate::module::{PackModule, SaveOptions};
use crate::read::Reader;
use crate::source::{ReadError, TensorSource};
use crate::write::Entry;

mod error;
mod module_store;

pub use error::StoreError;

/// The extension a file path without one gets (as `BurnpackStore` does).
const EXTENSION: &str = "bpk";

/// Any source of tensors the store can load from.
type SharedSource = Arc<dyn TensorSource + Send + Sync>;

enum Mode {
    File(PathBuf),
    Bytes(Option<Bytes>),
    /// Another container (safetensors weights...): load only.
    Source(SharedSource),
}

/// A [`ModuleStore`](burn::store::ModuleStore) in the burnpack format, written and read by this crate. See the
/// [module docs](self).
#[allow(clippy::struct_excessive_bools)] // `BurnpackStore`'s builder flags, one each
pub struct PackStore {
    mode: Mode,
    filter: Option<PathFilter>,
    metadata: BTreeMap<String, String>,
    allow_partial: bool,
    validate: bool,
    auto_extension: bool,
    remapper: KeyRemapper,
    /// `None`: the identity (which lets a save take the zero-copy route).
    from_adapter: Option<Box<dyn ModuleAdapter>>,
    to_adapter: Option<Box<dyn ModuleAdapter>>,
    options: SaveOptions,
    verify: bool,
    cache: Option<BTreeMap<String, StoreTensor>>,
}

impl std::fmt::Debug for PackStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackStore")
            .field("source", &self.source_name())
            .field("allow_partial", &self.allow_partial)
            .field("validate", &self.validate)
            .field("overwrite", &self.overwrites())
            .finish_non_exhaustive()
    }
}

impl PackStore {
    fn new(mode: Mode, auto_extension: bool) -> Self {
        Self {
            mode,
            filter: None,
            metadata: BTreeMap::new(),
            allow_partial: false,
            validate: true,
            auto_extension,
            remapper: KeyRemapper::new(),
            from_adapter: None,
            to_adapter: None,
            // No overwrite by default, as `BurnpackStore`.
            options: SaveOptions::new().overwrite(false),
            verify: false,
            cache: None,
        }
    }

    /// A store on a file (`.bpk` is appended to a path without an extension, unless
    /// [`auto_extension`](Self::auto_extension) is off).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("model");
    /// assert!(format!("{store:?}").contains("model.bpk"));
    /// ```
    pub fn from_file(path: impl AsRef<Path>) -> Self {
        Self::new(Mode::File(path.as_ref().to_path_buf()), true)
    }

    /// A store in memory: loads from `bytes`, or saves into memory (see
    /// [`get_bytes`](Self::get_bytes)) when `None`.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::store::ModuleSnapshot;
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::store::PackStore;
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let mut store = PackStore::from_bytes(None);
    /// Tiny { w: Param::from_data([3.0], &device) }.save_into(&mut store).unwrap();
    /// let bytes = store.get_bytes().unwrap();
    /// let mut back = Tiny { w: Param::from_data([0.0], &device) };
    /// back.load_from(&mut PackStore::from_bytes(Some(bytes))).unwrap();
    /// assert_eq!(back.w.val().into_data().try_to_vec::<f32>().unwrap(), [3.0]);
    /// ```
    #[must_use]
    pub fn from_bytes(bytes: Option<Bytes>) -> Self {
        Self::new(Mode::Bytes(bytes), false)
    }

    /// A store on static data (`include_bytes!`), read in place.
    ///
    /// ```
    /// use burn::store::ModuleStore;
    /// // An empty pack, as `include_bytes!` would give one.
    /// let pack: &'static [u8] = burnpack::write::Writer::new(vec![]).into_bytes().unwrap().to_vec().leak();
    /// let mut store = burnpack::store::PackStore::from_static(pack);
    /// assert!(store.keys().unwrap().is_empty());
    /// ```
    #[must_use]
    pub fn from_static(data: &'static [u8]) -> Self {
        let bytes = Bytes::from_shared(
            bytes::Bytes::from_static(data),
            burn::tensor::AllocationProperty::Other,
        );
        Self::from_bytes(Some(bytes))
    }

    /// A load-only store over any [`TensorSource`]: safetensors weights (one file or shards
    /// with an index, [`SafetensorsSource`](crate::interop::safetensors::SafetensorsSource)),
    /// a [`Reader`]... Tensors are handed to burn-store's applier as the source reads them
    /// (windows of the mapping where aligned), so burn-store's adapters apply: with
    /// `PyTorchToBurnAdapter`, Hugging Face / `PyTorch` weights load into Burn modules (Linear
    /// weights transposed, normalization `weight` / `bias` as `gamma` / `beta`).
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::store::{ModuleSnapshot, PyTorchToBurnAdapter};
    /// use burn::tensor::Device;
    /// use burnpack::interop::safetensors::SafetensorsSource;
    /// use burnpack::store::PackStore;
    ///
    /// #[derive(Module, Debug)]
    /// struct Head { fc: Linear }
    ///
    /// // PyTorch's `nn.Linear(3, 2)`: weight [out, in] = [2, 3].
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("head.safetensors");
    /// let w: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    /// let b: Vec<u8> = [0.5f32, -0.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// fn view(data: &[u8], shape: Vec<usize>) -> safetensors::tensor::TensorView<'_> {
    ///     safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, data).unwrap()
    /// }
    /// safetensors::serialize_to_file(
    ///     [("fc.weight", view(&w, vec![2, 3])), ("fc.bias", view(&b, vec![2]))],
    ///     None,
    ///     &path,
    /// )
    /// .unwrap();
    ///
    /// let device = Device::flex();
    /// let mut head = Head { fc: LinearConfig::new(3, 2).init(&device) };
    /// let mut store = PackStore::from_source(SafetensorsSource::open(&path).unwrap())
    ///     .with_from_adapter(PyTorchToBurnAdapter);
    /// let result = head.load_from(&mut store).unwrap();
    /// assert_eq!(result.applied.len(), 2);
    /// // Burn's [in, out]: the transpose of PyTorch's.
    /// let loaded = head.fc.weight.val().into_data().try_to_vec::<f32>().unwrap();
    /// assert_eq!(loaded, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// ```
    pub fn from_source(source: impl TensorSource + Send + Sync + 'static) -> Self {
        Self::new(Mode::Source(Arc::new(source)), false)
    }

    /// Adds a metadata entry to saved files.
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").metadata("run", "7");
    /// ```
    #[must_use]
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Removes the metadata entries added so far.
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").metadata("a", "b").clear_metadata();
    /// ```
    #[must_use]
    pub fn clear_metadata(mut self) -> Self {
        self.metadata.clear();
        self
    }

    /// Whether a load may leave module parameters without a tensor (default: no).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").allow_partial(true);
    /// ```
    #[must_use]
    pub fn allow_partial(mut self, allow: bool) -> Self {
        self.allow_partial = allow;
        self
    }

    /// Whether a load fails on dtype or shape errors (default: yes).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").validate(false);
    /// ```
    #[must_use]
    pub fn validate(mut self, validate: bool) -> Self {
        self.validate = validate;
        self
    }

    /// Whether a save may replace an existing file (default: no, as `BurnpackStore`). The
    /// same knob as [`SaveOptions::overwrite`] (the store's save options hold it; see
    /// [`save_options`](Self::save_options)).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").overwrite(true);
    /// assert!(format!("{store:?}").contains("overwrite: true"));
    /// ```
    #[must_use]
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.options = self.options.overwrite(overwrite);
        self
    }

    /// Whether a save may replace an existing file: the one knob, in the save options.
    fn overwrites(&self) -> bool {
        self.options.write_options().overwrite
    }

    /// Whether `.bpk` is appended to a file path without an extension (default: yes).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("model").auto_extension(false);
    /// assert!(!format!("{store:?}").contains("model.bpk"));
    /// ```
    #[must_use]
    pub fn auto_extension(mut self, enable: bool) -> Self {
        self.auto_extension = enable;
        self
    }

    /// The adapter applied to tensors on load (for example burn-store's
    /// `PyTorchToBurnAdapter`).
    ///
    /// ```
    /// use burn::store::PyTorchToBurnAdapter;
    /// let store = burnpack::store::PackStore::from_file("m.bpk").with_from_adapter(PyTorchToBurnAdapter);
    /// ```
    #[must_use]
    pub fn with_from_adapter(mut self, adapter: impl ModuleAdapter + 'static) -> Self {
        self.from_adapter = Some(Box::new(adapter));
        self
    }

    /// The adapter applied to tensors on save (for example `BurnToPyTorchAdapter`).
    ///
    /// ```
    /// use burn::store::BurnToPyTorchAdapter;
    /// let store = burnpack::store::PackStore::from_file("m.bpk").with_to_adapter(BurnToPyTorchAdapter);
    /// ```
    #[must_use]
    pub fn with_to_adapter(mut self, adapter: impl ModuleAdapter + 'static) -> Self {
        self.to_adapter = Some(Box::new(adapter));
        self
    }

    /// Only the parameters `filter` accepts are saved or loaded.
    ///
    /// ```
    /// use burn::store::PathFilter;
    /// let store = burnpack::store::PackStore::from_file("m.bpk")
    ///     .with_filter(PathFilter::new().with_regex(r"^encoder\."));
    /// ```
    #[must_use]
    pub fn with_filter(mut self, filter: PathFilter) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Same as [`with_filter`](Self::with_filter) (`BurnpackStore` has both names).
    ///
    /// ```
    /// use burn::store::PathFilter;
    /// let store = burnpack::store::PackStore::from_file("m.bpk").filter(PathFilter::new().match_all());
    /// ```
    #[must_use]
    pub fn filter(self, filter: PathFilter) -> Self {
        self.with_filter(filter)
    }

    /// Adds a regular expression the parameter paths may match (to the filter so far).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").with_regex(r"\.weight$");
    /// ```
    #[must_use]
    pub fn with_regex(mut self, pattern: &str) -> Self {
        self.filter = Some(self.filter.unwrap_or_default().with_regex(pattern));
        self
    }

    /// Adds one full parameter path to the filter.
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").with_full_path("head.weight");
    /// ```
    #[must_use]
    pub fn with_full_path(mut self, path: impl Into<String>) -> Self {
        self.filter = Some(self.filter.unwrap_or_default().with_full_path(path));
        self
    }

    /// A filter that accepts every parameter.
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").match_all();
    /// ```
    #[must_use]
    pub fn match_all(mut self) -> Self {
        self.filter = Some(PathFilter::new().match_all());
        self
    }

    /// Renames stored tensors before they are matched on load (burn-store's remapper).
    ///
    /// ```
    /// use burn::store::KeyRemapper;
    /// let remap = KeyRemapper::new().add_pattern(r"^transformer\.", "encoder.").unwrap();
    /// let store = burnpack::store::PackStore::from_file("m.bpk").remap(remap);
    /// ```
    #[must_use]
    pub fn remap(mut self, remapper: KeyRemapper) -> Self {
        self.remapper = remapper;
        self.cache = None;
        self
    }

    /// Adds one rename rule (a regular expression and its replacement).
    ///
    /// # Errors
    /// The pattern is not a valid regular expression (`BurnpackStore` panics there).
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk")
    ///     .with_remap_pattern(r"^old\.", "new.")
    ///     .unwrap();
    /// assert!(burnpack::store::PackStore::from_file("m.bpk").with_remap_pattern("(", "x").is_err());
    /// ```
    pub fn with_remap_pattern(
        mut self,
        from: impl AsRef<str>,
        to: impl Into<String>,
    ) -> Result<Self, regex::Error> {
        self.remapper = self.remapper.add_pattern(from.as_ref(), to.into())?;
        self.cache = None;
        Ok(self)
    }

    /// Whether each tensor the load applies is checked against its stored checksum (reading it
    /// once more; default off, as for `load_pack`). A mismatch is an error naming the file and
    /// the tensor. Files without checksums (Burn's) load unverified.
    ///
    /// ```
    /// let store = burnpack::store::PackStore::from_file("m.bpk").verify_checksums(true);
    /// ```
    #[must_use]
    pub fn verify_checksums(mut self, verify: bool) -> Self {
        self.verify = verify;
        self.cache = None;
        self
    }

    /// This crate's save options (checksums, threads, write mode; see [`SaveOptions`]). Their
    /// overwrite knob is the store's, whatever `options` say: set it with
    /// [`overwrite`](Self::overwrite), before or after (a store never replaces a file unless
    /// told so by name). Metadata is the store's own ([`metadata`](Self::metadata)), added to
    /// that of `options`.
    ///
    /// ```
    /// use burnpack::module::SaveOptions;
    /// let store = burnpack::store::PackStore::from_file("m.bpk").save_options(SaveOptions::new().threads(2));
    /// assert!(format!("{store:?}").contains("overwrite: false"));
    /// ```
    #[must_use]
    pub fn save_options(mut self, options: SaveOptions) -> Self {
        let overwrite = self.overwrites();
        self.options = options.overwrite(overwrite);
        self
    }

    /// The bytes a bytes store holds (given, or written by `save_into`).
    ///
    /// # Errors
    /// [`StoreError::NoBytes`] for a file store or an empty bytes store.
    pub fn get_bytes(&self) -> Result<Bytes, StoreError> {
        match &self.mode {
            Mode::Bytes(Some(bytes)) => Ok(bytes.clone()),
            _ => Err(StoreError::NoBytes),
        }
    }

    /// The file path as resolved (extension policy applied).
    fn path(&self, path: &Path) -> PathBuf {
        if self.auto_extension && path.extension().is_none() {
            path.with_extension(EXTENSION)
        } else {
            path.to_path_buf()
        }
    }

    fn source_name(&self) -> String {
        match &self.mode {
            Mode::File(path) => self.path(path).display().to_string(),
            Mode::Bytes(_) => "bytes".to_string(),
            Mode::Source(source) => source.file().to_string(),
        }
    }

    fn open(&self) -> Result<SharedSource, StoreError> {
        match &self.mode {
            Mode::File(path) => {
                let path = self.path(path);
                let reader = Reader::open(&path)?;
                // An incremental checkpoint: its tensors, from the data files beside it.
                #[cfg(feature = "optim")]
                if reader
                    .layout()
                    .metadata()
                    .contains_key(crate::format::INCREMENTAL_KEY)
                {
                    return Ok(Arc::new(crate::checkpoint::Chain::open_file(
                        &path, reader, false,
                    )?));
                }
                Ok(Arc::new(reader.not_a_manifest()?))
            }
            // Bytes alone hold no data files: a manifest is refused by name.
            Mode::Bytes(Some(bytes)) => Ok(Arc::new(
                Reader::from_bytes(bytes.clone())?.not_a_manifest()?,
            )),
            Mode::Bytes(None) => Err(StoreError::NoBytes),
            Mode::Source(source) => Ok(Arc::clone(source)),
        }
    }

    /// The stored tensors as burn-store's tensors (remapped), each a window of the mapping
    /// taken (and, with `verify`, checked against its checksum) only when the applier takes it.
    fn tensors(&mut self) -> Result<&BTreeMap<String, StoreTensor>, StoreError> {
        if self.cache.is_none() {
            let reader = self.open()?;
            let verify = self.verify;
            // A pack that declares a namespace (a checkpoint: `model.`) holds its module's
            // parameters under it, as the module loader reads them.
            let namespace = reader.namespace().map(str::to_string);
            let tensors = reader
                .tensors()
                .iter()
                .filter_map(|info| match &namespace {
                    Some(ns) => Some((info.name().strip_prefix(ns.as_str())?, info)),
                    None => Some((info.name(), info)),
                })
                .map(|(name, info)| {
                    let (reader, info) = (Arc::clone(&reader), info.clone());
                    StoreTensor::deferred(
                        name.to_string(),
                        info.dtype(),
                        info.shape().to_vec(),
                        info.param_id(),
                        info.len() as usize,
                        move || {
                            let bytes = reader.read(&info).map_err(pack_error)?;
                            if verify {
                                reader.check(&info, &bytes).map_err(pack_error)?;
                            }
                            Ok(bytes)
                        },
                    )
                })
                .collect();
            let tensors = if self.remapper.is_empty() {
                tensors
            } else {
                self.remapper.remap(tensors).0
            };
            self.cache = Some(tensors.into_iter().map(|t| (t.name.clone(), t)).collect());
        }
        Ok(self.cache.get_or_insert_default())
    }

    /// The entries to save: the zero-copy collector when nothing filters or adapts, else
    /// burn-store's collector with each tensor produced as the writer reaches it.
    fn entries<M: ModuleSnapshot>(&self, module: &M) -> Result<Vec<Entry>, StoreError> {
        if self.filter.is_none() && self.to_adapter.is_none() {
            return Ok(module.pack_entries()?);
        }
        let adapter: Box<dyn ModuleAdapter> = match &self.to_adapter {
            Some(adapter) => adapter.clone(),
            None => Box::new(IdentityAdapter),
        };
        Ok(module
            .collect(self.filter.clone(), Some(adapter), false)
            .into_iter()
            .map(|tensor| {
                let len = tensor.byte_len() as u64;
                let id = tensor.param_id;
                let entry = Entry::deferred(
                    tensor.name.clone(),
                    tensor.dtype,
                    tensor.shape.to_vec(),
                    len,
                    move || tensor.into_bytes().map_err(Into::into),
                );
                match id {
                    Some(id) => entry.with_param_id(id),
                    None => entry,
                }
            })
            .collect())
    }
}

/// A read error as burn-pack's error, for the applier (which reports it with the path).
#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn pack_error(err: ReadError) -> burn::store::burn_pack::Error {
    burn::store::burn_pack::Error::IoError(err.to_string())
}
