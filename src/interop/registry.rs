//! The container registry: every format this crate reads, recognised by its content, opened
//! into one [`DescribedSource`]. `bpk` and any program that takes "a file of weights" go
//! through [`open_any`]; a new format is one [`Container`] here (its folder, its feature).

use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use crate::read::Reader;
use crate::source::{DescribedSource, OpenOptions, SourceError};

use super::unknown::unknown;

/// Opens a local file of a format.
type OpenFile = fn(&Path, &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError>;
/// Opens bytes of a format.
type OpenBytes = fn(Bytes, &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError>;

/// One format the registry reads: how to recognise it and how to open it.
///
/// ```
/// let names: Vec<&str> = burnpack::interop::containers().iter().map(|c| c.name).collect();
/// assert!(names.contains(&"burnpack"));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Container {
    /// The format's short name (as [`Description::format`](crate::source::Description) says it).
    pub name: &'static str,
    /// Whether a file's first bytes (up to [`HEAD`]) are this format's, given its length.
    pub sniff: fn(&[u8], u64) -> bool,
    /// Opens a file of this format.
    pub open: OpenFile,
    /// Opens an index JSON whose first shard is of this format (formats with shards).
    pub open_index: Option<OpenFile>,
    /// Opens bytes of this format.
    pub from_bytes: OpenBytes,
}

/// How many bytes of a file [`Container::sniff`] is shown.
pub const HEAD: usize = 64;

fn boxed<S: DescribedSource + 'static>(
    source: Result<S, SourceError>,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    source.map(|s| Box::new(s) as Box<dyn DescribedSource>)
}

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

static CONTAINERS: &[Container] = &[
    Container {
        name: "burnpack",
        sniff: |head, _| head.starts_with(&crate::format::MAGIC.to_le_bytes()),
        open: |path, options| {
            let read = crate::read::ReadOptions::new().limits(options.limits);
            let read = if options.verify {
                read.mode(crate::read::ReadMode::Buffered)
            } else {
                read
            };
            let reader = read.open(path).map_err(SourceError::from)?;
            // An incremental checkpoint: its tensors are in the data files beside it.
            #[cfg(feature = "optim")]
            if reader
                .layout()
                .metadata()
                .contains_key(crate::checkpoint::INCREMENTAL_KEY)
            {
                return boxed(crate::checkpoint::Chain::open_file(
                    path,
                    reader,
                    options.verify,
                ));
            }
            boxed(Ok(reader))
        },
        open_index: None,
        from_bytes: |bytes, options| {
            let read = crate::read::ReadOptions::new().limits(options.limits);
            boxed(read.from_bytes(bytes).map_err(SourceError::from))
        },
    },
    #[cfg(feature = "safetensors")]
    Container {
        name: "safetensors",
        // An 8-byte little-endian header length, then a JSON object (JSON allows white space
        // before it, and the `safetensors` crate reads such headers). The length's four high
        // bytes are zero in any safetensors file (headers are at most 100 MB), and never in
        // text (a JSON Burn record that starts `{"item":{`): a cut file is still told apart,
        // and its parser says it is cut.
        sniff: |head, _| {
            head.len() > 8
                && head[4..8] == [0; 4]
                && head[..4] != [0; 4]
                && first_text_byte(&head[8..]) == Some(b'{')
        },
        open: |path, options| {
            boxed(super::safetensors::SafetensorsSource::open_file_for(
                path,
                &options.limits,
                options.verify,
            ))
        },
        open_index: Some(|path, options| {
            boxed(super::safetensors::SafetensorsSource::open_index_for(
                path,
                &options.limits,
                options.verify,
            ))
        }),
        from_bytes: |bytes, options| {
            boxed(super::safetensors::SafetensorsSource::from_bytes_with(
                bytes,
                &options.limits,
            ))
        },
    },
    #[cfg(feature = "pytorch")]
    Container {
        name: "pytorch",
        sniff: |head, _| {
            head.starts_with(b"PK\x03\x04")
                || head.len() > 1 && head[0] == 0x80 && (2..=5).contains(&head[1])
        },
        open: |path, options| boxed(super::pytorch::PytorchSource::open_file(path, options)),
        open_index: Some(|path, options| {
            boxed(super::pytorch::PytorchSource::open_index(path, options))
        }),
        from_bytes: |bytes, options| {
            boxed(super::pytorch::PytorchSource::from_bytes(bytes, options))
        },
    },
    #[cfg(feature = "gguf")]
    Container {
        name: "gguf",
        sniff: |head, _| head.starts_with(b"GGUF"),
        open: |path, options| boxed(super::gguf::GgufSource::open_with(path, options)),
        open_index: None,
        from_bytes: |bytes, options| boxed(super::gguf::GgufSource::from_bytes(bytes, options)),
    },
    #[cfg(feature = "legacy")]
    Container {
        name: "burn-record",
        // Gzip (`.mpk.gz`, `.json.gz`), a JSON object, or a small MessagePack map whose first
        // key is a short string (`metadata`): what Burn 0.14-0.21's recorders write.
        sniff: |head, _| {
            head.starts_with(&[0x1f, 0x8b])
                || first_text_byte(head) == Some(b'{')
                || head.len() > 1
                    && (0x81..=0x8f).contains(&head[0])
                    && (0xa0..=0xbf).contains(&head[1])
        },
        open: |path, options| {
            boxed(super::burn_record::LegacySource::open_detect(
                path,
                &options.limits,
            ))
        },
        open_index: None,
        from_bytes: |bytes, options| {
            boxed(super::burn_record::LegacySource::from_bytes(
                bytes,
                &options.limits,
            ))
        },
    },
];

