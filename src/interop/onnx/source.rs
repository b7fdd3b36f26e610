//! [`OnnxSource`]: an ONNX model's initializers as a [`TensorSource`].

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use burn::tensor::Bytes;
use prost::Message;

use super::model::{self, Model};
use super::proto::TensorHeader;
use super::types;
use super::wire::{Wire, fields, varints};
use crate::format::{TensorInfo, element_align};
use crate::source::data::{Source, aligned_words, map_file, zeroed_words};
use crate::source::{
    Checksums, CopyReason, Description, OpenOptions, ReadError, SourceError, SourceTable,
    TableBuilder, TensorSource, from_table, human_bytes,
};

/// An ONNX model's initializers (`graph.initializer`, and those of graphs nested in its
/// nodes' attributes) as a [`TensorSource`], names as stored.
///
/// The file is mapped and its `ModelProto` walked without decoding its nodes; each
/// initializer's `TensorProto` is decoded without its data, which stays in the mapping:
/// `raw_data` is a zero-copy window where it is aligned for its dtype (a copy, reported as
/// one, where it is not), the typed fields (`float_data`, `int32_data`, `int64_data`,
/// `double_data`, `uint64_data`) are decoded when read, and external data
/// (`data_location = EXTERNAL`) is a window of the mapping of the named file, which must lie
/// in the model's folder. `dims` is Burn's row-major shape.
///
/// ```
/// use burnpack::interop::onnx::OnnxSource;
/// use burnpack::source::TensorSource;
/// // ir_version 9, a graph with one FLOAT initializer "w" of dims [2], raw_data 8 bytes.
/// let tensor = [&[0x08, 2, 0x10, 1, 0x42, 1, b'w', 0x4a, 8][..], &[0, 0, 128, 63, 0, 0, 0, 64]].concat();
/// let graph = [&[0x2a, tensor.len() as u8][..], &tensor].concat();
/// let model = [&[0x08, 9, 0x3a, graph.len() as u8][..], &graph].concat();
/// let source = OnnxSource::from_bytes(burnpack::source::bytes_from_vec(model), &Default::default()).unwrap();
/// assert_eq!(source.tensors()[0].shape(), &[2]);
/// ```
pub struct OnnxSource {
    file: String,
    model: Model,
    data: Source,
    /// The external data files, by location as written in the model.
    external: Vec<(String, PathBuf, Source)>,
    table: SourceTable<Stored>,
}

/// Where a tensor's values are.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// `raw_data`, or a window of an external file (`Some(index)`).
    Raw(Option<usize>, u64),
    /// A typed field of the tensor message (absolute offset and length): decoded when read.
    Typed { message: (u64, usize), field: u32 },
    /// No elements.
    Empty,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Stored {
    data_type: i32,
    place: Place,
}

impl std::fmt::Debug for OnnxSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table
            .fmt_source(f, "OnnxSource", 1 + self.external.len())
    }
}

