//! The container registry's output side: every format this build *writes* a source into
//! (a pack, safetensors, sharded safetensors), each picked by the output's name, and the
//! migrations between training layouts (a burn-train 0.14-0.21 checkpoint directory into
//! this crate's checkpoints). `bpk convert` and `bpk migrate` reach formats only through these
//! lists; a new output is one [`Output`] here (its feature gate beside it) and its folder.
//!
//! Every output streams ([`Writer::streaming`]: a tensor is read as the writer reaches it) and
//! writes atomically: a scratch sibling, synced, renamed into place once whole, so a failed
//! conversion leaves no half-written file and replaces nothing.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::source::{DescribedSource, ReadError, SourceError, SourceErrorKind};
use crate::write::{WriteError, Writer};

mod edit;
pub use edit::OutputOptions;

/// A callback told how many bytes of tensor data were written since its last call.
pub type Progress = Arc<dyn Fn(u64) + Send + Sync>;

/// Writes a source to an output: the source, the input's name (for errors), the output, the
/// options and the progress callback (outputs that report it).
type WriteFn = fn(
    &Arc<dyn DescribedSource>,
    &Path,
    &Path,
    &OutputOptions,
    Option<Progress>,
) -> Result<Written, OutputError>;

/// One format this build writes, and the output names it takes.
///
/// ```
/// let outputs = burnpack::interop::outputs();
/// assert!(outputs.iter().any(|o| o.format == "burnpack" && o.extensions == ["bpk"]));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)] // A row of the table of outputs: what each takes.
pub struct Output {
    /// The output's short name (`burnpack`, `safetensors`, `safetensors-sharded`).
    pub name: &'static str,
    /// The format it writes, as a source of it describes itself
    /// ([`Description::format`](crate::source::Description)).
    pub format: &'static str,
    /// The extensions of the output names it takes, without the dot.
    pub extensions: &'static [&'static str],
    /// Whether it takes a shard size ([`OutputOptions::shard_size`]) and needs one: the
    /// output is then split into shards of at most that size, with an index JSON.
    pub sharded: bool,
    /// Whether it keeps quantized blocks as quantized tensors
    /// ([`OutputOptions::keep_quantized`]).
    pub keeps_quantized: bool,
    /// Whether it also writes to object storage (`s3://` URLs; feature `object-store`).
    pub object_store: bool,
    /// Whether it reports the bytes it writes to a [`Progress`] callback.
    pub reports_progress: bool,
    write: WriteFn,
}

/// What an output wrote: its files (shards first, an index last) and their total size.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Written {
    /// The files written (one, or the shards and the index last).
    pub paths: Vec<PathBuf>,
    /// Their total size in bytes.
    pub size: u64,
}

/// Why an output could not be picked or written. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The output's name says no format this build writes.
    #[error("{}: cannot tell the output format from its extension (known: {known})", path.display())]
    UnknownName {
        /// The output.
        path: PathBuf,
        /// The extensions this build writes (`.bpk, .safetensors`).
        known: String,
    },
    /// The output and its options do not go together (a shard size for a pack, safetensors
    /// to a URL, an unknown format name): nothing was read or written.
    #[error("{reason}")]
    Usage {
        /// The output.
        path: PathBuf,
        /// What does not go together, and what would.
        reason: String,
    },
    /// The conversion failed: the message names the file at fault (the output where writing
    /// it failed, the input where what it holds cannot be written or read). Nothing was left
    /// at the output.
    #[error("{message}")]
    Failed {
        /// What failed, naming the file.
        message: String,
        /// Whether the input was read and its own checks found it damaged.
        damaged: bool,
        /// The error underneath.
        source: Box<dyn Error + Send + Sync>,
    },
}

