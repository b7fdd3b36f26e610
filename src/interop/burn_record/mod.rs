//! Records of Burn 0.14 to 0.21 (which Burn 0.22 can no longer read) as a [`TensorSource`]:
//! the files of `NamedMpkFileRecorder` (`.mpk`, Burn's default), `NamedMpkGzFileRecorder`
//! (`.mpk.gz`), `PrettyJsonFileRecorder` (`.json`) and `JsonGzFileRecorder` (`.json.gz`).
//!
//! Such a file is `BurnRecord { metadata, item }` serialized with field names: the item is the
//! module's record tree (struct fields, `Vec` items, enum variants, `Option`s), each parameter
//! a `ParamSerde { id, param }` whose tensor is a `TensorData { bytes, shape, dtype }`. Every
//! tensor comes out under the dotted path Burn 0.22 gives the same module's parameter, with its
//! `ParamId`, so [`PackModule::load_from_source`](crate::module::PackModule::load_from_source)
//! loads a Burn 0.21 model into the same model under Burn 0.22 in one call, with every
//! [`LoadOptions`](crate::LoadOptions).
//!
//! `MessagePack` is decoded with `rmp-serde` over the mapped file: tensor bytes are windows of
//! the mapping where aligned for their element type, copied otherwise (the load report says
//! which). A `.gz` file is decompressed into memory once, and its tensors are windows of that
//! buffer. JSON stores bytes as numbers: they are decoded when the file is opened
//! ([`CopyReason::Decoded`]). Bincode records (`.bin`, `.bin.gz`) do not describe themselves
//! (no field names, no lengths) and are refused with an explanation.

mod train;
mod walk;

#[cfg(feature = "optim")]
pub use train::import_legacy_burn_train;
pub use train::{SchedulerKind, burn_train_epochs};

use std::io::Read;
use std::path::{Path, PathBuf};

use burn::tensor::{AllocationProperty, BoolStore, Bytes, DType};

use std::collections::BTreeMap;

use crate::format::{Limits, TensorInfo, byte_len, element_align};
use std::sync::atomic::AtomicU64;

use crate::read::source::Source;
use crate::read::{CopyReason, ReadError, TensorSource};
use crate::write::Writer;
use walk::{Found, Node, Payload, Walk};

/// An error opening a Burn 0.14-0.21 record, naming the file (and the tensor's path where
/// there is one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LegacyError {
    /// The file could not be read.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record this source reads, or is damaged.
    #[error("{path}: not a valid Burn record: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A tensor of the record is not one Burn 0.22 can hold as stored.
    #[error("{path}: tensor '{tensor}': {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor's path in the record.
        tensor: String,
        /// What was wrong.
        reason: String,
    },
    /// A bincode record (`BinFileRecorder`, `BinGzFileRecorder`).
    #[error(
        "{path}: a bincode record (BinFileRecorder / BinGzFileRecorder) does not describe itself \
         (no field names, no lengths), so it cannot be read without the Burn 0.21 module type \
         that wrote it: load it with that module under Burn 0.21 and save it with \
         NamedMpkFileRecorder (or burn-store's BurnpackStore), then open that file here"
    )]
    Bincode {
        /// The file.
        path: PathBuf,
    },
}

/// The record formats of Burn 0.14-0.21 that describe themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFormat {
    /// `NamedMpkFileRecorder` (`.mpk`): `MessagePack` with field names.
    NamedMpk,
    /// `NamedMpkGzFileRecorder` (`.mpk.gz`).
    NamedMpkGz,
    /// `PrettyJsonFileRecorder` (`.json`).
    Json,
    /// `JsonGzFileRecorder` (`.json.gz`).
    JsonGz,
}

impl RecordFormat {
    /// The format a file name's ending says, if it is one of these.
    ///
    /// ```
    /// use burnpack::interop::burn_record::RecordFormat;
    /// assert_eq!(RecordFormat::from_path("model.mpk.gz"), Some(RecordFormat::NamedMpkGz));
    /// assert_eq!(RecordFormat::from_path("model.bpk"), None);
    /// ```
    #[must_use]
    pub fn from_path(path: impl AsRef<Path>) -> Option<Self> {
        let name = path.as_ref().file_name()?.to_str()?.to_ascii_lowercase();
        [
            (".mpk.gz", Self::NamedMpkGz),
            (".json.gz", Self::JsonGz),
            (".mpk", Self::NamedMpk),
            (".json", Self::Json),
        ]
        .into_iter()
        .find_map(|(ending, format)| name.ends_with(ending).then_some(format))
    }