impl OnnxSource {
    /// Opens an ONNX model with the default [`Limits`](crate::format::Limits).
    ///
    /// # Errors
    /// [`SourceError`] naming the file, and the tensor where there is one.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// [`open`](Self::open) with options (the limits; `verify` reads the files rather than
    /// mapping them for the tensors' data).
    ///
    /// ```no_run
    /// use burnpack::interop::onnx::OnnxSource;
    /// let source = OnnxSource::open_with("model.onnx", &burnpack::source::OpenOptions::new())?;
    /// # Ok::<(), burnpack::source::SourceError>(())
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        Self::open_opened(path.as_ref(), None, options)
    }

    /// ONNX bytes in memory (a model without external data), with options.
    ///
    /// # Errors
    /// As [`open`](Self::open), naming `"<memory>"`.
    pub fn from_bytes(bytes: Bytes, options: &OpenOptions) -> Result<Self, SourceError> {
        let bytes = crate::source::data::view_capable(bytes);
        Self::build(
            Path::new("<memory>"),
            None,
            bytes.clone(),
            Source::Memory(bytes),
            options,
        )
    }

    pub(crate) fn open_opened(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let file = match file {
            Some(file) => file,
            None => crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?,
        };
        check_size(path, &file, options)?;
        let map = map_file(&file).map_err(SourceError::io(path, "map"))?;
        let data = if options.verify {
            crate::source::data::file_data(&file, true)
                .map_err(|(action, e)| SourceError::io(path, action)(e))?
        } else {
            Source::Memory(map.clone())
        };
        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::build(path, Some(&folder), map, data, options)
    }

    fn build(
        path: &Path,
        folder: Option<&Path>,
        map: Bytes,
        data: Source,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let invalid = SourceError::invalid(path);
        let model = model::read(&map, &options.limits).map_err(|e| invalid(e))?;
        if !model.has_graph {
            return Err(invalid(
                "no graph (a ModelProto without field 7): not an ONNX model".into(),
            ));
        }
        let mut rows = TableBuilder::new(path, &options.limits);
        let mut external: Vec<(String, PathBuf, Source)> = Vec::new();
        for (at, len, graph) in &model.initializers {
            let start = *at as usize;
            let message = &map[start..start + len];
            let (info, stored) = tensor(path, folder, message, *at, graph, &mut external, options)?;
            rows.push(info, stored)?;
        }
        let table = rows.finish(|_| String::new())?;
        Ok(Self {
            file: path.display().to_string(),
            model,
            data,
            external,
            table,
        })
    }

    /// The model's IR version.
    #[must_use]
    pub fn ir_version(&self) -> Option<i64> {
        self.model.ir_version
    }

    /// The operator sets the model imports: (domain, version), `""` the ONNX domain.
    #[must_use]
    pub fn opset_import(&self) -> &[(String, i64)] {
        &self.model.opset_import
    }

    /// The model's metadata: `ir_version`, `producer_name`, `producer_version`, `domain`,
    /// `model_version`, `doc_string` (abridged), `opset_import` (one entry per set), and each
    /// of `metadata_props` under its key.
    #[must_use]
    pub fn metadata(&self) -> Vec<(String, String)> {
        let m = &self.model;
        let mut out = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push((k.to_string(), v));
            }
        };
        put("ir_version", m.ir_version.map(|v| v.to_string()));
        put("producer_name", m.producer_name.clone());
        put("producer_version", m.producer_version.clone());
        put("domain", m.domain.clone());
        put("model_version", m.model_version.map(|v| v.to_string()));
        put("doc_string", m.doc_string.clone());
        for (domain, version) in &m.opset_import {
            let domain = if domain.is_empty() { "ai.onnx" } else { domain };
            out.push((format!("opset_import.{domain}"), version.to_string()));
        }
        out.extend(m.metadata_props.iter().cloned());
        out
    }

    /// The external data files the model names, resolved in its folder.
    #[must_use]
    pub fn external_files(&self) -> Vec<&Path> {
        self.external.iter().map(|(_, p, _)| p.as_path()).collect()
    }

    /// The stored type of `info`, and the external file holding it (`FLOAT in w.bin`), or
    /// the typed field decoded (`FLOAT from float_data`).
    fn data_type_of(&self, info: &TensorInfo) -> Option<String> {
        let stored = self.table.place(info).ok()?;
        let ty = types::name(stored.data_type);
        Some(match stored.place {
            Place::Raw(Some(i), _) => format!("{ty} in {}", self.external[i].0),
            Place::Typed { field, .. } => format!("{ty} from {}", types::field_name(field)),
            _ => ty,
        })
    }
}

fn check_size(
    path: &Path,
    file: &std::fs::File,
    options: &OpenOptions,
) -> Result<u64, SourceError> {
    let len = file
        .metadata()
        .map_err(SourceError::io(path, "stat"))?
        .len();
    if len > options.limits.max_file_size {
        return Err(SourceError::invalid(path)(format!(
            "{len} bytes, over the file-size limit of {}",
            options.limits.max_file_size
        )));
    }
    Ok(len)
}

