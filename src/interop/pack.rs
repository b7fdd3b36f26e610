//! The pack itself as the registry sees it: its magic (the format layer's), its openers (an
//! incremental checkpoint's manifest opens with its data files, feature `optim`).

use std::fs::File;
use std::path::Path;

use super::container::{Container, boxed};
use crate::read::{ReadMode, ReadOptions, Reader};
use crate::source::{DescribedSource, OpenOptions, SourceError};

/// Burnpack files, and bytes of one.
pub(crate) const CONTAINER: Container = Container {
    name: "burnpack",
    sniff: |head, _| head.starts_with(&crate::format::MAGIC.to_le_bytes()),
    hint: "this is a burnpack file: open it with `burnpack::read::Reader` or \
           `burnpack::interop::open_any`",
    open: |path, options| {
        let file = crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?;
        open_file(path, file, options)
    },
    open_file,
    open_index: None,
    index_shards: None,
    from_bytes: |bytes, options| {
        let read = ReadOptions::new().limits(options.limits);
        boxed(read.from_bytes(bytes).map_err(SourceError::from))
    },
    refuse: None,
};

/// A pack from its opened file: read with ordinary reads for a verification; an incremental
/// checkpoint with the data files beside it. (The file by value: the shape of every
/// container's opener, whose formats keep the file they are given.)
#[allow(clippy::needless_pass_by_value)]
fn open_file(
    path: &Path,
    file: File,
    options: &OpenOptions,
) -> Result<Box<dyn DescribedSource>, SourceError> {
    let read = ReadOptions::new().limits(options.limits);
    let read = if options.verify {
        read.mode(ReadMode::Buffered)
    } else {
        read
    };
    let reader: Reader = read.open_file(path, &file).map_err(SourceError::from)?;
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
}
