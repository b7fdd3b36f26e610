//! Errors of the read path.

use crate::format::FormatError;

/// What [`ReadError::IncrementalManifest`] says after the file's name.
const MANIFEST: &str = "an incremental checkpoint (a manifest whose tensors are in data files \
     beside it), not a pack of tensors: load it with `Checkpoint::open(path)?.load_model(model)` \
     (or its manager's `latest` / `checkpoint(step)`), open it with \
     `burnpack::interop::open_any`, or make a self-contained pack with `bpk convert`";

/// Why reading failed. Every variant names the file (`"<memory>"` for in-memory sources).
///
/// ```
/// use burnpack::read::Reader;
/// use burnpack::source::ReadError;
/// let err = Reader::open("/no/such/file.bpk").unwrap_err();
/// assert!(matches!(err, ReadError::Io { .. }));
/// assert!(err.to_string().contains("/no/such/file.bpk"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file's contents are not a valid burnpack (the inner error names the tensor).
    #[error("{file}: {source}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong.
        source: FormatError,
    },
    /// A file operation failed.
    #[error("{file}: cannot {action}: {source}")]
    Io {
        /// The file.
        file: String,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is an incremental checkpoint's manifest: its tensors are in data files beside
    /// it, which a loader of one pack does not open.
    #[error("{file}: {}", MANIFEST)]
    IncrementalManifest {
        /// The manifest.
        file: String,
    },
    /// A tensor's bytes do not match its stored checksum.
    #[error(
        "{file}: tensor '{tensor}': checksum mismatch (stored {expected:#018x}, computed {actual:#018x}): the data is corrupt"
    )]
    Checksum {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// The stored checksum.
        expected: u64,
        /// The checksum of the bytes read.
        actual: u64,
    },
    /// The [`TensorInfo`](crate::format::TensorInfo) asked for is not one of this source's
    /// (another source's table, or a changed copy): every source answers so, never reading
    /// whatever its offset points at.
    #[error("{file}: tensor '{tensor}' is not one of this source's (its description differs)")]
    NotMine {
        /// The file.
        file: String,
        /// The name of the tensor asked for.
        tensor: String,
    },
    /// The source lists the tensor but does not read how it is stored (a GGUF quantization
    /// type this crate does not dequantize): the other tensors read.
    #[error("{file}: tensor '{tensor}': {reason}")]
    Unsupported {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// How it is stored, and that it is not read.
        reason: String,
    },
    /// A checkpoint's reference to a tensor held by another file does not hold: the bytes there
    /// are not the ones the checkpoint recorded (see
    /// [`Chain`](crate::checkpoint::Chain)).
    #[error("{file}: tensor '{tensor}': {what}")]
    Reference {
        /// The checkpoint that refers.
        file: String,
        /// The tensor.
        tensor: String,
        /// What does not hold.
        what: String,
    },
    /// No tensor of that name.
    #[error("{file}: no tensor named '{tensor}'")]
    NotFound {
        /// The file.
        file: String,
        /// The name asked for.
        tensor: String,
    },
    /// The source cannot be converted as it is: what it holds would mean something else in
    /// the output (a metadata key the output's format reserves). Nothing was written.
    #[error("{file}: cannot convert: {reason}")]
    Conversion {
        /// The source file.
        file: String,
        /// What stands in the way.
        reason: String,
    },
}

impl ReadError {
    /// What kind of failure this is, in the terms of [`SourceError::kind`]: a checksum or
    /// CRC-32 that does not match, or a reference that does not hold, is
    /// [`SourceErrorKind::Damaged`]; an I/O error [`SourceErrorKind::Io`]; a file cut short
    /// [`SourceErrorKind::Truncated`].
    ///
    /// ```
    /// use burnpack::source::{ReadError, SourceErrorKind};
    /// let err = ReadError::Checksum { file: "m.bpk".into(), tensor: "w".into(), expected: 1, actual: 2 };
    /// assert_eq!(err.kind(), SourceErrorKind::Damaged);
    /// ```
    #[must_use]
    pub fn kind(&self) -> SourceErrorKind {
        match self {
            Self::Invalid { file, source } => SourceError::Format {
                path: file.into(),
                source: source.clone(),
            }
            .kind(),
            Self::Io { .. } => SourceErrorKind::Io,
            Self::Checksum { .. } | Self::Reference { .. } => SourceErrorKind::Damaged,
            Self::NotMine { .. } | Self::Unsupported { .. } | Self::NotFound { .. } => {
                SourceErrorKind::Tensor
            }
            // A manifest is a valid pack, of a kind a loader of one pack does not read; what a
            // conversion's output cannot hold is the input's structure.
            Self::IncrementalManifest { .. } | Self::Conversion { .. } => SourceErrorKind::Invalid,
        }
    }