    fn is_gzip(self) -> bool {
        matches!(self, Self::NamedMpkGz | Self::JsonGz)
    }

    fn is_json(self) -> bool {
        matches!(self, Self::Json | Self::JsonGz)
    }

    /// The recorder that writes this format, as Burn names it.
    #[must_use]
    pub fn recorder(self) -> &'static str {
        match self {
            Self::NamedMpk => "NamedMpkFileRecorder",
            Self::NamedMpkGz => "NamedMpkGzFileRecorder",
            Self::Json => "PrettyJsonFileRecorder",
            Self::JsonGz => "JsonGzFileRecorder",
        }
    }
}

/// The `metadata` of a Burn record: the element types and the Burn version that wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The float element type of the precision settings (`"f32"`, `"f16"`...).
    pub float: String,
    /// The int element type of the precision settings.
    pub int: String,
    /// The recorder's format name (`"NamedMpk"`...).
    pub format: String,
    /// The Burn version that wrote the record (`"0.21.0"`).
    pub version: String,
    /// The precision settings' type, as Burn printed it.
    pub settings: String,
}

/// A Burn 0.14-0.21 record file as a [`TensorSource`].
///
/// ```no_run
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Device;
/// use burnpack::interop::burn_record::LegacySource;
/// use burnpack::{LoadOptions, PackModule};
///
/// #[derive(Module, Debug)]
/// struct Model { fc: Linear }
///
/// let device = Device::flex();
/// // A file that Burn 0.21's `NamedMpkGzFileRecorder` wrote.
/// let source = LegacySource::open("model.mpk.gz").unwrap();
/// println!("written by Burn {}", source.record_metadata().version);
/// let model = Model { fc: LinearConfig::new(3, 4).init(&device) }
///     .load_from_source(&source, &LoadOptions::new())
///     .unwrap();
/// ```
pub struct LegacySource {
    file: String,
    format: RecordFormat,
    metadata: RecordMetadata,
    /// `metadata` as string entries (`burn.record.version`...), what a conversion keeps.
    entries: BTreeMap<String, String>,
    /// The mapped file, the decompressed file, or (JSON) the decoded bytes of every tensor.
    data: Source,
    /// For a mapped file, the file read with positional reads: a tensor whose bytes are not
    /// aligned in the mapping is read from it into a buffer of its own, so that the mapping's
    /// pages are not also made resident (peak memory stays the model's size).
    unaligned: Option<Source>,
    /// Sorted by name.
    tensors: Vec<TensorInfo>,
    /// Numbers of the record by path (an optimizer's step count, a scheduler's state).
    leaves: Vec<(String, walk::Leaf)>,
    /// Whether the tensors were decoded into memory of their own (JSON, or `MessagePack`
    /// arrays of numbers) rather than read in place.
    decoded: bool,
}

impl std::fmt::Debug for LegacySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySource")
            .field("file", &self.file)
            .field("format", &self.format)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

/// Decoded JSON tensors are laid out at offsets that are multiples of this (every element
/// type's alignment), so each is a window of one buffer.
const DECODED_ALIGN: usize = 64;

