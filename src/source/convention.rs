//! Conventions: how a format's tensor names and layouts relate to a Burn module's parameters.
//!
//! A [`Convention`] is a value the loader applies: it reads the source's names, proposes the
//! names a parameter may be stored under, says which stored tensors have their dimensions
//! reversed, and which source tensors are known extras with no parameter. [`PytorchConvention`]
//! is `PyTorch`'s (what [`LoadOptions::pytorch`](super::LoadOptions::pytorch) sets); a user
//! writes one for their own format and gives it to
//! [`LoadOptions::convention`](super::LoadOptions::convention).

use std::borrow::Cow;

use crate::format::TensorInfo;

/// Where a parameter is in the module being loaded, as a [`Convention`] sees it: its path,
/// the containers along it, its rank and kind. (This example shows every method.)
///
/// ```
/// use std::borrow::Cow;
/// use std::sync::{Arc, Mutex};
/// use burn::module::Module;
/// use burn::nn::{LayerNorm, LayerNormConfig};
/// use burn::tensor::Device;
/// use burnpack::module::{LoadOptions, PackModule};
/// use burnpack::source::{Convention, ParamPlace};
/// use burnpack::read::Reader;
///
/// /// Reads a norm's `gamma` from `scale` (a made-up format), and records what it saw.
/// #[derive(Debug)]
/// struct Scales(Arc<Mutex<Vec<String>>>);
/// impl Convention for Scales {
///     fn candidates<'p>(&self, param: &ParamPlace<'p>) -> Vec<Cow<'p, str>> {
///         let containers: Vec<&str> = param.containers().collect();
///         self.0.lock().unwrap().push(format!(
///             "{} {} {} {} {:?} {} {}",
///             param.path(), param.parent(), param.leaf(), param.module(), containers,
///             param.rank(), param.kind(),
///         ));
///         if param.module() == "Struct:LayerNorm" && param.leaf() == "gamma" {
///             vec![Cow::Owned(param.with_leaf("scale"))]
///         } else {
///             vec![Cow::Borrowed(param.path())]
///         }
///     }
/// }
///
/// #[derive(Module, Debug)]
/// struct Net { norms: Vec<LayerNorm> }
/// let device = Device::flex();
/// let net = || Net { norms: vec![LayerNormConfig::new(2).with_bias(false).init(&device)] };
/// // A file whose norms store `scale` (a pack of Burn's names, renamed on reading).
/// let reader = Reader::from_bytes(net().to_pack_bytes().unwrap()).unwrap();
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let options = LoadOptions::new()
///     .rename(r"gamma$", "scale")
///     .unwrap()
///     .convention(Scales(seen.clone()));
/// net().load_from_source(&reader, &options).unwrap();
/// assert_eq!(
///     seen.lock().unwrap()[0],
///     r#"norms.0.gamma norms.0 gamma Struct:LayerNorm ["Struct:Net", "Vec", "Struct:LayerNorm"] 1 float"#
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ParamPlace<'a> {
    path: &'a str,
    /// Where the last segment starts in `path`.
    leaf_start: usize,
    /// The container types, each ended by `\n`, outermost first.
    containers: &'a str,
    rank: usize,
    kind: TensorKind,
}

impl<'a> ParamPlace<'a> {
    pub(crate) fn new(
        path: &'a str,
        leaf_start: usize,
        containers: &'a str,
        rank: usize,
        kind: TensorKind,
    ) -> Self {
        Self {
            path,
            leaf_start,
            containers,
            rank,
            kind,
        }
    }

    /// The parameter's path in the module, segments joined with `.` (`encoder.0.fc.weight`).
    #[must_use]
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The path's last segment: the parameter's field name (`weight`).
    #[must_use]
    pub fn leaf(&self) -> &'a str {
        &self.path[self.leaf_start..]
    }

    /// The path without its last segment and the `.` before it (`encoder.0.fc`; empty for a
    /// parameter at the top of the module).
    #[must_use]
    pub fn parent(&self) -> &'a str {
        &self.path[..self.leaf_start.saturating_sub(1)]
    }

    /// The path with its last segment replaced by `leaf` (`encoder.0.fc.bias` for `bias`).
    #[must_use]
    pub fn with_leaf(&self, leaf: &str) -> String {
        let mut path = String::with_capacity(self.leaf_start + leaf.len());
        path.push_str(&self.path[..self.leaf_start]);
        path.push_str(leaf);
        path
    }

    /// The type of the container holding each segment of the path, outermost first, as Burn
    /// names them (`Struct:Net`, `Vec`, `Struct:Linear` for `layers.0.weight`): user-defined
    /// types are `Struct:Name` or `Enum:Name`, the others `Vec`, `Array`, `Tuple`...
    #[must_use]
    pub fn containers(&self) -> impl DoubleEndedIterator<Item = &'a str> + use<'a> {
        self.containers.split_terminator('\n')
    }

    /// The innermost user-defined container (`Struct:Linear`, `Struct:BatchNorm`,
    /// `Enum:Block`): the module the parameter belongs to; empty when there is none.
    #[must_use]
    pub fn module(&self) -> &'a str {
        self.containers()
            .rev()
            .find(|c| c.starts_with("Struct:") || c.starts_with("Enum:"))
            .unwrap_or("")
    }

    /// The parameter's rank (`D` of its `Tensor<D, K>`).
    #[must_use]
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The parameter's kind (float, int or bool).
    #[must_use]
    pub fn kind(&self) -> TensorKind {
        self.kind
    }
}

