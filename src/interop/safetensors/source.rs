//! Safetensors files, single or sharded with an index JSON, as a [`TensorSource`] for the
//! module loader: each file is mapped once, its header validated by the `safetensors` crate
//! (offsets, overlaps, lengths against dtype and shape, header size), and each tensor handed
//! out as a window of its mapping where aligned for its element type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use super::fp8::{Format, Fp8, Listed, pairs};
use super::header::{header_len, validate};
use super::{to_burn, withheld_reason};
use crate::format::{Limits, TensorInfo, element_align};
use crate::interop::AsOpenOptions;
use crate::interop::index::ShardIndex;
use crate::interop::read_hints::{Hinted, ReadHints, file_mapping};
use crate::source::data::Source;
use crate::source::from_table;
use crate::source::{
    CopyReason, InShard, OpenOptions, ReadError, Sharded, SourceError, SourceTable, TensorSource,
    Withheld, assemble_shards,
};

/// Hugging Face / `PyTorch` safetensors weights as a [`TensorSource`]: one `.safetensors` file,
/// or an index JSON (`model.safetensors.index.json`) whose `weight_map` routes each tensor to
/// its shard. Load a Burn module from it with
/// [`PackModule::load_from_source`](crate::module::PackModule::load_from_source) and the same
/// [`LoadOptions`](crate::module::LoadOptions) as for packs (strict by default, partial, unused,
/// filters, renames, dtype policies).
///
/// Every file is mapped once and validated by the `safetensors` crate before anything is read.
/// A tensor whose offset is aligned for its element type is a zero-copy window of the mapping
/// (on flex and ndarray the parameter uses the file's pages); an unaligned one is copied into
/// an aligned buffer when read ([`unaligned`](Self::unaligned) lists them). A load reads its
/// tensors ahead through the mappings in the files' order, from a thread that holds the
/// mappings until it is done (the parameters are windows of them): keep the files unchanged.
///
/// FP8 tensors (`F8_E4M3`, `F8_E5M2`, `F8_E4M3FNUZ`, `F8_E5M2FNUZ`, `F8_E8M0`) are decoded
/// exactly into `f32` when read (a copy); with
/// [`OpenOptions::keep_quantized`], `F8_E4M3` and `F8_E5M2` are Burn `QFloat` tensors of value
/// `E4M3` / `E5M2` instead (Burn 0.22 dequantizes those on wgpu and CUDA; a load onto flex or
/// ndarray refuses them by name). A weight's scale tensor of the same file is folded into it
/// (`X.weight_scale_inv`, DeepSeek-V3's 128 × 128 block scales; `X.weight_scale`, one per
/// tensor or per row) and is not listed. A tensor of a dtype this crate does not decode (`F4`,
/// `F6_*`) does not keep the file from opening: it is listed by
/// [`withheld`](TensorSource::withheld) (and by `bpk inspect`), the other tensors load, and a
/// load or a conversion that wants it is refused with an error naming the file, the tensor and
/// its dtype (load the others with a filter or
/// [`allow_partial`](crate::module::LoadOptions::allow_partial)).
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
    pub(super) shards: Vec<Shard>,
    /// Every tensor, sorted by name, with its shard.
    /// FP8 tensors are decoded (or laid out as `QFloat`) when read: `Some` says how.
    pub(super) table: SourceTable<InShard<Option<Fp8>>>,
    pub(super) metadata: BTreeMap<String, String>,
    /// The tensors of a dtype this crate does not decode (`F4`, `F6_*`), sorted by name:
    /// listed, not loadable ([`TensorSource::withheld`]).
    pub(super) withheld: Vec<Withheld>,
    /// Where each of `withheld` is (same order): its shard, and its bytes' absolute range.
    withheld_at: Vec<(usize, u64, u64)>,
    /// The read-ahead of the last [`TensorSource::prefetch`].
    hints: ReadHints,
}