impl LegacySource {
    /// Opens a record, its format told by the file name (`.mpk`, `.mpk.gz`, `.json`,
    /// `.json.gz`), with the default [`Limits`].
    ///
    /// # Errors
    /// See [`open_with`](Self::open_with).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LegacyError> {
        let path = path.as_ref();
        let format = RecordFormat::from_path(path).ok_or_else(|| {
            let name = path.display().to_string().to_ascii_lowercase();
            let bincode = [".bin", ".bin.gz"].iter().any(|ext| name.ends_with(ext));
            if bincode {
                LegacyError::Bincode {
                    path: path.to_path_buf(),
                }
            } else {
                LegacyError::Invalid {
                    path: path.to_path_buf(),
                    reason: "the file name does not end in .mpk, .mpk.gz, .json or .json.gz \
                             (name the format with LegacySource::open_with)"
                        .into(),
                }
            }
        })?;
        Self::open_with(path, format, &Limits::default())
    }

    /// Opens a record of `format`. Nesting deeper than `limits.max_cbor_depth`, more tensors
    /// than `limits.max_tensor_count`, a tensor over `limits.max_tensor_size` and a
    /// decompressed size over `limits.max_file_size` are refused.
    ///
    /// # Errors
    /// [`LegacyError::Io`] when the file cannot be read, [`LegacyError::Invalid`] when it is
    /// not a record of `format`, [`LegacyError::Tensor`] naming a tensor whose bytes, shape
    /// or dtype do not agree, or whose dtype Burn 0.22 does not have.
    pub fn open_with(
        path: impl AsRef<Path>,
        format: RecordFormat,
        limits: &Limits,
    ) -> Result<Self, LegacyError> {
        let path = path.as_ref();
        let io = |action: &'static str| {
            move |source| LegacyError::Io {
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let invalid = |reason: String| LegacyError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let file = crate::platform::open_regular(path).map_err(io("open"))?;
        let len = file.metadata().map_err(io("stat"))?.len();
        if len > limits.max_file_size {
            return Err(invalid(format!(
                "{len} bytes is over the file-size limit ({} bytes)",
                limits.max_file_size
            )));
        }
        let input = if format.is_gzip() {
            // Grown as data comes, up to the limit: a small bomb cannot ask for more. The
            // limit is the smaller of the file-size limit and `max_inflation` times the
            // compressed size (plus 1 MiB).
            let inflated = len
                .saturating_mul(limits.max_inflation)
                .saturating_add(1 << 20);
            let most = limits.max_file_size.min(inflated);
            let mut out = Vec::new();
            let mut reader = flate2::read::GzDecoder::new(std::io::BufReader::new(file))
                .take(most.saturating_add(1));
            reader.read_to_end(&mut out).map_err(io("decompress"))?;
            if out.len() as u64 > most {
                return Err(invalid(if most == limits.max_file_size {
                    format!(
                        "decompresses to more than the file-size limit ({} bytes)",
                        limits.max_file_size
                    )
                } else {
                    format!(
                        "decompresses to more than {most} bytes, {} times its {len} bytes \
                         plus 1 MiB (Limits::max_inflation; raise it for a record you trust)",
                        limits.max_inflation
                    )
                }));
            }
            Input::Owned(out)
        } else {
            // As for packs, the file must not be truncated or rewritten while it is mapped.
            let mapping = crate::read::source::map_file(&file).map_err(io("map"))?;
            Input::Mapped(mapping, file)
        };
        let bytes = input.bytes();
        if bytes.first() == Some(&b'\0') || bytes.is_empty() {
            return Err(invalid("empty, or starts with a zero byte".into()));
        }
        let mut walk = Walk::new(bytes, limits.max_cbor_depth, limits.max_tensor_count);
        let root = if format.is_json() {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let root = walk.record(&mut de).map_err(|e| invalid(e.to_string()))?;
            de.end().map_err(|e| invalid(e.to_string()))?;
            root
        } else {
            let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
            walk.record(&mut de).map_err(|e| invalid(e.to_string()))?
        };
        let metadata = record_metadata(&root).ok_or_else(|| {
            invalid(format!(
                "no BurnRecord metadata (float, int, format, version, settings) at the top: \
                 not a file of {}",
                format.recorder()
            ))
        })?;
        let found = std::mem::take(&mut walk.found);
        let leaves = std::mem::take(&mut walk.leaves);
        drop(walk);
        let (data, unaligned, tensors, decoded) = Self::table(path, input, format, found, limits)?;
        let entries = [
            ("version", &metadata.version),
            ("float", &metadata.float),
            ("int", &metadata.int),
            ("format", &metadata.format),
            ("settings", &metadata.settings),
        ]
        .into_iter()
        .map(|(key, value)| (format!("{METADATA_PREFIX}{key}"), value.clone()))
        .collect();
        Ok(Self {
            file: path.display().to_string(),
            format,
            metadata,
            entries,
            data,
            unaligned,
            tensors,
            leaves,
            decoded,
        })
    }

    /// The tensors' table and where their bytes are.
    #[allow(clippy::type_complexity)]
    fn table(
        path: &Path,
        input: Input,
        format: RecordFormat,
        mut found: Vec<Found>,
        limits: &Limits,
    ) -> Result<(Source, Option<Source>, Vec<TensorInfo>, bool), LegacyError> {
        let tensor_error = |tensor: &str, reason: String| LegacyError::Tensor {
            path: path.to_path_buf(),
            tensor: tensor.to_string(),
            reason,
        };
        // JSON's bytes are numbers; a MessagePack record whose bytes are arrays of numbers
        // rather than `bin` (an older writer's) is decoded the same way, every tensor of it.
        let decode = format.is_json()
            || found
                .iter()
                .any(|f| matches!(f.tensor.payload, Payload::Owned(_)));
        let mut decoded: Vec<u8> = Vec::new();
        // A decompressed file is this source's own memory: each tensor's bytes are moved down
        // to the 8-byte boundary at or below them (what lies in between is MessagePack heads,
        // already read), so every tensor is a window of it and nothing is copied again.
        let input = match input {
            Input::Owned(mut buffer) if !decode => {
                compact(&mut buffer, &mut found);
                Input::Owned(buffer)
            }
            other => other,
        };
        let mut tensors = Vec::with_capacity(found.len());
        for Found {
            path: name,
            id,
            tensor,
        } in found
        {
            let dtype = tensor_dtype(&tensor.dtype, &tensor.shape, tensor.len)
                .map_err(|reason| tensor_error(&name, reason))?;
            let shape: Vec<usize> = tensor
                .shape
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<Result<_, _>>()
                .map_err(|_| tensor_error(&name, "a dimension does not fit in memory".into()))?;
            let expected = byte_len(dtype, &tensor.shape);
            // (A quantized tensor's length was checked against its scheme above.)
            if !matches!(dtype, DType::QFloat(_)) && expected != Some(tensor.len as u64) {
                return Err(tensor_error(
                    &name,
                    format!(
                        "{} bytes for shape {shape:?} of {dtype:?} (expected {})",
                        tensor.len,
                        expected.map_or("more than fits".to_string(), |e| e.to_string())
                    ),
                ));
            }
            if tensor.len as u64 > limits.max_tensor_size {
                return Err(tensor_error(
                    &name,
                    format!("{} bytes is over the tensor-size limit", tensor.len),
                ));
            }
            let start = match tensor.payload {
                Payload::At(at) if !decode => at,
                Payload::At(at) => {
                    append_aligned(&mut decoded, &input.bytes()[at..at + tensor.len])
                }
                Payload::Owned(bytes) => append_aligned(&mut decoded, &bytes),
            };
            let mut info =
                TensorInfo::external(name, dtype, shape, start as u64, tensor.len as u64);
            if let Some(id) = id.as_deref().and_then(param_id) {
                info = info.with_param_id(id);
            }
            tensors.push(info);
        }
        tensors.sort_by(|a, b| a.name().cmp(b.name()));
        if let Some(pair) = tensors.windows(2).find(|w| w[0].name() == w[1].name()) {
            return Err(tensor_error(
                pair[0].name(),
                "two tensors with this path".into(),
            ));
        }
        if decode {
            // One buffer of every decoded tensor (the allocator aligns it for any element
            // type, and each tensor starts at a multiple of 64 in it; a window that is not
            // aligned is still copied on read).
            let data = Source::Memory(Bytes::from_shared(
                bytes::Bytes::from(decoded),
                AllocationProperty::Other,
            ));
            return Ok((data, None, tensors, true));
        }
        Ok(match input {
            Input::Mapped(mapping, file) => (
                Source::Memory(mapping),
                Some(Source::Buffered(file, AtomicU64::new(0))),
                tensors,
                false,
            ),
            Input::Owned(buffer) => (
                Source::Memory(Bytes::from_shared(
                    bytes::Bytes::from(buffer),
                    AllocationProperty::Other,
                )),
                None,
                tensors,
                false,
            ),
        })
    }

    /// The record's metadata: the Burn version and precision settings that wrote it.
    #[must_use]
    pub fn record_metadata(&self) -> &RecordMetadata {
        &self.metadata
    }

    /// The record's format.
    #[must_use]
    pub fn format(&self) -> RecordFormat {
        self.format
    }

    /// The record's metadata as string entries under [`METADATA_PREFIX`]
    /// (`burn.record.version`, `.float`, `.int`, `.format`, `.settings`): what
    /// [`to_writer`](Self::to_writer) keeps in the pack.
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.entries
    }

    /// A pack [`Writer`] of every tensor (names, dtypes, shapes, parameter ids) in the
    /// record's order, with the record's metadata kept as metadata entries: what
    /// `bpk convert old.mpk.gz new.bpk` writes. Tensors are windows of the source where it
    /// allows.
    ///
    /// # Errors
    /// A tensor's bytes could not be read.
    pub fn to_writer(&self) -> Result<Writer, ReadError> {
        let mut writer = Writer::from_source(self)?;
        for (key, value) in &self.entries {
            writer = writer.metadata(key.clone(), value.clone());
        }
        Ok(writer)
    }
}

