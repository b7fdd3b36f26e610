//! [`GgufSource`]: a GGUF file (or a split set) as a [`TensorSource`]: plain types as windows
//! of the mapping, quantized types dequantized into `f32` (or `f16`/`bf16`) when read, or kept
//! quantized as Burn `QFloat` tensors.

use std::path::{Path, PathBuf};

use burn::tensor::{Bytes, DType};

use super::dequant::{Dequantize, dequantize, dequantizer};
use super::header::{self, Header, HeaderError};
use super::quantized::{burn_dtype, burn_len, split};
use super::split::{check_part, split_count, split_parts};
use super::types::GgmlType;
use super::value::Value;
use crate::format::{TensorInfo, element_align};
use crate::source::OpenOptions;
use crate::source::data::{Source, aligned_words, zeroed_words};
use crate::source::from_table;
use crate::source::{
    CopyReason, InShard, ReadError, Sharded, SourceError, SourceTable, TensorSource,
    assemble_shards,
};

/// A llama.cpp GGUF file as a [`TensorSource`]: versions 2 and 3, little-endian, one file or a
/// split set (`model-00001-of-00003.gguf`, opened from its first part).
///
/// The header (metadata and tensor table) is read with ordinary reads and validated before the
/// file is mapped: counts and string lengths against what the file holds, every tensor's bytes
/// from its type's block size inside the data section, aligned, not overlapping another's.
/// Shapes are Burn's row-major order (GGUF lists dimensions fastest first). `F32`, `F16`,
/// `BF16`, `F64` and the integer types are zero-copy windows of the mapping; the quantized
/// types this crate reads ([`GgmlType::is_dequantized`]) are tables of `F32` tensors (or the
/// dtype of [`OpenOptions::dequantize_to`]), dequantized in parallel when read, bit for bit as
/// llama.cpp's reference, or Burn `QFloat` tensors ([`OpenOptions::keep_quantized`]). A tensor of a type
/// this crate does not read is listed (with the dtype it would have) and refused by name when
/// read; the other tensors load.
///
/// ```
/// use burnpack::interop::gguf::GgufSource;
/// let err = GgufSource::from_bytes(burn::tensor::Bytes::from_bytes_vec(b"GGUF\x01\x00\x00\x00".to_vec()), &Default::default())
///     .unwrap_err();
/// assert!(err.to_string().contains("versions 2 and 3"));
/// ```
pub struct GgufSource {
    file: String,
    pub(super) shards: Vec<Shard>,
    pub(super) table: SourceTable<InShard<Stored>>,
}

pub(super) struct Shard {
    pub(super) path: PathBuf,
    source: Source,
    pub(super) version: u32,
    pub(super) alignment: u64,
    pub(super) metadata: Vec<(String, Value)>,
}

/// How a tensor's bytes are stored.
#[derive(Clone, Copy)]
pub(super) struct Stored {
    pub(super) ty: Option<GgmlType>,
    /// The type id, for a type ggml does not have.
    type_id: u32,
    /// Absolute offset and length of the stored bytes (`None` for an unknown type).
    pub(super) range: Option<(u64, u64)>,
}

impl std::fmt::Debug for GgufSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt_source(f, "GgufSource", self.shards.len())
    }
}