    /// A failed read of `tensor`'s bytes from `file`: [`ReadError::Io`], the tensor named in
    /// its message (`cannot read tensor data: tensor 'w': ...`).
    pub(crate) fn reading(file: impl Into<String>, tensor: &str, source: &std::io::Error) -> Self {
        Self::Io {
            file: file.into(),
            action: "read tensor data",
            source: std::io::Error::new(source.kind(), format!("tensor '{tensor}': {source}")),
        }
    }
}

/// What kind of failure a [`SourceError`] is, for a program to match on whatever the format.
///
/// ```
/// use burnpack::source::SourceErrorKind;
/// assert!(SourceErrorKind::Truncated.is_unreadable());
/// assert!(SourceErrorKind::Invalid.is_unreadable());
/// assert!(!SourceErrorKind::Damaged.is_unreadable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// The file (or URL) could not be read: missing, not a regular file, permissions, a
    /// failed request.
    Io,
    /// The file is shorter than its own header says (an interrupted copy or download).
    Truncated,
    /// The contents are not a valid file of the format: a structure that does not parse or does
    /// not hold together (damage its own checks find is [`Damaged`](Self::Damaged)).
    Invalid,
    /// One tensor is wrong (named in the error): a dtype with no Burn equivalent, a length that
    /// does not match its shape, a view outside its storage.
    Tensor,
    /// The file asks for code to be run (a pickle's global outside a state dict's): nothing
    /// was run.
    Refused,
    /// A container this crate recognises but cannot read (a bincode record, which does not
    /// describe itself).
    Unsupported,
    /// Not a container any source of this crate reads.
    UnknownFormat,
    /// The path or URL itself is not one this crate can open (a malformed URL, a scheme this
    /// build was compiled without).
    Location,
    /// The file was read, and its own check says its bytes changed since it was written: a
    /// checksum or CRC-32 that does not match (a pack's header and metadata or a tensor, a
    /// `torch.save` archive's pickle or storage, a gzip stream), or a checkpoint's reference
    /// to bytes that are no longer the ones it recorded.
    Damaged,
}

impl SourceErrorKind {
    /// Whether the file could not be read (missing, of no format this crate reads, cut short,
    /// an invalid or unsupported structure, a refused pickle), as opposed to read and found
    /// [`Damaged`](Self::Damaged) by its own checks: `bpk` exits 3 for these and 1 for damage,
    /// whatever the format and the command.
    ///
    /// ```
    /// use burnpack::source::SourceErrorKind;
    /// assert!(SourceErrorKind::Io.is_unreadable());
    /// assert!(!SourceErrorKind::Damaged.is_unreadable());
    /// ```
    #[must_use]
    pub fn is_unreadable(self) -> bool {
        self != Self::Damaged
    }
}

