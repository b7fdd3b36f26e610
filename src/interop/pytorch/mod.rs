//! `PyTorch` `torch.save` files (`.pt`, `.pth`, `.bin`) as a [`TensorSource`], read without
//! running anything in them: a restricted unpickler reads the state dict's object graph and
//! refuses every global a state dict does not need, by name.
//!
//! Both containers `torch.save` has written are read:
//! - the zip archive of `PyTorch` 1.6 and later: `<name>/data.pkl` (the pickle) and one stored
//!   (uncompressed) entry per storage, `<name>/data/<key>`, each aligned to 64 bytes by recent
//!   versions. The file is mapped once and each contiguous tensor of an aligned storage is a
//!   zero-copy window of the mapping.
//! - the legacy format (before 1.6): pickles in a row (magic number, protocol, system info, the
//!   object, the storage keys), then each storage's element count and bytes.
//!
//! Tensors are views of storages: at an offset, several sharing one storage, with any strides.
//! A contiguous view is a window; a non-contiguous one (a transposed weight saved as is, a
//! buffer expanded with stride 0) is gathered into memory of its own, once, in parallel across
//! tensors when the module loader asks for them together, and the load report says why
//! ([`CopyReason::Strided`]). What the gathered views of a file add up to is bounded by the
//! file's own size plus 16 MiB, checked when it is opened: a few bytes expanded to gigabytes
//! are an error naming the tensor, not an allocation.
//!
//! Nothing is dropped in silence, and memory is bounded by the input: see the restricted
//! unpickler's rules (an argument or construct it does not fully understand is an error naming
//! it; its graph is at most 32 bytes per byte of the pickle plus 1 MiB) and docs/integrity.md.
//! Only regular files are opened (a FIFO or a device is refused before it is opened).
//!
//! The state dict is found at the top, or under a key: the one the options name, else the
//! first of `state_dict`, `model_state_dict` and `model` that holds tensors when the top holds
//! none directly. Nested dicts and lists are flattened with `.` (`encoder.layers.0.weight`).
//! A sharded checkpoint (`pytorch_model.bin.index.json`) is opened through its index, as for
//! safetensors.
//!
//! ```no_run
//! use burnpack::interop::pytorch::PytorchSource;
//! use burnpack::{LoadOptions, PackModule};
//! # use burn::module::Module;
//! # #[derive(Module, Debug)] struct Net { fc: burn::nn::Linear }
//! # let device = burn::tensor::Device::flex();
//! # let net = Net { fc: burn::nn::LinearConfig::new(2, 2).init(&device) };
//! let source = PytorchSource::open("resnet18.pth")?;
//! // PyTorch's Linear stores [out, in]; `pytorch(true)` transposes and renames norm parameters.
//! let net = net.load_from_source(&source, &LoadOptions::new().pytorch(true))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod pickle;

use std::collections::HashMap;
use std::fs::File;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use burn::tensor::{Bytes, DType};
use rayon::prelude::*;

use crate::format::{Limits, TensorInfo, element_align};
use crate::interop::index::{IndexError, ShardIndex};
use crate::read::source::{Source, aligned_bytes};
use crate::read::{CopyReason, ReadError, TensorSource};
use pickle::{Node, Pickle, PickleError, Storage, TensorView};

/// Why a `torch.save` file could not be opened. Every variant names the file; tensor errors
/// name the tensor too.
///
/// ```
/// use burnpack::interop::pytorch::{PytorchError, PytorchSource};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("empty.pt");
/// std::fs::write(&path, b"").unwrap();
/// match PytorchSource::open(&path) {
///     Err(PytorchError::Refused { global, .. }) => println!("malicious: {global}"),
///     Err(e) => println!("{e}"), // names empty.pt
///     Ok(_) => unreachable!(),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PytorchError {
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
    /// The file is not a `torch.save` file this source reads, or is damaged.
    #[error("{path}: not a readable torch.save file: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The pickle references a global outside the table of those a state dict needs (what a
    /// malicious file would use to run code). Nothing was run.
    #[error(
        "{path}: refused: the pickle references `{global}`, which a state dict never needs (nothing in the file is run)"
    )]
    Refused {
        /// The file.
        path: PathBuf,
        /// The global, as `module.name`.
        global: String,
    },
    /// A tensor of the file is not one Burn can hold, or does not fit its storage.
    #[error("{path}: tensor '{tensor}': {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor's flattened name.
        tensor: String,
        /// What was wrong.
        reason: String,
    },
}

/// How to open a `torch.save` file.
///
/// ```
/// use burnpack::interop::pytorch::PytorchOptions;
/// let options = PytorchOptions::new().key("ema_state_dict");
/// ```
#[derive(Debug, Clone, Default)]
pub struct PytorchOptions {
    key: Option<String>,
    limits: Limits,
}

impl PytorchOptions {
    /// The defaults: the state dict found at the top or under a well-known key, the default
    /// [`Limits`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The state dict is under this key of the top-level dict (an error if it is not).
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Bounds on the file: its size, the pickle's size (`max_metadata_size`), the number of
    /// tensors, one tensor's size (a gathered view included), the nesting of the state dict.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// The two containers `torch.save` writes.
///
/// ```no_run
/// use burnpack::interop::pytorch::{PytorchFormat, PytorchSource};
/// let source = PytorchSource::open("old-model.pth").unwrap();
/// if source.format() == PytorchFormat::Legacy {
///     println!("written before PyTorch 1.6: its tensors are copied when loaded");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PytorchFormat {
    /// The zip archive of `PyTorch` 1.6 and later.
    Zip,
    /// The pickle-and-records format before 1.6.
    Legacy,
}

/// The keys under which checkpoints keep their state dict, tried in this order when the top
/// holds no tensor itself.
const WELL_KNOWN_KEYS: [&str; 3] = ["state_dict", "model_state_dict", "model"];

