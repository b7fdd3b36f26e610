//! The container registry: every format this crate reads, recognised by its content, opened
//! into one [`DescribedSource`]. `bpk` and any program that takes "a file of weights" go
//! through [`open_any`]; a new format is one [`Container`] here (its folder, its feature).

use std::fs::File;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use super::container::{Container, HEAD, first_text_byte};
use super::unknown::unknown;
use crate::read::Reader;
use crate::source::{DescribedSource, OpenOptions, SourceError};

/// Every format this build reads, in the order they are tried.
///
/// ```
/// for container in burnpack::interop::containers() {
///     println!("{}", container.name);
/// }
/// ```
#[must_use]
pub fn containers() -> &'static [Container] {
    CONTAINERS
}

/// The formats of this build: each format's folder exports its container; a format's feature
/// gate is here and on its folder's declaration, nowhere else.
static CONTAINERS: &[Container] = &[
    super::pack::CONTAINER,
    #[cfg(feature = "safetensors")]
    super::safetensors::CONTAINER,
    #[cfg(feature = "numpy")]
    super::numpy::CONTAINER,
    #[cfg(feature = "pytorch")]
    super::pytorch::CONTAINER,
    #[cfg(feature = "gguf")]
    super::gguf::CONTAINER,
    #[cfg(feature = "onnx")]
    super::onnx::CONTAINER,
    #[cfg(feature = "legacy")]
    super::burn_record::CONTAINER,
];

/// What a file whose first bytes are `head` is, when it is given where another format is
/// wanted (a near miss): the [`hint`](Container::hint) of the format of this build that takes
/// those bytes, or `None` when none does.
///
/// ```
/// let hint = burnpack::interop::near_miss(b"NRUB\x01\x00\x00\x00\x00\x00").unwrap();
/// assert!(hint.contains("burnpack"));
/// assert_eq!(burnpack::interop::near_miss(b"hello"), None);
/// ```
#[must_use]
pub fn near_miss(head: &[u8]) -> Option<&'static str> {
    sniffed(head, head.len() as u64).map(|c| c.hint)
}

/// Opens whatever `location` names, with the default [`OpenOptions`]: a local file of any
/// format this build reads (told by its content, never by its name), an index JSON of shards
/// (the format of its first shard), or a pack on object storage (`s3://bucket/key`, feature
/// `object-store`).
///
/// ```
/// use burnpack::source::SourceErrorKind;
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("notes.txt");
/// std::fs::write(&path, b"hello").unwrap();
/// let err = burnpack::interop::open_any(&path).unwrap_err();
/// assert_eq!(err.kind(), SourceErrorKind::UnknownFormat);
/// assert!(err.to_string().contains("not a file bpk reads (it starts with \"hello\")"));
/// ```
///
/// # Errors
/// [`SourceError`]: the file cannot be read, is of no format this build reads, or is invalid
/// in its format.
pub fn open_any(location: impl AsRef<Path>) -> Result<Box<dyn DescribedSource>, SourceError> {
    open_any_with(location, &OpenOptions::new())
}

/// [`open_any`] with options.
///
/// # Errors
/// As [`open_any`].
pub fn open_any_with(
    location: impl AsRef<Path>,
    options: &OpenOptions,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    let location = location.as_ref();
    // An option no format can honour is refused whatever the file is.
    options.dequantize_into(location)?;
    if location.to_str().is_some_and(super::is_object_url) {
        return open_url(location, options);
    }
    let (file, head, len) = head_of(location, INDEX_HEAD)?;
    if first_text_byte(&head) == Some(b'{') && is_index(&file) {
        return open_index(location, options);
    }
    match sniffed(&head, len) {
        // The file opened here is the one the format reads: opened once. Its cursor back at
        // the start (reading the head moved it on Windows and WASI, scanning an index
        // everywhere), for a format that reads it through `Read`.
        Some(container) => {
            let mut file = file;
            std::io::Seek::rewind(&mut file).map_err(SourceError::io(location, "seek"))?;
            (container.open_file)(location, file, options)
        }
        None => Err(unknown(location, &head, CONTAINERS)),
    }
}

