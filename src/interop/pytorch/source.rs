//! The `torch.save` source: one file or shards, its table, and each tensor's bytes (windows of
//! the mapping, gathered views, CRC-32 checks, read-ahead for loads).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use burn::tensor::Bytes;
use rayon::prelude::*;

use super::file::{Shard, open_bytes, open_file};
use super::views::{Placed, Strided, element_size, gather_into};
use super::{PytorchFormat, StorageEntry};
use crate::format::{Limits, TensorInfo};
use crate::interop::index::ShardIndex;
use crate::interop::read_hints::{Hinted, file_mapping};
use crate::source::OpenOptions;
use crate::source::data::{Source, aligned_bytes};
use crate::source::from_table;
use crate::source::{
    Checksums, CopyReason, Description, InShard, ReadError, Sharded, SourceError, SourceTable,
    TensorSource, assemble_shards,
};

/// `torch.save` weights as a [`TensorSource`]: one file (zip or legacy), or a sharded
/// checkpoint through its index JSON. Load a Burn module from it with
/// [`PackModule::load_from_source`](crate::module::PackModule::load_from_source) and the same
/// [`LoadOptions`](crate::module::LoadOptions) as for packs and safetensors (`pytorch(true)` for
/// `PyTorch`'s `[out, in]` linear weights and norm names).
///
/// The file is mapped: it must not be truncated or rewritten while the source (or a tensor
/// loaded from it without a copy) lives, as for [`Reader::open`](crate::read::Reader::open).
/// Opening a zip archive (`PyTorch` 1.6 and later) reads its central directory and pickle
/// with ordinary reads before the file is mapped, so a damaged or truncated file is an error,
/// never a fault. Opened for a verification ([`OpenOptions::verify`](crate::source::OpenOptions::verify),
/// what `bpk verify` does), a zip archive is not mapped: its tensors are read with ordinary
/// reads, so a file cut or rewritten meanwhile is an error to report. A legacy file (pickles
/// and storages in a row, no directory) is parsed through its mapping: if another process
/// truncates it while it is being opened, the read of a page past its new end faults
/// (`SIGBUS`), as any mapped read does.
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
    /// Every tensor, sorted by name, with its shard and where in it.
    table: SourceTable<InShard<Placed>>,
    globals: Vec<String>,
    key: Option<String>,
    /// Top-level keys holding tensors that were not read (the state dict was under `key`).
    unread: Vec<String>,
    /// Gathered views, by position, from [`TensorSource::prefetch`] until read.
    gathered: Mutex<HashMap<usize, Bytes>>,
    /// Storages already checked against their CRC-32, by (shard, first byte): the outcome.
    checked: Mutex<HashMap<(usize, u64), u32>>,
    /// The read-ahead hints of the last [`TensorSource::prefetch`] (see `Hinted`: those on a
    /// mapping go on after the source is dropped, for its tensors' sake).
    hints: crate::interop::read_hints::ReadHints,
}

impl std::fmt::Debug for PytorchSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt_source(f, "PytorchSource", self.shards.len())
    }
}