/// `torch.save` weights as a [`TensorSource`]: one file (zip or legacy), or a sharded
/// checkpoint through its index JSON. Load a Burn module from it with
/// [`PackModule::load_from_source`](crate::module::PackModule::load_from_source) and the same
/// [`LoadOptions`](crate::LoadOptions) as for packs and safetensors (`pytorch(true)` for
/// `PyTorch`'s `[out, in]` linear weights and norm names).
///
/// The file is mapped: it must not be truncated or rewritten while the source (or a tensor
/// loaded from it without a copy) lives, as for [`Reader::open`](crate::read::Reader::open).
///
/// ```
/// use burnpack::interop::pytorch::PytorchSource;
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("not-a-checkpoint.pt");
/// std::fs::write(&path, b"hello").unwrap();
/// let err = PytorchSource::open(&path).unwrap_err();
/// assert!(err.to_string().contains("not-a-checkpoint.pt"));
/// ```
pub struct PytorchSource {
    file: String,
    shards: Vec<Shard>,
    /// Sorted by name.
    tensors: Vec<TensorInfo>,
    /// Where each tensor's bytes are, by position in `tensors`.
    places: Vec<Place>,
    globals: Vec<String>,
    key: Option<String>,
    /// Top-level keys holding tensors that were not read (the state dict was under `key`).
    unread: Vec<String>,
    /// Gathered views, by position, from [`TensorSource::prefetch`] until read.
    gathered: Mutex<HashMap<usize, Bytes>>,
    /// Storages already checked against their CRC-32, by (shard, first byte): the outcome.
    checked: Mutex<HashMap<(usize, u64), u32>>,
}

struct Shard {
    path: PathBuf,
    /// The open file, for read-ahead hints on the ranges a load will read.
    file: File,
    source: Source,
    format: PytorchFormat,
    /// The zip archive's `data.pkl` (with its CRC-32); `None` for the legacy format.
    pickle: Option<StorageEntry>,
}

/// Where a tensor's bytes are.
struct Place {
    shard: usize,
    /// `None` for a contiguous view: the window `info.offset()..+info.len()` of the shard.
    strided: Option<Strided>,
    /// The storage it views (checked whole against its CRC-32).
    storage: StorageEntry,
}

/// A non-contiguous view: gathered element by element (runs where the last stride is 1).
struct Strided {
    /// The storage's first byte in the file.
    base: u64,
    /// The storage's length in bytes.
    storage_len: u64,
    /// The view's first element in the storage.
    offset: u64,
    strides: Vec<u64>,
}