/// The prefix of the metadata entries that keep a record's `BurnMetadata` in a pack
/// converted from it.
pub const METADATA_PREFIX: &str = "burn.record.";

/// What a record is read from: the mapped file (and the file, for unaligned tensors), or the
/// decompressed file in memory of this source's own.
enum Input {
    Mapped(Bytes, std::fs::File),
    Owned(Vec<u8>),
}

impl Input {
    fn bytes(&self) -> &[u8] {
        match self {
            Input::Mapped(mapping, _) => mapping,
            Input::Owned(buffer) => buffer,
        }
    }
}

/// Moves each tensor's bytes in `buffer` down to the 8-byte boundary at or below them, when
/// that stays clear of the previous tensor's bytes (between two tensors lie their `MessagePack`
/// heads, which the walk has read), and updates the offsets in `found`.
fn compact(buffer: &mut [u8], found: &mut [Found]) {
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_by_key(|&i| match found[i].tensor.payload {
        Payload::At(at) => at,
        Payload::Owned(_) => usize::MAX,
    });
    let mut previous_end = 0;
    for i in order {
        let len = found[i].tensor.len;
        let Payload::At(at) = &mut found[i].tensor.payload else {
            continue;
        };
        let to = *at & !7;
        if to >= previous_end && to != *at {
            buffer.copy_within(*at..*at + len, to);
            *at = to;
        }
        previous_end = *at + len;
    }
}