impl OutputError {
    /// Whether the output and its options are at fault (nothing was read or written), rather
    /// than the input or the write.
    ///
    /// ```
    /// let err = burnpack::interop::output_for("m.txt", None, &Default::default()).unwrap_err();
    /// assert!(err.is_usage());
    /// ```
    #[must_use]
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::UnknownName { .. } | Self::Usage { .. })
    }

    /// Whether the input was read and its own checks found it damaged (a checksum that does
    /// not match): the conversion's failure is the input's.
    ///
    /// ```
    /// let err = burnpack::interop::output_for("m.txt", None, &Default::default()).unwrap_err();
    /// assert!(!err.is_damaged());
    /// ```
    #[must_use]
    pub fn is_damaged(&self) -> bool {
        matches!(self, Self::Failed { damaged: true, .. })
    }

    /// A failure of `e`, its message `message`.
    fn failed(message: String, e: impl Error + Send + Sync + 'static) -> Self {
        Self::Failed {
            message,
            damaged: damaged(&e),
            source: Box::new(e),
        }
    }
}

/// Whether a read found the input damaged anywhere in `e`'s chain of causes.
fn damaged(e: &(dyn Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(cause) = next {
        let kind = cause
            .downcast_ref::<SourceError>()
            .map(SourceError::kind)
            .or_else(|| cause.downcast_ref::<ReadError>().map(ReadError::kind))
            .or_else(|| convert_kind(cause));
        if kind == Some(SourceErrorKind::Damaged) {
            return true;
        }
        next = cause.source();
    }
    false
}

impl Output {
    /// Writes `source` to `output` (as a stream: each tensor read as the writer reaches it),
    /// atomically. `input` names the source in errors; `progress` is told the bytes written
    /// where [`reports_progress`](Self::reports_progress).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::interop::{OutputOptions, output_for};
    /// use burnpack::source::DescribedSource;
    /// use burnpack::write::{Entry, Writer};
    /// let dir = tempfile::tempdir().unwrap();
    /// let (input, output) = (dir.path().join("in.bpk"), dir.path().join("out.bpk"));
    /// Writer::new(vec![Entry::resident("w", DType::F32, vec![1], Bytes::from_elems(vec![1.0f32]))])
    ///     .write_to_file(&input)
    ///     .unwrap();
    /// let source: Arc<dyn DescribedSource> = Arc::from(burnpack::interop::open_any(&input).unwrap());
    /// let options = OutputOptions::new();
    /// let written = output_for(&output, None, &options).unwrap().write(&source, &input, &output, &options, None).unwrap();
    /// assert_eq!(written.paths, [output]);
    /// ```
    ///
    /// # Errors
    /// The source cannot be streamed or read, holds what the format cannot (a dtype, a name),
    /// or the output cannot be written; a URL for an output that writes files only.
    pub fn write(
        &self,
        source: &Arc<dyn DescribedSource>,
        input: &Path,
        output: &Path,
        options: &OutputOptions,
        progress: Option<Progress>,
    ) -> Result<Written, OutputError> {
        (self.write)(source, input, output, options, progress)
    }
}

/// Every output this build writes, in the order they are matched.
///
/// ```
/// for output in burnpack::interop::outputs() {
///     println!("{}: .{}", output.name, output.extensions.join(", ."));
/// }
/// ```
#[must_use]
pub fn outputs() -> &'static [Output] {
    OUTPUTS
}

/// The formats this build writes (each once, in the order of [`outputs`]): the names
/// [`output_for`] takes.
///
/// ```
/// assert_eq!(burnpack::interop::output_formats()[0], "burnpack");
/// ```
#[must_use]
pub fn output_formats() -> Vec<&'static str> {
    let mut formats: Vec<&'static str> = OUTPUTS.iter().map(|o| o.format).collect();
    formats.dedup();
    formats
}

