//! How a pack is written: durability, overwriting, parallelism, checksums.

/// How [`Writer::write_to_file`](super::Writer::write_to_file) treats the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Write a scratch sibling, fsync it, rename it over the destination, fsync the directory.
    /// The destination is either left exactly as it was or replaced whole, even if the process
    /// dies midway; readers that mapped the old file keep seeing it. Needs room for a second
    /// copy while writing.
    #[default]
    Atomic,
    /// Truncate and write the destination itself: no second copy and no fsync, but a failure
    /// midway leaves a partial file, and processes that mapped the old file see it change
    /// (or receive `SIGBUS`). Use only for files nobody else reads meanwhile.
    InPlace,
}

/// The options of a write, apart from what is written: mode, overwrite, threads, checksums.
/// [`Writer`](super::Writer) holds one, and so does the module layer's
/// [`SaveOptions`](crate::module::SaveOptions), which adds metadata and scalars around it.
///
/// ```
/// use burnpack::write::{WriteMode, WriteOptions, Writer};
/// let options = WriteOptions::new().mode(WriteMode::InPlace).threads(2).checksums(false);
/// assert!(!options.has_checksums());
/// let writer = Writer::new(vec![]).options(options);
/// # let _ = writer;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    pub(crate) mode: WriteMode,
    pub(crate) overwrite: bool,
    pub(crate) threads: Option<usize>,
    pub(crate) checksums: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            mode: WriteMode::Atomic,
            overwrite: true,
            threads: None,
            checksums: true,
        }
    }
}

impl WriteOptions {
    /// Atomic, overwriting, rayon's thread count, with checksums.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Atomic (default) or in-place file writes.
    #[must_use]
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Whether an existing destination may be replaced (default `true`). With `false`, an
    /// existing file is refused with
    /// [`WriteError::AlreadyExists`](super::WriteError::AlreadyExists) and left untouched.
    #[must_use]
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Number of worker threads. A file's workers each materialize, checksum and write one
    /// chunk (an entry, or neighbouring entries under 1 MiB together) at a time (default:
    /// rayon's global pool size); a stream's producers materialize and checksum chunks for its
    /// one writing thread (default: one fewer than the pool, at least one); a buffer gets the
    /// whole pool. Each holds at most one chunk at a time and takes the next only once it is
    /// written: at most `threads` produced chunks exist at once.
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
        self
    }

    /// Whether to store checksums (xxh3-64) of every tensor and of the header and metadata,
    /// computed in the same parallel pass that writes the data (default `true`). Burn 0.22's
    /// reader ignores them; with `false` the bytes are exactly those of Burn's
    /// `burn_pack::Writer`.
    #[must_use]
    pub fn checksums(mut self, checksums: bool) -> Self {
        self.checksums = checksums;
        self
    }

    /// Whether checksums are stored.
    #[must_use]
    pub fn has_checksums(&self) -> bool {
        self.checksums
    }
}

/// The write knobs as shortcuts on a type that holds a [`WriteOptions`] in `$field` (the
/// [`Writer`](super::Writer), `SaveOptions`): each sets the field's option, so every knob has
/// one home, `WriteOptions`, and its shortcuts are written once, here.
macro_rules! write_knobs {
    ($field:ident) => {
        /// Atomic (default) or in-place file writes: shortcut for
        /// [`WriteOptions::mode`](crate::write::WriteOptions::mode).
        #[must_use]
        pub fn mode(mut self, mode: $crate::write::WriteMode) -> Self {
            self.$field = self.$field.mode(mode);
            self
        }

        /// Whether an existing destination may be replaced: shortcut for
        /// [`WriteOptions::overwrite`](crate::write::WriteOptions::overwrite).
        #[must_use]
        pub fn overwrite(mut self, overwrite: bool) -> Self {
            self.$field = self.$field.overwrite(overwrite);
            self
        }

        /// Number of producer threads: shortcut for
        /// [`WriteOptions::threads`](crate::write::WriteOptions::threads).
        #[must_use]
        pub fn threads(mut self, threads: usize) -> Self {
            self.$field = self.$field.threads(threads);
            self
        }

        /// Whether to store checksums: shortcut for
        /// [`WriteOptions::checksums`](crate::write::WriteOptions::checksums).
        #[must_use]
        pub fn checksums(mut self, checksums: bool) -> Self {
            self.$field = self.$field.checksums(checksums);
            self
        }
    };
}
pub(crate) use write_knobs;

/// `metadata` and `scalar` on a type with `metadata` and `scalars` maps (the
/// [`Writer`](super::Writer), `SaveOptions`): one spelling, written once.
macro_rules! metadata_knobs {
    () => {
        /// Adds (or replaces) a string metadata entry. With checksums on, the writer adds a
        /// `producer` entry naming this crate unless one is set here.
        #[must_use]
        pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
            self.metadata.insert(key.into(), value.into());
            self
        }

        /// Adds (or replaces) a typed scalar.
        #[must_use]
        pub fn scalar(
            mut self,
            key: impl Into<String>,
            value: impl Into<$crate::format::Scalar>,
        ) -> Self {
            self.scalars.insert(key.into(), value.into());
            self
        }
    };
}
pub(crate) use metadata_knobs;