/// Why a source of tensors (a pack, safetensors weights, a `torch.save` file, a Burn record,
/// an object on object storage) could not be opened: one error for every format, naming the
/// path or URL, the tensor where there is one, and what was wrong, with a
/// [`kind`](Self::kind) a program can match.
///
/// ```
/// use burnpack::source::{SourceError, SourceErrorKind};
/// let err = burnpack::interop::open_any("/no/such/model.safetensors").unwrap_err();
/// assert_eq!(err.kind(), SourceErrorKind::Io);
/// assert_eq!(err.path(), std::path::Path::new("/no/such/model.safetensors"));
/// assert!(err.to_string().contains("/no/such/model.safetensors"));
/// assert!(matches!(err, SourceError::Io { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The file could not be read.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file or URL.
        path: std::path::PathBuf,
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid file of its format (its structure does not parse or hold
    /// together).
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file or URL.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A tensor of the file is not one Burn can hold as stored, or does not fit its storage.
    #[error("{}: tensor '{tensor}': {reason}", path.display())]
    Tensor {
        /// The file or URL.
        path: std::path::PathBuf,
        /// The tensor's name.
        tensor: String,
        /// What was wrong.
        reason: String,
    },
    /// A pickle references a global outside the table of those a state dict needs (what a
    /// malicious file would use to run code). Nothing was run.
    #[error(
        "{}: refused: the pickle references `{global}`, which a state dict never needs (nothing in the file is run)",
        path.display()
    )]
    Refused {
        /// The file.
        path: std::path::PathBuf,
        /// The global, as `module.name`.
        global: String,
    },
    /// A bincode record of Burn 0.14-0.21 (`BinFileRecorder`, `BinGzFileRecorder`).
    #[error(
        "{}: a bincode record (BinFileRecorder / BinGzFileRecorder) does not describe itself \
         (no field names, no lengths), so it cannot be read without the Burn 0.21 module type \
         that wrote it: load it with that module under Burn 0.21 and save it with \
         NamedMpkFileRecorder (or burn-store's BurnpackStore), then open that file here",
        path.display()
    )]
    Bincode {
        /// The file.
        path: std::path::PathBuf,
    },
    /// A burnpack file (or buffer) that failed validation.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file or URL.
        path: std::path::PathBuf,
        /// What is wrong (naming the tensor where there is one).
        source: FormatError,
    },
    /// A file of a format this crate recognises, in a variant it does not read (a big-endian
    /// or future version of it).
    #[error("{}: {reason}", path.display())]
    Unsupported {
        /// The file.
        path: std::path::PathBuf,
        /// What it is, and what is read.
        reason: String,
    },
    /// The file is shorter than its own header says (an interrupted copy or download).
    #[error("{}: truncated: {reason}", path.display())]
    Truncated {
        /// The file.
        path: std::path::PathBuf,
        /// What its header says, and what is there.
        reason: String,
    },
    /// The path or URL is not one this crate can open.
    #[error("{}: {reason}", path.display())]
    Location {
        /// The path or URL as given.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file was read and its own check failed (see [`SourceErrorKind::Damaged`]).
    #[error(
        "{}: {}{reason}",
        path.display(),
        tensor.as_ref().map(|t| format!("tensor '{t}': ")).unwrap_or_default()
    )]
    Damaged {
        /// The file.
        path: std::path::PathBuf,
        /// The tensor whose bytes failed their check, where the check is a tensor's.
        tensor: Option<String>,
        /// Which check failed, and what it expected.
        reason: String,
    },
    /// Not a file any source of this crate reads.
    #[error("{}: not a file bpk reads (it starts with {start}){hint}", path.display())]
    UnknownFormat {
        /// The file.
        path: std::path::PathBuf,
        /// Its first bytes, as text where printable and hex otherwise.
        start: String,
        /// What the caller may have meant (a format whose Cargo feature is off), or empty.
        hint: String,
    },
}

impl SourceError {
    /// What kind of failure this is.
    ///
    /// ```
    /// use burnpack::source::{SourceError, SourceErrorKind};
    /// let err = SourceError::Invalid { path: "m.pt".into(), reason: "bad".into() };
    /// assert_eq!(err.kind(), SourceErrorKind::Invalid);
    /// ```
    #[must_use]
    pub fn kind(&self) -> SourceErrorKind {
        match self {
            Self::Io { .. } => SourceErrorKind::Io,
            Self::Invalid { .. } => SourceErrorKind::Invalid,
            Self::Tensor { .. } => SourceErrorKind::Tensor,
            Self::Refused { .. } => SourceErrorKind::Refused,
            Self::Bincode { .. } | Self::Unsupported { .. } => SourceErrorKind::Unsupported,
            Self::UnknownFormat { .. } => SourceErrorKind::UnknownFormat,
            Self::Location { .. } => SourceErrorKind::Location,
            Self::Truncated { .. } => SourceErrorKind::Truncated,
            Self::Damaged { .. } => SourceErrorKind::Damaged,
            Self::Format { source, .. } => match source {
                FormatError::Truncated { .. } | FormatError::PastEnd { .. } => {
                    SourceErrorKind::Truncated
                }
                FormatError::MetadataChecksum { .. } | FormatError::TensorChecksum { .. } => {
                    SourceErrorKind::Damaged
                }
                _ if source.tensor().is_some() => SourceErrorKind::Tensor,
                _ => SourceErrorKind::Invalid,
            },
        }
    }

