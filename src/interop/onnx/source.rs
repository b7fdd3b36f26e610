//! [`OnnxSource`]: an ONNX model's initializers as a [`TensorSource`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use super::initializer::{External, Place, Stored, tensor};
use super::model::{self, Model};
use super::types;
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
    external: Vec<External>,
    table: SourceTable<Stored>,
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
        let path = Path::new("<memory>");
        crate::source::data::within_file_size(path, bytes.len() as u64, &options.limits)?;
        let bytes = crate::source::data::view_capable(bytes);
        Self::build(path, None, &bytes, Source::Memory(bytes.clone()), options)
    }

    pub(crate) fn open_opened(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let (file, _) = crate::source::data::opened_within_limits(path, file, &options.limits)?;
        let map = map_file(&file).map_err(SourceError::io(path, "map"))?;
        let data = if options.verify {
            crate::source::data::file_data(&file, true)
                .map_err(|(action, e)| SourceError::io(path, action)(e))?
        } else {
            Source::Memory(map.clone())
        };
        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::build(path, Some(&folder), &map, data, options)
    }

    fn build(
        path: &Path,
        folder: Option<&Path>,
        map: &Bytes,
        data: Source,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let invalid = SourceError::invalid(path);
        let model = model::read(map, &options.limits).map_err(&invalid)?;
        if !model.has_graph {
            return Err(invalid(
                "no graph (a ModelProto without field 7): not an ONNX model".into(),
            ));
        }
        let mut external: Vec<External> = Vec::new();
        let mut found = Vec::with_capacity(model.initializers.len());
        for (at, len, graph, scope) in &model.initializers {
            let start = *at as usize;
            let message = &map[start..start + len];
            let (info, stored) = tensor(path, folder, message, *at, graph, &mut external, options)?;
            found.push((info, stored, scope));
        }
        // Names as stored; a name that more than one graph holds (the two branches of an `If`,
        // or a nested graph's name shadowing an outer one, both valid ONNX) is qualified in the
        // nested graphs by their scope: `If_0/then_branch/w`.
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (info, _, _) in &found {
            *counts.entry(info.name()).or_default() += 1;
        }
        let shared: std::collections::HashSet<String> = counts
            .into_iter()
            .filter(|&(_, n)| n > 1)
            .map(|(name, _)| name.to_string())
            .collect();
        let mut rows = TableBuilder::new(path, &options.limits);
        let mut qualified = 0u64;
        for (info, stored, scope) in found {
            let info = match scope {
                Some(scope) if shared.contains(info.name()) => {
                    let name = format!("{scope}/{}", info.name());
                    qualified += name.len() as u64;
                    if qualified > u64::from(options.limits.max_metadata_size) {
                        return Err(invalid(format!(
                            "the names of initializers qualified by their graphs' scopes take \
                             more than the metadata limit of {} bytes",
                            options.limits.max_metadata_size
                        )));
                    }
                    TensorInfo::external(
                        name,
                        info.dtype(),
                        info.shape().to_vec(),
                        info.offset(),
                        info.len(),
                    )
                }
                _ => info,
            };
            rows.push(info, stored)?;
        }
        // Two initializers of one name are told apart by their graphs in the refusal.
        let table = rows.finish(|stored| format!("in {}", stored.graph))?;
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
    /// `model_version`, `doc_string` (abridged), `opset_import.<domain>` (one entry per set),
    /// and each of `metadata_props` as `metadata_props.<key>` (a key given twice is refused
    /// when the file is opened, as onnx's checker refuses it).
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
        // The user's own keys under their field's name: never in the place of the model's.
        out.extend(
            m.metadata_props
                .iter()
                .map(|(k, v)| (format!("metadata_props.{k}"), v.clone())),
        );
        out
    }

    /// The external data files the model names, resolved in its folder.
    #[must_use]
    pub fn external_files(&self) -> Vec<&Path> {
        self.external.iter().map(|e| e.path.as_path()).collect()
    }

    /// The stored type of `info`, and the external file holding it (`FLOAT in w.bin`), or
    /// the typed field decoded (`FLOAT from float_data`).
    fn data_type_of(&self, info: &TensorInfo) -> Option<String> {
        let stored = self.table.place(info).ok()?;
        let ty = types::name(stored.data_type);
        Some(match stored.place {
            Place::Raw(Some(i), _) => format!("{ty} in {}", self.external[i].location),
            Place::Typed { field, .. } => format!("{ty} from {}", types::field_name(field)),
            _ => ty,
        })
    }
}

impl TensorSource for OnnxSource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        crate::source::data::checked_bools(&self.file, info, self.read_stored(info)?, |_| Ok(false))
    }

    /// Only these bytes of a `raw_data` tensor (in the model or its external data); the
    /// window of the decoded whole for a tensor of typed fields.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        crate::source::check_range(&self.file, info, &range)?;
        let stored = self.table.place(info)?;
        let (data, file, start) = match stored.place {
            Place::Raw(None, start) => (&self.data, self.file.clone(), start),
            Place::Raw(Some(i), start) => {
                let External { path, data, .. } = &self.external[i];
                (data, path.display().to_string(), start)
            }
            _ => {
                let whole = self.read(info)?;
                return crate::source::window(&self.file, info, whole, range);
            }
        };
        data.read_window(&file, info, start, range)
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let stored = self.table.place(info).ok()?;
        let align = element_align(info.dtype());
        match stored.place {
            Place::Raw(None, start) => self.data.copy_reason(start, align),
            Place::Raw(Some(i), start) => self.external[i].data.copy_reason(start, align),
            Place::Typed { field, .. } => Some(CopyReason::Decoded {
                format: types::field_name(field),
            }),
            Place::Empty => None,
        }
    }
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
                    .map(|e| e.location.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let ir = m.ir_version.unwrap_or_default();
        let mut shards = vec![PathBuf::from(&self.file)];
        shards.extend(self.external.iter().map(|e| e.path.clone()));
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
                ("ir_version", ir.cast_unsigned().into()),
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

impl OnnxSource {
    /// `info`'s bytes as stored (or decoded from a typed field).
    fn read_stored(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let stored = self.table.place(info)?;
        let io =
            |file: &str, source: std::io::Error| ReadError::reading(file, info.name(), &source);
        match stored.place {
            Place::Raw(None, start) => self
                .data
                .read(start, info.len(), element_align(info.dtype()))
                .map_err(|e| io(&self.file, e)),
            Place::Raw(Some(i), start) => {
                let External { path, data, .. } = &self.external[i];
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
                types::decode_typed(&raw, message.0, field, stored.data_type, out).map_err(
                    |reason| ReadError::Unsupported {
                        file: self.file.clone(),
                        tensor: info.name().to_string(),
                        reason,
                    },
                )?;
                Ok(aligned_words(
                    words,
                    len,
                    burn::tensor::AllocationProperty::Native,
                ))
            }
        }
    }
}
