//! Conversions between burnpack and safetensors (the `safetensors` crate reads and writes that
//! format; nothing of it is re-implemented here).
//!
//! Both directions stream: the source is memory-mapped and each tensor goes from the mapping
//! to the destination without the model being held in memory. safetensors → burnpack writes
//! in parallel (this crate's writer); burnpack → safetensors writes sequentially (the
//! `safetensors` crate's writer). Both destinations are written atomically.
//!
//! ```
//! use burn::tensor::{Bytes, DType};
//! use burnpack::interop::safetensors as convert;
//! use burnpack::write::{Entry, Writer};
//! let dir = tempfile::tempdir().unwrap();
//! let (bpk, st, back) = (dir.path().join("m.bpk"), dir.path().join("m.safetensors"), dir.path().join("back.bpk"));
//! Writer::new(vec![Entry::resident("w", DType::F32, vec![2], Bytes::from_elems(vec![1.0f32, 2.0]))])
//!     .write_to_file(&bpk)
//!     .unwrap();
//! convert::burnpack_to_safetensors(&bpk, &st).unwrap();
//! convert::safetensors_to_burnpack(&st, &back).unwrap();
//! let reader = burnpack::read::Reader::open(&back).unwrap();
//! assert_eq!(&reader.bytes("w").unwrap()[..], &[1.0f32, 2.0].map(f32::to_le_bytes).concat()[..]);
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::{BoolStore, DType};
use safetensors::Dtype;

use crate::read::Reader;
use crate::write::{Entry, WriteError, Writer};

mod container;
mod deprecated;
mod describe;
mod fp8;
mod header;
#[cfg(all(test, target_os = "linux"))]
mod prefetch_tests;
mod source;
mod write;
pub(crate) use container::CONTAINER;
pub use source::SafetensorsSource;
pub use write::save_safetensors;

/// Why a conversion failed. Every variant names the file and, where there is one, the tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// The burnpack source could not be read.
    #[error(transparent)]
    Read(#[from] crate::source::ReadError),
    /// The burnpack destination could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A module's parameters could not be collected.
    #[error(transparent)]
    Module(#[from] crate::module::ModuleError),
    /// The input could not be opened (any format: the error names the file and says why).
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    /// A file operation failed.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The safetensors file could not be written.
    #[error("{}: {message}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The safetensors crate's error.
        message: String,
    },
    /// The header (tensor table and metadata) would be larger than safetensors readers
    /// accept: refused before anything is written.
    #[error("{}: {reason}", path.display())]
    Header {
        /// The source file.
        path: PathBuf,
        /// How large, and what makes it so.
        reason: String,
    },
    /// A tensor's name means something else in the other format (`__metadata__` in
    /// safetensors): refused before anything is written.
    #[error("{}: tensor '{tensor}': {reason}", path.display())]
    Name {
        /// The source file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the name means there.
        reason: String,
    },
    /// A tensor's dtype has no equivalent in the other format.
    #[error("{}: tensor '{tensor}': {dtype} has no {target} equivalent", path.display())]
    Dtype {
        /// The source file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
        /// The destination format.
        target: &'static str,
    },
}

impl ConvertError {
    /// A tensor the output format cannot hold is the input's: the error names the input file
    /// (the output was not written).
    pub(crate) fn naming_input(self, input: &str) -> Self {
        match self {
            Self::Name { tensor, reason, .. } => Self::Name {
                path: PathBuf::from(input),
                tensor,
                reason,
            },
            Self::Header { reason, .. } => Self::Header {
                path: PathBuf::from(input),
                reason,
            },
            Self::Dtype {
                tensor,
                dtype,
                target,
                ..
            } => Self::Dtype {
                path: PathBuf::from(input),
                tensor,
                dtype,
                target,
            },
            other => other,
        }
    }

    /// Maps an I/O error of `action` on `path` (for `map_err`).
    pub(crate) fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            path,
            action,
            source,
        }
    }
}

fn to_burn(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::BOOL => DType::Bool(BoolStore::Native),
        Dtype::U8 => DType::U8,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::U64 => DType::U64,
        _ => return None,
    })
}

/// Why a tensor of `dtype` (one [`to_burn`] has no Burn dtype for, and not an 8-bit float,
/// which is decoded) cannot be loaded: the packed 4- and 6-bit floats.
fn withheld_reason(dtype: Dtype) -> String {
    format!(
        "Burn has no {dtype:?} dtype and this crate does not decode it, so it is not loadable \
         (load the other tensors with a filter or allow_partial)"
    )
}