impl std::fmt::Debug for PytorchSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PytorchSource")
            .field("file", &self.file)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl PytorchSource {
    /// Opens a `torch.save` file, or an index JSON (a path ending in `.json`) and the shards it
    /// names, with the default [`PytorchOptions`].
    ///
    /// # Errors
    /// [`PytorchError`] naming the file (and the tensor, or the refused global).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PytorchError> {
        Self::open_with(path, &PytorchOptions::new())
    }

    /// [`open`](Self::open) with options.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(
        path: impl AsRef<Path>,
        options: &PytorchOptions,
    ) -> Result<Self, PytorchError> {
        let path = path.as_ref();
        let invalid = |reason: String| PytorchError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        if path.extension().is_some_and(|e| e == "json") {
            let index = ShardIndex::read(path, "PyTorch shard", options.limits.max_tensor_count)
                .map_err(|e| match e {
                    IndexError::Io(action, source) => PytorchError::Io {
                        path: path.to_path_buf(),
                        action,
                        source,
                    },
                    IndexError::Invalid(reason) => invalid(reason),
                })?;
            let mut opened = Vec::with_capacity(index.shards.len());
            for (i, shard) in index.shards.iter().enumerate() {
                // A shard may hold no more tensors than the index routes to it; each is
                // checked against the index before the next one is opened.
                let mut limits = options.limits;
                limits.max_tensor_count = limits.max_tensor_count.min(index.routed(i));
                let shard_options = PytorchOptions {
                    key: options.key.clone(),
                    limits,
                };
                let one = Opened::open(shard, &shard_options)?;
                index
                    .check_shard(i, one.tensors.iter().map(|t| t.0.name()))
                    .map_err(invalid)?;
                opened.push(one);
            }
            return Self::assemble(path, opened, options);
        }
        let opened = Opened::open(path, options)?;
        Self::assemble(path, vec![opened], options)
    }

    fn assemble(
        path: &Path,
        opened: Vec<Opened>,
        options: &PytorchOptions,
    ) -> Result<Self, PytorchError> {
        let mut table: Vec<(TensorInfo, Place)> = Vec::new();
        let mut shards = Vec::with_capacity(opened.len());
        let mut globals: Vec<String> = Vec::new();
        let mut key = None;
        let mut unread: Vec<String> = Vec::new();
        for (i, o) in opened.into_iter().enumerate() {
            table.extend(o.tensors.into_iter().map(|(info, placed)| {
                let Placed { strided, storage } = placed;
                (
                    info,
                    Place {
                        shard: i,
                        strided,
                        storage,
                    },
                )
            }));
            for g in o.globals {
                if !globals.contains(&g) {
                    globals.push(g);
                }
            }
            key = key.or(o.key);
            for k in o.unread {
                if !unread.contains(&k) {
                    unread.push(k);
                }
            }
            shards.push(o.shard);
        }
        if table.len() > options.limits.max_tensor_count {
            return Err(PytorchError::Invalid {
                path: path.to_path_buf(),
                reason: format!(
                    "{} tensors, over the limit of {}",
                    table.len(),
                    options.limits.max_tensor_count
                ),
            });
        }
        table.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        if let Some(pair) = table.windows(2).find(|w| w[0].0.name() == w[1].0.name()) {
            return Err(PytorchError::Tensor {
                path: path.to_path_buf(),
                tensor: pair[0].0.name().to_string(),
                reason: "two tensors with this name".into(),
            });
        }
        let (tensors, places) = table.into_iter().unzip();
        Ok(Self {
            file: path.display().to_string(),
            shards,
            tensors,
            places,
            globals,
            key,
            unread,
            gathered: Mutex::new(HashMap::new()),
            checked: Mutex::new(HashMap::new()),
        })
    }

    /// The container of the (first) file.
    ///
    /// ```no_run
    /// use burnpack::interop::pytorch::{PytorchFormat, PytorchSource};
    /// let source = PytorchSource::open("model.pt").unwrap();
    /// assert_eq!(source.format(), PytorchFormat::Zip);
    /// ```
    #[must_use]
    pub fn format(&self) -> PytorchFormat {
        self.shards[0].format
    }

    /// Every global the pickles reference, as `module.name` (all of them from the table a
    /// state dict needs: any other is refused when the file is opened).
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("model.pt").unwrap();
    /// for global in source.globals() {
    ///     println!("{global}");
    /// }
    /// ```
    #[must_use]
    pub fn globals(&self) -> &[String] {
        &self.globals
    }

    /// The key of the top-level dict the state dict was found under, if it was not the top.
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("checkpoint.pth").unwrap();
    /// println!("{:?}", source.key()); // Some("model_state_dict")
    /// ```
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The other top-level keys that hold tensors, when the state dict was found under a
    /// well-known key ([`key`](Self::key)) rather than named: a checkpoint's optimizer state
    /// or EMA weights, not read (name one with [`PytorchOptions::key`] to read it instead).
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("lightning.ckpt").unwrap();
    /// for key in source.unread_keys() {
    ///     println!("not read: '{key}'");
    /// }
    /// ```
    #[must_use]
    pub fn unread_keys(&self) -> &[String] {
        &self.unread
    }

    /// The files read: the one file, or the shards in name order.
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("pytorch_model.bin.index.json").unwrap();
    /// println!("{} shards", source.shards().count());
    /// ```
    #[must_use]
    pub fn shards(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The tensor called `name`, if any.
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("model.pt").unwrap();
    /// assert!(source.tensor("no.such.tensor").is_none());
    /// ```
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.position(name).map(|i| &self.tensors[i])
    }

    /// A [`Writer`](crate::Writer) of every tensor (non-contiguous views gathered, the rest
    /// windows of the mapping), with the origin as metadata (`pytorch.format`, and
    /// `pytorch.key` when the state dict was under one): `bpk convert model.pt model.bpk`.
    ///
    /// ```no_run
    /// let source = burnpack::interop::pytorch::PytorchSource::open("model.pt").unwrap();
    /// source.to_writer().unwrap().write_to_file("model.bpk").unwrap();
    /// ```
    ///
    /// # Errors
    /// A tensor could not be read.
    pub fn to_writer(&self) -> Result<crate::Writer, ReadError> {
        let mut writer = crate::Writer::from_source(self)?.metadata(
            "pytorch.format",
            format!("{:?}", self.format()).to_lowercase(),
        );
        if let Some(key) = &self.key {
            writer = writer.metadata("pytorch.key", key.clone());
        }
        Ok(writer)
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.tensors.binary_search_by(|t| t.name().cmp(name)).ok()
    }

    fn io_error(&self, shard: usize) -> impl Fn(std::io::Error) -> ReadError + '_ {
        move |source| ReadError::Io {
            file: self.shards[shard].path.display().to_string(),
            action: "read tensor data",
            source,
        }
    }

    /// A non-contiguous view's bytes, gathered into memory of their own.
    fn gather(
        &self,
        info: &TensorInfo,
        place: &Place,
        strided: &Strided,
    ) -> Result<Bytes, ReadError> {
        let shard = &self.shards[place.shard];
        let storage = shard
            .source
            .read(strided.base, strided.storage_len, 1)
            .map_err(self.io_error(place.shard))?;
        let size = element_size(info.dtype());
        let len = usize::try_from(info.len()).map_err(|_| ReadError::Io {
            file: self.file.clone(),
            action: "gather a strided tensor",
            source: std::io::Error::other("larger than memory"),
        })?;
        aligned_bytes(len, |out| {
            gather_into(
                out,
                &storage,
                info.shape(),
                &strided.strides,
                strided.offset,
                size,
            );
            Ok(())
        })
    }
}

/// The bytes of each element of a view of `storage` (elements of `size` bytes) at `offset`
/// with `strides`, in row-major order into `out` (validated when the file was opened: every
/// element lies inside `storage`).
fn gather_into(
    out: &mut [u8],
    storage: &[u8],
    shape: &[usize],
    strides: &[u64],
    offset: u64,
    size: usize,
) {
    let rank = shape.len();
    if out.is_empty() {
        return;
    }
    if rank == 0 {
        let at = offset as usize * size;
        out.copy_from_slice(&storage[at..at + size]);
        return;
    }
    // Runs along the last dimension when it is contiguous.
    let inner = shape[rank - 1];
    let run = if strides[rank - 1] == 1 {
        inner * size
    } else {
        size
    };
    let per_outer = if strides[rank - 1] == 1 { 1 } else { inner };
    let mut index = vec![0usize; rank];
    let mut written = 0;
    while written < out.len() {
        let mut at = offset;
        for d in 0..rank {
            at += index[d] as u64 * strides[d];
        }
        for k in 0..per_outer {
            let from = (at + k as u64 * strides[rank - 1]) as usize * size;
            out[written..written + run].copy_from_slice(&storage[from..from + run]);
            written += run;
        }
        // Next index, the last dimension taken whole above.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

fn element_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool(_) => 1,
        other => other.size(),
    }
}

/// Where a tensor of one file is: its gather (for a non-contiguous view) and its storage.
struct Placed {
    strided: Option<Strided>,
    storage: StorageEntry,
}

/// One file opened: its tensors (with their gathers), its globals and the key used.
struct Opened {
    shard: Shard,
    tensors: Vec<(TensorInfo, Placed)>,
    globals: Vec<String>,
    key: Option<String>,
    unread: Vec<String>,
}

/// A storage's bytes in the file.
#[derive(Clone, Copy)]
struct StorageEntry {
    start: u64,
    len: u64,
    /// The zip entry's CRC-32 (the legacy format stores none).
    crc: Option<u32>,
}