/// Appends `bytes` at the next multiple of [`DECODED_ALIGN`]; returns where.
fn append_aligned(out: &mut Vec<u8>, bytes: &[u8]) -> usize {
    let start = out.len().next_multiple_of(DECODED_ALIGN);
    out.resize(start, 0);
    out.extend_from_slice(bytes);
    start
}

/// `metadata` of the root map, if it has the fields of Burn's `BurnMetadata`.
fn record_metadata(root: &Node) -> Option<RecordMetadata> {
    let Node::Map(entries) = root else {
        return None;
    };
    let (_, Node::Map(meta)) = entries.iter().find(|(k, _)| k == "metadata")? else {
        return None;
    };
    entries.iter().find(|(k, _)| k == "item")?;
    let field = |name: &str| {
        meta.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_str())
            .map(str::to_string)
    };
    Some(RecordMetadata {
        float: field("float")?,
        int: field("int")?,
        format: field("format")?,
        version: field("version")?,
        settings: field("settings").unwrap_or_default(),
    })
}

/// A tensor's dtype as Burn 0.14-0.21 wrote it, quantized ones included (checked against the
/// tensor's `len` bytes: a quantized tensor's length follows from its scheme and shape).
fn tensor_dtype(node: &Node, shape: &[u64], len: usize) -> Result<DType, String> {
    if let Node::Map(entries) = node
        && let [(variant, Node::Map(fields))] = entries.as_slice()
        && variant == "QFloat"
    {
        return quantized(fields, shape, len).map(DType::QFloat);
    }
    dtype(node).ok_or_else(|| format!("dtype {node:?} is not one Burn 0.22 has"))
}