/// One initializer's row: its header decoded, its values' place found and checked.
fn tensor(
    path: &Path,
    folder: Option<&Path>,
    message: &[u8],
    at: u64,
    graph: &str,
    external: &mut Vec<(String, PathBuf, Source)>,
    options: &OpenOptions,
) -> Result<(TensorInfo, Stored), SourceError> {
    let header = TensorHeader::decode(message).map_err(|e| {
        SourceError::invalid(path)(format!("the initializer at byte {at} of {graph}: {e}"))
    })?;
    let name = header.name.clone().unwrap_or_default();
    let err = |reason: String| SourceError::Tensor {
        path: path.to_path_buf(),
        tensor: name.clone(),
        reason,
    };
    if name.is_empty() {
        return Err(SourceError::invalid(path)(format!(
            "the initializer at byte {at} of {graph} has no name"
        )));
    }
    if header.segment.is_some() {
        return Err(err(
            "a segment of a tensor (TensorProto.segment), which this crate does not read".into(),
        ));
    }
    let data_type = header.data_type.unwrap_or(0);
    let dtype = types::burn_dtype(data_type).ok_or_else(|| {
        err(format!(
            "stored as ONNX {}, which has no Burn dtype",
            types::name(data_type)
        ))
    })?;
    if header.dims.len() > 64 {
        return Err(err(format!("{} dimensions", header.dims.len())));
    }
    let mut elements = 1u64;
    let mut shape = Vec::with_capacity(header.dims.len());
    for &d in &header.dims {
        let d = u64::try_from(d)
            .map_err(|_| err(format!("a negative dimension in {:?}", header.dims)))?;
        elements = elements
            .checked_mul(d)
            .ok_or_else(|| err(format!("dimensions {:?} overflow", header.dims)))?;
        shape.push(
            usize::try_from(d)
                .map_err(|_| err("a dimension past this platform's memory".into()))?,
        );
    }
    let bytes = elements
        .checked_mul(types::size(dtype))
        .ok_or_else(|| err(format!("dimensions {:?} overflow", header.dims)))?;
    if bytes > options.limits.max_tensor_size {
        return Err(err(format!(
            "{bytes} bytes, over the tensor-size limit of {}",
            options.limits.max_tensor_size
        )));
    }
    let found = model::data_fields(message, at).map_err(&err)?;
    let place = match header.data_location.unwrap_or(0) {
        0 => {
            if !header.external_data.is_empty() {
                return Err(err(
                    "external_data entries on a tensor whose data_location is DEFAULT".into(),
                ));
            }
            match (found.raw, found.typed) {
                (Some(_), Some((field, _))) => {
                    return Err(err(format!(
                        "values in both raw_data and {}",
                        types::field_name(field)
                    )));
                }
                (Some((start, len)), None) => {
                    if len != bytes {
                        return Err(err(format!(
                            "raw_data holds {len} bytes, but {} of shape {shape:?} needs {bytes}",
                            types::name(data_type)
                        )));
                    }
                    Place::Raw(None, start)
                }
                (None, Some((field, count))) => {
                    if Some(field) != types::typed_field(data_type) {
                        return Err(err(format!(
                            "{} values in {}, which does not hold that type",
                            types::name(data_type),
                            types::field_name(field)
                        )));
                    }
                    if count != elements {
                        return Err(err(format!(
                            "{} holds {count} values, but shape {shape:?} has {elements}",
                            types::field_name(field)
                        )));
                    }
                    Place::Typed {
                        message: (at, message.len()),
                        field,
                    }
                }
                (None, None) if elements == 0 => Place::Empty,
                (None, None) => {
                    return Err(err(format!(
                        "no values (no raw_data, no typed field) for {elements} elements"
                    )));
                }
            }
        }
        1 => {
            if found.raw.is_some() || found.typed.is_some() {
                return Err(err("values in the model as well as in external data".into()));
            }
            external_place(folder, &header, bytes, external, options).map_err(&err)?
        }
        other => {
            return Err(err(format!(
                "data_location {other}, which ONNX does not define"
            )));
        }
    };
    let offset = match place {
        Place::Raw(_, start) => start,
        Place::Typed { message, .. } => message.0,
        Place::Empty => 0,
    };
    let info = TensorInfo::external(name.clone(), dtype, shape, offset, bytes);
    Ok((info, Stored { data_type, place }))
}