impl GgufSource {
    /// Opens a GGUF file, or the first part of a split set and its other parts (named
    /// `<stem>-0000N-of-0000M.gguf` in the same folder), with the default [`Limits`](crate::format::Limits).
    ///
    /// # Errors
    /// [`SourceError`] naming the file, and the tensor where there is one.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// [`open`](Self::open) with options: the [`Limits`](crate::format::Limits), the types
    /// a Burn scheme holds exactly kept quantized ([`OpenOptions::keep_quantized`]), and the
    /// dtype the others are dequantized into ([`OpenOptions::dequantize_to`]).
    ///
    /// ```no_run
    /// use burnpack::interop::gguf::GgufSource;
    /// use burnpack::source::OpenOptions;
    /// let source = GgufSource::open_with("model-q8_0.gguf", &OpenOptions::new().keep_quantized(true))?;
    /// # Ok::<(), burnpack::source::SourceError>(())
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        Self::open_opened(path.as_ref(), None, options)
    }

    /// [`open_with`](Self::open_with), its first file already opened (by the registry, which
    /// then opens nothing again) when `file` is given.
    pub(crate) fn open_opened(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let first = open_file(path, file, options)?;
        let count = split_count(&first.0.metadata, path)?;
        let shards = if count > 1 {
            split_parts(path, count)?
        } else {
            vec![path.to_path_buf()]
        };
        let mut first = Some(first);
        let mut no = 0u64;
        let sharded = assemble_shards(path, &shards, None, &options.limits, |part, limits| {
            let opened = match first.take() {
                Some(opened) => opened,
                None => open_file(part, None, &options.clone().limits(*limits))?,
            };
            check_part(part, &opened.0.metadata, no, count)?;
            no += 1;
            Ok(opened)
        })?;
        let declared = sharded.shards[0]
            .1
            .metadata
            .iter()
            .find(|(k, _)| k == "split.tensors.count")
            .and_then(|(_, v)| v.as_u64());
        let found = sharded.table.tensors().len() as u64;
        if let Some(declared) = declared.filter(|&d| d != found) {
            return Err(SourceError::invalid(path)(format!(
                "the split set says it holds {declared} tensors (split.tensors.count), its \
                 parts hold {found}"
            )));
        }
        Ok(Self::assemble(path, sharded))
    }

    /// GGUF bytes in memory (one file), with options.
    ///
    /// # Errors
    /// As [`open`](Self::open), naming `"<memory>"`.
    pub fn from_bytes(bytes: Bytes, options: &OpenOptions) -> Result<Self, SourceError> {
        let path = Path::new("<memory>");
        let limits = &options.limits;
        let bytes = crate::source::data::view_capable(bytes);
        let len = bytes.len() as u64;
        crate::source::data::within_file_size(path, len, limits)?;
        let header = header::read(std::io::Cursor::new(&bytes[..]), len, limits)
            .map_err(|e| header_error(path, e))?;
        let mut opened = Some(shard(
            path,
            header,
            len,
            Source::Memory(bytes),
            (options.keep_quantized, options.dequantize_into(path)?),
        )?);
        let sharded = assemble_shards(path, &[path.to_path_buf()], None, limits, |_, _| {
            opened
                .take()
                .ok_or_else(|| SourceError::invalid(path)("opened twice".into()))
        })?;
        Ok(Self::assemble(path, sharded))
    }

    fn assemble(path: &Path, sharded: Sharded<Shard, Stored>) -> Self {
        Self {
            file: path.display().to_string(),
            shards: sharded.shards.into_iter().map(|(_, s)| s).collect(),
            table: sharded.table,
        }
    }

    /// The metadata of the (first) file, in file order, typed.
    ///
    /// ```no_run
    /// let source = burnpack::interop::gguf::GgufSource::open("model.gguf").unwrap();
    /// let arch = source.get("general.architecture").and_then(|v| v.as_str());
    /// ```
    #[must_use]
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.shards[0].metadata
    }

    /// The metadata value of `key` in the (first) file.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The GGUF version of the (first) file.
    #[must_use]
    pub fn version(&self) -> u32 {
        self.shards[0].version
    }

    /// The stored type of `info` (a tensor of this source), when ggml has it.
    #[must_use]
    pub fn ggml_type(&self, info: &TensorInfo) -> Option<GgmlType> {
        self.table.place(info).ok().and_then(|p| p.place.ty)
    }

    /// The files read: the one file, or the parts of a split set in order.
    #[must_use]
    pub fn shards(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    pub(super) fn type_name(stored: &Stored) -> String {
        stored.ty.map_or_else(
            || format!("type {}", stored.type_id),
            |t| t.name().to_string(),
        )
    }
}

type Opened = (Shard, Vec<(TensorInfo, Stored)>);

fn header_error(path: &Path, e: HeaderError) -> SourceError {
    let path = path.to_path_buf();
    match e {
        HeaderError::Truncated(reason) => SourceError::Truncated { path, reason },
        HeaderError::Unsupported(reason) => SourceError::Unsupported { path, reason },
        HeaderError::Invalid(reason) => SourceError::Invalid { path, reason },
    }
}

/// One file: its header read with ordinary reads and validated, then the file mapped.
fn open_file(
    path: &Path,
    file: Option<std::fs::File>,
    options: &OpenOptions,
) -> Result<Opened, SourceError> {
    let (limits, keep) = (&options.limits, options.keep_quantized);
    let into = options.dequantize_into(path)?;
    let (file, len) = crate::source::data::opened_within_limits(path, file, limits)?;
    let header = header::read(std::io::BufReader::new(&file), len, limits)
        .map_err(|e| header_error(path, e))?;
    // As for `Reader::open`, the file must not be truncated while it is mapped (read, not
    // mapped, for a verification).
    let data = crate::source::data::file_data(&file, options.verify)
        .map_err(|(action, e)| SourceError::io(path, action)(e))?;
    shard(path, header, len, data, (keep, into))
}