/// Each storage by key.
type Storages = HashMap<String, StorageEntry>;

/// The magic number of the legacy format, as its pickle writes it (LONG1, little-endian).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

impl Opened {
    fn open(path: &Path, options: &PytorchOptions) -> Result<Self, PytorchError> {
        let invalid = |reason: String| PytorchError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let io = |action: &'static str| {
            move |source| PytorchError::Io {
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let file = crate::platform::open_regular(path).map_err(io("open"))?;
        let size = file.metadata().map_err(io("stat"))?.len();
        if size > options.limits.max_file_size {
            return Err(invalid(format!(
                "{size} bytes, over the file-size limit of {}",
                options.limits.max_file_size
            )));
        }
        // As for `Reader::open`, the file must not be truncated while mapped (documented on
        // `PytorchSource`).
        let all = crate::read::source::map_file(&file).map_err(io("map"))?;
        let fault = |e| match e {
            Fault::Pickle(e) => pickle_error(path, e),
            Fault::Other(reason) => invalid(reason),
        };
        let (format, pickle, storages, pickle_entry) = if all.starts_with(b"PK\x03\x04") {
            let (pickle, storages, entry) = zip_parts(&all, options).map_err(fault)?;
            (PytorchFormat::Zip, pickle, storages, Some(entry))
        } else if all.len() > 1 && all[0] == 0x80 && (2..=5).contains(&all[1]) {
            // The legacy format, written with pickle protocol 2 (the default) or a later one.
            let (pickle, storages) = legacy_parts(&all, options).map_err(fault)?;
            (PytorchFormat::Legacy, pickle, storages, None)
        } else {
            return Err(invalid(
                "neither a zip archive (PyTorch 1.6 and later) nor a legacy pickle".into(),
            ));
        };
        check_storage_types(&pickle).map_err(invalid)?;
        let (root, key) = state_dict(&pickle, options.key.as_deref()).map_err(invalid)?;
        let unread = if options.key.is_none() {
            unread_keys(&pickle, key.as_deref(), &options.limits)
        } else {
            Vec::new()
        };
        let mut walker = Walker::new(&pickle, &options.limits);
        walker.walk(root, &mut String::new(), 0).map_err(invalid)?;
        let found = std::mem::take(&mut walker.out);
        if found.is_empty() {
            return Err(invalid(format!(
                "no tensors found: the state dict may be under a key (top-level keys: {:?}); \
                 name it with PytorchOptions::key, or bpk's --key",
                top_keys(&pickle, pickle.root)
            )));
        }
        // Non-contiguous views are gathered into memory of their own: what they add up to is
        // bounded by the file's own size (plus 16 MiB for small expanded buffers), so a
        // stride-0 view of one element cannot ask for gigabytes.
        let max_gathered = size.saturating_add(MAX_GATHERED_SLACK);
        let mut gathered = 0u64;
        let mut tensors = Vec::with_capacity(found.len());
        for (name, id) in found {
            let Node::Tensor(view) = pickle.node(id) else {
                unreachable!("the walk hands out tensor nodes")
            };
            let tensor_error = |reason| PytorchError::Tensor {
                path: path.to_path_buf(),
                tensor: name.clone(),
                reason,
            };
            let placed = place(
                &name,
                view,
                pickle.storage_of(view),
                &storages,
                &options.limits,
            )
            .map_err(tensor_error)?;
            if placed.1.strided.is_some() {
                gathered = gathered.saturating_add(placed.0.len());
                if gathered > max_gathered {
                    return Err(tensor_error(format!(
                        "a non-contiguous view of {} bytes: with the views before it, more \
                         than the file's size plus {} MiB would be gathered into memory \
                         (stride-0 views expanded)",
                        placed.0.len(),
                        MAX_GATHERED_SLACK >> 20
                    )));
                }
            }
            tensors.push(placed);
        }
        Ok(Self {
            shard: Shard {
                path: path.to_path_buf(),
                file,
                source: Source::Memory(all),
                format,
                pickle: pickle_entry,
            },
            tensors,
            globals: pickle.globals,
            key,
            unread,
        })
    }
}

fn pickle_error(path: &Path, e: PickleError) -> PytorchError {
    match e.refused {
        Some(global) => PytorchError::Refused {
            path: path.to_path_buf(),
            global,
        },
        None => PytorchError::Invalid {
            path: path.to_path_buf(),
            reason: format!("pickle: {} (at byte {})", e.reason, e.offset),
        },
    }
}

enum Fault {
    Pickle(PickleError),
    Other(String),
}

/// Bytes that gathered (non-contiguous) views may add up to beyond the size of their file.
const MAX_GATHERED_SLACK: u64 = 16 << 20;

/// The zip format: the pickle (read) and where each storage's bytes are.
fn zip_parts(
    all: &[u8],
    options: &PytorchOptions,
) -> Result<(Pickle, Storages, StorageEntry), Fault> {
    let (entry, storages) = zip_layout(all, options).map_err(Fault::Other)?;
    let range = entry.start as usize..(entry.start + entry.len) as usize;
    // The pickle decides what every byte of the file means: checked against its CRC-32 on
    // every open, before it is read (the storages are checked by verified loads).
    let actual = crc32fast::hash(&all[range.clone()]);
    if Some(actual) != entry.crc {
        return Err(Fault::Other(format!(
            "data.pkl does not match its zip CRC-32 (expected {:08x}, found {actual:08x}): the \
             file is damaged",
            entry.crc.unwrap_or_default()
        )));
    }
    let (pickle, _) = pickle::load(&all[range]).map_err(Fault::Pickle)?;
    Ok((pickle, storages, entry))
}

/// The zip archive, when every reader would read it alike: two entries of one name would be
/// read differently by different readers (this one would see the last, another the first), so
/// they are refused, as are local headers that disagree with the central directory.
fn consistent_archive(all: &[u8]) -> Result<zip::ZipArchive<Cursor<&[u8]>>, String> {
    let mut archive = zip::ZipArchive::new(Cursor::new(all)).map_err(|e| format!("zip: {e}"))?;
    if archive.has_duplicate_names() {
        return Err(
            "the zip archive holds two entries of the same name (another reader could take a \
             different one): refused"
                .into(),
        );
    }
    archive
        .validate_header_consistency()
        .map_err(|e| format!("zip: {e}"))?;
    Ok(archive)
}

/// The zip format's pickle (its byte range) and storages.
fn zip_layout(all: &[u8], options: &PytorchOptions) -> Result<(StorageEntry, Storages), String> {
    let mut archive = consistent_archive(all)?;
    let mut entries = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| format!("zip entry {i}: {e}"))?;
        let name = entry
            .name()
            .map_err(|e| format!("zip entry {i}: a name that is not UTF-8: {e}"))?
            .to_string();
        if entry.encrypted() {
            return Err(format!(
                "zip entry '{name}' is encrypted: torch.save encrypts nothing, and its bytes \
                 are not tensor data"
            ));
        }
        let start = entry
            .data_start()
            .ok_or_else(|| format!("zip entry '{name}': no data offset"))?;
        let stored = entry.compression() == zip::CompressionMethod::Stored;
        // What lies in the file (a stored entry's bytes are its contents).
        let len = entry.compressed_size();
        if start
            .checked_add(len)
            .is_none_or(|end| end > all.len() as u64)
        {
            return Err(format!("zip entry '{name}' lies past the end of the file"));
        }
        if stored && entry.size() != len {
            return Err(format!(
                "zip entry '{name}' is stored with {len} bytes but says it holds {}",
                entry.size()
            ));
        }
        entries.push((name, start, len, stored, entry.compression(), entry.crc32()));
    }
    let pickles: Vec<_> = entries
        .iter()
        .filter(|(n, ..)| n.ends_with("data.pkl") && n.matches('/').count() == 1)
        .collect();
    let [(pkl_name, pkl_start, pkl_len, pkl_stored, method, pkl_crc)] = pickles.as_slice() else {
        return Err(format!(
            "{} entries named <archive>/data.pkl (torch.save writes one)",
            pickles.len()
        ));
    };
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    let stored_only = |name: &str, stored: bool, method: zip::CompressionMethod| {
        if stored {
            Ok(())
        } else {
            Err(format!(
                "zip entry '{name}' is compressed ({method}): torch.save stores every entry \
                 as is, and this reader decompresses nothing"
            ))
        }
    };
    stored_only(pkl_name, *pkl_stored, *method)?;
    if *pkl_len > u64::from(options.limits.max_metadata_size) {
        return Err(format!(
            "a pickle of {pkl_len} bytes, over the limit of {}",
            options.limits.max_metadata_size
        ));
    }
    let data_prefix = format!("{prefix}data/");
    let mut storages = Storages::new();
    for (name, start, len, stored, method, crc) in &entries {
        if name == &format!("{prefix}byteorder") {
            let order = &all[*start as usize..(*start + *len) as usize];
            if order != b"little" {
                return Err(format!(
                    "byte order '{}': only little-endian files are read",
                    String::from_utf8_lossy(order)
                ));
            }
        }
        if let Some(key) = name.strip_prefix(&data_prefix) {
            stored_only(name, *stored, *method)?;
            storages.insert(
                key.to_string(),
                StorageEntry {
                    start: *start,
                    len: *len,
                    crc: Some(*crc),
                },
            );
        }
    }
    let pickle = StorageEntry {
        start: *pkl_start,
        len: *pkl_len,
        crc: Some(*pkl_crc),
    };
    Ok((pickle, storages))
}

