//! Options for loading modules.

use std::sync::Arc;

use burn::tensor::DType;
use regex::Regex;

use super::error::ModuleError;
use crate::format::Limits;
use crate::read::{ReadMode, ReadOptions};
use crate::source::{Convention, PytorchConvention};

/// Which dtype a loaded parameter gets.
///
/// A dtype the target device cannot hold is never changed silently: under `AsStored` it is
/// an error naming the parameter (in [`ModuleError::Mismatch`](crate::module::ModuleError)),
/// which one of the casts resolves. Booleans are the exception that is not a change: native,
/// u8 and u32 stores hold the same values, and each device gets the store it has.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::module::{DTypePolicy, LoadOptions};
///
/// // BF16 or F64 checkpoints onto a device that only computes in f32:
/// let options = LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F32));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DTypePolicy {
    /// The dtype stored in the file, loaded verbatim (zero copy where the backend allows).
    #[default]
    AsStored,
    /// The dtype the module's parameter has now. Reading it initializes a lazy parameter.
    CastToModule,
    /// Float parameters are cast to this dtype; int and bool parameters keep theirs.
    CastFloatsTo(DType),
}

/// Decides which module paths are loaded.
#[derive(Clone)]
pub(crate) enum Filter {
    Regex(Regex),
    Predicate(Arc<dyn Fn(&str) -> bool + Send + Sync>),
}

impl Filter {
    pub(crate) fn accepts(&self, path: &str) -> bool {
        match self {
            Filter::Regex(re) => re.is_match(path),
            Filter::Predicate(f) => f(path),
        }
    }
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::Regex(re) => write!(f, "Regex({})", re.as_str()),
            Filter::Predicate(_) => f.write_str("Predicate(..)"),
        }
    }
}

/// How a module is loaded. Strict by default: every parameter must be in the file with its
/// shape, and every tensor in the file must be used.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::module::{DTypePolicy, LoadOptions};
/// let options = LoadOptions::new()
///     .allow_partial(true)
///     .allow_unused(true)
///     .filter_regex(r"^encoder\.")
///     .unwrap()
///     .rename(r"^model\.", "")
///     .unwrap()
///     .dtype(DTypePolicy::CastFloatsTo(DType::F32));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
#[allow(clippy::struct_excessive_bools)] // independent switches of a builder
pub struct LoadOptions {
    pub(crate) allow_partial: bool,
    pub(crate) allow_unused: bool,
    pub(crate) filter: Option<Filter>,
    pub(crate) renames: Vec<(Regex, String)>,
    pub(crate) dtype: DTypePolicy,
    /// Set by [`limits`](LoadOptions::limits): only for the `load_pack*` methods, which open
    /// the file.
    pub(crate) limits: Option<Limits>,
    /// Set by [`buffered`](LoadOptions::buffered): likewise.
    pub(crate) buffered: Option<bool>,
    pub(crate) verify: bool,
    pub(crate) convention: Option<Arc<dyn Convention>>,
    pub(crate) contiguous: bool,
    pub(crate) skip_enum_variants: bool,
    pub(crate) map_indices_contiguous: bool,
}

impl LoadOptions {
    /// Strict, dtypes as stored, memory-mapped, Burn's limits.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Parameters missing from the file keep their current values instead of failing.
    #[must_use]
    pub fn allow_partial(mut self, allow: bool) -> Self {
        self.allow_partial = allow;
        self
    }

    /// Tensors in the file that no parameter uses are ignored instead of failing.
    #[must_use]
    pub fn allow_unused(mut self, allow: bool) -> Self {
        self.allow_unused = allow;
        self
    }

    /// Loads only parameters whose path matches `pattern`; the others keep their values and
    /// file tensors outside the filter are not reported as unused.
    ///
    /// # Errors
    /// The pattern does not compile.
    pub fn filter_regex(mut self, pattern: &str) -> Result<Self, regex::Error> {
        self.filter = Some(Filter::Regex(Regex::new(pattern)?));
        Ok(self)
    }