/// The safetensors dtype of a burnpack dtype. `Flex32` is stored as f32 bytes, so it becomes
/// `F32`; quantized tensors and non-native boolean stores have no equivalent.
fn to_safetensors(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::Bool(BoolStore::Native) => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::I8 => Dtype::I8,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::F32 | DType::Flex32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::U64 => Dtype::U64,
        DType::Bool(_) | DType::QFloat(_) => return None,
    })
}

/// Converts safetensors weights (one file, or an index JSON and its shards) to one burnpack
/// file: names, dtypes, shapes and string metadata are kept; tensors are written in the
/// sources' file order, in parallel, each copied from its mapped shard into its aligned slot
/// (so unaligned safetensors tensors come out aligned). Returns the size written.
///
/// # Errors
/// An invalid source (see [`SafetensorsSource::open`]), an unsupported dtype (`F4`, `F6_*`:
/// FP8 tensors are written decoded into `f32`), or a failed write (the destination is then
/// untouched).
pub fn safetensors_to_burnpack(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
) -> Result<u64, ConvertError> {
    Ok(safetensors_to_writer(input)?.write_to_file(output)?)
}

/// The writer [`safetensors_to_burnpack`] writes with: every tensor of the safetensors
/// weights as a window of its mapped shard, in the shards' file order, with the string
/// metadata. For destinations other than a file (an object store's
/// `upload` (feature `object-store`), bytes in memory).
///
/// ```
/// use burnpack::interop::safetensors::{safetensors_to_writer, save_safetensors};
/// # use burn::module::{Module, Param};
/// # use burn::tensor::{Device, Tensor};
/// # #[derive(Module, Debug)] struct Tiny { w: Param<Tensor<1>> }
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("m.safetensors");
/// let model = Tiny { w: Param::from_data([1.0, 2.0], &Device::flex()) };
/// save_safetensors(&model, &path, None).unwrap();
/// let pack = safetensors_to_writer(&path).unwrap().into_bytes().unwrap();
/// let reader = burnpack::read::Reader::from_bytes(pack).unwrap();
/// assert_eq!(reader.tensors()[0].name(), "w");
/// ```
///
/// # Errors
/// As for [`safetensors_to_burnpack`], less the write.
pub fn safetensors_to_writer(input: impl AsRef<Path>) -> Result<Writer, ConvertError> {
    let source = SafetensorsSource::open(input)?;
    // A tensor of a dtype this crate does not decode (F4, F6) would be missing from the
    // pack: refused by name. FP8 tensors are written as read: decoded into `f32`.
    crate::source::refuse_withheld(&source)?;
    let mut infos: Vec<&crate::format::TensorInfo> = crate::source::TensorSource::tensors(&source)
        .iter()
        .collect();
    infos.sort_by_key(|t| (source.shard_of(t).to_path_buf(), t.offset()));
    let mut entries = Vec::with_capacity(infos.len());
    for info in infos {
        entries.push(Entry::resident(
            info.name(),
            info.dtype(),
            info.shape().to_vec(),
            source.window(info)?,
        ));
    }
    let mut writer = Writer::new(entries);
    // The `producer` key names the writer of the file that holds it: another format's is not
    // carried into a pack (where it would claim to be this crate's, or another pack writer's).
    for (k, v) in source.metadata() {
        if k != PRODUCER_KEY {
            writer = writer.metadata(k.clone(), v.clone());
        }
    }
    Ok(writer)
}

/// Converts a burnpack file to safetensors with the `safetensors` crate: names, dtypes, shapes
/// and string metadata are kept (parameter ids and scalars have no place in safetensors and
/// are dropped). Each tensor is read from the mapped source as it is written. The destination
/// is written to a scratch sibling, fsynced and renamed. Returns the size written.
///
/// # Errors
/// An invalid source, a dtype safetensors cannot hold (quantized, non-native booleans), or a
/// failed write (the destination is then untouched).
pub fn burnpack_to_safetensors(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
) -> Result<u64, ConvertError> {
    let output = output.as_ref();
    burnpack_to_safetensors_sharded(input, output, None)?;
    std::fs::metadata(output)
        .map(|m| m.len())
        .map_err(ConvertError::io(output, "stat"))
}