/// The legacy format: magic, protocol, system info, the object, the storage keys, then each
/// storage as its element count (8 bytes) and its bytes.
fn legacy_parts(all: &[u8], options: &PytorchOptions) -> Result<(Pickle, Storages), Fault> {
    let other = |s: &str| Fault::Other(s.to_string());
    let mut at = 0usize;
    let next = |at: &mut usize| -> Result<Pickle, Fault> {
        let rest = &all[*at..];
        let window = &rest[..rest.len().min(options.limits.max_metadata_size as usize)];
        let (pickle, used) = pickle::load(window).map_err(|mut e| {
            e.offset += *at;
            Fault::Pickle(e)
        })?;
        *at += used;
        Ok(pickle)
    };
    let magic = next(&mut at)?;
    if !matches!(magic.node(magic.root), Node::BigInt(b) if b[..] == LEGACY_MAGIC) {
        return Err(other("a pickle without torch.save's magic number"));
    }
    let protocol = next(&mut at)?;
    if !matches!(protocol.node(protocol.root), Node::Int(1001)) {
        return Err(other(
            "a legacy torch.save file of another protocol than 1001",
        ));
    }
    // The system info: a dict whose `little_endian`, when present, must be `True`.
    let info = next(&mut at)?;
    let Node::Dict(entries) = info.node(info.root) else {
        return Err(other(
            "the system information after the protocol is not a dict",
        ));
    };
    for &(k, v) in entries {
        if matches!(info.node(k), Node::Str(s) if &**s == "little_endian")
            && !matches!(info.node(v), Node::Bool(true))
        {
            return Err(other(
                "a big-endian file (little_endian is not True): only little-endian files are read",
            ));
        }
    }
    let object = next(&mut at)?;
    let keys = next(&mut at)?;
    let Node::List(items) = keys.node(keys.root) else {
        return Err(other("no list of storage keys after the object"));
    };
    let sizes: HashMap<&str, u64> = object
        .storages()
        .map(|s| (s.key.as_str(), s.kind.element_size))
        .collect();
    let mut storages = Storages::new();
    for &item in items {
        let Node::Str(key) = keys.node(item) else {
            return Err(other("a storage key that is not a string"));
        };
        if storages.contains_key(&**key) {
            return Err(Fault::Other(format!(
                "storage '{key}' is listed twice (one of its records would be ignored)"
            )));
        }
        let element = *sizes.get(&**key).ok_or_else(|| {
            Fault::Other(format!(
                "storage '{key}' is listed, but nothing in the pickle names it: its size is unknown"
            ))
        })?;
        let head: [u8; 8] = all
            .get(at..at + 8)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| {
                Fault::Other(format!("storage '{key}' is missing: the file ends first"))
            })?;
        at += 8;
        let numel = u64::from_le_bytes(head);
        let len = numel
            .checked_mul(element)
            .filter(|&len| len <= (all.len() - at) as u64)
            .ok_or_else(|| {
                Fault::Other(format!(
                    "storage '{key}' of {numel} elements runs past the end of the file"
                ))
            })?;
        storages.insert(
            key.to_string(),
            StorageEntry {
                start: at as u64,
                len,
                crc: None,
            },
        );
        at += len as usize;
    }
    if at != all.len() {
        return Err(Fault::Other(format!(
            "{} bytes after the last storage, which nothing names",
            all.len() - at
        )));
    }
    Ok((object, storages))
}