/// The output for `path`, in format `format` where given (one of [`output_formats`]),
/// otherwise the one its extension names; of those, the one that takes `options` (a shard
/// size picks the sharded safetensors output).
///
/// ```
/// use burnpack::interop::{OutputOptions, output_for};
/// let plain = OutputOptions::new();
/// assert_eq!(output_for("m.bpk", None, &plain).unwrap().name, "burnpack");
/// let sharded = OutputOptions::new().shard_size(Some(1 << 30));
/// assert_eq!(output_for("m.safetensors", None, &sharded).unwrap().name, "safetensors-sharded");
/// assert!(output_for("m.onnx", None, &plain).unwrap_err().to_string().contains(".bpk"));
/// ```
///
/// # Errors
/// [`OutputError::UnknownName`] for an extension no output takes, naming those that are;
/// [`OutputError::Usage`] for an unknown format, or options the output does not take.
pub fn output_for(
    path: impl AsRef<Path>,
    format: Option<&str>,
    options: &OutputOptions,
) -> Result<&'static Output, OutputError> {
    let path = path.as_ref();
    let usage = |reason: String| OutputError::Usage {
        path: path.to_path_buf(),
        reason,
    };
    let format = if let Some(format) = format {
        if !OUTPUTS.iter().any(|o| o.format == format) {
            return Err(usage(format!(
                "{}: no output format '{format}' (known: {})",
                path.display(),
                output_formats().join(", ")
            )));
        }
        format
    } else {
        let extension = path.extension().and_then(|e| e.to_str());
        let Some(output) = OUTPUTS
            .iter()
            .find(|o| extension.is_some_and(|e| o.extensions.contains(&e)))
        else {
            return Err(OutputError::UnknownName {
                path: path.to_path_buf(),
                known: known_extensions(),
            });
        };
        output.format
    };
    let of_format = || OUTPUTS.iter().filter(move |o| o.format == format);
    if options.shard_size.is_some() && !of_format().any(|o| o.sharded) {
        return Err(usage(format!(
            "--shard-size applies to {} output only",
            formats_where(|o| o.sharded)
        )));
    }
    let Some(output) = of_format().find(|o| o.sharded == options.shard_size.is_some()) else {
        return Err(usage(format!(
            "{}: {format} output needs a shard size",
            path.display()
        )));
    };
    if options.keep_quantized && !output.keeps_quantized {
        return Err(usage(format!(
            "--keep-quantized applies to {} output only ({format} has no quantized dtype)",
            formats_where(|o| o.keeps_quantized)
        )));
    }
    if !output.object_store && super::is_object_url(&path.to_string_lossy()) {
        return Err(usage(format!(
            "{}: {format} are written to local files only; convert to a local file, then copy it",
            path.display()
        )));
    }
    Ok(output)
}

/// The extensions of every output (`.bpk, .safetensors`).
fn known_extensions() -> String {
    let mut known: Vec<String> = OUTPUTS
        .iter()
        .flat_map(|o| o.extensions.iter().map(|e| format!(".{e}")))
        .collect();
    known.dedup();
    known.join(", ")
}

/// The formats of the outputs where `take` holds (`safetensors`, `burnpack or safetensors`).
fn formats_where(take: impl Fn(&Output) -> bool) -> String {
    let mut formats: Vec<&str> = OUTPUTS
        .iter()
        .filter(|o| take(o))
        .map(|o| o.format)
        .collect();
    formats.dedup();
    formats.join(" or ")
}

// The outputs of one format side by side (the lists of formats and extensions say each once).
static OUTPUTS: &[Output] = &[
    Output {
        name: "burnpack",
        format: "burnpack",
        extensions: &["bpk"],
        sharded: false,
        keeps_quantized: true,
        object_store: true,
        reports_progress: true,
        write: write_pack,
    },
    #[cfg(feature = "safetensors")]
    Output {
        name: "safetensors",
        format: "safetensors",
        extensions: &["safetensors"],
        sharded: false,
        keeps_quantized: false,
        object_store: false,
        reports_progress: false,
        write: write_safetensors,
    },
    // `NAME.safetensors` with a shard size: `NAME-00001-of-0000N.safetensors`, ... beside it,
    // and the index `NAME.safetensors.index.json` (written last).
    #[cfg(feature = "safetensors")]
    Output {
        name: "safetensors-sharded",
        format: "safetensors",
        extensions: &["safetensors"],
        sharded: true,
        keeps_quantized: false,
        object_store: false,
        reports_progress: false,
        write: write_safetensors,
    },
];

