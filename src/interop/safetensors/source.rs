//! Safetensors files, single or sharded with an index JSON, as a [`TensorSource`] for the
//! module loader: each file is mapped once, its header validated by the `safetensors` crate
//! (offsets, overlaps, lengths against dtype and shape, header size), and each tensor handed
//! out as a window of its mapping where aligned for its element type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;
use safetensors::SafeTensors;

use super::{ConvertError, map_file, to_burn};
use crate::format::{TensorInfo, element_align};
use crate::interop::index::{IndexError, ShardIndex};
use crate::read::source::Source;
use crate::read::{CopyReason, ReadError, TensorSource};

/// Hugging Face / `PyTorch` safetensors weights as a [`TensorSource`]: one `.safetensors` file,
/// or an index JSON (`model.safetensors.index.json`) whose `weight_map` routes each tensor to
/// its shard. Load a Burn module from it with
/// [`PackModule::load_from_source`](crate::module::PackModule::load_from_source) and the same
/// [`LoadOptions`](crate::LoadOptions) as for packs (strict by default, partial, unused,
/// filters, renames, dtype policies).
///
/// Every file is mapped once and validated by the `safetensors` crate before anything is read.
/// A tensor whose offset is aligned for its element type is a zero-copy window of the mapping
/// (on flex and ndarray the parameter uses the file's pages); an unaligned one is copied into
/// an aligned buffer when read ([`unaligned`](Self::unaligned) lists them).
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::interop::safetensors::SafetensorsSource;
/// use burnpack::module::PackModule;
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("model.safetensors");
/// let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
/// safetensors::serialize_to_file([("w", view)], None, &path).unwrap();
///
/// let device = Device::flex();
/// let source = SafetensorsSource::open(&path).unwrap();
/// let tiny = Tiny { w: Param::from_data([0.0, 0.0], &device) }
///     .load_from_source(&source, &Default::default())
///     .unwrap();
/// assert_eq!(tiny.w.val().into_data().try_to_vec::<f32>().unwrap(), [1.0, 2.0]);
/// ```
pub struct SafetensorsSource {
    /// The file (or index) named in errors.
    file: String,
    shards: Vec<Shard>,
    /// Sorted by name.
    tensors: Vec<TensorInfo>,
    /// The shard of each tensor, by position in `tensors`.
    shard_of: Vec<usize>,
    metadata: BTreeMap<String, String>,
}

