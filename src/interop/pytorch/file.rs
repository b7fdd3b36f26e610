//! One `torch.save` file opened: its container read (zip or legacy), the state dict found
//! and walked, each tensor placed in its storage.

use std::fs::File;
use std::path::{Path, PathBuf};

use burn::tensor::Bytes;

use super::pickle::{Node, Pickle, PickleError};
use super::state_dict::{Walker, check_storage_types, state_dict, top_keys, unread_keys};
use super::views::{Placed, place};
use super::{Fault, PytorchFormat, StorageEntry, Storages, legacy, zip};
use crate::format::TensorInfo;
use crate::source::OpenOptions;
use crate::source::SourceError;
use crate::source::data::Source;

/// One file of a source: its bytes, its container, and what its pickle said.
pub(super) struct Shard {
    pub(super) path: PathBuf,
    /// The open file, for read-ahead hints on the ranges a load will read (`None` in memory).
    pub(super) file: Option<File>,
    pub(super) source: Source,
    pub(super) format: PytorchFormat,
    /// The zip archive's `data.pkl` (with its CRC-32); `None` for the legacy format.
    pub(super) pickle: Option<StorageEntry>,
    pub(super) globals: Vec<String>,
    /// The key the state dict was found under.
    pub(super) key: Option<String>,
    /// Top-level keys holding tensors that were not read.
    pub(super) unread: Vec<String>,
    /// The file's size in bytes (what its gathered views are bounded by).
    pub(super) size: u64,
}

/// A file and its tensors, each placed in its storage.
pub(super) type Opened = (Shard, Vec<(TensorInfo, Placed)>);

/// The first bytes of a zip archive.
pub(super) const ZIP_MAGIC: &[u8] = b"PK\x03\x04";

/// Whether `head` starts a pickle of protocol 2 to 5 (the legacy format's first bytes).
pub(super) fn is_pickle(head: &[u8]) -> bool {
    head.len() > 1 && head[0] == 0x80 && (2..=5).contains(&head[1])
}

/// Opens the file at `path`: a zip archive's central directory and pickle are read with
/// ordinary reads before the file is mapped; a legacy file is mapped and parsed through the
/// mapping (see [`PytorchSource`](super::PytorchSource) on what the caller guarantees).
/// `file`: the file already opened (by the registry), or `None` to open `path`.
pub(super) fn open_file(
    path: &Path,
    file: Option<File>,
    options: &OpenOptions,
) -> Result<Opened, SourceError> {
    let io = |action| SourceError::io(path, action);
    let (file, size) = crate::source::data::opened_within_limits(path, file, &options.limits)?;
    let mut head = [0u8; 4];
    let n = size.min(4) as usize;
    crate::platform::read_exact_at(&file, &mut head[..n], 0).map_err(io("read"))?;
    let fault = |e| fault(path, e);
    if head[..n] == *ZIP_MAGIC {
        let (pickle, storages, entry) =
            zip::zip_parts(&zip::Input::File(&file, size), options).map_err(fault)?;
        // As for `Reader::open`, the file must not be truncated while mapped (documented on
        // `PytorchSource`); a verification reads every byte with ordinary reads instead, so
        // that a file cut meanwhile is an error to report, not a fault.
        let source = crate::source::data::file_data(&file, options.verify)
            .map_err(|(action, e)| io(action)(e))?;
        let parts = Parts {
            format: PytorchFormat::Zip,
            pickle,
            storages,
            entry: Some(entry),
        };
        return read(path, options, size, parts, Some(file), source);
    }
    if !is_pickle(&head[..n]) {
        return Err(neither(path));
    }
    let all = crate::source::data::map_file(&file).map_err(io("map"))?;
    let (pickle, storages) = legacy::legacy_parts(&all, options).map_err(fault)?;
    let parts = Parts {
        format: PytorchFormat::Legacy,
        pickle,
        storages,
        entry: None,
    };
    read(path, options, size, parts, Some(file), Source::Memory(all))
}

