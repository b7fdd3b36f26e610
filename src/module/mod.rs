//! The Burn adapter: save any `#[derive(Module)]` model as a pack, load a pack into one.
//!
//! Saving walks the module once and turns each parameter into a deferred entry (name = field
//! path joined by `.`, the `ParamId`, dtype and shape, after the parameter's save mapper);
//! bytes are read from the device only when the parallel writer reaches that parameter's slot.
//! Loading maps the file once and builds each parameter from a zero-copy view with the
//! file's dtype on the parameter's own device, restoring its `ParamId`.
//!
//! ```
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::module::PackModule;
//!
//! #[derive(Module, Debug)]
//! struct Tiny {
//!     weight: Param<Tensor<2>>,
//! }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("tiny.bpk");
//! let model = Tiny { weight: Param::from_data([[1.0, 2.0], [3.0, 4.0]], &device) };
//! model.save_pack(&path).unwrap();
//!
//! let fresh = Tiny { weight: Param::from_data([[0.0; 2]; 2], &device) };
//! let loaded = fresh.load_pack(&path).unwrap();
//! assert_eq!(loaded.weight.val().into_data().to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
//! assert_eq!(loaded.weight.id, model.weight.id);
//! ```

mod apply;
mod by_name;
mod collect;
mod contiguous;
mod error;
mod host;
mod lookup;
mod options;
mod quantized;
mod read_ahead;
mod report;
mod save_options;
mod shown;
mod transpose;

use std::path::Path;

use burn::module::Module;
use burn::tensor::Bytes;

/// Moved to [`crate::source`] (the source core); these paths stay one release.
#[doc(hidden)]
pub use crate::source::{Convention, DimOrder, ParamPlace, PytorchConvention, TensorKind};
pub use by_name::LoadTensor;
pub use error::{KindMismatch, Mismatch, ModuleError, ShapeMismatch};
pub use options::{DTypePolicy, LoadOptions};
pub use report::{Cast, Copied, LoadReport, Missing, Renamed};
pub use save_options::SaveOptions;

use crate::source::TensorSource;
use crate::write::{Entry, Writer};

/// Moved to [`crate::format::PRODUCER`] (its one path); this one stays one release.
#[doc(hidden)]
pub use crate::format::PRODUCER;

/// Save and load for every Burn [`Module`]. Names differ from Burn's own `save_file` /
/// `load_file`, so both can be in scope with `burn::prelude::*`.
pub trait PackModule: Module + Sized {
    /// The module's parameters as deferred entries, in visiting order (what is written).
    ///
    /// # Errors
    /// A quantized parameter whose bytes could not be read from its device.
    fn pack_entries(&self) -> Result<Vec<Entry>, ModuleError> {
        let mut collector = collect::Collector::default();
        self.visit(&mut collector);
        match collector.failure {
            Some(e) => Err(e.into()),
            None => Ok(collector.entries),
        }
    }

    /// A writer for this module with `options` applied (for writing to memory or a buffer).
    ///
    /// # Errors
    /// See [`pack_entries`](Self::pack_entries).
    fn pack_writer(&self, options: &SaveOptions) -> Result<Writer, ModuleError> {
        Ok(options.configure(Writer::new(self.pack_entries()?)))
    }

    /// Saves the module to `path` atomically. Returns the file size.
    ///
    /// # Errors
    /// See [`save_pack_with`](Self::save_pack_with).
    fn save_pack(&self, path: impl AsRef<Path>) -> Result<u64, ModuleError> {
        self.save_pack_with(path, &SaveOptions::new())
    }

    /// Saves the module to `path` with `options`. On flex and ndarray (this crate's features of
    /// the same names) each parameter's storage is written where it is, without a copy; on
    /// other backends parameters are read from their device one at a time per producer
    /// thread, as the writer reaches them, so peak host memory is at most about
    /// threads × the largest parameter on top of the model itself (one parameter at a time
    /// with `threads(1)`).
    ///
    /// # Errors
    /// [`ModuleError::Write`] naming the file and the parameter; in atomic mode `path` is then
    /// unchanged.
    fn save_pack_with(
        &self,
        path: impl AsRef<Path>,
        options: &SaveOptions,
    ) -> Result<u64, ModuleError> {
        Ok(self.pack_writer(options)?.write_to_file(path)?)
    }

