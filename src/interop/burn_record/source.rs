//! [`LegacySource`]: opening a record (mapped, decompressed or decoded), its tensors' table
//! and reading them as a [`TensorSource`].

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::AtomicU64;

use burn::tensor::{AllocationProperty, Bytes};

use super::compact::{append_aligned, compact};
use super::dtype::tensor_dtype;
use super::node::{self, Found, Payload};
use super::walk::Walk;
use super::{METADATA_PREFIX, RecordFormat, RecordMetadata, param_id, record_metadata};
use crate::format::{Limits, TensorInfo};
use crate::interop::AsOpenOptions;
use crate::source::data::Source;
use crate::source::from_table;
use crate::source::{
    CopyReason, Description, OpenOptions, ReadError, SourceError, SourceTable, TableBuilder,
    TensorSource,
};
use crate::write::Writer;

/// A Burn 0.14-0.21 record file as a [`TensorSource`].
///
/// A gzipped record is decompressed (bounded by [`Limits::max_inflation`]) with ordinary
/// reads. An uncompressed one (`.mpk`, `.json`) is mapped and parsed through its mapping: it
/// must not be truncated or rewritten while the source lives (as for
/// [`Reader::open`](crate::read::Reader::open)); if another process truncates it meanwhile, a
/// read past its new end faults (`SIGBUS`), as any mapped read does.
///
/// ```no_run
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Device;
/// use burnpack::interop::burn_record::LegacySource;
/// use burnpack::module::{LoadOptions, PackModule};
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
    pub(super) file: String,
    pub(super) format: RecordFormat,
    pub(super) metadata: RecordMetadata,
    /// `metadata` as string entries (`burn.record.version`...), what a conversion keeps.
    pub(super) entries: BTreeMap<String, String>,
    /// The mapped file, the decompressed file, or (JSON) the decoded bytes of every tensor.
    pub(super) data: Source,
    /// For a mapped file, the file read with positional reads: a tensor whose bytes are not
    /// aligned in the mapping is read from it into a buffer of its own, so that the mapping's
    /// pages are not also made resident (peak memory stays the model's size).
    pub(super) unaligned: Option<Source>,
    /// Every tensor, sorted by name.
    pub(super) table: SourceTable<()>,
    /// Numbers of the record by path (an optimizer's step count, a scheduler's state).
    pub(super) leaves: Vec<(String, node::Leaf)>,
    /// Whether the tensors were decoded into memory of their own (JSON, or `MessagePack`
    /// arrays of numbers) rather than read in place.
    pub(super) decoded: bool,
}

impl std::fmt::Debug for LegacySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt_source(f, "LegacySource", 1)
    }
}