pub(super) struct Shard {
    pub(super) path: PathBuf,
    /// The file's mapping (or, read for a verification, the file; or bytes in memory).
    source: Source,
    /// The file's own `__metadata__`.
    metadata: BTreeMap<String, String>,
    /// Its tensors of a dtype Burn has no equivalent of, with their bytes' absolute range.
    withheld: Vec<(Withheld, u64, u64)>,
    /// Scale tensors folded into the FP8 weight they scale (not listed): scale, weight.
    pub(super) folded: Vec<(String, String)>,
}

impl std::fmt::Debug for SafetensorsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table
            .fmt_source(f, "SafetensorsSource", self.shards.len())
    }
}

impl SafetensorsSource {
    /// Opens a `.safetensors` file, or an index JSON (a path ending in `.json`) and the shards
    /// it names (file names in the index's directory), with the default [`OpenOptions`]. Each
    /// header is read with ordinary reads and validated before the file is mapped, so opening
    /// never faults on a damaged file.
    ///
    /// # Errors
    /// [`SourceError`] naming the file: `Io` when a file cannot be opened or mapped, `Invalid`
    /// when a header or the index is invalid. (A tensor whose dtype has no Burn equivalent is
    /// no error here: see [`withheld`](TensorSource::withheld).)
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::new())
    }

    /// [`open`](Self::open) with options: the limits on tensor count and size, and
    /// [`verify`](OpenOptions::verify) (read with ordinary reads instead of mapped). A
    /// `&Limits` is still taken for one release (deprecated: pass
    /// `&OpenOptions::new().limits(limits)`).
    ///
    /// ```
    /// use burnpack::interop::safetensors::SafetensorsSource;
    /// use burnpack::source::{OpenOptions, TensorSource};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("model.safetensors");
    /// let view = safetensors::tensor::TensorView::new(safetensors::Dtype::U8, vec![2], &[1, 2]).unwrap();
    /// safetensors::serialize_to_file([("w", view)], None, &path).unwrap();
    /// let source = SafetensorsSource::open_with(&path, &OpenOptions::new().verify(true)).unwrap();
    /// assert_eq!(source.tensors().len(), 1);
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(
        path: impl AsRef<Path>,
        options: &(impl AsOpenOptions + ?Sized),
    ) -> Result<Self, SourceError> {
        let (path, options) = (path.as_ref(), options.open_options());
        if path.extension().is_some_and(|e| e == "json") {
            Self::open_index_for(path, &options)
        } else {
            Self::open_file_for(path, None, &options)
        }
    }

    /// One file, whatever its name, read with ordinary reads instead of mapped where
    /// `options.verify`; `file`: the file already opened (by the registry, which then opens
    /// nothing again).
    pub(crate) fn open_file_for(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let mut file = file;
        let open = |shard: &Path, limits: &Limits| open_shard(shard, file.take(), limits, options);
        let sharded = assemble_shards(path, &[path.to_path_buf()], None, &options.limits, open)?;
        Ok(Self::assemble(path, sharded, BTreeMap::new()))
    }

    /// An index JSON and its shards, read with ordinary reads instead of mapped where
    /// `options.verify`.
    pub(crate) fn open_index_for(path: &Path, options: &OpenOptions) -> Result<Self, SourceError> {
        let limits = &options.limits;
        let index = ShardIndex::read(path, "safetensors", limits.max_tensor_count)?;
        // Each shard checked against the index here rather than by `assemble_shards`: the
        // index routes the withheld tensors too.
        let mut next = 0;
        let open = |shard: &Path, limits: &Limits| {
            let (opened, rows) = open_shard(shard, None, limits, options)?;
            let held = rows.iter().map(|(info, _)| info.name());
            let held = held.chain(opened.withheld.iter().map(|(w, _, _)| w.name.as_str()));
            let held = held.chain(opened.folded.iter().map(|(scale, _)| scale.as_str()));
            index
                .check_shard(next, held)
                .map_err(SourceError::invalid(path))?;
            next += 1;
            Ok((opened, rows))
        };
        let sharded = assemble_shards(path, &index.shards, None, limits, open)?;
        super::fp8::refuse_scale_elsewhere(path, &sharded.table)?;
        Ok(Self::assemble(path, sharded, index.metadata))
    }

    /// Safetensors bytes in memory (a file fetched by a web page, an embedded model): validated
    /// by the `safetensors` crate, tensors handed out as windows of `bytes` where aligned.
    ///
    /// ```
    /// use burnpack::interop::safetensors::SafetensorsSource;
    /// use burnpack::source::{OpenOptions, TensorSource};
    /// let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
    /// let bytes = safetensors::serialize([("w", view)], None).unwrap();
    /// let bytes = burn::tensor::Bytes::from_bytes_vec(bytes);
    /// let source = SafetensorsSource::from_bytes(bytes, &OpenOptions::new()).unwrap();
    /// assert_eq!(source.read(source.tensor("w").unwrap()).unwrap().len(), 8);
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open), naming `"<memory>"`.
    pub fn from_bytes(
        bytes: Bytes,
        options: &(impl AsOpenOptions + ?Sized),
    ) -> Result<Self, SourceError> {
        let options = options.open_options();
        let limits = &options.limits;
        let path = Path::new(MEMORY);
        let mut bytes = Some(crate::source::data::view_capable(bytes));
        let sharded =
            assemble_shards(path, &[path.to_path_buf()], None, limits, |path, limits| {
                let bytes = bytes
                    .take()
                    .unwrap_or_else(|| Bytes::from_bytes_vec(Vec::new()));
                let (header_len, metadata) = validate(path, &bytes, bytes.len() as u64, limits)?;
                let mut rows = Vec::new();
                let shard = shard(
                    path,
                    Source::Memory(bytes),
                    header_len,
                    &metadata,
                    (options.keep_quantized, options.dequantize_into(path)?),
                    &mut rows,
                )?;
                Ok((shard, rows))
            })?;
        Ok(Self::assemble(path, sharded, BTreeMap::new()))
    }

    fn assemble(
        path: &Path,
        sharded: Sharded<Shard, Option<Fp8>>,
        mut metadata: BTreeMap<String, String>,
    ) -> Self {
        let shards: Vec<Shard> = sharded.shards.into_iter().map(|(_, s)| s).collect();
        // The shards' own `__metadata__`, then the index's (which wins).
        let mut merged = BTreeMap::new();
        let mut withheld = Vec::new();
        for (i, shard) in shards.iter().enumerate() {
            merged.extend(shard.metadata.clone());
            withheld.extend(
                shard
                    .withheld
                    .iter()
                    .map(|(w, start, len)| (w.clone(), (i, *start, *len))),
            );
        }
        merged.append(&mut metadata);
        withheld.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let (withheld, withheld_at) = withheld.into_iter().unzip();
        Self {
            file: path.display().to_string(),
            shards,
            table: sharded.table,
            metadata: merged,
            withheld,
            withheld_at,
            hints: ReadHints::default(),
        }
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
        // A tensor of another source has no shard here: the first is as good as any for a
        // caller that asks (reads refuse it).
        let shard = self.table.place(info).map_or(0, |p| p.shard);
        &self.shards[shard].path
    }

    /// The tensor called `name`, if any.
    ///
    /// ```no_run
    /// let source = burnpack::interop::safetensors::SafetensorsSource::open("model.safetensors").unwrap();
    /// assert!(source.tensor("no.such.tensor").is_none());
    /// ```
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.table.get(name)
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
        self.table
            .tensors()
            .iter()
            .filter(|info| matches!(self.copy_reason(info), Some(CopyReason::Unaligned { .. })))
    }

    /// The bytes of `info` as they lie in the mapping, aligned or not (for copying elsewhere);
    /// an FP8 tensor's as it is listed (decoded, or laid out as `QFloat`).
    pub(crate) fn window(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        match self.table.place(info)? {
            InShard {
                shard,
                place: Some(fp8),
            } => read_fp8(&self.shards[*shard], info, fp8),
            _ => self.read_aligned(info, 1),
        }
    }

    fn read_aligned(&self, info: &TensorInfo, align: usize) -> Result<Bytes, ReadError> {
        let shard = &self.shards[self.table.place(info)?.shard];
        shard
            .source
            .read(info.offset(), info.len(), align)
            .map_err(|source| {
                ReadError::reading(shard.path.display().to_string(), info.name(), &source)
            })
    }
}