/// The rows of a validated header: each tensor's shape reversed into Burn's order, its bytes
/// inside the data section, aligned, and clear of every other tensor's.
/// With `keep`, the types a Burn scheme holds exactly are that scheme's `QFloat` tensors; the
/// other quantized types are tensors of dtype `into`.
fn shard(
    path: &Path,
    header: Header,
    len: u64,
    source: Source,
    (keep, into): (bool, DType),
) -> Result<Opened, SourceError> {
    let tensor_error = |tensor: &str, reason: String| SourceError::Tensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        reason,
    };
    let mut rows = Vec::with_capacity(header.tensors.len());
    let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
    for raw in &header.tensors {
        let name = &raw.name;
        let elements = raw
            .dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| tensor_error(name, format!("dimensions {:?} overflow", raw.dims)))?;
        let shape: Vec<usize> = raw
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| tensor_error(name, "a dimension past this platform's memory".into()))?;
        let ty = GgmlType::from_id(raw.type_id);
        let range = stored_range(path, &header, raw, ty, elements, len)?;
        if let Some((start, bytes)) = range {
            ranges.push((start, start + bytes, rows.len()));
        }
        let stored = Stored {
            ty,
            type_id: raw.type_id,
            range,
        };
        let plain = ty.and_then(GgmlType::plain_dtype);
        let kept = ty.filter(|_| keep).and_then(burn_dtype);
        let (dtype, len) = match (plain, kept, range) {
            (Some(dtype), _, Some((_, bytes))) => (dtype, bytes),
            (_, Some(dtype), Some(_)) => (
                dtype,
                ty.and_then(|ty| burn_len(ty, elements))
                    .ok_or_else(|| tensor_error(name, "too many elements".into()))?,
            ),
            // Dequantized (or refused when read) as `into`.
            _ => (
                into,
                elements
                    .checked_mul(into.size() as u64)
                    .ok_or_else(|| tensor_error(name, "too many elements".into()))?,
            ),
        };
        let offset = range.map_or(
            header.data_start.saturating_add(raw.offset),
            |(start, _)| start,
        );
        rows.push((
            TensorInfo::external(name.clone(), dtype, shape, offset, len),
            stored,
        ));
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            return Err(tensor_error(
                rows[b].0.name(),
                format!("its bytes overlap those of tensor '{}'", rows[a].0.name()),
            ));
        }
    }
    let shard = Shard {
        path: path.to_path_buf(),
        source,
        version: header.version,
        alignment: header.alignment,
        metadata: header.metadata,
    };
    Ok((shard, rows))
}

/// Where a tensor's bytes are (absolute start, length), checked: its declared place aligned,
/// rows of whole blocks, inside the file. `None` for a type ggml does not have (its size is
/// unknown).
fn stored_range(
    path: &Path,
    header: &Header,
    raw: &header::RawTensor,
    ty: Option<GgmlType>,
    elements: u64,
    len: u64,
) -> Result<Option<(u64, u64)>, SourceError> {
    let name = &raw.name;
    let tensor_error = |tensor: &str, reason: String| SourceError::Tensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        reason,
    };
    // Every tensor's declared place is aligned, whatever its type.
    if !raw.offset.is_multiple_of(header.alignment) {
        return Err(tensor_error(
            name,
            format!(
                "offset {} is not a multiple of the alignment {}",
                raw.offset, header.alignment
            ),
        ));
    }
    Ok(match ty {
        None => None,
        Some(ty) => {
            // ggml stores rows of whole blocks: the first (fastest) dimension is a
            // multiple of the block.
            let row = raw.dims.first().copied().unwrap_or(1);
            if !row.is_multiple_of(ty.block()) {
                return Err(tensor_error(
                    name,
                    format!(
                        "rows of {row} elements of {ty}, not whole blocks of {}",
                        ty.block()
                    ),
                ));
            }
            let bytes = ty.bytes_of(elements).ok_or_else(|| {
                tensor_error(
                    name,
                    format!("{elements} elements of {ty} are too large to address"),
                )
            })?;
            let start = header.data_start.checked_add(raw.offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(tensor_error(name, "an offset past any file".into()));
            };
            if end > len {
                return Err(SourceError::Truncated {
                    path: path.to_path_buf(),
                    reason: format!(
                        "tensor '{name}' ends at byte {end}, but the file has {len} bytes"
                    ),
                });
            }
            Some((start, bytes))
        }
    })
}

