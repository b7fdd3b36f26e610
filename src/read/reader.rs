//! The reader: open a pack, list what it holds, hand out tensor bytes.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{AllocationProperty, Bytes};

use super::errors::{invalid_error, io_error};
use crate::format::{FormatError, Layout, Limits, OpenError, Scalar, TensorInfo};
use crate::platform::read_exact_at;
use crate::source::ReadError;
use crate::source::data::{Source, file_data};
use crate::source::{CopyReason, TensorSource, from_table};

/// How a file's tensor data is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Memory-map the file; tensors are zero-copy windows into the mapping (default).
    #[default]
    Mmap,
    /// Read each tensor with ordinary positional reads into an owned, aligned buffer, when it
    /// is asked for. For network filesystems, where mapping is slow or unsafe, and
    /// unified-memory machines, where mapped pages compete with device memory.
    Buffered,
}

/// Options for opening a pack: limits and read mode.
///
/// ```
/// use burnpack::format::Limits;
/// use burnpack::read::{ReadMode, ReadOptions};
/// let options = ReadOptions::new()
///     .limits(Limits::default().with_max_file_size(1 << 40))
///     .mode(ReadMode::Buffered);
/// assert!(options.open("/does/not/exist.bpk").is_err());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    pub(super) limits: Limits,
    pub(super) mode: ReadMode,
}

impl ReadOptions {
    /// Burn's default limits, memory-mapped.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the limits checked before anything sized by the file is allocated.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the read mode (files only; in-memory sources are always windows).
    #[must_use]
    pub fn mode(mut self, mode: ReadMode) -> Self {
        self.mode = mode;
        self
    }

    /// Opens `path`, reading and validating only the header and metadata.
    ///
    /// # Mapping
    /// In [`ReadMode::Mmap`] the file is mapped read-only and tensors are windows into the
    /// mapping. The mapping is only sound while nobody truncates or rewrites the file in
    /// place: replacing it by rename (as this crate's atomic writer and Burn do) is safe and
    /// the reader keeps seeing the old contents, but another process truncating it makes later
    /// reads of the lost pages fault (`SIGBUS`). Use [`ReadMode::Buffered`] for files that may
    /// change under you.
    ///
    /// The header and metadata are always read with ordinary reads, never through the
    /// mapping, so opening (and listing, `bpk inspect`) never faults. What a mapping can still
    /// meet when tensor bytes are touched: a file truncated or rewritten in place by another
    /// process, an I/O error of the device or network filesystem, and on tmpfs a hole (left by
    /// an in-place write that failed on a full filesystem) that needs a page the filesystem
    /// cannot give. Each of these is a `SIGBUS`, which no library can turn into an error; the
    /// buffered mode turns each into [`ReadError::Io`] (`bpk verify` reads that way).
    ///
    /// # Errors
    /// [`ReadError::Io`] if the file cannot be opened or read, [`ReadError::Invalid`] if it is
    /// not a valid pack within the limits.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Reader, ReadError> {
        let path = path.as_ref();
        let file = crate::platform::open_regular(path).map_err(|source| ReadError::Io {
            file: path.display().to_string(),
            action: "open",
            source,
        })?;
        self.open_file(path, &file)
    }

    /// [`open`](Self::open) of a file already opened (`path` names it in errors): the
    /// registry opens each file once, reads its first bytes, and hands it on.
    pub(crate) fn open_file(&self, path: &Path, file: &std::fs::File) -> Result<Reader, ReadError> {
        let name = path.display().to_string();
        let (io, invalid) = (
            |action| io_error(&name, action),
            |e| invalid_error(&name, e),
        );
        let stat = file.metadata().map_err(io("stat"))?;
        if stat.is_dir() {
            return Err(io("open")(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not a burnpack file",
            )));
        }
        let file_len = stat.len();
        // Header and metadata are read with ordinary reads in both modes, never through the
        // mapping: a file that a failed write left with holes on a full tmpfs (where faulting
        // in a hole needs a page that cannot be had) is then an error, not `SIGBUS`. The
        // ranges asked are validated first (`Layout::read`), so the buffer is bounded.
        let read = |range: std::ops::Range<u64>| {
            let end = range.end.min(file_len);
            let mut buf = vec![0u8; usize::try_from(end.saturating_sub(range.start)).unwrap_or(0)];
            read_exact_at(file, &mut buf, range.start)?;
            Ok((std::borrow::Cow::Owned(buf), file_len))
        };
        let layout = Layout::read(&self.limits, read).map_err(|e| match e {
            OpenError::Read(e) => io("read")(e),
            OpenError::Invalid(e) => invalid(e),
        })?;
        // The caller's side of the mapping's contract is documented on this function and on
        // `Reader::open`; buffered, the file is read with ordinary reads.
        let source = file_data(file, self.mode == ReadMode::Buffered)
            .map_err(|(action, e)| io(action)(e))?;
        Ok(Reader {
            file: name.clone(),
            layout,
            source,
            #[cfg(feature = "optim")]
            recorded: None,
        })
    }

    /// Reads a pack held in memory. Tensors are zero-copy windows into `bytes`.
    ///
    /// # Errors
    /// [`ReadError::Invalid`] if the bytes are not a valid pack within the limits.
    pub fn from_bytes(&self, bytes: Bytes) -> Result<Reader, ReadError> {
        self.open_memory(crate::source::data::view_capable(bytes))
    }

    /// Reads a pack embedded in the program (e.g. with `include_bytes!`), without copying.
    ///
    /// # Errors
    /// [`ReadError::Invalid`] if the bytes are not a valid pack within the limits.
    pub fn from_static(&self, data: &'static [u8]) -> Result<Reader, ReadError> {
        self.open_memory(Bytes::from_shared(
            bytes::Bytes::from_static(data),
            AllocationProperty::Other,
        ))
    }

    fn open_memory(&self, all: Bytes) -> Result<Reader, ReadError> {
        let file = "<memory>".to_string();
        match Layout::from_bytes(&all, &self.limits) {
            Ok(layout) => Ok(Reader {
                file,
                layout,
                source: Source::Memory(all),
                #[cfg(feature = "optim")]
                recorded: None,
            }),
            Err(source) => Err(ReadError::Invalid { file, source }),
        }
    }
}