/// The place of an external tensor: its file (in the model's folder, opened once), offset
/// and length checked against the file.
fn external_place(
    folder: Option<&Path>,
    header: &TensorHeader,
    bytes: u64,
    external: &mut Vec<(String, PathBuf, Source)>,
    options: &OpenOptions,
) -> Result<Place, String> {
    let Some(folder) = folder else {
        return Err(
            "external data, which a model in memory cannot reach (open the model by its path)"
                .into(),
        );
    };
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for entry in &header.external_data {
        let key = entry.key.as_deref().unwrap_or("");
        let value = entry.value.as_deref().unwrap_or("");
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("external_data {key} '{value}' is not a number"))
        };
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            // `basepath` is ignored by onnx's own loader too (the model's folder is the base).
            "checksum" | "basepath" => {}
            _ => {
                return Err(format!(
                    "external_data key '{key}', which ONNX does not define"
                ));
            }
        }
    }
    let location = location.ok_or("external data without a location")?;
    let index = match external.iter().position(|(l, _, _)| *l == location) {
        Some(i) => i,
        None => {
            let file_path = inside(folder, &location)?;
            let file = crate::platform::open_regular(&file_path)
                .map_err(|e| format!("external data '{location}': {e}"))?;
            check_size(&file_path, &file, options).map_err(|e| e.to_string())?;
            let data = crate::source::data::file_data(&file, options.verify)
                .map_err(|(action, e)| format!("external data '{location}': {action}: {e}"))?;
            external.push((location.clone(), file_path, data));
            external.len() - 1
        }
    };
    let file_len = std::fs::metadata(&external[index].1)
        .map_err(|e| format!("external data '{location}': {e}"))?
        .len();
    let length = length.unwrap_or_else(|| file_len.saturating_sub(offset));
    if length != bytes {
        return Err(format!(
            "external data '{location}' gives {length} bytes, but the tensor needs {bytes}"
        ));
    }
    match offset.checked_add(length) {
        Some(end) if end <= file_len => Ok(Place::Raw(Some(index), offset)),
        _ => Err(format!(
            "external data '{location}' at offset {offset}, {length} bytes, past its end ({file_len} bytes)"
        )),
    }
}

/// `location` resolved in `folder`: relative, without `..`, and (links followed) still in the
/// folder.
fn inside(folder: &Path, location: &str) -> Result<PathBuf, String> {
    let relative = Path::new(location);
    if location.is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "external data location '{location}' is not a plain path inside the model's folder"
        ));
    }
    let base = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let joined = base.join(relative);
    let real_base = std::fs::canonicalize(base).map_err(|e| format!("the model's folder: {e}"))?;
    let real =
        std::fs::canonicalize(&joined).map_err(|e| format!("external data '{location}': {e}"))?;
    if !real.starts_with(&real_base) {
        return Err(format!(
            "external data location '{location}' leads out of the model's folder (to {})",
            real.display()
        ));
    }
    Ok(joined)
}

impl TensorSource for OnnxSource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let stored = *self.table.place(info)?;
        let io =
            |file: &str, source: std::io::Error| ReadError::reading(file, info.name(), &source);
        match stored.place {
            Place::Raw(None, start) => self
                .data
                .read(start, info.len(), element_align(info.dtype()))
                .map_err(|e| io(&self.file, e)),
            Place::Raw(Some(i), start) => {
                let (_, path, data) = &self.external[i];
                data.read(start, info.len(), element_align(info.dtype()))
                    .map_err(|e| io(&path.display().to_string(), e))
            }
            Place::Empty => Ok(aligned_words(
                Vec::new(),
                0,
                burn::tensor::AllocationProperty::Native,
            )),
            Place::Typed { message, field } => {
                let raw = self
                    .data
                    .read(message.0, message.1 as u64, 1)
                    .map_err(|e| io(&self.file, e))?;
                let len = usize::try_from(info.len())
                    .map_err(|_| io(&self.file, std::io::Error::other("too large")))?;
                let mut words = zeroed_words(len.div_ceil(8)).ok_or_else(|| {
                    io(
                        &self.file,
                        std::io::Error::other(format!("cannot allocate {len} bytes")),
                    )
                })?;
                let out = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
                decode_typed(&raw, message.0, field, stored.data_type, out).map_err(|reason| {
                    ReadError::Unsupported {
                        file: self.file.clone(),
                        tensor: info.name().to_string(),
                        reason,
                    }
                })?;
                Ok(aligned_words(
                    words,
                    len,
                    burn::tensor::AllocationProperty::Native,
                ))
            }
        }
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let stored = self.table.place(info).ok()?;
        let align = element_align(info.dtype());
        match stored.place {
            Place::Raw(None, start) => self.data.copy_reason(start, align),
            Place::Raw(Some(i), start) => self.external[i].2.copy_reason(start, align),
            Place::Typed { field, .. } => Some(CopyReason::Decoded {
                format: types::field_name(field),
            }),
            Place::Empty => None,
        }
    }
}