/// The streaming writer of `source` with `options`' edits (filter, renames, float dtype); a
/// source that cannot be streamed fails as itself, edits that do not fit it (a rename onto a
/// taken name, a filter that keeps nothing) as a usage error naming the output.
fn streaming(
    source: &Arc<dyn DescribedSource>,
    output: &Path,
    options: &OutputOptions,
) -> Result<Writer, OutputError> {
    let writer = Writer::streaming(source).map_err(|e| OutputError::Failed {
        message: e.to_string(),
        // (Said as it is, whatever its cause.)
        damaged: false,
        source: Box::new(e),
    })?;
    edit::edit(writer, options).map_err(|why| OutputError::Usage {
        path: output.to_path_buf(),
        reason: format!("{}: {why}", source.file()),
    })
}

/// A pack, to a file (a scratch sibling renamed into place) or, with `object-store`, to a
/// URL as a multipart upload.
fn write_pack(
    source: &Arc<dyn DescribedSource>,
    input: &Path,
    output: &Path,
    options: &OutputOptions,
    progress: Option<Progress>,
) -> Result<Written, OutputError> {
    let mut writer = streaming(source, output, options)?;
    if let Some(progress) = progress {
        writer = writer.progress(move |n| progress(n));
    }
    let size = if super::is_object_url(&output.to_string_lossy()) {
        upload(writer, output)?
    } else {
        writer
            .write_to_file(output)
            .map_err(|e| write_failed(input, output, e))?
    };
    Ok(Written {
        paths: vec![output.to_path_buf()],
        size,
    })
}

/// A pack's failed write, naming the file at fault: the output where writing it failed, the
/// reader's own error where a tensor could not be read (it names the input), the input where
/// what it holds cannot be written.
fn write_failed(input: &Path, output: &Path, e: WriteError) -> OutputError {
    match &e {
        WriteError::Provider { source, .. } => {
            let message = source.to_string();
            OutputError::failed(message, e)
        }
        WriteError::Io { .. } | WriteError::AlreadyExists { .. } => {
            OutputError::failed(e.to_string(), e)
        }
        _ => OutputError::failed(cannot_be_written(input, output, &e), e),
    }
}

/// `INPUT: cannot be written as OUTPUT: why`.
fn cannot_be_written(input: &Path, output: &Path, e: &dyn std::fmt::Display) -> String {
    format!(
        "{}: cannot be written as {}: {e}",
        input.display(),
        output.display()
    )
}

/// A pack streamed to object storage as a multipart upload.
#[cfg(feature = "object-store")]
fn upload(writer: Writer, output: &Path) -> Result<u64, OutputError> {
    use super::object_store::{ObjectLocation, UploadOptions, upload};
    let location =
        ObjectLocation::parse(&output.to_string_lossy()).map_err(|e| OutputError::Usage {
            path: output.to_path_buf(),
            reason: e.to_string(),
        })?;
    upload(writer, &location, &UploadOptions::new())
        .map_err(|e| OutputError::failed(e.to_string(), e))
}

/// Without the `object-store` feature, a URL is a usage error saying how to get it.
#[cfg(not(feature = "object-store"))]
fn upload(_: Writer, output: &Path) -> Result<u64, OutputError> {
    Err(OutputError::Usage {
        path: output.to_path_buf(),
        reason: format!(
            "{}: this bpk was built without object storage; install it with \
             `--features cli,object-store`",
            output.display()
        ),
    })
}