/// One storage, one type: two types over the same bytes would read them two ways.
fn check_storage_types(pickle: &Pickle) -> Result<(), String> {
    let mut kinds: HashMap<&str, &str> = HashMap::new();
    for storage in pickle.storages() {
        let kind = *kinds.entry(&storage.key).or_insert(storage.kind.name);
        if kind != storage.kind.name {
            return Err(format!(
                "storage '{}' is named as torch.{kind} and as torch.{}: its bytes cannot be both",
                storage.key, storage.kind.name
            ));
        }
    }
    Ok(())
}

/// When the state dict was found under the well-known key `chosen`: the other top-level keys
/// whose values hold tensors (an optimizer's state, an EMA copy), which are not read and are
/// said ([`PytorchSource::unread_keys`]).
fn unread_keys(pickle: &Pickle, chosen: Option<&str>, limits: &Limits) -> Vec<String> {
    let (Some(chosen), Node::Dict(entries)) = (chosen, pickle.node(pickle.root)) else {
        return Vec::new();
    };
    let mut unread = Vec::new();
    for &(k, v) in entries {
        let Node::Str(k) = pickle.node(k) else {
            continue;
        };
        if &**k == chosen {
            continue;
        }
        let mut other = Walker::new(pickle, limits);
        if other.walk(v, &mut k.to_string(), 1).is_err() || !other.out.is_empty() {
            unread.push(k.to_string());
        }
    }
    unread
}

/// The keys of a dict node that are strings, the first 16, for errors.
fn top_keys(p: &Pickle, id: usize) -> Vec<&str> {
    match p.node(id) {
        Node::Dict(entries) => entries
            .iter()
            .filter_map(|&(name, _)| match p.node(name) {
                Node::Str(s) => Some(&**s),
                _ => None,
            })
            .take(16)
            .collect(),
        _ => Vec::new(),
    }
}

/// The state dict: under `key` when given, else the top, or the first well-known key holding
/// a dict when the top holds no tensor itself.
fn state_dict(p: &Pickle, key: Option<&str>) -> Result<(usize, Option<String>), String> {
    let entries = match p.node(p.root) {
        Node::Dict(entries) => entries.as_slice(),
        _ => &[],
    };
    let lookup = |k: &str| {
        entries
            .iter()
            .find(|&&(name, _)| matches!(p.node(name), Node::Str(s) if &**s == k))
            .map(|&(_, value)| value)
    };
    if let Some(k) = key {
        return lookup(k).map(|v| (v, Some(k.to_string()))).ok_or_else(|| {
            format!(
                "no key '{k}' at the top level (its keys: {:?})",
                top_keys(p, p.root)
            )
        });
    }
    if !entries
        .iter()
        .any(|&(_, v)| matches!(p.node(v), Node::Tensor(_)))
    {
        for k in WELL_KNOWN_KEYS {
            if let Some(v) = lookup(k)
                && matches!(p.node(v), Node::Dict(_))
            {
                return Ok((v, Some(k.to_string())));
            }
        }
    }
    Ok((p.root, None))
}

/// Longest tensor name (a dotted path) the walk builds.
const MAX_NAME: usize = 64 << 10;

/// The walk of a state dict's graph, with its bounds: nodes visited (a graph can share nodes,
/// so a walk could otherwise revisit them exponentially), depth, tensors found, and the bytes
/// of names and shapes handed out (at most 8 per byte of the pickle, plus 1 MiB), each checked
/// before the work it bounds.
struct Walker<'p> {
    p: &'p Pickle,
    visits: usize,
    max_visits: usize,
    max_depth: usize,
    max_tensors: usize,
    held: usize,
    max_held: usize,
    copied: usize,
    max_copied: usize,
    /// Each tensor found: its dotted name and its node.
    out: Vec<(String, usize)>,
}

impl<'p> Walker<'p> {
    fn new(p: &'p Pickle, limits: &Limits) -> Self {
        Self {
            p,
            visits: 0,
            max_visits: limits.max_tensor_count.saturating_mul(64).max(1 << 16),
            max_depth: limits.max_cbor_depth,
            max_tensors: limits.max_tensor_count,
            held: 0,
            max_held: p.len.saturating_mul(8).saturating_add(1 << 20),
            copied: 0,
            max_copied: p.len.saturating_mul(64).saturating_add(64 << 20),
            out: Vec::new(),
        }
    }