/// Opens `torch.save` bytes in memory (`path` names them in errors).
pub(super) fn open_bytes(
    path: &Path,
    all: Bytes,
    options: &OpenOptions,
) -> Result<Opened, SourceError> {
    let size = all.len() as u64;
    check_size(path, size, options)?;
    let fault = |e| fault(path, e);
    let parts = if all.starts_with(ZIP_MAGIC) {
        let (pickle, storages, entry) =
            zip::zip_parts(&zip::Input::Memory(&all), options).map_err(fault)?;
        Parts {
            format: PytorchFormat::Zip,
            pickle,
            storages,
            entry: Some(entry),
        }
    } else if is_pickle(&all) {
        let (pickle, storages) = legacy::legacy_parts(&all, options).map_err(fault)?;
        Parts {
            format: PytorchFormat::Legacy,
            pickle,
            storages,
            entry: None,
        }
    } else {
        return Err(neither(path));
    };
    read(path, options, size, parts, None, Source::Memory(all))
}

fn check_size(path: &Path, size: u64, options: &OpenOptions) -> Result<(), SourceError> {
    crate::source::data::within_file_size(path, size, &options.limits)
}

fn neither(path: &Path) -> SourceError {
    SourceError::invalid(path)(
        "not a readable torch.save file: neither a zip archive (PyTorch 1.6 and later) nor a \
         legacy pickle"
            .into(),
    )
}

/// A container read: its pickle and where each storage's bytes are.
struct Parts {
    format: PytorchFormat,
    pickle: Pickle,
    storages: Storages,
    entry: Option<StorageEntry>,
}

/// The state dict of a container found, walked and placed.
fn read(
    path: &Path,
    options: &OpenOptions,
    size: u64,
    parts: Parts,
    file: Option<File>,
    source: Source,
) -> Result<Opened, SourceError> {
    let Parts {
        format,
        pickle,
        storages,
        entry: pickle_entry,
    } = parts;
    let invalid = |reason: String| SourceError::Invalid {
        path: path.to_path_buf(),
        reason: format!("not a readable torch.save file: {reason}"),
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
                 name it with OpenOptions::key, or bpk's --key",
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
        let tensor_error = |reason| SourceError::Tensor {
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
    let shard = Shard {
        path: path.to_path_buf(),
        file,
        source,
        format,
        pickle: pickle_entry,
        globals: pickle.globals,
        key,
        unread,
        size,
    };
    Ok((shard, tensors))
}

fn fault(path: &Path, e: Fault) -> SourceError {
    match e {
        Fault::Pickle(PickleError {
            refused: Some(global),
            ..
        }) => SourceError::Refused {
            path: path.to_path_buf(),
            global,
        },
        Fault::Pickle(e) => SourceError::Invalid {
            path: path.to_path_buf(),
            reason: format!(
                "not a readable torch.save file: pickle: {} (at byte {})",
                e.reason, e.offset
            ),
        },
        Fault::Damaged(reason) => SourceError::Damaged {
            path: path.to_path_buf(),
            tensor: None,
            reason,
        },
        Fault::Other(reason) => SourceError::Invalid {
            path: path.to_path_buf(),
            reason: format!("not a readable torch.save file: {reason}"),
        },
    }
}

/// All the shards' gathered views together, bounded by the shards' sizes plus one
/// [`MAX_GATHERED_SLACK`] (each shard's own were bounded by its size when it was opened; many
/// small shards must not each add the slack). `path` is the index (or the one file).
pub(super) fn check_gathered(
    path: &Path,
    sharded: &crate::source::Sharded<Shard, Placed>,
) -> Result<(), SourceError> {
    let sizes = sharded.shards.iter().map(|(_, s)| s.size);
    let max_gathered = sizes
        .fold(0u64, u64::saturating_add)
        .saturating_add(MAX_GATHERED_SLACK);
    let mut gathered = 0u64;
    for (info, place) in sharded.table.tensors().iter().zip(sharded.table.places()) {
        if place.place.strided.is_some() {
            gathered = gathered.saturating_add(info.len());
            if gathered > max_gathered {
                return Err(SourceError::Tensor {
                    path: sharded.shards[place.shard].0.clone(),
                    tensor: info.name().to_string(),
                    reason: format!(
                        "a non-contiguous view of {} bytes: with the views before it, in \
                         every shard of '{}', more than the shards' sizes plus {} MiB would \
                         be gathered into memory (stride-0 views expanded)",
                        info.len(),
                        path.display(),
                        MAX_GATHERED_SLACK >> 20
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Bytes that gathered (non-contiguous) views may add up to beyond the size of their file (of
/// all the files of a sharded source together: once, not once per shard).
pub(super) const MAX_GATHERED_SLACK: u64 = 16 << 20;