/// An open burnpack: its validated layout plus the source of its bytes.
///
/// Listing names, dtypes, shapes, parameter ids, metadata and scalars touches no tensor data.
/// [`bytes`](Self::bytes) hands a tensor out as a Burn [`Bytes`]: for mapped and in-memory
/// sources, a zero-copy window (mapped files have the `File` allocation property, so Burn's
/// ndarray backend borrows it and flex keeps it as is). The mapping stays alive as long as any
/// window does; dropping the reader does not invalidate them.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![
///     Entry::resident("b", DType::F32, vec![1], Bytes::from_elems(vec![2.0f32])),
///     Entry::resident("a", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32])),
/// ])
/// .into_bytes()
/// .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let by_name: Vec<_> = reader.tensors().iter().map(|t| t.name()).collect();
/// let by_position: Vec<_> = reader.tensors_by_position().map(|t| t.name()).collect();
/// assert_eq!((by_name, by_position), (vec!["a", "b"], vec!["b", "a"]));
/// assert_eq!(&reader.bytes("a").unwrap()[..], &1.0f32.to_le_bytes());
/// ```
pub struct Reader {
    pub(super) file: String,
    pub(super) layout: Layout,
    pub(super) source: Source,
    /// Where the layout is a record's (an incremental checkpoint's data file opened from its
    /// manifest, `read::shared::open_recorded_shared`) rather than the file's own: the
    /// record's check against the file, made once.
    #[cfg(feature = "optim")]
    pub(super) recorded: Option<super::recorded::Record>,
}