impl LegacySource {
    /// Opens a record with the default [`OpenOptions`], its format told by its content, not
    /// its name (as the registry tells it): gzip or not, then JSON (a `{`) or named
    /// `MessagePack`; a bincode record (which does not describe itself) is said to be one.
    ///
    /// # Errors
    /// See [`open_with`](Self::open_with).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::new())
    }

    /// [`open`](Self::open) with options: nesting deeper than `limits.max_cbor_depth`, more
    /// tensors than `limits.max_tensor_count`, a tensor over `limits.max_tensor_size` and a
    /// decompressed size over `limits.max_file_size` are refused. A `&Limits` is still taken
    /// for one release (deprecated: pass `&OpenOptions::new().limits(limits)`).
    ///
    /// ```
    /// use burnpack::interop::burn_record::LegacySource;
    /// use burnpack::source::OpenOptions;
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("weights");
    /// std::fs::write(&path, br#"{"a": 1}"#).unwrap();
    /// let err = LegacySource::open_with(&path, &OpenOptions::new()).unwrap_err();
    /// assert!(err.to_string().contains("no BurnRecord metadata"));
    /// ```
    ///
    /// # Errors
    /// [`SourceError::Io`] when the file cannot be read, [`SourceError::Bincode`] for a bincode
    /// record, [`SourceError::Invalid`] when it is no record, [`SourceError::Tensor`] naming a
    /// tensor whose bytes, shape or dtype do not agree, or whose dtype Burn 0.22 does not have.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: &(impl AsOpenOptions + ?Sized),
    ) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let file = crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?;
        Self::open_file(path, file, &options.open_options())
    }

    /// A record from its file, already opened (by the registry, which then opens nothing
    /// again), its format told by its content.
    pub(crate) fn open_file(
        path: &Path,
        file: std::fs::File,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let mut head = [0u8; 2];
        let gzip = crate::platform::read_exact_at(&file, &mut head, 0).is_ok() && head == GZIP;
        let input = Self::read_file(path, file, gzip, &options.limits)?;
        let format = RecordFormat::of_content(gzip, input.bytes());
        Self::from_input(path, input, format, &options.limits)
    }

    /// A record in memory (a `.mpk`, `.mpk.gz`, `.json` or `.json.gz` file's bytes), its
    /// format told by its content. A `&Limits` is still taken for one release (deprecated).
    ///
    /// ```
    /// use burnpack::interop::burn_record::LegacySource;
    /// use burnpack::source::OpenOptions;
    /// let bytes = burn::tensor::Bytes::from_bytes_vec(b"hello".to_vec());
    /// let err = LegacySource::from_bytes(bytes, &OpenOptions::new()).unwrap_err();
    /// assert!(err.to_string().starts_with("<memory>: not a valid Burn record"));
    /// ```
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with), naming `"<memory>"`.
    pub fn from_bytes(
        bytes: Bytes,
        options: &(impl AsOpenOptions + ?Sized),
    ) -> Result<Self, SourceError> {
        let options = options.open_options();
        let limits = &options.limits;
        let path = Path::new("<memory>");
        let gzip = bytes.starts_with(&GZIP);
        crate::source::data::within_file_size(path, bytes.len() as u64, limits)?;
        let input = if gzip {
            Input::Owned(inflate(path, &bytes[..], bytes.len() as u64, limits)?)
        } else {
            Input::Mapped(crate::source::data::view_capable(bytes), None)
        };
        let format = RecordFormat::of_content(gzip, input.bytes());
        Self::from_input(path, input, format, limits)
    }

    /// The file's bytes: decompressed (bounded) or mapped.
    fn read_file(
        path: &Path,
        file: std::fs::File,
        gzip: bool,
        limits: &Limits,
    ) -> Result<Input, SourceError> {
        let io = |action| SourceError::io(path, action);
        let (file, len) = crate::source::data::opened_within_limits(path, Some(file), limits)?;
        if gzip {
            return Ok(Input::Owned(inflate(
                path,
                std::io::BufReader::new(file),
                len,
                limits,
            )?));
        }
        // As for packs, the file must not be truncated or rewritten while it is mapped.
        let mapping = crate::source::data::map_file(&file).map_err(io("map"))?;
        // The walk touches only the record's structure: no readahead of the tensor bytes
        // around each of its pages (which would read the whole file before the load starts,
        // one fault at a time); the load reads them, ahead, on every core.
        crate::platform::advise_random(&mapping, true);
        Ok(Input::Mapped(mapping, Some(file)))
    }

    fn from_input(
        path: &Path,
        input: Input,
        format: RecordFormat,
        limits: &Limits,
    ) -> Result<Self, SourceError> {
        let invalid = invalid(path);
        let bytes = input.bytes();
        if bytes.first() == Some(&b'\0') || bytes.is_empty() {
            return Err(invalid("empty, or starts with a zero byte".into()));
        }
        // A record is a map: a JSON object, or a MessagePack map. A gzip file holding anything
        // else (a compressed safetensors file) is said to be so, not parsed as a record.
        let map = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
            || matches!(bytes[0], 0x80..=0x8f | 0xde | 0xdf);
        if super::bincode::fits_record(bytes) {
            return Err(SourceError::Bincode { path: path.into() });
        }
        if !map {
            let start = bytes[..bytes.len().min(16)].escape_ascii();
            return Err(invalid(if format.is_gzip() {
                format!(
                    "the gzip stream holds no record (a record is a map; it starts with \"{start}\")"
                )
            } else {
                format!(
                    "a record is a JSON object or a MessagePack map, and this starts with \
                     \"{start}\" (`bpk inspect` names the format of any file bpk reads)"
                )
            }));
        }
        // The walk faults in single pages of the structure between the tensors; those nobody
        // had cached are dropped after it, so that the load's reads find the tensors' bytes
        // whole (see `platform::CacheProbe`).
        #[cfg(target_os = "linux")]
        let probe = match &input {
            Input::Mapped(_, Some(file)) => crate::platform::CacheProbe::new(file)
                .and_then(|probe| Some((probe.residency()?, probe, file))),
            _ => None,
        };
        let mut walk = Walk::new(bytes, limits.max_cbor_depth, limits.max_tensor_count);
        let root = if format.is_json() {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let root = walk.record(&mut de).map_err(|e| invalid(e.to_string()))?;
            de.end().map_err(|e| invalid(e.to_string()))?;
            root
        } else {
            let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
            let root = walk.record(&mut de).map_err(|e| invalid(e.to_string()))?;
            // Bytes past the record would be read by nobody (and could be another record):
            // the record's end found from its markers and lengths alone (no tensor byte is
            // read, so a mapped file is not paged in here).
            let end = super::msgpack_end::value_end(bytes).map_err(&invalid)?;
            let rest = bytes.len() - end;
            if rest > 0 {
                return Err(invalid(format!(
                    "{rest} bytes after the record, which nothing reads"
                )));
            }
            root
        };
        let metadata = record_metadata(&root).ok_or_else(|| {
            invalid(format!(
                "no BurnRecord metadata (float, int, format, version, settings) at the top: \
                 not a file of {}",
                format.recorder()
            ))
        })?;
        crate::platform::advise_random(bytes, false);
        #[cfg(target_os = "linux")]
        if let Some((before, probe, file)) = probe {
            probe.drop_cached_since(file, &before, Some(bytes));
        }
        let found = std::mem::take(&mut walk.found);
        let leaves = std::mem::take(&mut walk.leaves);
        drop(walk);
        let (data, unaligned, table, decoded) = Self::table(path, input, format, found, limits)?;
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
            table,
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
    ) -> Result<(Source, Option<Source>, SourceTable<()>, bool), SourceError> {
        let tensor_error = |tensor: &str, reason: String| SourceError::Tensor {
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
        let mut tensors = TableBuilder::new(path, limits);
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
            tensors.push(info, ())?;
        }
        let tensors = tensors.finish(|()| "in the record".into())?;
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
                file.map(|file| Source::Buffered(file, AtomicU64::new(0))),
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

/// What a record is read from: the mapped file (and the file, for unaligned tensors), or the
/// decompressed file in memory of this source's own.
enum Input {
    /// The mapped file (or bytes in memory, with no file).
    Mapped(Bytes, Option<std::fs::File>),
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

impl TensorSource for LegacySource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        self.table.place(info)?;
        let (source, window_of_file) = match &self.unaligned {
            Some(file) if self.data.tensor_copy_reason(info).is_some() => (file, false),
            unaligned => (&self.data, unaligned.is_some()),
        };
        let bytes = source.read_tensor(&self.file, info)?;
        // A window of a mapped file is read in now, with the kernel's readahead through the
        // mapping (`MADV_POPULATE_READ`): the load's workers read the tensors in its order,
        // windows and copies alike, so a cold load reads the file in one stream and returns
        // with every byte in memory. Cold, 512 MiB: asking the kernel for every tensor at once
        // (`WILLNEED`) took 1.5x one pass of reads, the windows read ahead by a thread of their
        // own 1.3x, this 1.2x (docs/benchmarks.md). A file cut by then is an error here rather
        // than a `SIGBUS` at the tensor's first use.
        #[cfg(not(target_os = "linux"))]
        let _ = window_of_file;
        #[cfg(target_os = "linux")]
        if window_of_file && let Some(Err(e)) = crate::platform::populate(&bytes, 0..bytes.len()) {
            let cut = std::io::Error::new(
                e.kind(),
                format!(
                    "its pages could not be read through the mapping (was the file cut or \
                     changed while open?): {e}"
                ),
            );
            return Err(ReadError::reading(&self.file, info.name(), &cut));
        }
        crate::source::data::checked_bools(&self.file, info, bytes, |_| Ok(false))
    }

    fn shared(&self) -> Option<&(dyn TensorSource + Sync)> {
        Some(self)
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        self.table.place(info).ok()?;
        if self.decoded {
            let format = if self.format.is_json() {
                "JSON"
            } else {
                "MessagePack arrays"
            };
            return Some(CopyReason::Decoded { format });
        }
        self.data.tensor_copy_reason(info)
    }
}