/// An FP8 tensor as listed: its bytes (and its folded scales) read, then decoded into
/// `f32` or laid out as Burn's `QFloat`, in memory of its own.
fn read_fp8(shard: &Shard, info: &TensorInfo, fp8: &Fp8) -> Result<Bytes, ReadError> {
    let io = |source| ReadError::reading(shard.path.display().to_string(), info.name(), &source);
    let raw = shard
        .source
        .read(info.offset(), fp8.raw_len, 1)
        .map_err(io)?;
    let scales = match fp8.scale {
        Some(scale) => Some(shard.source.read(scale.start, scale.len, 1).map_err(io)?),
        None => None,
    };
    let len = usize::try_from(info.len()).map_err(|_| io(std::io::Error::other("too large")))?;
    crate::source::data::aligned_bytes(len, io, |out| {
        fp8.fill(&raw, scales.as_deref().unwrap_or(&[]), out);
        Ok(())
    })
}

/// A shard's tensors, each with how an FP8 one is read.
type Rows = Vec<(TensorInfo, Option<Fp8>)>;

/// The name of a source in memory, in errors.
const MEMORY: &str = "<memory>";

/// Opens one file: its header read with ordinary reads (at most `MAX_HEADER` bytes past
/// the length prefix) and validated, then the file mapped; returns the shard and its rows.
fn open_shard(
    path: &Path,
    file: Option<std::fs::File>,
    limits: &Limits,
    options: &OpenOptions,
) -> Result<(Shard, Rows), SourceError> {
    let verify = options.verify;
    let (file, total) = crate::source::data::opened_within_limits(path, file, limits)?;
    let mut prefix = [0u8; 8];
    let got = crate::platform::read_exact_at(&file, &mut prefix[..total.min(8) as usize], 0);
    got.map_err(SourceError::io(path, "read the header"))?;
    let n = header_len(path, &prefix[..total.min(8) as usize], total)?;
    let mut head = vec![0u8; 8 + n];
    crate::platform::read_exact_at(&file, &mut head, 0)
        .map_err(SourceError::io(path, "read the header"))?;
    let (header_len, metadata) = validate(path, &head, total, limits)?;
    drop(head);
    // As for `Reader::open`, the file must not be truncated while it is mapped (documented
    // on `SafetensorsSource`); read, not mapped, for a verification.
    let data = crate::source::data::file_data(&file, verify)
        .map_err(|(action, e)| SourceError::io(path, action)(e))?;
    let mut rows = Vec::new();
    let shard = shard(
        path,
        data,
        header_len,
        &metadata,
        (options.keep_quantized, options.dequantize_into(path)?),
        &mut rows,
    )?;
    Ok((shard, rows))
}