impl PytorchSource {
    /// Opens a `torch.save` file, or an index JSON (a path ending in `.json`) and the shards it
    /// names, with the default [`OpenOptions`].
    ///
    /// # Errors
    /// [`SourceError`] naming the file (and the tensor, or the refused global).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::new())
    }

    /// [`open`](Self::open) with options.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "json") {
            return Self::open_index(path, options);
        }
        Self::open_file(path, options)
    }

    /// Opens one `torch.save` file (zip or legacy), whatever its name.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_file(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        Self::open_opened(path.as_ref(), None, options)
    }

    /// One file, whatever its name; `file`: the file already opened (by the registry, which
    /// then opens nothing again).
    pub(crate) fn open_opened(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let mut file = file;
        let open = |shard: &Path, limits: &Limits| {
            open_file(shard, file.take(), &options.clone().limits(*limits))
        };
        let sharded = assemble_shards(path, &[path.to_path_buf()], None, &options.limits, open)?;
        Self::assemble(path, sharded)
    }

    /// Opens an index JSON (whatever its name) and the shards its `weight_map` names.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_index(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let index = ShardIndex::read(path, "PyTorch shard", options.limits.max_tensor_count)?;
        let open = |shard: &Path, limits: &Limits| {
            open_file(shard, None, &options.clone().limits(*limits))
        };
        let sharded = assemble_shards(path, &index.shards, Some(&index), &options.limits, open)?;
        Self::assemble(path, sharded)
    }

    /// A `torch.save` file in memory (zip or legacy), with options: the same checks as a
    /// file's, tensors handed out as windows of `bytes` where aligned and contiguous.
    ///
    /// ```
    /// use burnpack::interop::pytorch::PytorchSource;
    /// use burnpack::source::OpenOptions;
    /// let err = PytorchSource::from_bytes(burn::tensor::Bytes::from_bytes_vec(b"hello".to_vec()), &OpenOptions::new())
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("<memory>"));
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open), naming `"<memory>"`.
    pub fn from_bytes(bytes: Bytes, options: &OpenOptions) -> Result<Self, SourceError> {
        let path = Path::new("<memory>");
        let mut bytes = Some(crate::source::data::view_capable(bytes));
        let sharded = assemble_shards(
            path,
            &[path.to_path_buf()],
            None,
            &options.limits,
            |path, limits| {
                let options = options.clone().limits(*limits);
                let bytes = bytes
                    .take()
                    .unwrap_or_else(|| Bytes::from_bytes_vec(Vec::new()));
                open_bytes(path, bytes, &options)
            },
        )?;
        Self::assemble(path, sharded)
    }

    /// The source over opened shards, their gathered views bounded all together
    /// ([`check_gathered`](super::file::check_gathered)).
    fn assemble(path: &Path, sharded: Sharded<Shard, Placed>) -> Result<Self, SourceError> {
        super::file::check_gathered(path, &sharded)?;
        let mut globals: Vec<String> = Vec::new();
        let mut key = None;
        let mut unread: Vec<String> = Vec::new();
        let shards: Vec<Shard> = sharded.shards.into_iter().map(|(_, s)| s).collect();
        for shard in &shards {
            for g in &shard.globals {
                if !globals.contains(g) {
                    globals.push(g.clone());
                }
            }
            key = key.or_else(|| shard.key.clone());
            for k in &shard.unread {
                if !unread.contains(k) {
                    unread.push(k.clone());
                }
            }
        }
        Ok(Self {
            file: path.display().to_string(),
            shards,
            table: sharded.table,
            globals,
            key,
            unread,
            gathered: Mutex::new(HashMap::new()),
            checked: Mutex::new(HashMap::new()),
            hints: crate::interop::read_hints::ReadHints::default(),
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
    /// or EMA weights, not read (name one with [`OpenOptions::key`] to read it instead).
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
        self.table.get(name)
    }

    /// A [`Writer`](crate::write::Writer) of every tensor (non-contiguous views gathered, the rest
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
    pub fn to_writer(&self) -> Result<crate::write::Writer, ReadError> {
        let mut writer = crate::write::Writer::from_source(self)?.metadata(
            "pytorch.format",
            format!("{:?}", self.format()).to_lowercase(),
        );
        if let Some(key) = &self.key {
            writer = writer.metadata("pytorch.key", key.clone());
        }
        Ok(writer)
    }

    fn io_error<'a>(
        &'a self,
        shard: usize,
        info: &'a TensorInfo,
    ) -> impl Fn(std::io::Error) -> ReadError + 'a {
        move |source| {
            let file = self.shards[shard].path.display().to_string();
            ReadError::reading(file, info.name(), &source)
        }
    }

    /// A non-contiguous view's bytes, gathered into memory of their own.
    fn gather(
        &self,
        info: &TensorInfo,
        shard: usize,
        strided: &Strided,
    ) -> Result<Bytes, ReadError> {
        let storage = self.shards[shard]
            .source
            .read(strided.base, strided.storage_len, 1)
            .map_err(self.io_error(shard, info))?;
        let size = element_size(info.dtype());
        let len = usize::try_from(info.len()).map_err(|_| ReadError::Io {
            file: self.file.clone(),
            action: "gather a strided tensor",
            source: std::io::Error::other("larger than memory"),
        })?;
        let refused = |e: std::io::Error| ReadError::Io {
            file: self.file.clone(),
            action: "gather a strided tensor",
            source: std::io::Error::new(e.kind(), format!("tensor '{}': {e}", info.name())),
        };
        aligned_bytes(len, refused, |out| {
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

impl TensorSource for PytorchSource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let (i, InShard { shard, place }) = self.table.owner(info)?;
        match &place.strided {
            None => {
                let shard = &self.shards[*shard];
                let bytes = shard.source.read_tensor(shard.path.display(), info)?;
                crate::source::data::checked_bools(&self.file, info, bytes, |b| {
                    TensorSource::check(self, info, b)
                })
            }
            Some(strided) => {
                let ready = self
                    .gathered
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&i);
                match ready {
                    Some(bytes) => Ok(bytes),
                    None => self.gather(info, *shard, strided),
                }
            }
        }
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let InShard { shard, place } = self.table.place(info).ok()?;
        if place.strided.is_some() {
            return Some(CopyReason::Strided);
        }
        self.shards[*shard].source.tensor_copy_reason(info)
    }

    /// The CRC-32 the zip archive keeps of the storage `info` views, against that storage's
    /// bytes (each storage hashed once: `bytes` themselves where the tensor is its whole
    /// storage, else the storage read again); `false` for the legacy format, which keeps none.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        let InShard { shard, place } = self.table.place(info)?;
        let shard = *shard;
        let Some(expected) = place.storage.crc else {
            return Ok(false);
        };
        let key = (shard, place.storage.start);
        let known = self
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .copied();
        let whole = place.strided.is_none()
            && info.offset() == place.storage.start
            && info.len() == place.storage.len
            && bytes.len() as u64 == place.storage.len;
        let actual = if let Some(actual) = known {
            actual
        } else {
            let actual = if whole {
                crc32fast::hash(bytes)
            } else {
                let storage = self.shards[shard]
                    .source
                    .read(place.storage.start, place.storage.len, 1)
                    .map_err(self.io_error(shard, info))?;
                crc32fast::hash(&storage)
            };
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
                file: self.shards[shard].path.display().to_string(),
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

    /// The loader hands over what it will read before reading it: those ranges of the file
    /// are read ahead from a thread of their own (a cold load then reads at the disk's
    /// sequential speed rather than a page fault at a time; a mapped file through its
    /// mapping, see `Hinted`), and non-contiguous views are gathered in parallel.
    fn wants_prefetch(&self) -> bool {
        true
    }

    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        // Each shard's ranges in file order, neighbours (under 1 MiB apart) merged.
        let ranges: Vec<(usize, u64, u64)> = wanted
            .iter()
            .filter_map(|info| {
                let &InShard { shard, ref place } = self.table.place(info).ok()?;
                Some(match place.strided {
                    None => (shard, info.offset(), info.offset() + info.len()),
                    Some(_) => (
                        shard,
                        place.storage.start,
                        place.storage.start + place.storage.len,
                    ),
                })
            })
            .collect();
        self.hints.ask_shards(ranges, |i| {
            // A mapped file is touched through its mapping (large folios, see `Hinted`).
            let shard = &self.shards[i];
            let file = shard.file.as_ref()?;
            Some(match &shard.source {
                Source::Buffered(..) => Hinted::File(file),
                mapped => Hinted::Mapped(file_mapping(mapped)?),
            })
        });
        // Views gathered by an earlier prefetch and not read yet are not gathered again (a
        // caller that prefetches before a writer that prefetches too would hold two copies).
        let strided: Vec<(usize, usize, &TensorInfo, &Strided)> = {
            let ready = self
                .gathered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            wanted
                .iter()
                .filter_map(|info| {
                    let (i, InShard { shard, place }) = self.table.owner(info).ok()?;
                    let strided = place.strided.as_ref()?;
                    (!ready.contains_key(&i)).then_some((i, *shard, *info, strided))
                })
                .collect()
        };
        let done = strided
            .par_iter()
            .map(|&(i, shard, info, s)| self.gather(info, shard, s).map(|b| (i, b)))
            .collect::<Result<Vec<_>, _>>()?;
        self.gathered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(done);
        Ok(())
    }
}