/// [`burnpack_to_safetensors`], split into shards of at most `max_shard_bytes` with the
/// index JSON when the tensors exceed it (named as [`save_safetensors`] names them). Returns
/// the paths written, the index last.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::safetensors as convert;
/// use burnpack::write::{Entry, Writer};
/// let dir = tempfile::tempdir().unwrap();
/// let bpk = dir.path().join("m.bpk");
/// let entries = (0..3).map(|i| Entry::resident(format!("w{i}"), DType::F32, vec![4], Bytes::from_elems(vec![i as f32; 4])));
/// Writer::new(entries.collect()).write_to_file(&bpk).unwrap();
/// let written = convert::burnpack_to_safetensors_sharded(&bpk, dir.path().join("m.safetensors"), Some(16)).unwrap();
/// assert_eq!(written.len(), 4); // three shards and the index
/// ```
///
/// # Errors
/// As for [`burnpack_to_safetensors`].
pub fn burnpack_to_safetensors_sharded(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    max_shard_bytes: Option<u64>,
) -> Result<Vec<PathBuf>, ConvertError> {
    pack_to_safetensors(&Reader::open(input.as_ref())?, output, max_shard_bytes)
}

/// Any [`TensorSource`](crate::source::TensorSource) (a `torch.save` file, a Burn 0.21 record)
/// written as safetensors: one file, or shards and their index past `max_shard_bytes`. Returns
/// the paths written, the index last.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::safetensors as convert;
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32]))])
///     .into_bytes()
///     .unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("m.safetensors");
/// assert_eq!(convert::source_to_safetensors(&Reader::from_bytes(pack).unwrap(), &out, None).unwrap(), [out]);
/// ```
///
/// # Errors
/// A tensor could not be read, has no safetensors dtype, or the output could not be written.
pub fn source_to_safetensors<S: crate::source::TensorSource + ?Sized>(
    source: &S,
    output: impl AsRef<Path>,
    max_shard_bytes: Option<u64>,
) -> Result<Vec<PathBuf>, ConvertError> {
    let entries = Writer::from_source(source)?.into_entries();
    write::write_safetensors(entries, output.as_ref(), max_shard_bytes, None)
        .map_err(|e| e.naming_input(source.file()))
}

/// A [`Writer`]'s tensors and string metadata (the writer's `producer` aside) as safetensors,
/// sharded at `max_shard_bytes`: what a source's
/// [`to_writer`](crate::source::DescribedSource::to_writer) holds (a GGUF file's metadata,
/// say), kept. `file` names the input in errors. Returns the paths written, the index last.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::safetensors::writer_to_safetensors;
/// use burnpack::write::{Entry, Writer};
/// let writer = Writer::new(vec![Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32]))])
///     .metadata("general.architecture", "llama");
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("m.safetensors");
/// writer_to_safetensors(writer, "m.gguf", &out, None).unwrap();
/// let bytes = std::fs::read(&out).unwrap();
/// let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
/// assert_eq!(meta.metadata().as_ref().unwrap()["general.architecture"], "llama");
/// ```
///
/// # Errors
/// As [`source_to_safetensors`].
pub fn writer_to_safetensors(
    writer: Writer,
    file: &str,
    output: impl AsRef<Path>,
    max_shard_bytes: Option<u64>,
) -> Result<Vec<PathBuf>, ConvertError> {
    let (entries, metadata) = writer.into_parts();
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .filter(|(k, _)| k.as_str() != PRODUCER_KEY)
        .collect();
    write::write_safetensors(
        entries,
        output.as_ref(),
        max_shard_bytes,
        (!metadata.is_empty()).then_some(&metadata),
    )
    .map_err(|e| e.naming_input(file))
}

/// The metadata key that names a file's writer: it describes the file that holds it, so it is
/// never copied into a file of another format.
const PRODUCER_KEY: &str = "producer";

/// [`burnpack_to_safetensors_sharded`] from any open pack (a [`Reader`], a pack on object
/// storage): each tensor checked against its checksum, then written by the `safetensors`
/// crate. Returns the paths written, the index last.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::safetensors as convert;
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32]))])
///     .into_bytes()
///     .unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("m.safetensors");
/// let written = convert::pack_to_safetensors(&Reader::from_bytes(pack).unwrap(), &out, None).unwrap();
/// assert_eq!(written, [out]);
/// ```
///
/// # Errors
/// As for [`burnpack_to_safetensors`], and a tensor failing its checksum.
pub fn pack_to_safetensors<S: crate::source::PackSource + ?Sized>(
    source: &S,
    output: impl AsRef<Path>,
    max_shard_bytes: Option<u64>,
) -> Result<Vec<PathBuf>, ConvertError> {
    // The pack's metadata goes along (its own `producer` aside: it describes the pack, not the
    // safetensors file the `safetensors` crate writes from it).
    let mut writer = Writer::from_part(source, "")?;
    for (key, value) in source.layout().metadata() {
        writer = writer.metadata(key.clone(), value.clone());
    }
    writer_to_safetensors(writer, source.file(), output, max_shard_bytes)
}