impl Reader {
    /// Memory-maps and opens `path` with Burn's default limits. See [`ReadOptions::open`] for
    /// what mapping requires of other processes.
    ///
    /// # Errors
    /// See [`ReadOptions::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReadError> {
        ReadOptions::new().open(path)
    }

    /// Opens `path` in [`ReadMode::Buffered`] with default limits.
    ///
    /// # Errors
    /// See [`ReadOptions::open`].
    pub fn open_buffered(path: impl AsRef<Path>) -> Result<Self, ReadError> {
        ReadOptions::new().mode(ReadMode::Buffered).open(path)
    }

    /// Reads a pack held in memory with default limits. See [`ReadOptions::from_bytes`].
    ///
    /// # Errors
    /// See [`ReadOptions::from_bytes`].
    pub fn from_bytes(bytes: Bytes) -> Result<Self, ReadError> {
        ReadOptions::new().from_bytes(bytes)
    }

    /// Reads an embedded pack with default limits. See [`ReadOptions::from_static`].
    ///
    /// # Errors
    /// See [`ReadOptions::from_static`].
    pub fn from_static(data: &'static [u8]) -> Result<Self, ReadError> {
        ReadOptions::new().from_static(data)
    }

    /// The same reader, named `name` in errors and by [`file`](Self::file): for a pack read
    /// into memory from elsewhere (the URL it was downloaded from).
    ///
    /// ```
    /// use burnpack::read::Reader;
    /// use burnpack::write::Writer;
    /// let pack = Writer::new(Vec::new()).into_bytes().unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap().with_name("s3://models/m.bpk");
    /// assert_eq!(reader.file(), "s3://models/m.bpk");
    /// ```
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.file = name.into();
        self
    }

    /// The file's path as given (`"<memory>"` for in-memory sources), as used in errors.
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// `self`, unless it is an incremental checkpoint's manifest (metadata
    /// [`INCREMENTAL_KEY`](crate::format::INCREMENTAL_KEY)): a loader of one pack refuses
    /// that by name instead of finding none of its tensors.
    pub(crate) fn not_a_manifest(self) -> Result<Self, ReadError> {
        if self
            .layout()
            .metadata()
            .contains_key(crate::format::INCREMENTAL_KEY)
        {
            return Err(ReadError::IncrementalManifest {
                file: self.file().to_string(),
            });
        }
        Ok(self)
    }

    /// The validated layout.
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every tensor, sorted by name.
    #[must_use]
    pub fn tensors(&self) -> &[TensorInfo] {
        self.layout.tensors()
    }

    /// Every tensor in file order.
    #[must_use = "iterators are lazy"]
    pub fn tensors_by_position(&self) -> impl ExactSizeIterator<Item = &TensorInfo> {
        self.layout.tensors_by_position()
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.layout.tensor(name)
    }

    /// String metadata.
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        self.layout.metadata()
    }

    /// Typed scalars.
    #[must_use]
    pub fn scalars(&self) -> &BTreeMap<String, Scalar> {
        self.layout.scalars()
    }

    /// The bytes of the tensor called `name`. See [`read`](Self::read).
    ///
    /// # Errors
    /// [`ReadError::NotFound`], or see [`read`](Self::read).
    pub fn bytes(&self, name: &str) -> Result<Bytes, ReadError> {
        let info = self.tensor(name).ok_or_else(|| ReadError::NotFound {
            file: self.file.clone(),
            tensor: name.to_string(),
        })?;
        self.read(info)
    }

    /// The bytes of `info` (a tensor of this reader): a zero-copy window for mapped and
    /// in-memory sources when [`is_zero_copy`](Self::is_zero_copy), otherwise an owned,
    /// 8-byte aligned copy (buffered mode, or a tensor another writer left unaligned).
    ///
    /// # Errors
    /// [`ReadError::Io`] if a buffered read fails.
    pub fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        self.owned(info)?;
        let bytes = self.source.read_tensor(&self.file, info)?;
        crate::source::data::checked_bools(&self.file, info, bytes, |b| self.check(info, b))
    }

    /// `info`, when it is one of this pack's tensors ("not mine" otherwise, as every source
    /// answers).
    fn owned(&self, info: &TensorInfo) -> Result<(), ReadError> {
        crate::format::owned(self.layout.tensors(), info)
            .map(|_| ())
            .ok_or_else(|| ReadError::NotMine {
                file: self.file.clone(),
                tensor: info.name().to_string(),
            })
    }

    /// Checks `bytes` (as read for `info`) against the stored checksum. Returns `false` when
    /// the file stores none (files written by Burn: their contents are unverified).
    ///
    /// # Errors
    /// [`ReadError::Checksum`] naming the tensor.
    pub fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        TensorSource::check(self, info, bytes)
    }

    /// Reads `info` and checks it against its checksum (see [`check`](Self::check)).
    ///
    /// # Errors
    /// [`ReadError::Checksum`] or a read error.
    pub fn verify(&self, info: &TensorInfo) -> Result<bool, ReadError> {
        self.check(info, &self.read(info)?)
    }

    /// Verifies every tensor, in parallel. Returns how many had a checksum.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![2], Bytes::from_bytes_vec(vec![1, 2]))])
    ///     .into_bytes()
    ///     .unwrap();
    /// let mut corrupt = pack.to_vec();
    /// *corrupt.last_mut().unwrap() ^= 1;
    /// assert_eq!(Reader::from_bytes(pack).unwrap().verify_all().unwrap(), 1);
    /// let err = Reader::from_bytes(Bytes::from_bytes_vec(corrupt)).unwrap().verify_all().unwrap_err();
    /// assert!(err.to_string().contains("tensor 'w': checksum mismatch"));
    /// ```
    ///
    /// # Errors
    /// [`verify_structure`](Self::verify_structure)'s errors, then the first
    /// [`ReadError::Checksum`] (or read error) found.
    pub fn verify_all(&self) -> Result<usize, ReadError> {
        use rayon::prelude::*;
        self.verify_structure()?;
        self.tensors()
            .par_iter()
            .map(|t| self.verify(t).map(usize::from))
            .try_reduce(|| 0, |a, b| Ok(a + b))
    }

    /// The checks beyond the tensors' own checksums that [`verify_all`](Self::verify_all)
    /// and `LoadOptions::verify_checksums` make: a file whose `producer` names this crate must
    /// have no unknown top-level metadata key ([`FormatError::UnknownKey`]; in other files
    /// they are warnings, see [`Layout::check_extras`](crate::format::Layout::check_extras))
    /// and must carry checksums ([`FormatError::MissingChecksums`]), and in a file with
    /// checksums the padding after the metadata and between tensors must be zero
    /// ([`FormatError::Padding`]). The header and metadata checksum itself is checked on
    /// every open.
    ///
    /// # Errors
    /// [`ReadError::Invalid`] as above, or a read error.
    pub fn verify_structure(&self) -> Result<(), ReadError> {
        #[cfg(feature = "optim")]
        if let Some(record) = &self.recorded {
            return record.verify(&self.file, &self.layout, &self.source, |layout| {
                self.structure(layout)
            });
        }
        self.structure(&self.layout)
    }

    /// [`verify_structure`](Self::verify_structure)'s checks of `layout`, the file's.
    pub(super) fn structure(&self, layout: &Layout) -> Result<(), ReadError> {
        let invalid = |source| ReadError::Invalid {
            file: self.file.clone(),
            source,
        };
        layout.check_extras().map_err(invalid)?;
        layout.require_checksums().map_err(invalid)?;
        if !layout.has_checksums() {
            return Ok(());
        }
        for (start, end, before) in layout.padding() {
            let mut at = start;
            while at < end {
                // In pieces of at most 1 MiB: a buffered read allocates what it reads.
                let len = (end - at).min(1 << 20);
                let bytes = self
                    .source
                    .read(at, len, 1)
                    .map_err(|source| ReadError::Io {
                        file: self.file.clone(),
                        action: "read padding",
                        source,
                    })?;
                if let Some(i) = bytes.iter().position(|&b| b != 0) {
                    return Err(invalid(FormatError::Padding {
                        offset: at + i as u64,
                        before: before.to_string(),
                    }));
                }
                at += len;
            }
        }
        Ok(())
    }

    /// Whether [`read`](Self::read) hands `info` out without copying.
    #[must_use]
    pub fn is_zero_copy(&self, info: &TensorInfo) -> bool {
        self.copy_reason(info).is_none()
    }

    /// Why [`read`](Self::read) copies `info` (see [`TensorSource::copy_reason`]).
    #[must_use]
    pub fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        self.source.tensor_copy_reason(info)
    }

    /// Tensors that a mapped or in-memory read must copy because their bytes are not aligned
    /// to their element size (never the case for files from Burn or this crate).
    pub fn unaligned(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors()
            .iter()
            .filter(|t| matches!(self.source, Source::Memory(_)) && !self.is_zero_copy(t))
    }
}