impl crate::source::DescribedSource for PytorchSource {
    fn describe(&self) -> Description {
        let format = self.format();
        let shards = match self.shards.len() {
            1 => String::new(),
            n => format!(", {n} shards"),
        };
        let mut lines = Vec::new();
        if let Some(key) = &self.key {
            lines.push(format!("state dict: under '{key}'"));
        }
        lines.push(format!("globals: {}", self.globals.join(", ")));
        let mut notes = Vec::new();
        if !self.unread.is_empty() {
            notes.push(format!(
                "not read (tensors under other top-level keys; --key KEY reads one): {}",
                self.unread.join(", ")
            ));
        }
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert(
            "pytorch.format".into(),
            format!("{format:?}").to_lowercase(),
        );
        if let Some(key) = &self.key {
            metadata.insert("pytorch.key".into(), key.clone());
        }
        Description {
            format: "pytorch",
            metadata,
            summary: format!("PyTorch torch.save file ({format:?}{shards})"),
            valid: format!("torch.save file valid ({format:?}), no globals beyond a state dict's"),
            shards: self.shards.iter().map(|s| s.path.clone()).collect(),
            lines,
            fields: vec![
                ("format", format!("{format:?}").into()),
                (
                    "shards",
                    self.shards
                        .iter()
                        .map(|s| s.path.display().to_string())
                        .collect::<Vec<_>>()
                        .into(),
                ),
                ("key", self.key.clone().into()),
                ("unread_keys", self.unread.clone().into()),
                ("globals", self.globals.clone().into()),
            ],
            notes,
            checksums: match format {
                PytorchFormat::Zip => Checksums::ZipCrc32,
                PytorchFormat::Legacy => Checksums::None,
            },
            unverified: "no checksums in the legacy format (contents unverified)".into(),
            column: Some("load"),
            ..Description::default()
        }
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        Some(
            self.copy_reason(info)
                .map_or_else(|| "view".to_string(), |r| r.to_string()),
        )
    }
}