    /// Loads only parameters for whose path `predicate` returns true.
    #[must_use]
    pub fn filter(mut self, predicate: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Filter::Predicate(Arc::new(predicate)));
        self
    }

    /// Renames file tensors before matching them to parameters: every rule is applied in
    /// order with [`Regex::replace_all`] (`$1` etc. refer to groups).
    ///
    /// # Errors
    /// The pattern does not compile.
    pub fn rename(
        mut self,
        pattern: &str,
        replacement: impl Into<String>,
    ) -> Result<Self, regex::Error> {
        self.renames
            .push((Regex::new(pattern)?, replacement.into()));
        Ok(self)
    }

    /// Sets the dtype policy.
    #[must_use]
    pub fn dtype(mut self, policy: DTypePolicy) -> Self {
        self.dtype = policy;
        self
    }

    /// Reads with ordinary reads instead of a memory map (network filesystems, unified memory).
    ///
    /// Only for the `load_pack*` methods, which open the file: a source given to
    /// [`load_from_source`](crate::module::PackModule::load_from_source) is already open and
    /// reads as it was opened, so there the option is refused
    /// ([`ModuleError::Option`]) rather than ignored.
    #[must_use]
    pub fn buffered(mut self, buffered: bool) -> Self {
        self.buffered = Some(buffered);
        self
    }

    /// Checks every loaded parameter's bytes against the file's checksums (reads them all once
    /// more; default off). A mismatch is reported with the other problems. Files of other
    /// producers without checksums (Burn's) load unverified; a file whose `producer` names
    /// this crate but which carries no checksums is refused as damaged
    /// ([`FormatError::MissingChecksums`](crate::format::FormatError)), as is non-zero padding.
    /// The header and metadata checksum is checked on every open, with or without this.
    #[must_use]
    pub fn verify_checksums(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// `PyTorch` conventions, as burn-store's `PyTorchToBurnAdapter` applies them: shorthand for
    /// [`convention`](Self::convention)`(`[`PytorchConvention`]`)` when `true`; `false` removes
    /// the convention (whichever was set). A `Linear`'s `weight` is stored `[out, in]` and
    /// becomes Burn's `[in, out]`; a `BatchNorm`, `LayerNorm`, `GroupNorm` or `RmsNorm`'s
    /// `gamma` / `beta` are read from `weight` / `bias` (Burn's own names are taken first when
    /// the file has them); a `BatchNorm`'s `num_batches_tracked` buffer, which Burn's has no
    /// counterpart of, is not reported as unused. Default off.
    ///
    /// The transpose is a view: the tensor is built from the stored bytes (zero copy where the
    /// source allows) and transposed as Burn does it, by its strides, so a transposed load costs
    /// no copy and no time; the first operation that needs it contiguous (or a save) lays it
    /// out. A block-quantized matrix is the exception: Burn's backends would dequantize and
    /// quantize it again to transpose it, so it is transposed on the host instead, values and
    /// block scales together (one copy, reported as `CopyReason::Transposed`), and keeps its
    /// exact values. Module paths and other names are left to [`rename`](Self::rename) rules
    /// (say, a Hugging Face `bert.` prefix).
    ///
    /// A `Linear` built with `LinearLayout::Col` already loads `[out, in]` (Burn 0.22's own
    /// load mapper transposes it), so such modules load `PyTorch` weights without this option
    /// (renaming norms' `weight` / `bias` with rules); with it they are transposed once too
    /// often, as with burn-store's adapter: a shape error for non-square weights. The layout
    /// is not visible from outside the parameter, so it cannot be told apart here.
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Bytes, DType, Device};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    ///
    /// // PyTorch's nn.Linear(3, 2): weight [out, in] = [2, 3].
    /// let weight = Bytes::from_elems(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// let bias = Bytes::from_elems(vec![0.5f32, -0.5]);
    /// let pack = Writer::new(vec![
    ///     Entry::resident("weight", DType::F32, vec![2, 3], weight),
    ///     Entry::resident("bias", DType::F32, vec![2], bias),
    /// ])
    /// .into_bytes()
    /// .unwrap();
    /// let device = Device::flex();
    /// let linear: Linear = LinearConfig::new(3, 2).init(&device);
    /// let linear = linear
    ///     .load_from_source(&Reader::from_bytes(pack).unwrap(), &LoadOptions::new().pytorch(true))
    ///     .unwrap();
    /// let w = linear.weight.val();
    /// assert_eq!(w.dims(), [3, 2]);
    /// assert_eq!(w.into_data().try_to_vec::<f32>().unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// ```
    #[must_use]
    pub fn pytorch(mut self, pytorch: bool) -> Self {
        self.convention = pytorch.then(|| Arc::new(PytorchConvention) as Arc<dyn Convention>);
        self
    }

    /// Lays every matrix a convention transposes (see [`pytorch`](Self::pytorch)) out
    /// contiguous at load, instead of leaving it a view by strides. Default off.
    ///
    /// A view costs nothing at load, and Burn's CPU matmul takes its strides as they are; but
    /// the first operation that needs the matrix contiguous (`into_data`, a save, a backend
    /// kernel that wants its own layout) copies it through its strides, element by element,
    /// after the load. With this option the load copies it instead: in tiles, on every core,
    /// into memory of its own (huge pages for a large one), while the file is still being read,
    /// several times faster than that strided copy (see docs/benchmarks.md). The tensor is then
    /// a copy, reported as `CopyReason::Transposed` (or the earlier reason where it was a copy
    /// already: the source's own, a cast), and no longer reads from the file. Tensors of
    /// another rank keep their view; block-quantized matrices are transposed on the host
    /// where that is exact (see [`pytorch`](Self::pytorch)); a backend that copies to
    /// transpose anyway (ndarray) gets this copy with or without the option.
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{Bytes, DType, Device};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    /// use burnpack::source::CopyReason;
    /// use burnpack::write::{Entry, Writer};
    ///
    /// // PyTorch's nn.Linear(3, 2): weight [out, in] = [2, 3].
    /// let weight = Bytes::from_elems(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// let bias = Bytes::from_elems(vec![0.5f32, -0.5]);
    /// let pack = Writer::new(vec![
    ///     Entry::resident("weight", DType::F32, vec![2, 3], weight),
    ///     Entry::resident("bias", DType::F32, vec![2], bias),
    /// ])
    /// .into_bytes()
    /// .unwrap();
    /// let linear: Linear = LinearConfig::new(3, 2).init(&Device::flex());
    /// let options = LoadOptions::new().pytorch(true).contiguous(true);
    /// let (linear, report) = linear
    ///     .load_from_source_with_report(&Reader::from_bytes(pack).unwrap(), &options)
    ///     .unwrap();
    /// assert_eq!(report.copied()[0].reason, CopyReason::Transposed); // the weight, at load
    /// let w = linear.weight.val();
    /// assert_eq!(w.dims(), [3, 2]);
    /// assert_eq!(w.into_data().try_to_vec::<f32>().unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// ```
    #[must_use]
    pub fn contiguous(mut self, contiguous: bool) -> Self {
        self.contiguous = contiguous;
        self
    }

    /// Leaves the variant names of Burn enum modules out of the module's paths, as burn-store's
    /// `skip_enum_variants` does (its `PytorchStore` default). Default off.
    ///
    /// A `#[derive(Module)]` enum puts the name of its variant in every path below it
    /// (`conv.DwsConv.dconv.weight` for a field `conv` of an enum holding a `DwsConv`
    /// variant); files written by other frameworks (`PyTorch`'s `state_dict`) have no such
    /// segment (`conv.dconv.weight`). With this option the walk skips each segment entered
    /// by an enum (a container Burn names `Enum:...`), so the paths match, the same paths that
    /// filters and the [`LoadReport`](super::LoadReport) then name.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Dense { w: Param<Tensor<1>> }
    /// #[derive(Module, Debug)]
    /// enum Layer { Dense(Dense) }
    /// #[derive(Module, Debug)]
    /// struct Net { layer: Layer }
    /// // A file naming the parameter `layer.w`, as PyTorch would.
    /// #[derive(Module, Debug)]
    /// struct Flat { layer: Dense }
    ///
    /// let device = Device::flex();
    /// let flat = Flat { layer: Dense { w: Param::from_data([1.0, 2.0], &device) } };
    /// let reader = Reader::from_bytes(flat.to_pack_bytes().unwrap()).unwrap();
    /// let net = || Net { layer: Layer::Dense(Dense { w: Param::from_data([0.0, 0.0], &device) }) };
    /// assert!(net().load_from_source(&reader, &LoadOptions::new()).is_err()); // wants layer.Dense.w
    /// let net = net()
    ///     .load_from_source(&reader, &LoadOptions::new().skip_enum_variants(true))
    ///     .unwrap();
    /// let Layer::Dense(dense) = net.layer;
    /// assert_eq!(dense.w.val().into_data().to_vec::<f32>().unwrap(), [1.0, 2.0]);
    /// ```
    #[must_use]
    pub fn skip_enum_variants(mut self, skip: bool) -> Self {
        self.skip_enum_variants = skip;
        self
    }

    /// Renumbers the numeric segments of the source's names to be contiguous, as burn-store's
    /// `map_indices_contiguous` does (its `PytorchStore` default; Burn issue #4149). Default
    /// off.
    ///
    /// A `PyTorch` `nn.Sequential` of convolutions and activations names its parameters
    /// `fc.0.weight`, `fc.2.weight`, `fc.4.weight` (the activations at 1 and 3 have none),
    /// where Burn's `Vec` of the same convolutions has `fc.0`, `fc.1`, `fc.2`. Under this
    /// option every numeric segment of a name is replaced by its rank among the indices seen
    /// at the same place (the same prefix, with the file's own indices) across all the
    /// source's names: `0, 2, 4` become `0, 1, 2`, each nesting level on its own. Applied
    /// to the names after the [convention](Self::convention) and the
    /// [`rename`](Self::rename) rules, as burn-store applies it after its key remapper; each
    /// name it changes is listed in [`LoadReport::renamed`](super::LoadReport::renamed).
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Bytes, DType, Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    ///
    /// #[derive(Module, Debug)]
    /// struct Dense { w: Param<Tensor<1>> }
    /// #[derive(Module, Debug)]
    /// struct Net { fc: Vec<Dense> }
    ///
    /// let entry = |name: &str, v: f32| Entry::resident(name, DType::F32, vec![1], Bytes::from_elems(vec![v]));
    /// let pack = Writer::new(vec![entry("fc.0.w", 1.0), entry("fc.2.w", 2.0)]).into_bytes().unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// let device = Device::flex();
    /// let net = Net { fc: (0..2).map(|_| Dense { w: Param::from_data([0.0], &device) }).collect() };
    /// let options = LoadOptions::new().map_indices_contiguous(true);
    /// let (net, report) = net.load_from_source_with_report(&reader, &options).unwrap();
    /// assert_eq!(net.fc[1].w.val().into_data().to_vec::<f32>().unwrap(), [2.0]);
    /// assert_eq!(report.renamed()[0].from, "fc.2.w");
    /// assert_eq!(report.renamed()[0].to, "fc.1.w");
    /// ```
    #[must_use]
    pub fn map_indices_contiguous(mut self, map: bool) -> Self {
        self.map_indices_contiguous = map;
        self
    }

    /// Loads with `convention`: the rules that map the module's parameter paths to the
    /// source's tensor names and layouts (see [`Convention`], and [`PytorchConvention`] for
    /// `PyTorch`'s). Applied before the [`rename`](Self::rename) rules, which come on top of
    /// it. Replaces a convention set before.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use burnpack::module::LoadOptions;
    /// use burnpack::source::Convention;
    ///
    /// /// Tensors named `model.<path>`.
    /// #[derive(Debug)]
    /// struct Prefixed;
    /// impl Convention for Prefixed {
    ///     fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
    ///         Cow::Borrowed(name.strip_prefix("model.").unwrap_or(name))
    ///     }
    /// }
    /// let options = LoadOptions::new().convention(Prefixed);
    /// assert!(options.convention_ref().is_some());
    /// ```
    #[must_use]
    pub fn convention(mut self, convention: impl Convention + 'static) -> Self {
        self.convention = Some(Arc::new(convention));
        self
    }

    /// The convention set, if any.
    ///
    /// ```
    /// use burnpack::module::LoadOptions;
    /// assert!(LoadOptions::new().pytorch(true).convention_ref().is_some());
    /// assert!(LoadOptions::new().pytorch(true).pytorch(false).convention_ref().is_none());
    /// ```
    #[must_use]
    pub fn convention_ref(&self) -> Option<&dyn Convention> {
        self.convention.as_deref()
    }

    /// Sets the limits checked when opening the file.
    ///
    /// Only for the `load_pack*` methods, which open the file: a source given to
    /// [`load_from_source`](crate::module::PackModule::load_from_source) was checked against
    /// the limits it was opened with (such as [`ReadOptions::limits`]), so there the option is
    /// refused ([`ModuleError::Option`]) rather than ignored.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// The options of the reader that the `load_pack*` methods open.
    pub(crate) fn read_options(&self) -> ReadOptions {
        let mut read = ReadOptions::new();
        if let Some(limits) = self.limits {
            read = read.limits(limits);
        }
        if let Some(buffered) = self.buffered {
            read = read.mode(if buffered {
                ReadMode::Buffered
            } else {
                ReadMode::Mmap
            });
        }
        read
    }

    /// Refuses the options that only apply where this crate opens the file, for a load from a
    /// source opened by the caller.
    pub(crate) fn check_for_source(&self) -> Result<(), ModuleError> {
        let refuse = |option: &'static str, what: &str| ModuleError::Option {
            option,
            reason: format!(
                "applies to the load_pack* methods, which open the file; a source given to \
                 load_from_source is already open ({what})"
            ),
        };
        if self.limits.is_some() {
            return Err(refuse(
                "limits",
                "a source's limits are given when it is opened, such as with ReadOptions::limits",
            ));
        }
        if self.buffered.is_some() {
            return Err(refuse(
                "buffered",
                "it reads as it was opened, such as with ReadOptions::mode(ReadMode::Buffered)",
            ));
        }
        Ok(())
    }

    /// `name` after every rename rule, in order; borrowed when no rule changes it.
    pub(crate) fn renamed<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        use std::borrow::Cow;
        self.renames
            .iter()
            .fold(Cow::Borrowed(name), |acc, (re, to)| {
                match re.replace_all(&acc, to.as_str()) {
                    Cow::Borrowed(_) => acc,
                    Cow::Owned(changed) => Cow::Owned(changed),
                }
            })
    }

    pub(crate) fn accepts(&self, path: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| f.accepts(path))
    }
}