impl crate::source::PackSource for Reader {
    fn layout(&self) -> &Layout {
        &self.layout
    }
}

impl TensorSource for Reader {
    from_table!(file, layout);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        Reader::read(self, info)
    }

    /// Only the bytes of `range`: a window of the mapping, or one positional read.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        self.owned(info)?;
        crate::source::check_range(&self.file, info, &range)?;
        // A window is not the whole tensor: no checksum to hold it to.
        self.source
            .read_window(&self.file, info, info.offset(), range)
    }

    fn namespace(&self) -> Option<&str> {
        self.layout.namespace()
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        Reader::copy_reason(self, info)
    }

    fn shared(&self) -> Option<&(dyn TensorSource + Sync)> {
        Some(self)
    }

    /// The tensor's checksum; for a reader opened from a record, first (once) the record
    /// against the file's own table: a record that does not describe the file fails every
    /// check, so no path that checks checksums takes what a lying record points at.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        #[cfg(feature = "optim")]
        if let Some(record) = &self.recorded {
            record.holds(&self.file, &self.layout, &self.source)?;
        }
        crate::source::check_checksum(&self.file, info, bytes)
    }

    fn verify_structure(&self) -> Result<(), ReadError> {
        Reader::verify_structure(self)
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("file", &self.file)
            .field("tensors", &self.layout.tensors().len())
            .finish_non_exhaustive()
    }
}

impl crate::source::DescribedSource for Reader {
    fn describe(&self) -> crate::source::Description {
        super::describe_pack(&self.layout)
    }

    fn as_pack(&self) -> Option<&dyn crate::source::PackSource> {
        Some(self)
    }
}