/// `range` of a dequantized tensor (`info`, stored as whole blocks of `ty` from `start`): only
/// the blocks that cover it read and dequantized, then the window of them.
fn blocks_of_range(
    shard: &Shard,
    info: &TensorInfo,
    ty: GgmlType,
    f: Dequantize,
    start: u64,
    range: std::ops::Range<u64>,
) -> Result<Bytes, ReadError> {
    let io = |source| ReadError::reading(shard.path.display().to_string(), info.name(), &source);
    let out_block = ty.block() * info.dtype().size() as u64;
    let (first, last) = (range.start / out_block, range.end.div_ceil(out_block));
    let raw = shard
        .source
        .read(
            start + first * ty.block_bytes(),
            (last - first) * ty.block_bytes(),
            1,
        )
        .map_err(io)?;
    let too_large = || io(std::io::Error::other("too large"));
    let decoded = usize::try_from((last - first) * out_block).map_err(|_| too_large())?;
    let mut words = zeroed_words(decoded.div_ceil(8)).ok_or_else(too_large)?;
    let out = &mut bytemuck::cast_slice_mut(&mut words)[..decoded];
    dequantize(ty, f, &raw, out, info.dtype());
    let skip = usize::try_from(range.start - first * out_block).map_err(|_| too_large())?;
    let len = usize::try_from(range.end - range.start).map_err(|_| too_large())?;
    if skip == 0 {
        return Ok(aligned_words(
            words,
            len,
            burn::tensor::AllocationProperty::Native,
        ));
    }
    let mut window = zeroed_words(len.div_ceil(8)).ok_or_else(too_large)?;
    bytemuck::cast_slice_mut::<u64, u8>(&mut window)[..len]
        .copy_from_slice(&bytemuck::cast_slice::<u64, u8>(&words)[skip..skip + len]);
    Ok(aligned_words(
        window,
        len,
        burn::tensor::AllocationProperty::Native,
    ))
}

impl TensorSource for GgufSource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let InShard { shard, place } = self.table.place(info)?;
        let shard = &self.shards[*shard];
        let io =
            |source| ReadError::reading(shard.path.display().to_string(), info.name(), &source);
        let unread = || ReadError::Unsupported {
            file: shard.path.display().to_string(),
            tensor: info.name().to_string(),
            reason: format!(
                "stored as GGUF {}, which this crate does not read (the other tensors load)",
                Self::type_name(place)
            ),
        };
        let (Some(ty), Some((start, bytes))) = (place.ty, place.range) else {
            return Err(unread());
        };
        if ty.plain_dtype().is_some() {
            return shard
                .source
                .read(start, bytes, element_align(info.dtype()))
                .map_err(io);
        }
        let kept = matches!(info.dtype(), DType::QFloat(_));
        let f: Option<Dequantize> = if kept {
            None
        } else {
            Some(dequantizer(ty).ok_or_else(unread)?)
        };
        let raw = shard.source.read(start, bytes, 1).map_err(io)?;
        let len =
            usize::try_from(info.len()).map_err(|_| io(std::io::Error::other("too large")))?;
        // The dequantized (or re-laid) tensor is memory of its own: asked for first, so that a
        // tensor larger than what is left is an error naming it, not an abort.
        let mut words = zeroed_words(len.div_ceil(8)).ok_or_else(|| {
            io(std::io::Error::other(format!(
                "cannot allocate {len} bytes to {} tensor '{}'",
                if kept { "hold" } else { "dequantize" },
                info.name()
            )))
        })?;
        let out = &mut bytemuck::cast_slice_mut(&mut words)[..len];
        match f {
            Some(f) => dequantize(ty, f, &raw, out, info.dtype()),
            None => split(ty, &raw, out),
        }
        Ok(aligned_words(
            words,
            len,
            burn::tensor::AllocationProperty::Native,
        ))
    }

    /// Only these bytes of a plain tensor; the window of the dequantized whole otherwise.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        crate::source::check_range(&self.file, info, &range)?;
        let InShard { shard, place } = self.table.place(info)?;
        let shard = &self.shards[*shard];
        match (place.ty, place.range) {
            (Some(ty), Some((start, _))) if ty.plain_dtype().is_some() => {
                shard
                    .source
                    .read_window(&shard.path.display().to_string(), info, start, range)
            }
            (Some(ty), Some((start, _)))
                if !matches!(info.dtype(), DType::QFloat(_)) && !range.is_empty() =>
            {
                match dequantizer(ty) {
                    Some(f) => blocks_of_range(shard, info, ty, f, start, range),
                    None => {
                        let whole = self.read(info)?;
                        crate::source::window(&self.file, info, whole, range)
                    }
                }
            }
            _ => {
                let whole = self.read(info)?;
                crate::source::window(&self.file, info, whole, range)
            }
        }
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let InShard { shard, place } = self.table.place(info).ok()?;
        match (place.ty, place.range) {
            (Some(ty), Some((start, _))) if ty.plain_dtype().is_some() => self.shards[*shard]
                .source
                .copy_reason(start, element_align(info.dtype())),
            (Some(ty), _) => Some(CopyReason::Decoded { format: ty.name() }),
            _ => Some(CopyReason::Decoded { format: "GGUF" }),
        }
    }
}