    /// The file or URL.
    ///
    /// ```
    /// let err = burnpack::source::SourceError::Bincode { path: "model.bin".into() };
    /// assert_eq!(err.path(), std::path::Path::new("model.bin"));
    /// ```
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        match self {
            Self::Io { path, .. }
            | Self::Invalid { path, .. }
            | Self::Tensor { path, .. }
            | Self::Refused { path, .. }
            | Self::Bincode { path }
            | Self::Format { path, .. }
            | Self::Location { path, .. }
            | Self::Truncated { path, .. }
            | Self::Damaged { path, .. }
            | Self::Unsupported { path, .. }
            | Self::UnknownFormat { path, .. } => path,
        }
    }

    /// The tensor the error is about, where there is one.
    ///
    /// ```
    /// let err = burnpack::source::SourceError::Tensor {
    ///     path: "m.safetensors".into(),
    ///     tensor: "w".into(),
    ///     reason: "dtype F8_E4M3 has no Burn equivalent".into(),
    /// };
    /// assert_eq!(err.tensor(), Some("w"));
    /// ```
    #[must_use]
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Self::Tensor { tensor, .. } => Some(tensor),
            Self::Damaged { tensor, .. } => tensor.as_deref(),
            Self::Format { source, .. } => source.tensor(),
            _ => None,
        }
    }

    /// `map_err` for an I/O error of `action` on `path`.
    pub(crate) fn io(
        path: &std::path::Path,
        action: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            path,
            action,
            source,
        }
    }

    /// `map_err` for a reason `path` is invalid.
    pub(crate) fn invalid(path: &std::path::Path) -> impl Fn(String) -> Self {
        let path = path.to_path_buf();
        move |reason| Self::Invalid {
            path: path.clone(),
            reason,
        }
    }
}

impl From<ReadError> for SourceError {
    /// A pack's [`ReadError`] as the error of opening a source (its file becomes the path).
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Invalid { file, source } => Self::Format {
                path: file.into(),
                source,
            },
            ReadError::Io {
                file,
                action,
                source,
            } => Self::Io {
                path: file.into(),
                action,
                source,
            },
            ReadError::Checksum {
                file,
                tensor,
                expected,
                actual,
            } => Self::Damaged {
                path: file.into(),
                tensor: Some(tensor),
                reason: format!(
                    "checksum mismatch (stored {expected:#018x}, computed {actual:#018x}): the data is corrupt"
                ),
            },
            ReadError::NotFound { file, tensor } => Self::Tensor {
                path: file.into(),
                tensor,
                reason: "no tensor of this name".into(),
            },
            ReadError::Reference { file, tensor, what } => Self::Damaged {
                path: file.into(),
                tensor: Some(tensor),
                reason: what,
            },
            ReadError::Unsupported {
                file,
                tensor,
                reason,
            } => Self::Tensor {
                path: file.into(),
                tensor,
                reason,
            },
            ReadError::NotMine { file, tensor } => Self::Tensor {
                path: file.into(),
                tensor,
                reason: "not a tensor of this source".into(),
            },
            ReadError::IncrementalManifest { file } => Self::Invalid {
                path: file.into(),
                reason: MANIFEST.into(),
            },
            ReadError::Conversion { file, reason } => Self::Invalid {
                path: file.into(),
                reason: format!("cannot convert: {reason}"),
            },
        }
    }
}