/// An index JSON of shards: every shard's format told by its content, all of one format,
/// opened by that format's index opener.
fn open_index(
    location: &Path,
    options: &OpenOptions,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    let shards = index_shards(location, options)?;
    let mut format: Option<(&'static Container, &Path)> = None;
    for shard in &shards {
        let (file, head, len) = head_of(shard, HEAD)?;
        if first_text_byte(&head) == Some(b'{') && is_index(&file) {
            return Err(SourceError::Invalid {
                path: location.to_path_buf(),
                reason: format!(
                    "shard '{}' is itself an index: an index names files of tensors",
                    shard.display()
                ),
            });
        }
        let container = sniffed(&head, len).ok_or_else(|| unknown(shard, &head, CONTAINERS))?;
        match format {
            None => format = Some((container, shard)),
            Some((first, first_shard)) if first.name != container.name => {
                return Err(SourceError::Invalid {
                    path: location.to_path_buf(),
                    reason: format!(
                        "shards of two formats: '{}' is {}, '{}' is {}",
                        first_shard.display(),
                        first.name,
                        shard.display(),
                        container.name
                    ),
                });
            }
            Some(_) => {}
        }
    }
    let (container, _) = format.ok_or_else(|| SourceError::Invalid {
        path: location.to_path_buf(),
        reason: "an index of no shard".into(),
    })?;
    let open = container.open_index.ok_or_else(|| SourceError::Invalid {
        path: location.to_path_buf(),
        reason: format!(
            "an index of shards of {} files, which are not read through an index",
            container.name
        ),
    })?;
    open(location, options)
}

/// Opens bytes of any format this build reads (told by their content), named `"<memory>"`
/// in errors: what a web page fetched, a model compiled into the program.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
///     .into_bytes()
///     .unwrap();
/// let source = burnpack::interop::open_bytes_any(pack, &Default::default()).unwrap();
/// assert_eq!(source.describe().format, "burnpack");
/// ```
///
/// # Errors
/// As [`open_any`].
pub fn open_bytes_any(
    bytes: Bytes,
    options: &OpenOptions,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    // As much of the start as a file's sniff is shown (a zip archive's first member name
    // tells an `.npz` from a `torch.save` file, and may be long).
    let head = &bytes[..bytes.len().min(INDEX_HEAD)];
    match sniffed(head, bytes.len() as u64) {
        Some(container) => (container.from_bytes)(bytes, options),
        None => Err(unknown(Path::new("<memory>"), head, CONTAINERS)),
    }
}

/// How much of a file's start is looked at for its format (a JSON document may start with
/// white space).
const INDEX_HEAD: usize = 64 << 10;

/// Whether the JSON object `file` starts with is an index of shards: told by its first key
/// that decides (`weight_map`: an index; `item`: a Burn record), reading no further than that
/// (other keys' values, such as an index's or a record's `metadata`, are skipped), and never
/// past [`INDEX_SCAN`] bytes.
fn is_index(file: &File) -> bool {
    let reader = std::io::BufReader::new(std::io::Read::take(file, INDEX_SCAN));
    let mut bytes = std::io::Read::bytes(reader).map_while(Result::ok);
    first_deciding_key(&mut bytes) == Some(true)
}

/// How far into a JSON file [`is_index`] reads for its deciding key (an index's `metadata`
/// comes first and is small).
const INDEX_SCAN: u64 = 64 << 20;

/// The keys of the JSON object `bytes` start with, in order, until one decides: `Some(true)`
/// for `weight_map`, `Some(false)` for `item`; `None` when none does or the JSON is cut or
/// invalid. Values of other keys are skipped (strings, numbers, nested arrays and objects).
fn first_deciding_key(bytes: &mut impl Iterator<Item = u8>) -> Option<bool> {
    fn next(bytes: &mut impl Iterator<Item = u8>) -> Option<u8> {
        bytes.find(|b| !b.is_ascii_whitespace())
    }
    if next(bytes)? != b'{' {
        return None;
    }
    loop {
        match next(bytes)? {
            b'"' => {}
            _ => return None,
        }
        let key = json_string(bytes)?;
        match key.as_slice() {
            b"weight_map" => return Some(true),
            b"item" => return Some(false),
            _ => {}
        }
        if next(bytes)? != b':' {
            return None;
        }
        // The value, to the comma (or the end of the object) at this depth.
        let mut depth = 0usize;
        loop {
            match bytes.next()? {
                b'"' => {
                    json_string(bytes)?;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => return None,
                b'}' | b']' => depth -= 1,
                b',' if depth == 0 => break,
                _ => {}
            }
        }
    }
}

/// The rest of a JSON string whose opening quote was read, up to its closing quote (escapes
/// kept as written; keys compared here have none). At most 4 KiB is kept.
fn json_string(bytes: &mut impl Iterator<Item = u8>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        match bytes.next()? {
            b'"' => return Some(out),
            b'\\' => {
                let escaped = bytes.next()?;
                if out.len() < 4096 {
                    out.extend([b'\\', escaped]);
                }
            }
            b if out.len() < 4096 => out.push(b),
            _ => {}
        }
    }
}

/// The shards an index names, in name order, read by a format of this build with shards.
fn index_shards(path: &Path, options: &OpenOptions) -> Result<Vec<PathBuf>, SourceError> {
    match CONTAINERS.iter().find_map(|c| c.index_shards) {
        Some(shards) => shards(path, options),
        None => Err(SourceError::Location {
            path: path.to_path_buf(),
            reason: "an index of shards: this build reads no format with shards (features \
                     `safetensors`, `pytorch`)"
                .into(),
        }),
    }
}

/// Opens the regular file `path` and reads its first `most` bytes (fewer when it is shorter):
/// the file, those bytes and its length.
fn head_of(path: &Path, most: usize) -> Result<(File, Vec<u8>, u64), SourceError> {
    let file = crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?;
    let len = file
        .metadata()
        .map_err(SourceError::io(path, "stat"))?
        .len();
    let n = usize::try_from(len).map_or(most, |len| len.min(most));
    let mut head = vec![0u8; n];
    crate::platform::read_exact_at(&file, &mut head, 0).map_err(SourceError::io(path, "read"))?;
    Ok((file, head, len))
}

/// The first container whose sniff takes `head`.
fn sniffed(head: &[u8], total: u64) -> Option<&'static Container> {
    CONTAINERS.iter().find(|c| (c.sniff)(head, total))
}