/// How a stored tensor's dimensions relate to its parameter's.
///
/// ```
/// use burnpack::source::DimOrder;
/// assert_eq!(DimOrder::default(), DimOrder::AsStored);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DimOrder {
    /// The stored shape is the parameter's.
    #[default]
    AsStored,
    /// The stored dimensions are the parameter's in reverse order (`PyTorch`'s `[out, in]`
    /// `Linear` weight for Burn's `[in, out]`; GGUF's dimensions, listed innermost first).
    /// The tensor is built from the stored bytes and permuted by its strides: a view, no copy
    /// where the backend transposes by strides (flex, the GPU backends; ndarray copies).
    Reversed,
}

/// A format's naming and layout rules, which the loader applies between a module's parameter
/// paths and a source's tensors. Every method has a default that changes nothing, so a
/// convention implements only what its format does differently.
///
/// In order, a load
/// 1. reads each source tensor's name (after the source's namespace) through
///    [`source_name`](Self::source_name), then through the
///    [`rename`](super::LoadOptions::rename) rules of the options, and keeps what the
///    [filter](super::LoadOptions::filter) accepts;
/// 2. for each parameter, asks [`candidates`](Self::candidates) for the names it may be
///    stored under and takes the first the source has (not taken yet);
/// 3. asks [`dim_order`](Self::dim_order) whether that tensor's dimensions are reversed;
/// 4. when nothing may be left over, reports the source tensors no parameter took, except
///    those [`ignores`](Self::ignores) names.
///
/// A convention for a checkpoint whose tensors are all under `model.`, read from the names:
///
/// ```
/// use std::borrow::Cow;
/// use burn::module::{Module, Param};
/// use burn::tensor::{Bytes, DType, Device, Tensor};
/// use burnpack::module::{LoadOptions, PackModule};
/// use burnpack::source::Convention;
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
///
/// #[derive(Debug)]
/// struct Prefixed;
/// impl Convention for Prefixed {
///     fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
///         Cow::Borrowed(name.strip_prefix("model.").unwrap_or(name))
///     }
/// }
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let pack = Writer::new(vec![Entry::resident(
///     "model.w",
///     DType::F32,
///     vec![2],
///     Bytes::from_elems(vec![1.0f32, 2.0]),
/// )])
/// .into_bytes()
/// .unwrap();
/// let device = Device::flex();
/// let tiny = Tiny { w: Param::from_data([0.0, 0.0], &device) }
///     .load_from_source(&Reader::from_bytes(pack).unwrap(), &LoadOptions::new().convention(Prefixed))
///     .unwrap();
/// assert_eq!(tiny.w.val().into_data().try_to_vec::<f32>().unwrap(), [1.0, 2.0]);
/// ```
pub trait Convention: Send + Sync + std::fmt::Debug {
    /// A source tensor's name as this convention reads it, before the options' renames:
    /// unchanged by default. Two names read as one are reported as a collision.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use burnpack::source::Convention;
    ///
    /// /// llama.cpp's block names (a part of them) as a Burn model's.
    /// #[derive(Debug)]
    /// struct Blocks;
    /// impl Convention for Blocks {
    ///     fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
    ///         match name.strip_prefix("blk.") {
    ///             Some(rest) => Cow::Owned(format!("layers.{rest}")),
    ///             None => Cow::Borrowed(name),
    ///         }
    ///     }
    /// }
    /// assert_eq!(Blocks.source_name("blk.0.attn_q.weight"), "layers.0.attn_q.weight");
    /// ```
    fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
        Cow::Borrowed(name)
    }

    /// The names (as read by [`source_name`](Self::source_name) and the renames) the parameter
    /// at `param` may be stored under, tried in order: the first the source has is loaded.
    /// When the source has none of them the parameter is missing; an empty list says the
    /// format never stores it. By default the parameter's path.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use burnpack::source::{Convention, ParamPlace};
    ///
    /// /// Looks for every parameter under its own path, then under `model.`.
    /// #[derive(Debug)]
    /// struct MaybePrefixed;
    /// impl Convention for MaybePrefixed {
    ///     fn candidates<'p>(&self, param: &ParamPlace<'p>) -> Vec<Cow<'p, str>> {
    ///         vec![Cow::Borrowed(param.path()), Cow::Owned(format!("model.{}", param.path()))]
    ///     }
    /// }
    /// # let _ = MaybePrefixed;
    /// ```
    fn candidates<'p>(&self, param: &ParamPlace<'p>) -> Vec<Cow<'p, str>> {
        vec![Cow::Borrowed(param.path())]
    }

    /// Whether `tensor`, found for the parameter at `param`, is stored with its dimensions
    /// reversed. Its shape is compared with the parameter's accordingly. Stored as is by
    /// default.
    ///
    /// ```
    /// use burnpack::format::TensorInfo;
    /// use burnpack::source::{Convention, DimOrder, ParamPlace};
    ///
    /// /// Every matrix stored transposed.
    /// #[derive(Debug)]
    /// struct ColumnMajor;
    /// impl Convention for ColumnMajor {
    ///     fn dim_order(&self, param: &ParamPlace<'_>, _tensor: &TensorInfo) -> DimOrder {
    ///         if param.rank() == 2 { DimOrder::Reversed } else { DimOrder::AsStored }
    ///     }
    /// }
    /// # let _ = ColumnMajor;
    /// ```
    fn dim_order(&self, param: &ParamPlace<'_>, tensor: &TensorInfo) -> DimOrder {
        let _ = (param, tensor);
        DimOrder::AsStored
    }

    /// Whether the source tensor `name` (as read by [`source_name`](Self::source_name) and the
    /// renames) is a known extra of the format, with no parameter in a Burn module: not
    /// reported as unused when it is left over. None by default.
    ///
    /// ```
    /// use burnpack::source::{Convention, PytorchConvention};
    /// assert!(PytorchConvention.ignores("bn.num_batches_tracked"));
    /// assert!(!PytorchConvention.ignores("bn.running_mean"));
    /// ```
    fn ignores(&self, name: &str) -> bool {
        let _ = name;
        false
    }
}

