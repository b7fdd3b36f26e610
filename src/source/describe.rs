//! What a source says about itself, for tools (`bpk inspect` and `verify`) and programs that
//! take any format: the format, the files it spans, its metadata, what it references, and
//! facts in its own words, both as text lines and as named values.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::TensorSource;
use crate::format::TensorInfo;

/// A value of a [`Description`]'s fields (a number, a text, or a list of texts).
///
/// ```
/// use burnpack::source::Value;
/// assert_eq!(Value::from(3u64).to_string(), "3");
/// assert_eq!(Value::from(vec!["a".to_string(), "b".into()]).to_string(), "a, b");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Value {
    /// A number.
    Number(u64),
    /// A text.
    Text(String),
    /// A list of texts.
    List(Vec<String>),
    /// Nothing (a value the format may have and this file has not).
    None,
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Self::Number(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(v.to_string())
    }
}

impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Self {
        Self::List(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::None, Into::into)
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Text(t) => f.write_str(t),
            Self::List(items) => f.write_str(&items.join(", ")),
            Self::None => f.write_str("-"),
        }
    }
}

/// What a source's integrity checks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Checksums {
    /// A 64-bit checksum of every tensor (and of the header and metadata): burnpack.
    PerTensor,
    /// A zip archive's CRC-32 of every member: each storage and the pickle of a `torch.save`
    /// file, each array of an `.npz`.
    ZipCrc32,
    /// None: the contents cannot be verified.
    #[default]
    None,
}

/// What a source says about itself (see [`DescribedSource::describe`]).
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::DescribedSource;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
///     .into_bytes()
///     .unwrap();
/// let about = Reader::from_bytes(pack).unwrap().describe();
/// assert_eq!(about.format, "burnpack");
/// assert!(about.summary.starts_with("burnpack v1"));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Description {
    /// The format's short name: `burnpack`, `safetensors`, `pytorch`, `burn-record`.
    pub format: &'static str,
    /// One line of what the file is (`burnpack v1, 2.0 MiB (2097408 bytes)`,
    /// `PyTorch torch.save file (Zip)`...), without the path.
    pub summary: String,
    /// What a verification found valid when it opened the source (`structure valid`,
    /// `3 shards valid`...).
    pub valid: String,
    /// The files read, when the source spans several (shards).
    pub shards: Vec<PathBuf>,
    /// String metadata.
    pub metadata: BTreeMap<String, String>,
    /// Scalars, as text.
    pub scalars: Vec<(String, String)>,
    /// Facts as text lines, in the source's own words (`state dict: under 'model'`).
    pub lines: Vec<String>,
    /// The same facts (and more) as named values, for JSON.
    pub fields: Vec<(&'static str, Value)>,
    /// What a verification should warn of without failing.
    pub warnings: Vec<String>,
    /// Notes for the reader (`not read: ...`), printed by inspect and verify.
    pub notes: Vec<String>,
    /// The integrity checks the format has.
    pub checksums: Checksums,
    /// What a verification says when there are no checksums (`no checksums in safetensors
    /// (contents unverified)`).
    pub unverified: String,
    /// The heading (and JSON key) of the per-tensor column [`DescribedSource::column`] fills.
    pub column: Option<&'static str>,
}

/// A [`TensorSource`] that describes itself: what every source opened through the container
/// registry (`burnpack::interop::open_any`) is, so that a tool shows and checks any format
/// without knowing it.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::DescribedSource;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
///     .into_bytes()
///     .unwrap();
/// let source: Box<dyn DescribedSource> = Box::new(Reader::from_bytes(pack).unwrap());
/// assert_eq!(source.as_tensor_source().tensors().len(), 1);
/// assert!(source.unusable().is_none());
/// ```
pub trait DescribedSource: TensorSource + AsTensorSource + Send + Sync {
    /// What the source is.
    fn describe(&self) -> Description;

    /// The value of [`Description::column`] for one tensor (its shard, how it loads...): by
    /// default its parameter id.
    fn column(&self, info: &TensorInfo) -> Option<String> {
        info.param_id().map(|id| id.to_string())
    }

    /// Why this source, though it opened, holds nothing a load or a conversion could use (a
    /// Burn record without a tensor); `None` when it is usable.
    fn unusable(&self) -> Option<String> {
        None
    }

    /// The source as a whole pack (scalars, metadata, parameter ids, checksums), when it is
    /// one.
    fn as_pack(&self) -> Option<&dyn super::tensor_source::PackSource> {
        None
    }

    /// The string metadata of a source of another format as a conversion into a pack carries
    /// it (before the reserved keys are moved aside, see
    /// [`Writer::streaming`](crate::write::Writer::streaming)): by default its
    /// [`Description::metadata`]; a format whose description abridges values (GGUF's long
    /// arrays) gives them whole here. Not asked of a pack, which is copied as it is.
    ///
    /// ```
    /// use burnpack::read::Reader;
    /// use burnpack::source::DescribedSource;
    /// let pack = burnpack::write::Writer::new(vec![]).metadata("k", "v").into_bytes().unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// assert!(reader.carried_metadata().contains(&("k".to_string(), "v".to_string())));
    /// ```
    fn carried_metadata(&self) -> Vec<(String, String)> {
        self.describe().metadata.into_iter().collect()
    }
}

impl std::fmt::Debug for dyn DescribedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DescribedSource")
            .field("format", &self.describe().format)
            .field("file", &self.file())
            .field("tensors", &self.tensors().len())
            .finish()
    }
}

/// A source as a plain [`TensorSource`] (every `TensorSource + Sync` is one): how a
/// `dyn DescribedSource` is handed to the module loader.
pub trait AsTensorSource {
    /// The source as a plain [`TensorSource`].
    fn as_tensor_source(&self) -> &(dyn TensorSource + Sync);
}

impl<T: TensorSource + Sync> AsTensorSource for T {
    fn as_tensor_source(&self) -> &(dyn TensorSource + Sync) {
        self
    }
}

/// A size as people read it: `512 B`, `1.5 KiB`, `2.0 MiB`.
///
/// ```
/// assert_eq!(burnpack::source::human_bytes(3 << 20), "3.0 MiB");
/// assert_eq!(burnpack::source::human_bytes(12), "12 B");
/// ```
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)] // one decimal shown
    let value = bytes as f64;
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", value / 1_048_576.0)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", value / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