    /// The module as pack bytes in memory.
    ///
    /// # Errors
    /// See [`save_pack_with`](Self::save_pack_with).
    fn to_pack_bytes(&self) -> Result<Bytes, ModuleError> {
        Ok(self.pack_writer(&SaveOptions::new())?.into_bytes()?)
    }

    /// Loads the module from `path`, strictly, with the file's dtypes.
    ///
    /// # Errors
    /// See [`load_pack_with`](Self::load_pack_with).
    fn load_pack(self, path: impl AsRef<Path>) -> Result<Self, ModuleError> {
        self.load_pack_with(path, &LoadOptions::new())
    }

    /// Loads the module from `path` with `options`.
    ///
    /// # Errors
    /// [`ModuleError::Read`] for an unreadable or invalid file, or an incremental checkpoint's
    /// manifest ([`ReadError::IncrementalManifest`](crate::source::ReadError::IncrementalManifest):
    /// its tensors are in data files beside it; load it through `Checkpoint::open` instead),
    /// [`ModuleError::Mismatch`] listing every missing, unused, mis-shaped or unloadable
    /// parameter at once.
    fn load_pack_with(
        self,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<Self, ModuleError> {
        let reader = options.read_options().open(path)?.not_a_manifest()?;
        Ok(load_opened(self, &reader, options)?.0)
    }

    /// [`load_pack_with`](Self::load_pack_with), also returning a [`LoadReport`]: what was
    /// applied, missing, unused, skipped, renamed, cast and copied, by name.
    ///
    /// ```no_run
    /// # use burn::module::{Module, Param};
    /// # use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// # #[derive(Module, Debug)]
    /// # struct Tiny { w: Param<Tensor<1>> }
    /// # let model = Tiny { w: Param::from_data([0.0], &Device::flex()) };
    /// let options = LoadOptions::new().allow_partial(true).allow_unused(true);
    /// let (model, report) = model.load_pack_with_report("weights.bpk", &options).unwrap();
    /// println!("{report}"); // counts, then each list (`{report:#}` for every name)
    /// ```
    ///
    /// # Errors
    /// See [`load_pack_with`](Self::load_pack_with).
    fn load_pack_with_report(
        self,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<(Self, LoadReport), ModuleError> {
        let reader = options.read_options().open(path)?.not_a_manifest()?;
        load_opened(self, &reader, options)
    }

    /// [`load_pack_bytes`](Self::load_pack_bytes), also returning a [`LoadReport`].
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let bytes = Tiny { w: Param::from_data([1.0], &device) }.to_pack_bytes().unwrap();
    /// let fresh = Tiny { w: Param::from_data([0.0], &device) };
    /// let (_, report) = fresh.load_pack_bytes_with_report(bytes, &LoadOptions::new()).unwrap();
    /// assert_eq!(report.applied(), ["w"]);
    /// ```
    ///
    /// # Errors
    /// See [`load_pack_with`](Self::load_pack_with).
    fn load_pack_bytes_with_report(
        self,
        bytes: Bytes,
        options: &LoadOptions,
    ) -> Result<(Self, LoadReport), ModuleError> {
        let reader = options.read_options().from_bytes(bytes)?.not_a_manifest()?;
        load_opened(self, &reader, options)
    }

    /// Loads the module from pack bytes in memory (zero-copy views into them).
    ///
    /// # Errors
    /// See [`load_pack_with`](Self::load_pack_with).
    fn load_pack_bytes(self, bytes: Bytes, options: &LoadOptions) -> Result<Self, ModuleError> {
        let reader = options.read_options().from_bytes(bytes)?.not_a_manifest()?;
        Ok(load_opened(self, &reader, options)?.0)
    }

    /// Loads the module from a pack embedded with `include_bytes!` (zero-copy).
    ///
    /// # Errors
    /// See [`load_pack_with`](Self::load_pack_with).
    fn load_pack_static(
        self,
        data: &'static [u8],
        options: &LoadOptions,
    ) -> Result<Self, ModuleError> {
        let reader = options.read_options().from_static(data)?.not_a_manifest()?;
        Ok(load_opened(self, &reader, options)?.0)
    }

    /// Loads the module from any [`TensorSource`] (a pack [`Reader`](crate::read::Reader), or
    /// another container that builds the same table of tensors), with `options`: the source's
    /// namespace, the [convention](LoadOptions::convention), filters, renames, dtype policy
    /// and strictness apply alike. The tensors keep the source alive (a mapping lives as long
    /// as any parameter uses it).
    ///
    /// The source is already open: the options about opening a file
    /// ([`limits`](LoadOptions::limits), [`buffered`](LoadOptions::buffered)) are refused
    /// here rather than ignored; give them to the source when opening it.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let bytes = Tiny { w: Param::from_data([1.0, 2.0], &device) }.to_pack_bytes().unwrap();
    /// let reader = Reader::from_bytes(bytes).unwrap();
    /// let tiny = Tiny { w: Param::from_data([0.0, 0.0], &device) }
    ///     .load_from_source(&reader, &LoadOptions::new())
    ///     .unwrap();
    /// assert_eq!(tiny.w.val().into_data().to_vec::<f32>().unwrap(), [1.0, 2.0]);
    /// ```
    ///
    /// # Errors
    /// [`ModuleError::Option`] for `limits` or `buffered` set in `options`,
    /// [`ModuleError::Read`] when a verified load finds the source damaged,
    /// [`ModuleError::Mismatch`] listing every problem.
    fn load_from_source(
        self,
        source: &dyn TensorSource,
        options: &LoadOptions,
    ) -> Result<Self, ModuleError> {
        Ok(self.load_from_source_with_report(source, options)?.0)
    }

    /// [`load_from_source`](Self::load_from_source), also returning a [`LoadReport`]: which
    /// parameters were applied, which were copied rather than viewed and why (unaligned in the
    /// file, a buffered source, a dtype cast), which kept their value (missing, skipped by the
    /// filter), which of the source's tensors went unused, renamed or cast.
    ///
    /// # Errors
    /// See [`load_from_source`](Self::load_from_source).
    fn load_from_source_with_report(
        self,
        source: &dyn TensorSource,
        options: &LoadOptions,
    ) -> Result<(Self, LoadReport), ModuleError> {
        options.check_for_source()?;
        load_opened(self, source, options)
    }
}

impl<M: Module> PackModule for M {}

/// The walk that loads `module` through `applier`.
fn walk<M: Module>(module: M, mut applier: apply::Applier<'_>) -> (M, error::Mismatch, LoadReport) {
    let module = module.map(&mut applier);
    let (mismatch, report) = applier.finish();
    (module, mismatch, report)
}

/// Loads `module` from `source`, opened by this crate with `options` (or checked by the
/// caller not to carry options about opening).
fn load_opened<M: Module>(
    module: M,
    source: &dyn TensorSource,
    options: &LoadOptions,
) -> Result<(M, LoadReport), ModuleError> {
    if options.verify {
        source.verify_structure()?;
    }
    let mut applier = apply::Applier::new(source, options);
    // A source that fetches (an object in a bucket) or reads a file ahead gets the whole list
    // first, so that it fetches in parallel, or reads in the file's order, only what this
    // module reads.
    if source.wants_prefetch() {
        source.prefetch(&applier.wanted(&module))?;
    }
    // A source whose reads are copies is read ahead of the walk on every core.
    // (Asked of the source's table first: a mapped pack with nothing to copy is not walked
    // twice.)
    let copies = source.shared().is_some()
        && source
            .tensors()
            .iter()
            .any(|info| source.copy_reason(info).is_some());
    let (module, mismatch, report) = if copies {
        let wanted = applier.wanted(&module);
        match read_ahead::worth_it(source, &wanted) {
            Some(shared) => {
                let ahead = read_ahead::ReadAhead::new(shared, wanted);
                let workers = std::thread::available_parallelism().map_or(2, usize::from);
                ahead.run(workers, |ahead| {
                    walk(module, apply::Applier::new(ahead, options))
                })
            }
            None => walk(module, applier),
        }
    } else {
        walk(module, applier)
    };
    if mismatch.is_empty() {
        Ok((module, report))
    } else {
        Err(ModuleError::Mismatch {
            file: source.file().to_string(),
            mismatch: Box::new(mismatch),
        })
    }
}