/// A quantized tensor's scheme: Burn 0.18-0.21's `QuantScheme { value, param, store, level,
/// mode }` as Burn 0.22's (`value`, `store`, `mode`, and a per-tensor or per-block scale level
/// of `param`'s dtype), checked against the tensor's byte length.
///
/// Both versions lay a quantized tensor out as its values, then its scales. Burn 0.21's ndarray backend (the one that writes records on the CPU) keeps
/// 8-bit values one byte each whatever the `store`, and its scales as `f32` whatever `param`
/// says: where the record's length is not what Burn 0.22 reads for the scheme as written, the
/// same bytes are read as `Native` (one byte a value) and/or `f32` scales, the first reading
/// whose length matches. Bytes that fit none (4- and 2-bit values one byte each, a scheme of
/// an older Burn) are an error, never a guess.
fn quantized(
    fields: &[(String, Node)],
    shape: &[u64],
    len: usize,
) -> Result<burn::tensor::quantization::QuantScheme, String> {
    use burn::tensor::quantization::{
        QuantMode, QuantScheme, QuantStore, QuantValue, ScaleDtype, quantized_data_len,
    };
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let text = |name: &str| field(name).and_then(Node::as_str);
    let refuse = |what: String| {
        format!(
            "a quantized tensor whose {what}: not a scheme Burn 0.22 reads (dequantize under the Burn that wrote it and save again)"
        )
    };
    let value = match text("value") {
        Some("Q8F") => QuantValue::Q8F,
        Some("Q8S") => QuantValue::Q8S,
        Some("E5M2") => QuantValue::E5M2,
        Some("E4M3") => QuantValue::E4M3,
        Some("Q4F") => QuantValue::Q4F,
        Some("Q4S") => QuantValue::Q4S,
        Some("E2M1") => QuantValue::E2M1,
        Some("Q2F") => QuantValue::Q2F,
        Some("Q2S") => QuantValue::Q2S,
        _ => return Err(refuse(format!("values are {:?}", field("value")))),
    };
    let mode = match text("mode") {
        Some("Symmetric") => QuantMode::Symmetric,
        _ => return Err(refuse(format!("mode is {:?}", field("mode")))),
    };
    let param = match text("param") {
        Some("F32") => ScaleDtype::F32,
        Some("F16") => ScaleDtype::F16,
        Some("BF16") => ScaleDtype::BF16,
        Some("UE8M0") => ScaleDtype::UE8M0,
        Some("UE4M3") => ScaleDtype::UE4M3,
        _ => return Err(refuse(format!("scales are {:?}", field("param")))),
    };
    let rank = shape.len();
    let store = match field("store") {
        Some(Node::Str(s)) if s == "Native" => QuantStore::Native,
        Some(Node::Map(e)) => match e.as_slice() {
            [(kind, Node::UInt(dim))] if (*dim as usize) < rank.max(1) => match kind.as_str() {
                "PackedU32" => QuantStore::PackedU32(*dim as usize),
                "PackedNative" => QuantStore::PackedNative(*dim as usize),
                _ => return Err(refuse(format!("store is {kind:?}"))),
            },
            _ => return Err(refuse(format!("store is {e:?}"))),
        },
        other => return Err(refuse(format!("store is {other:?}"))),
    };
    let block: Option<Vec<u8>> = match field("level") {
        Some(Node::Str(s)) if s == "Tensor" => None,
        Some(Node::Map(e)) => match e.as_slice() {
            [(kind, Node::Map(size))] if kind == "Block" => {
                Some(block_size(size).ok_or_else(|| refuse(format!("block size is {size:?}")))?)
            }
            _ => return Err(refuse(format!("level is {e:?}"))),
        },
        other => return Err(refuse(format!("level is {other:?}"))),
    };
    // Every element is at least 2 bits: more elements than 4 a byte cannot be this tensor's
    // (and the product below cannot overflow).
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if elements.is_none_or(|n| n > (len as u64).saturating_mul(4)) {
        return Err(format!(
            "{len} bytes cannot hold a quantized tensor of shape {shape:?}"
        ));
    }
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let scheme = |store: QuantStore, scale: ScaleDtype| {
        let scheme = QuantScheme::default()
            .with_value(value)
            .with_mode(mode)
            .with_store(store);
        match &block {
            // Burn 0.22's own default: no level stored, read as one f32 scale.
            None if scale == ScaleDtype::F32 => scheme,
            None => scheme.per_tensor(scale),
            Some(block) => scheme.per_block(block, scale),
        }
    };
    let readings = [
        scheme(store, param),
        scheme(QuantStore::Native, param),
        scheme(store, ScaleDtype::F32),
        scheme(QuantStore::Native, ScaleDtype::F32),
    ];
    let shape = burn::tensor::Shape::from(dims);
    // The values, then the scales (and a two-level scheme's per-tensor scale after them),
    // as `QuantizedBytes` lays them out.
    let stored_len = |s: &QuantScheme| quantized_data_len(s, &shape);
    let expected = stored_len(&readings[0]);
    readings
        .into_iter()
        .find(|s| stored_len(s) == len)
        .ok_or_else(|| {
            format!(
                "{len} bytes for a quantized tensor of shape {:?} (Burn 0.22 reads {expected} \
             for its scheme, {value:?} values)",
                shape.as_slice()
            )
        })
}