/// The values of typed field `field` of the tensor message `raw` into `out`, each as data
/// type `data_type`; the count was checked when the file was opened.
fn decode_typed(
    raw: &[u8],
    base: u64,
    field: u32,
    data_type: i32,
    out: &mut [u8],
) -> Result<(), String> {
    let width = types::burn_dtype(data_type).map_or(1, |d| d.size());
    let mut chunks = out.chunks_exact_mut(width.max(1));
    let mut put = |v: u64| -> Result<(), String> {
        let slot = chunks.next().ok_or("more values than elements")?;
        if types::put(data_type, v, slot) {
            Ok(())
        } else {
            Err(format!(
                "{} holds {v}, which is no {} value",
                types::field_name(field),
                types::name(data_type)
            ))
        }
    };
    for f in fields(raw, base) {
        let (number, value) = f?;
        if number != field {
            continue;
        }
        match value {
            Wire::Varint(v) => put(v)?,
            Wire::Fixed32(v) => put(u64::from(v))?,
            Wire::Fixed64(v) => put(v)?,
            Wire::Bytes(data, _) if field == 4 => {
                for w in data.chunks_exact(4) {
                    put(u64::from(u32::from_le_bytes(
                        w.try_into().unwrap_or_default(),
                    )))?;
                }
            }
            Wire::Bytes(data, _) if field == 10 => {
                for w in data.chunks_exact(8) {
                    put(u64::from_le_bytes(w.try_into().unwrap_or_default()))?;
                }
            }
            Wire::Bytes(data, _) => {
                for v in varints(data) {
                    put(v?)?;
                }
            }
        }
    }
    Ok(())
}

impl crate::source::DescribedSource for OnnxSource {
    fn describe(&self) -> Description {
        let m = &self.model;
        let mut census: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for (info, stored) in self.table.tensors().iter().zip(self.table.places()) {
            let entry = census.entry(types::name(stored.data_type)).or_default();
            entry.0 += 1;
            entry.1 += info.len();
        }
        let types_line: Vec<String> = census
            .iter()
            .map(|(t, (n, bytes))| format!("{t} {n} ({})", human_bytes(*bytes)))
            .collect();
        let opsets: Vec<String> = m
            .opset_import
            .iter()
            .map(|(d, v)| format!("{}:{v}", if d.is_empty() { "ai.onnx" } else { d }))
            .collect();
        let producer = format!(
            "{} {}",
            m.producer_name.as_deref().unwrap_or("unknown"),
            m.producer_version.as_deref().unwrap_or("")
        )
        .trim()
        .to_string();
        let mut lines = vec![
            format!("producer: {producer}"),
            format!("opsets: {}", opsets.join(", ")),
            format!("stored types: {}", types_line.join(", ")),
        ];
        if !self.external.is_empty() {
            lines.push(format!(
                "external data: {}",
                self.external
                    .iter()
                    .map(|(l, _, _)| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let ir = m.ir_version.unwrap_or_default();
        let mut shards = vec![PathBuf::from(&self.file)];
        shards.extend(self.external.iter().map(|(_, p, _)| p.clone()));
        Description {
            format: "onnx",
            summary: format!(
                "ONNX model (IR v{ir}), {} initializers",
                self.table.tensors().len()
            ),
            valid: format!("ONNX model (IR v{ir}) valid"),
            shards: if self.external.is_empty() {
                Vec::new()
            } else {
                shards
            },
            metadata: self.metadata().into_iter().collect(),
            lines,
            fields: vec![
                ("ir_version", (ir as u64).into()),
                ("producer", producer.into()),
                ("opsets", opsets.into()),
                ("types", types_line.into()),
            ],
            checksums: Checksums::None,
            unverified: "no checksums in ONNX (contents unverified)".into(),
            column: Some("type"),
            ..Description::default()
        }
    }

    fn carried_metadata(&self) -> Vec<(String, String)> {
        self.metadata()
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        self.data_type_of(info)
    }
}