    /// Every tensor under `id`, named by its dotted path (dict keys, list indices). A tensor
    /// the walk cannot name (under a key that is not a string or an integer, in a set) is an
    /// error naming where it is, never dropped; so is a storage that is not a tensor's.
    fn walk(&mut self, id: usize, name: &mut String, depth: usize) -> Result<(), String> {
        self.visits += 1;
        if self.visits > self.max_visits {
            return Err(format!(
                "the pickle's object graph has more than {} nodes to walk (shared or cyclic)",
                self.max_visits
            ));
        }
        if depth > self.max_depth {
            return Err(format!(
                "nested deeper than {} levels at '{name}'",
                self.max_depth
            ));
        }
        let p = self.p;
        for &value in p.side(id) {
            self.unnamed(
                name,
                value,
                depth,
                "the state or extra arguments of an object (a BUILD state, a tensor's hooks or \
                 metadata, a parameter's state)",
            )?;
        }
        match p.node(id) {
            Node::Tensor(view) => {
                if name.is_empty() {
                    return Err("the file holds one tensor, not a dict of named tensors".into());
                }
                if self.out.len() >= self.max_tensors {
                    return Err(format!(
                        "more than {} tensors (the tensor-count limit)",
                        self.max_tensors
                    ));
                }
                self.held = self
                    .held
                    .saturating_add(name.len() + 16 * view.shape.len() + 64);
                if self.held > self.max_held {
                    return Err(format!(
                        "the tensors' names and shapes would take more than {} bytes (8 per \
                         byte of the pickle, plus 1 MiB): the graph is shared to blow up, at \
                         '{name}'",
                        self.max_held
                    ));
                }
                self.out.push((name.clone(), id));
            }
            Node::Dict(entries) => {
                for &(k, v) in entries {
                    match p.node(k) {
                        Node::Str(s) => self.child(name, s, v, depth)?,
                        Node::Int(i) => self.child(name, &i.to_string(), v, depth)?,
                        // As Python's `str()` writes them.
                        Node::Bool(true) => self.child(name, "True", v, depth)?,
                        Node::Bool(false) => self.child(name, "False", v, depth)?,
                        other => {
                            let kind = other.kind();
                            self.unnamed(name, v, depth, &format!("a dict key that is a {kind}"))?;
                        }
                    }
                }
            }
            Node::List(items) | Node::Tuple(items) => {
                for (i, &v) in items.iter().enumerate() {
                    self.child(name, &i.to_string(), v, depth)?;
                }
            }
            Node::Set(items) => {
                for &v in items {
                    self.unnamed(name, v, depth, "a set")?;
                }
            }
            Node::Storage(s) => {
                return Err(format!(
                    "'{name}' is a bare storage ('{}', torch.{}), not a tensor: nothing names \
                     its shape",
                    s.key, s.kind.name
                ));
            }
            // Numbers, text, bytes, None, globals: values of a checkpoint that are not tensors.
            Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::Float
            | Node::Str(_)
            | Node::Bytes
            | Node::Global(_) => {}
        }
        Ok(())
    }

    fn child(
        &mut self,
        name: &mut String,
        segment: &str,
        value: usize,
        depth: usize,
    ) -> Result<(), String> {
        // Every byte of name built is counted: a long key shared by many paths costs its
        // length each time.
        self.copied = self.copied.saturating_add(segment.len() + 1);
        if self.copied > self.max_copied {
            return Err(format!(
                "walking the state dict would build more than {} bytes of names (64 per byte \
                 of the pickle, plus 64 MiB): the graph is shared to blow up",
                self.max_copied
            ));
        }
        if name.len() + 1 + segment.len() > MAX_NAME {
            return Err(format!(
                "a tensor name longer than {MAX_NAME} bytes under '{}'",
                &name[..name.floor_char_boundary(200)]
            ));
        }
        let len = name.len();
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(segment);
        let result = self.walk(value, name, depth + 1);
        name.truncate(len);
        result
    }

    /// A value the walk cannot name a tensor under: walked, and an error if it holds one.
    fn unnamed(
        &mut self,
        name: &mut String,
        value: usize,
        depth: usize,
        what: &str,
    ) -> Result<(), String> {
        let before = self.out.len();
        self.child(name, "?", value, depth)?;
        if self.out.len() > before {
            return Err(format!(
                "tensor '{}' is under {what}, which gives it no name: not a state dict this \
                 reader can name",
                self.out[before].0
            ));
        }
        Ok(())
    }
}

/// Whether `strides` are the row-major strides of `shape` (dimensions of 1 aside).
fn is_contiguous(shape: &[u64], strides: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// A tensor's table entry: checked against its storage's bytes in the file.
fn place(
    name: &str,
    view: &TensorView,
    storage: &Storage,
    storages: &Storages,
    limits: &Limits,
) -> Result<(TensorInfo, Placed), String> {
    let kind = storage.kind;
    let dtype = kind
        .dtype
        .ok_or_else(|| format!("a torch.{} tensor, which Burn has no dtype for", kind.name))?;
    let size = kind.element_size;
    let key = &storage.key;
    let entry = *storages
        .get(key)
        .ok_or_else(|| format!("its storage '{key}' is not in the file"))?;
    let (start, bytes) = (entry.start, entry.len);
    let numel_storage = storage.numel;
    let storage_len = numel_storage
        .checked_mul(size)
        .filter(|&len| len <= bytes)
        .ok_or_else(|| {
            format!(
                "its storage '{key}' declares {numel_storage} elements of {size} bytes; the file \
                 holds {bytes} bytes of it"
            )
        })?;
    let shape: Vec<usize> = view
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| "a dimension that does not fit in memory".to_string())?;
    let len = view
        .shape
        .iter()
        .try_fold(size, |n, &d| n.checked_mul(d))
        .filter(|&len| len <= limits.max_tensor_size)
        .ok_or_else(|| {
            format!(
                "shape {shape:?} is over the tensor-size limit of {} bytes",
                limits.max_tensor_size
            )
        })?;
    let offset = view
        .offset
        .checked_add(storage.view_offset)
        .ok_or_else(|| "an offset past any storage".to_string())?;
    if len == 0 {
        let info = TensorInfo::external(name.to_string(), dtype, shape, start, 0);
        return Ok((
            info,
            Placed {
                strided: None,
                storage: entry,
            },
        ));
    }
    let last = view
        .shape
        .iter()
        .zip(&view.stride)
        .try_fold(offset, |at, (&d, &s)| {
            at.checked_add((d - 1).checked_mul(s)?)
        });
    // A legacy storage view bounds the tensor to the view, not the whole storage.
    let end = match storage.view_len {
        Some(len) => storage.view_offset.saturating_add(len).min(numel_storage),
        None => numel_storage,
    };
    if last.is_none_or(|last| last >= end) {
        return Err(format!(
            "a view past the end of its storage: offset {offset}, shape {shape:?}, strides {:?}, \
             over a storage of {numel_storage} elements",
            view.stride
        ));
    }
    let at = start + offset * size;
    let info = TensorInfo::external(name.to_string(), dtype, shape, at, len);
    let strided = (!is_contiguous(&view.shape, &view.stride)).then_some(Strided {
        base: start,
        storage_len,
        offset,
        strides: view.stride.clone(),
    });
    Ok((
        info,
        Placed {
            strided,
            storage: entry,
        },
    ))
}

