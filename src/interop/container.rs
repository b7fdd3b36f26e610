//! What a format folder exports to the registry: one [`Container`] value, its recognition
//! (the first bytes), its hint for a near miss, and its openers (from a path, from a file the
//! registry has already opened, from bytes). The registry (`registry.rs`) is a list of them.

use std::fs::File;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use crate::source::{DescribedSource, OpenOptions, SourceError};

/// Opens a local file of a format, by its path.
pub type OpenPath = fn(&Path, &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError>;
/// Opens a local file of a format that is already open (`path` names it in errors): the
/// registry opens each file once, reads its first bytes, and hands it to the format it is.
pub type OpenFile = fn(&Path, File, &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError>;
/// Lists the shards an index JSON names, in name order.
pub type IndexShards = fn(&Path, &OpenOptions) -> Result<Vec<PathBuf>, SourceError>;
/// Given a path and its first bytes, the error for a file of a format's family that the
/// format recognises but does not read, or `None`.
pub type Refuse = fn(&Path, &[u8]) -> Option<SourceError>;
/// Opens bytes of a format.
pub type OpenBytes = fn(Bytes, &OpenOptions) -> Result<Box<dyn DescribedSource>, SourceError>;

/// One format the registry reads: how to recognise it, what to say of a file of it given
/// where another format is wanted, and how to open it. Each format folder exports one (its
/// `CONTAINER`); [`containers`](super::containers) lists them.
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
    /// What a file of this format is and what to do with it, for one given where another
    /// format is wanted (a near miss; [`near_miss`](super::near_miss)).
    pub hint: &'static str,
    /// Opens a file of this format by its path.
    pub open: OpenPath,
    /// Opens a file of this format that the registry has already opened (and sniffed).
    pub open_file: OpenFile,
    /// Opens an index JSON whose first shard is of this format (formats with shards).
    pub open_index: Option<OpenPath>,
    /// Lists the shards an index JSON names (formats with shards): how the registry finds the
    /// shards of an index, whose format it then tells by their content.
    pub index_shards: Option<IndexShards>,
    /// Opens bytes of this format.
    pub from_bytes: OpenBytes,
    /// Files of this format's family that it recognises but does not read (a bincode record
    /// of Burn, which does not describe itself): given the first bytes of a file no container
    /// takes, the error that says so.
    pub refuse: Option<Refuse>,
}

/// How many bytes of a file [`Container::sniff`] is shown.
pub const HEAD: usize = 64;

/// A source of a format as the registry hands it out.
pub(crate) fn boxed<S: DescribedSource + 'static>(
    source: Result<S, SourceError>,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    source.map(|s| Box::new(s) as Box<dyn DescribedSource>)
}

/// The first byte that is not ASCII white space.
pub(crate) fn first_text_byte(head: &[u8]) -> Option<u8> {
    head.iter().copied().find(|b| !b.is_ascii_whitespace())
}