/// A pack on object storage.
#[cfg(feature = "object-store")]
fn open_url(
    location: &Path,
    options: &OpenOptions,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    use super::object_store::{ObjectLocation, ObjectSource};
    let url = location.to_string_lossy();
    let object = ObjectLocation::parse(&url)?;
    let source = ObjectSource::open_with(&object, options)?;
    if !options.verify {
        return Ok(Box::new(source));
    }
    // Header and metadata first (above), so that an object that is not a pack within the
    // limits is refused before its data is fetched; then one GET.
    drop(source);
    let bytes = object.read_all()?;
    let reader = crate::read::ReadOptions::new()
        .limits(options.limits)
        .from_bytes(Bytes::from_bytes_vec(bytes))
        .map(|r: Reader| r.with_name(url.to_string()))
        .map_err(SourceError::from)?;
    Ok(Box::new(reader))
}

/// Without the `object-store` feature, a URL says how to get it.
#[cfg(not(feature = "object-store"))]
fn open_url(location: &Path, _: &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError> {
    let _: Option<Reader> = None;
    Err(SourceError::Location {
        path: location.to_path_buf(),
        reason: "this build reads no object storage; build it with the `object-store` feature \
                 (bpk: install it with `--features cli,object-store`)"
            .into(),
    })
}