struct Shard {
    path: PathBuf,
    source: Source,
    /// The file's own `__metadata__`.
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsSource")
            .field("file", &self.file)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl SafetensorsSource {
    /// Opens a `.safetensors` file, or an index JSON (a path ending in `.json`) and the shards
    /// it names (file names in the index's directory).
    ///
    /// # Errors
    /// [`ConvertError::Io`] when a file cannot be opened or mapped,
    /// [`ConvertError::Safetensors`] naming the file when a header or the index is invalid,
    /// [`ConvertError::Dtype`] naming the tensor when its dtype has no Burn equivalent.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ConvertError> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "json") {
            Self::open_index(path)
        } else {
            let mut tables = Vec::new();
            let shard = open_shard(path, &mut tables, 0)?;
            Self::assemble(path, vec![shard], tables, BTreeMap::new())
        }
    }

    fn open_index(path: &Path) -> Result<Self, ConvertError> {
        let invalid = |message: String| ConvertError::Safetensors {
            path: path.to_path_buf(),
            message,
        };
        let max_tensors = crate::format::Limits::default().max_tensor_count;
        let index = ShardIndex::read(path, "safetensors", max_tensors).map_err(|e| match e {
            IndexError::Io(action, source) => ConvertError::Io {
                path: path.to_path_buf(),
                action,
                source,
            },
            IndexError::Invalid(message) => invalid(message),
        })?;
        let mut shards = Vec::with_capacity(index.shards.len());
        let mut tables = Vec::new();
        for (i, shard) in index.shards.iter().enumerate() {
            let first = tables.len();
            shards.push(open_shard(shard, &mut tables, i)?);
            // The index and each shard must agree tensor for tensor, checked before the next
            // shard is opened.
            index
                .check_shard(i, tables[first..].iter().map(|(name, _, _)| name.as_str()))
                .map_err(invalid)?;
        }
        Self::assemble(path, shards, tables, index.metadata)
    }

    fn assemble(
        path: &Path,
        shards: Vec<Shard>,
        mut tables: Vec<(String, usize, TensorInfo)>,
        mut metadata: BTreeMap<String, String>,
    ) -> Result<Self, ConvertError> {
        tables.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = tables.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(ConvertError::Safetensors {
                path: path.to_path_buf(),
                message: format!(
                    "tensor '{}' is in two shards ('{}' and '{}')",
                    pair[0].0,
                    shards[pair[0].1].path.display(),
                    shards[pair[1].1].path.display()
                ),
            });
        }
        // The shards' own `__metadata__`, then the index's (which wins).
        let mut merged = BTreeMap::new();
        for shard in &shards {
            merged.extend(shard.metadata.clone());
        }
        merged.append(&mut metadata);
        let (shard_of, tensors) = tables.into_iter().map(|(_, s, info)| (s, info)).unzip();
        Ok(Self {
            file: path.display().to_string(),
            shards,
            tensors,
            shard_of,
            metadata: merged,
        })
    }

    /// The files mapped: the one file, or the shards in name order.
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors.index.json").unwrap();
    /// println!("{} shards", source.shards().count());
    /// ```
    #[must_use]
    pub fn shards(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The file holding `info` (a tensor of this source).
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors.index.json").unwrap();
    /// let info = source.tensor("lm_head.weight").unwrap();
    /// println!("{}", source.shard_of(info).display());
    /// ```
    #[must_use]
    pub fn shard_of(&self, info: &TensorInfo) -> &Path {
        &self.shards[self.shard_index(info)].path
    }

    /// The tensor called `name`, if any.
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors").unwrap();
    /// assert!(source.tensor("no.such.tensor").is_none());
    /// ```
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.position(name).map(|i| &self.tensors[i])
    }

    /// String metadata: the files' `__metadata__`, and for an index its `metadata` (whose keys
    /// win; values that are not strings as JSON text).
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors").unwrap();
    /// println!("{:?}", source.metadata().get("format"));
    /// ```
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Tensors whose data is not aligned for their element type: reading one copies it.
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors").unwrap();
    /// for info in source.unaligned() {
    ///     println!("{} is copied when loaded", info.name());
    /// }
    /// ```
    pub fn unaligned(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors
            .iter()
            .filter(|info| self.copy_reason(info).is_some())
    }

    /// The bytes of `info` as they lie in the mapping, aligned or not (for copying elsewhere).
    pub(crate) fn window(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let shard = &self.shards[self.shard_index(info)];
        shard
            .source
            .read(info.offset(), info.len(), 1)
            .map_err(|source| ReadError::Io {
                file: shard.path.display().to_string(),
                action: "read tensor data",
                source,
            })
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.tensors.binary_search_by(|t| t.name().cmp(name)).ok()
    }

    fn shard_index(&self, info: &TensorInfo) -> usize {
        // `info` comes from this source, so its name is present.
        self.position(info.name()).map_or(0, |i| self.shard_of[i])
    }
}

/// Maps one file, validates it with the `safetensors` crate and appends its tensors to
/// `tables` as (name, shard, info).
fn open_shard(
    path: &Path,
    tables: &mut Vec<(String, usize, TensorInfo)>,
    shard: usize,
) -> Result<Shard, ConvertError> {
    let all = map_file(path)?;
    let invalid = |e: safetensors::SafeTensorError| ConvertError::Safetensors {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    // One parse of the header, validated by the `safetensors` crate (offsets contiguous and
    // within the file, the file exactly as long as they say).
    let (header_len, metadata) = SafeTensors::read_metadata(&all).map_err(invalid)?;
    let data_start = 8 + header_len as u64;
    for (name, info) in metadata.tensors() {
        let dtype = to_burn(info.dtype).ok_or_else(|| ConvertError::Dtype {
            path: path.to_path_buf(),
            tensor: name.clone(),
            dtype: format!("{:?}", info.dtype),
            target: "Burn",
        })?;
        let (start, end) = info.data_offsets;
        tables.push((
            name.clone(),
            shard,
            TensorInfo::external(
                name,
                dtype,
                info.shape.clone(),
                data_start + start as u64,
                (end - start) as u64,
            ),
        ));
    }
    Ok(Shard {
        path: path.to_path_buf(),
        source: Source::Memory(all),
        metadata: metadata
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    })
}

impl TensorSource for SafetensorsSource {
    fn file(&self) -> &str {
        &self.file
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let shard = &self.shards[self.shard_index(info)];
        shard
            .source
            .read(info.offset(), info.len(), element_align(info.dtype()))
            .map_err(|source| ReadError::Io {
                file: shard.path.display().to_string(),
                action: "read tensor data",
                source,
            })
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        self.shards[self.shard_index(info)]
            .source
            .copy_reason(info.offset(), element_align(info.dtype()))
    }
}