/// The rows of a validated header (names, Burn dtypes, absolute ranges), and the shard.
fn shard(
    path: &Path,
    source: Source,
    header_len: usize,
    metadata: &safetensors::tensor::Metadata,
    keep: (bool, burn::tensor::DType),
    rows: &mut Rows,
) -> Result<Shard, SourceError> {
    let data_start = 8 + header_len as u64;
    let tensors = metadata.tensors();
    let listed: std::collections::HashMap<&str, Listed<'_>> = tensors
        .iter()
        .map(|(name, info)| {
            let (start, end) = info.data_offsets;
            let listed = Listed {
                dtype: info.dtype,
                shape: &info.shape,
                start: data_start + start as u64,
                len: (end - start) as u64,
            };
            (name.as_str(), listed)
        })
        .collect();
    let pairs = pairs(&listed).map_err(|(tensor, reason)| SourceError::Tensor {
        path: path.to_path_buf(),
        tensor,
        reason,
    })?;
    let folded: std::collections::HashMap<&str, &str> = pairs
        .iter()
        .map(|(weight, (scale, _))| (scale.as_str(), weight.as_str()))
        .collect();
    let mut withheld = Vec::new();
    for (name, info) in &tensors {
        let (start, len) = (listed[name.as_str()].start, listed[name.as_str()].len);
        if folded.contains_key(name.as_str()) {
            continue;
        }
        if let Some(format) = Format::of(info.dtype) {
            let scale = pairs.get(name).map(|(_, scale)| *scale);
            let (fp8, dtype, listed_len) =
                Fp8::new(format, len, scale, keep).ok_or_else(|| SourceError::Tensor {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    reason: "too many elements".into(),
                })?;
            let info =
                TensorInfo::external(name.clone(), dtype, info.shape.clone(), start, listed_len);
            rows.push((info, Some(fp8)));
            continue;
        }
        // Listed, not loadable: the rest of the file is.
        let Some(dtype) = to_burn(info.dtype) else {
            withheld.push((
                Withheld::new(
                    name,
                    format!("{:?}", info.dtype),
                    info.shape.clone(),
                    withheld_reason(info.dtype),
                ),
                start,
                len,
            ));
            continue;
        };
        let info = TensorInfo::external(name.clone(), dtype, info.shape.clone(), start, len);
        rows.push((info, None));
    }
    let mut folded: Vec<(String, String)> = folded
        .into_iter()
        .map(|(scale, weight)| (scale.to_string(), weight.to_string()))
        .collect();
    folded.sort();
    Ok(Shard {
        path: path.to_path_buf(),
        source,
        metadata: metadata
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        withheld,
        folded,
    })
}