/// A `BlockSize { storage, len }` as serde wrote it: at most 5 dimensions, none of them 0.
fn block_size(fields: &[(String, Node)]) -> Option<Vec<u8>> {
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let storage: Vec<u8> = match field("storage")? {
        Node::Bytes(walk::Payload::Owned(v), _) => v.clone(),
        _ => return None,
    };
    let Node::UInt(len) = field("len")? else {
        return None;
    };
    let dims = storage.get(..usize::try_from(*len).ok()?)?;
    (dims.len() <= 5 && !dims.is_empty() && dims.iter().all(|&d| d > 0)).then(|| dims.to_vec())
}

/// A dtype as serde wrote Burn 0.14-0.21's `DType`: a unit variant's name, or a one-entry
/// map for `Bool(store)` (Burn 0.21; earlier versions wrote `Bool` alone: native bytes).
fn dtype(node: &Node) -> Option<DType> {
    Some(match node {
        Node::Str(name) => match name.as_str() {
            "F64" => DType::F64,
            "F32" => DType::F32,
            "Flex32" => DType::Flex32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "I64" => DType::I64,
            "I32" => DType::I32,
            "I16" => DType::I16,
            "I8" => DType::I8,
            "U64" => DType::U64,
            "U32" => DType::U32,
            "U16" => DType::U16,
            "U8" => DType::U8,
            "Bool" => DType::Bool(BoolStore::Native),
            _ => return None,
        },
        Node::Map(entries) if entries.len() == 1 => match (entries[0].0.as_str(), &entries[0].1) {
            ("Bool", Node::Str(store)) => DType::Bool(match store.as_str() {
                "Native" => BoolStore::Native,
                "U8" => BoolStore::U8,
                "U32" => BoolStore::U32,
                _ => return None,
            }),

            _ => return None,
        },
        _ => return None,
    })
}

/// A `ParamId` as Burn 0.14-0.21 serialized it: the id's little-endian bytes in base32
/// (DNSSEC alphabet: `0-9a-v`, no padding), 8 bytes, or 6 in the oldest format. Ids of the
/// uuid era (before 0.14) were hashed by Burn with a per-build hasher and are not recovered.
fn param_id(text: &str) -> Option<u64> {
    let bytes = data_encoding::BASE32_DNSSEC.decode(text.as_bytes()).ok()?;
    if bytes.is_empty() || bytes.len() > 8 {
        return None;
    }
    let mut buffer = [0u8; 8];
    buffer[..bytes.len()].copy_from_slice(&bytes);
    Some(u64::from_le_bytes(buffer))
}

impl TensorSource for LegacySource {
    fn file(&self) -> &str {
        &self.file
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let align = element_align(info.dtype());
        let source = match &self.unaligned {
            Some(file) if self.data.copy_reason(info.offset(), align).is_some() => file,
            _ => &self.data,
        };
        source
            .read(info.offset(), info.len(), align)
            .map_err(|source| ReadError::Io {
                file: self.file.clone(),
                action: "read tensor data",
                source,
            })
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        if self.decoded {
            let format = if self.format.is_json() {
                "JSON"
            } else {
                "MessagePack arrays"
            };
            return Some(CopyReason::Decoded { format });
        }
        self.data
            .copy_reason(info.offset(), element_align(info.dtype()))
    }
}