/// The first bytes of a gzip stream.
pub(super) const GZIP: [u8; 2] = [0x1f, 0x8b];

/// `reason` that `path` is not a valid record, as an error.
fn invalid(path: &Path) -> impl Fn(String) -> SourceError {
    let path = path.to_path_buf();
    move |reason| SourceError::Invalid {
        path: path.clone(),
        reason: format!("not a valid Burn record: {reason}"),
    }
}

/// Decompresses a gzip stream of `len` bytes, grown as data comes, up to the limit (a small
/// bomb cannot ask for more): the smaller of the file-size limit and `max_inflation` times the
/// compressed size (plus 1 MiB).
fn inflate(
    path: &Path,
    compressed: impl Read,
    len: u64,
    limits: &Limits,
) -> Result<Vec<u8>, SourceError> {
    let inflated = len
        .saturating_mul(limits.max_inflation)
        .saturating_add(1 << 20);
    let most = limits.max_file_size.min(inflated);
    let mut out = Vec::new();
    let mut reader = flate2::read::MultiGzDecoder::new(compressed).take(most.saturating_add(1));
    reader.read_to_end(&mut out).map_err(|e| match e.kind() {
        // Cut short: the stream ends before its end.
        std::io::ErrorKind::UnexpectedEof => SourceError::Truncated {
            path: path.to_path_buf(),
            reason: format!("its gzip stream is cut short: {e}"),
        },
        // A gzip header that does not parse: not a stream to read.
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
            if e.to_string().contains("header") =>
        {
            invalid(path)(format!("its gzip header is invalid: {e}"))
        }
        // The compressed data does not decode, or does not match the stream's own CRC-32:
        // read, and found damaged.
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
            SourceError::Damaged {
                path: path.to_path_buf(),
                tensor: None,
                reason: format!("its gzip stream is damaged: {e}"),
            }
        }
        _ => SourceError::io(path, "decompress")(e),
    })?;
    if out.len() as u64 > most {
        return Err(invalid(path)(if most == limits.max_file_size {
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
    Ok(out)
}

impl crate::source::DescribedSource for LegacySource {
    fn describe(&self) -> Description {
        let meta = &self.metadata;
        let recorder = self.format.recorder();
        Description {
            format: "burn-record",
            summary: format!("Burn {} record ({recorder})", meta.version),
            valid: format!("Burn {} record valid", meta.version),
            metadata: self.entries.clone(),
            lines: vec![format!("precision: float {}, int {}", meta.float, meta.int)],
            fields: vec![
                ("format", format!("{:?}", self.format).into()),
                ("recorder", recorder.into()),
                ("burn_version", meta.version.as_str().into()),
                ("float", meta.float.as_str().into()),
                ("int", meta.int.as_str().into()),
            ],
            unverified: "no checksums in Burn records (contents unverified)".into(),
            column: Some("param id"),
            ..Description::default()
        }
    }

    /// A record without a tensor: nothing to load (a bare scheduler record, or tensors this
    /// reader did not find), never a silent success.
    fn unusable(&self) -> Option<String> {
        self.table.tensors().is_empty().then(|| {
            format!(
                "{}: no tensors found in the record (a scheduler's or an empty optimizer's \
                 record holds none: `bpk migrate` converts those with their checkpoint)",
                self.file
            )
        })
    }
}