/// Safetensors with the `safetensors` crate: one file, or shards of at most the shard size
/// and their index; every file a scratch sibling renamed into place once all are written.
#[cfg(feature = "safetensors")]
fn write_safetensors(
    source: &Arc<dyn DescribedSource>,
    input: &Path,
    output: &Path,
    options: &OutputOptions,
    _: Option<Progress>,
) -> Result<Written, OutputError> {
    use super::safetensors::{ConvertError, writer_to_safetensors};
    let writer = streaming(source, output, options)?;
    let paths =
        writer_to_safetensors(writer, source.file(), output, options.shard_size).map_err(|e| {
            let names_a_file = match &e {
                ConvertError::Write(w) => matches!(
                    w,
                    WriteError::Io { .. }
                        | WriteError::AlreadyExists { .. }
                        | WriteError::Provider { .. }
                ),
                ConvertError::Read(_)
                | ConvertError::Source(_)
                | ConvertError::Io { .. }
                | ConvertError::Dtype { .. }
                | ConvertError::Name { .. }
                | ConvertError::Header { .. }
                | ConvertError::Safetensors { .. } => true,
                _ => false,
            };
            // A tensor that could not be read: the reader's error, which starts with the
            // input's name, rather than the writer's wrapping of it.
            if let ConvertError::Write(WriteError::Provider { source, .. }) = &e {
                let message = source.to_string();
                return OutputError::failed(message, e);
            }
            let message = if names_a_file {
                e.to_string()
            } else {
                cannot_be_written(input, output, &e)
            };
            OutputError::failed(message, e)
        })?;
    let size = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    Ok(Written { paths, size })
}

/// The kind of a conversion's read error (it wraps one transparently: its chain of causes
/// skips it).
#[cfg(feature = "safetensors")]
fn convert_kind(cause: &(dyn Error + 'static)) -> Option<SourceErrorKind> {
    use super::safetensors::ConvertError;
    match cause.downcast_ref::<ConvertError>()? {
        ConvertError::Read(e) => Some(e.kind()),
        ConvertError::Source(e) => Some(e.kind()),
        _ => None,
    }
}

#[cfg(not(feature = "safetensors"))]
fn convert_kind(_: &(dyn Error + 'static)) -> Option<SourceErrorKind> {
    None
}

/// A migration from another training layout into this crate's checkpoints (one per epoch):
/// what `bpk migrate` runs. Each lives in its format's folder; [`migrations`] lists them.
///
/// ```
/// # #[cfg(all(feature = "legacy", feature = "optim"))] {
/// let burn_train = burnpack::interop::migration("burn-train").unwrap();
/// assert!(burn_train.schedulers.iter().any(|(name, _)| *name == "exponential"));
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Migration {
    /// The layout it reads (`burn-train`).
    pub name: &'static str,
    /// The LR schedulers the layout's records may belong to (name, what it records): the
    /// names [`check`](Self::check) and [`epoch`](Self::epoch) take; the first is the default.
    pub schedulers: &'static [(&'static str, &'static str)],
    /// The epochs of a directory of this layout, ascending.
    pub epochs: fn(&Path) -> Result<Vec<u64>, SourceError>,
    /// Checks, before anything is written, that every epoch's scheduler record reads as the
    /// named scheduler's.
    pub check: fn(&Path, &str) -> Result<(), SourceError>,
    /// Writes one epoch of the directory as one checkpoint at the path, atomically; returns
    /// its size.
    pub epoch: fn(&Path, u64, &str, &Path) -> Result<u64, SourceError>,
}

/// Every migration this build runs.
///
/// ```
/// for migration in burnpack::interop::migrations() {
///     println!("{}", migration.name);
/// }
/// ```
#[must_use]
pub fn migrations() -> &'static [Migration] {
    MIGRATIONS
}

/// The migration named `name` (`burn-train`), where this build runs it.
///
/// ```
/// assert!(burnpack::interop::migration("no-such-layout").is_none());
/// ```
#[must_use]
pub fn migration(name: &str) -> Option<&'static Migration> {
    MIGRATIONS.iter().find(|m| m.name == name)
}

static MIGRATIONS: &[Migration] = &[
    #[cfg(all(feature = "legacy", feature = "optim"))]
    super::burn_record::BURN_TRAIN,
];