/// `PyTorch`'s conventions, as burn-store's `PyTorchToBurnAdapter` applies them (where the
/// innermost user-defined container decides):
/// - a `Linear`'s 2-D `weight` is stored `[out, in]` and becomes Burn's `[in, out]`
///   ([`DimOrder::Reversed`]);
/// - a `BatchNorm`, `LayerNorm`, `GroupNorm` or `RmsNorm`'s `gamma` / `beta` are read from
///   `weight` / `bias` (Burn's own names are taken first when the source has them);
/// - a `BatchNorm`'s `num_batches_tracked` buffer, which Burn's has no counterpart of, is not
///   reported as unused.
///
/// Tensor names are otherwise left as they are (a Hugging Face `bert.` prefix is for
/// [`rename`](super::LoadOptions::rename) rules). Given to
/// [`LoadOptions::convention`](super::LoadOptions::convention), it is what
/// [`LoadOptions::pytorch`](super::LoadOptions::pytorch)`(true)` sets.
///
/// ```
/// use burnpack::module::LoadOptions;
/// use burnpack::source::PytorchConvention;
/// let options = LoadOptions::new().convention(PytorchConvention);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PytorchConvention;

impl Convention for PytorchConvention {
    fn candidates<'p>(&self, param: &ParamPlace<'p>) -> Vec<Cow<'p, str>> {
        let path = Cow::Borrowed(param.path());
        let pytorch_name = match param.leaf() {
            "gamma" => "weight",
            "beta" => "bias",
            _ => return vec![path],
        };
        let norm = matches!(
            param.module(),
            "Struct:BatchNorm" | "Struct:LayerNorm" | "Struct:GroupNorm" | "Struct:RmsNorm"
        );
        if norm {
            vec![path, Cow::Owned(param.with_leaf(pytorch_name))]
        } else {
            vec![path]
        }
    }

    fn dim_order(&self, param: &ParamPlace<'_>, _tensor: &TensorInfo) -> DimOrder {
        if param.rank() == 2 && param.leaf() == "weight" && param.module() == "Struct:Linear" {
            DimOrder::Reversed
        } else {
            DimOrder::AsStored
        }
    }

    fn ignores(&self, name: &str) -> bool {
        // PyTorch's BatchNorm counts its batches in a buffer Burn's has no counterpart of.
        name.ends_with("num_batches_tracked")
    }
}

/// The kind of a tensor: what a parameter holds, or what a file's dtype is.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::source::TensorKind;
/// assert_eq!(TensorKind::of(DType::BF16), TensorKind::Float);
/// assert_eq!(TensorKind::of(DType::U8), TensorKind::Int);
/// assert_eq!(TensorKind::Float.to_string(), "float");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// Floating point, quantized included (`Param<Tensor<D>>`).
    Float,
    /// Signed or unsigned integers (`Param<Tensor<D, Int>>`).
    Int,
    /// Booleans, in any store (`Param<Tensor<D, Bool>>`).
    Bool,
}

impl TensorKind {
    /// The kind of tensor a dtype belongs to.
    #[must_use]
    pub fn of(dtype: burn::tensor::DType) -> Self {
        use burn::tensor::DType;
        match dtype {
            DType::F64
            | DType::F32
            | DType::Flex32
            | DType::F16
            | DType::BF16
            | DType::QFloat(_) => Self::Float,
            DType::Bool(_) => Self::Bool,
            DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U64
            | DType::U32
            | DType::U16
            | DType::U8 => Self::Int,
        }
    }
}

impl std::fmt::Display for TensorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Float => "float",
            Self::Int => "int",
            Self::Bool => "bool",
        })
    }
}