/// The first byte that is not ASCII white space.
fn first_text_byte(head: &[u8]) -> Option<u8> {
    head.iter().copied().find(|b| !b.is_ascii_whitespace())
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
    if location.to_str().is_some_and(super::is_object_url) {
        return open_url(location, options);
    }
    let (file, head, len) = head_of(location, INDEX_HEAD)?;
    if first_text_byte(&head) == Some(b'{') && is_index(file) {
        return open_index(location, options);
    }
    match sniffed(&head, len) {
        Some(container) => (container.open)(location, options),
        None => Err(unknown(location, &head)),
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
        if first_text_byte(&head) == Some(b'{') && is_index(file) {
            return Err(SourceError::Invalid {
                path: location.to_path_buf(),
                reason: format!(
                    "shard '{}' is itself an index: an index names files of tensors",
                    shard.display()
                ),
            });
        }
        let container = sniffed(&head, len).ok_or_else(|| unknown(shard, &head))?;
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
    let head = &bytes[..bytes.len().min(HEAD)];
    match sniffed(head, bytes.len() as u64) {
        Some(container) => (container.from_bytes)(bytes, options),
        None => Err(unknown(Path::new("<memory>"), head)),
    }
}

/// How much of a file's start is looked at for its format (a JSON document may start with
/// white space).
const INDEX_HEAD: usize = 64 << 10;

/// Whether the JSON object `file` starts with is an index of shards: told by its first key
/// that decides (`weight_map`: an index; `item`: a Burn record), reading no further than that
/// (other keys' values, such as an index's or a record's `metadata`, are skipped).
#[cfg(not(any(feature = "safetensors", feature = "pytorch", feature = "legacy")))]
fn is_index(_: std::fs::File) -> bool {
    // No format of this build reads JSON.
    false
}

/// Whether the JSON object `file` starts with is an index of shards (see above).
#[cfg(any(feature = "safetensors", feature = "pytorch", feature = "legacy"))]
fn is_index(file: std::fs::File) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Keys<'a>(&'a std::cell::Cell<Option<bool>>);
    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "weight_map" => {
                        self.0.set(Some(true));
                        return Ok(());
                    }
                    "item" => {
                        self.0.set(Some(false));
                        return Ok(());
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let decided = std::cell::Cell::new(None);
    let reader = std::io::BufReader::new(std::io::Read::take(file, INDEX_SCAN));
    let mut de = serde_json::Deserializer::from_reader(reader);
    // The deserializer complains of the keys left unread once the visitor has decided.
    let _ = (&mut de).deserialize_map(Keys(&decided));
    decided.get() == Some(true)
}

/// How far into a JSON file [`is_index`] reads for its deciding key (an index's `metadata`
/// comes first and is small).
#[cfg(any(feature = "safetensors", feature = "pytorch", feature = "legacy"))]
const INDEX_SCAN: u64 = 64 << 20;

/// The shards an index names, in name order.
fn index_shards(path: &Path, options: &OpenOptions) -> Result<Vec<PathBuf>, SourceError> {
    #[cfg(any(feature = "safetensors", feature = "pytorch"))]
    {
        let index = super::index::ShardIndex::read(path, "shard", options.limits.max_tensor_count)?;
        Ok(index.shards)
    }
    #[cfg(not(any(feature = "safetensors", feature = "pytorch")))]
    {
        let _ = options;
        Err(SourceError::Location {
            path: path.to_path_buf(),
            reason: "an index of shards: this build reads neither safetensors nor PyTorch \
                     shards (features `safetensors`, `pytorch`)"
                .into(),
        })
    }
}

/// Opens the regular file `path` and reads its first `most` bytes (fewer when it is shorter):
/// the file, those bytes and its length.
fn head_of(path: &Path, most: usize) -> Result<(std::fs::File, Vec<u8>, u64), SourceError> {
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
    let source = ObjectSource::open_with(&object, &options.limits)?;
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