impl TensorSource for PytorchSource {
    fn file(&self) -> &str {
        &self.file
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let i = self
            .position(info.name())
            .ok_or_else(|| ReadError::NotFound {
                file: self.file.clone(),
                tensor: info.name().to_string(),
            })?;
        let place = &self.places[i];
        match &place.strided {
            None => self.shards[place.shard]
                .source
                .read(info.offset(), info.len(), element_align(info.dtype()))
                .map_err(self.io_error(place.shard)),
            Some(strided) => {
                let ready = self
                    .gathered
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&i);
                match ready {
                    Some(bytes) => Ok(bytes),
                    None => self.gather(info, place, strided),
                }
            }
        }
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let place = &self.places[self.position(info.name())?];
        if place.strided.is_some() {
            return Some(CopyReason::Strided);
        }
        self.shards[place.shard]
            .source
            .copy_reason(info.offset(), element_align(info.dtype()))
    }

    /// The CRC-32 the zip archive keeps of the storage `info` views, against that storage's
    /// bytes (each storage hashed once); `false` for the legacy format, which keeps none.
    fn check(&self, info: &TensorInfo, _bytes: &[u8]) -> Result<bool, ReadError> {
        let Some(i) = self.position(info.name()) else {
            return Ok(false);
        };
        let place = &self.places[i];
        let Some(expected) = place.storage.crc else {
            return Ok(false);
        };
        let key = (place.shard, place.storage.start);
        let known = self
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .copied();
        let actual = if let Some(actual) = known {
            actual
        } else {
            let storage = self.shards[place.shard]
                .source
                .read(place.storage.start, place.storage.len, 1)
                .map_err(self.io_error(place.shard))?;
            let actual = crc32fast::hash(&storage);
            self.checked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key, actual);
            actual
        };
        if actual == expected {
            Ok(true)
        } else {
            Err(ReadError::Checksum {
                file: self.shards[place.shard].path.display().to_string(),
                tensor: info.name().to_string(),
                expected: u64::from(expected),
                actual: u64::from(actual),
            })
        }
    }

    /// Every zip archive's pickle against its CRC-32 (the storages are checked per tensor, by
    /// [`check`](TensorSource::check)).
    fn verify_structure(&self) -> Result<(), ReadError> {
        for shard in &self.shards {
            let Some(StorageEntry {
                start,
                len,
                crc: Some(expected),
            }) = shard.pickle
            else {
                continue;
            };
            let file = shard.path.display().to_string();
            let bytes = shard
                .source
                .read(start, len, 1)
                .map_err(|source| ReadError::Io {
                    file: file.clone(),
                    action: "read the pickle",
                    source,
                })?;
            let actual = crc32fast::hash(&bytes);
            if actual != expected {
                return Err(ReadError::Checksum {
                    file,
                    tensor: "data.pkl".into(),
                    expected: u64::from(expected),
                    actual: u64::from(actual),
                });
            }
        }
        Ok(())
    }

    /// The loader hands over what it will read before reading it: the kernel is asked to
    /// read those ranges of the file ahead (a cold load then reads at the disk's sequential
    /// speed rather than a page fault at a time), and non-contiguous views are gathered in
    /// parallel.
    fn wants_prefetch(&self) -> bool {
        true
    }

    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        // Each shard's ranges in file order, neighbours (under 1 MiB apart) merged.
        let mut ranges: Vec<(usize, u64, u64)> = wanted
            .iter()
            .filter_map(|info| {
                let place = &self.places[self.position(info.name())?];
                Some(match place.strided {
                    None => (place.shard, info.offset(), info.offset() + info.len()),
                    Some(_) => (
                        place.shard,
                        place.storage.start,
                        place.storage.start + place.storage.len,
                    ),
                })
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(usize, u64, u64)> = Vec::new();
        for (shard, start, end) in ranges {
            match merged.last_mut() {
                Some(last) if last.0 == shard && start <= last.2 + (1 << 20) => {
                    last.2 = last.2.max(end);
                }
                _ => merged.push((shard, start, end)),
            }
        }
        for (shard, start, end) in merged {
            crate::platform::will_need(&self.shards[shard].file, start, end - start);
        }
        let strided: Vec<(usize, &TensorInfo, &Strided)> = wanted
            .iter()
            .filter_map(|info| {
                let i = self.position(info.name())?;
                Some((i, *info, self.places[i].strided.as_ref()?))
            })
            .collect();
        let done = strided
            .par_iter()
            .map(|&(i, info, s)| self.gather(info, &self.places[i], s).map(|b| (i, b)))
            .collect::<Result<Vec<_>, _>>()?;
        self.gathered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_views_gather_row_major() {
        // A 2x3 matrix stored transposed (strides [1, 2]) over a 6-element storage.
        let storage: Vec<u8> = (0u8..6).collect();
        let mut out = [0u8; 6];
        gather_into(&mut out, &storage, &[2, 3], &[1, 2], 0, 1);
        assert_eq!(out, [0, 2, 4, 1, 3, 5]);
        // Rows of a contiguous last dimension at an offset, every other row.
        let storage: Vec<u8> = (0u8..12).collect();
        let mut out = [0u8; 6];
        gather_into(&mut out, &storage, &[2, 3], &[6, 1], 1, 1);
        assert_eq!(out, [1, 2, 3, 7, 8, 9]);
        assert!(is_contiguous(&[2, 1, 3], &[3, 7, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
    }
}