impl TensorSource for SafetensorsSource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let InShard { shard, place } = self.table.place(info)?;
        if let Some(fp8) = place {
            return read_fp8(&self.shards[*shard], info, fp8);
        }
        let bytes = self.read_aligned(info, element_align(info.dtype()))?;
        crate::source::data::checked_bools(&self.file, info, bytes, |_| Ok(false))
    }

    /// Only these bytes: a window of the shard's mapping, or one positional read.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        crate::source::check_range(&self.file, info, &range)?;
        let InShard { shard, place } = self.table.place(info)?;
        let shard = &self.shards[*shard];
        if let Some(fp8) = place {
            // Decoded (and scaled) as a whole: the stored bytes are not the listed ones.
            let whole = read_fp8(shard, info, fp8)?;
            return crate::source::window(&self.file, info, whole, range);
        }
        shard.source.read_window(
            &shard.path.display().to_string(),
            info,
            info.offset(),
            range,
        )
    }

    fn withheld(&self) -> &[Withheld] {
        &self.withheld
    }

    fn read_withheld(&self, name: &str) -> Result<Bytes, ReadError> {
        let i = self
            .withheld
            .binary_search_by(|w| w.name.as_str().cmp(name))
            .map_err(|_| ReadError::NotFound {
                file: self.file.clone(),
                tensor: name.to_string(),
            })?;
        let (shard, start, len) = self.withheld_at[i];
        let shard = &self.shards[shard];
        shard
            .source
            .read(start, len, 1)
            .map_err(|source| ReadError::reading(shard.path.display().to_string(), name, &source))
    }

    /// A mapped file is read ahead in its own order while the load goes on: writers sort
    /// tensors by name (`layers.10` before `layers.2`), so the module's order jumps about a
    /// cold file (1.16-1.20x one pass of reads, against 1.01x: docs/benchmarks.md).
    fn wants_prefetch(&self) -> bool {
        self.shards
            .iter()
            .any(|shard| file_mapping(&shard.source).is_some())
    }

    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        let ranges = wanted.iter().filter_map(|info| {
            let InShard { shard, place } = self.table.place(info).ok()?;
            let len = place.map_or(info.len(), |fp8| fp8.raw_len);
            Some((*shard, info.offset(), info.offset() + len))
        });
        self.hints.ask_shards(ranges.collect(), |i| {
            file_mapping(&self.shards[i].source).map(Hinted::Mapped)
        });
        Ok(())
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let InShard { shard, place } = self.table.place(info).ok()?;
        match place {
            Some(fp8) => Some(CopyReason::Decoded {
                format: fp8.format.name(),
            }),
            None => self.shards[*shard].source.tensor_copy_reason(info),
        }
    }
}
