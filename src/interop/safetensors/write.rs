//! A Burn module written as safetensors: one file, or shards at a size limit with the index
//! JSON that Hugging Face tools read, each written by the `safetensors` crate atomically.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use burn::module::Module;
use safetensors::{Dtype, View};

use super::{ConvertError, to_safetensors};
use crate::module::PackModule;
use crate::write::commit::Scratch;
use crate::write::entry::Data;
use crate::write::entry::materialize;
use crate::write::{Entry, WriteError};

/// One tensor on its way out: bytes in hand (a parameter's own storage on flex and ndarray),
/// or a deferred entry produced when the `safetensors` crate asks for it and dropped once
/// written (so at most one such tensor is held at a time).
struct Outgoing {
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
    payload: Payload,
    /// A deferred entry's failure, reported after the write (the `View` cannot fail).
    failure: Mutex<Option<WriteError>>,
}

enum Payload {
    Ready(Data),
    Deferred(Mutex<Option<Entry>>),
}

impl View for &Outgoing {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        match &self.payload {
            Payload::Ready(data) => Cow::Borrowed(data),
            Payload::Deferred(entry) => {
                let entry = entry.lock().ok().and_then(|mut e| e.take());
                match entry.map(materialize) {
                    Some(Ok(data)) => Cow::Owned(data.to_vec()),
                    Some(Err(e)) => {
                        if let Ok(mut failure) = self.failure.lock() {
                            failure.get_or_insert(e);
                        }
                        Cow::Owned(vec![0; self.len])
                    }
                    None => Cow::Owned(vec![0; self.len]),
                }
            }
        }
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// Saves `module` as safetensors at `path` (for example `model.safetensors`): names, dtypes
/// and shapes as [`save_pack`](PackModule::save_pack) records them (parameter ids have no
/// place in safetensors). With `max_shard_bytes`, a model larger than that is split, in module
/// order, into `<stem>-00001-of-0000N.safetensors` shards beside `path` plus
/// `<file name>.index.json` (`metadata.total_size` and the `weight_map`); a tensor larger than
/// the limit gets a shard of its own. Every file is written to a scratch sibling, fsynced and
/// renamed, the index last. Returns the paths written (the index last).
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::interop::safetensors::{SafetensorsSource, save_safetensors};
/// use burnpack::module::PackModule;
///
/// #[derive(Module, Debug)]
/// struct Two { a: Param<Tensor<1>>, b: Param<Tensor<1>> }
///
/// let device = Device::flex();
/// let dir = tempfile::tempdir().unwrap();
/// let model = Two { a: Param::from_data([1.0, 2.0], &device), b: Param::from_data([3.0], &device) };
/// let written = save_safetensors(&model, dir.path().join("model.safetensors"), Some(8)).unwrap();
/// assert_eq!(written.len(), 3); // two shards and the index
/// let source = SafetensorsSource::open(written.last().unwrap()).unwrap();
/// let back = Two { a: Param::from_data([0.0, 0.0], &device), b: Param::from_data([0.0], &device) }
///     .load_from_source(&source, &Default::default())
///     .unwrap();
/// assert_eq!(back.b.val().into_data().try_to_vec::<f32>().unwrap(), [3.0]);
/// ```
///
/// # Errors
/// A parameter could not be read ([`ConvertError::Module`], [`ConvertError::Write`]), a dtype
/// safetensors cannot hold ([`ConvertError::Dtype`]), or a failed write (nothing is left at
/// the destination paths then, except shards completed before the failure: the index that
/// names them is written last).
pub fn save_safetensors<M: Module>(
    module: &M,
    path: impl AsRef<Path>,
    max_shard_bytes: Option<u64>,
) -> Result<Vec<PathBuf>, ConvertError> {
    write_safetensors(module.pack_entries()?, path.as_ref(), max_shard_bytes, None)
}

/// Writes `entries` as safetensors at `path` (one file, or shards plus the index when they
/// exceed `max_shard_bytes`; see [`save_safetensors`]), with string `metadata` in each file.
pub(super) fn write_safetensors(
    entries: Vec<Entry>,
    path: &Path,
    max_shard_bytes: Option<u64>,
    metadata: Option<&HashMap<String, String>>,
) -> Result<Vec<PathBuf>, ConvertError> {
    // A name the format keeps for itself makes a header no reader parses: refused before
    // anything is written.
    if let Some(entry) = entries.iter().find(|e| e.name() == METADATA_KEY) {
        return Err(ConvertError::Name {
            path: path.to_path_buf(),
            tensor: entry.name().to_string(),
            reason: format!(
                "safetensors keeps '{METADATA_KEY}' for the file's metadata: a tensor of that \
                 name makes a header no reader parses (rename it first)"
            ),
        });
    }
    check_header(&entries, path, metadata)?;
    let mut outgoing = Vec::new();
    for entry in entries {
        let dtype = to_safetensors(entry.dtype()).ok_or_else(|| ConvertError::Dtype {
            path: path.to_path_buf(),
            tensor: entry.name().to_string(),
            dtype: format!("{:?}", entry.dtype()),
            target: "safetensors",
        })?;
        let name = entry.name().to_string();
        let (shape, len) = (entry.shape().to_vec(), entry.len() as usize);
        let payload = if entry.is_deferred() {
            Payload::Deferred(Mutex::new(Some(entry)))
        } else {
            Payload::Ready(materialize(entry)?)
        };
        outgoing.push((
            name,
            Outgoing {
                dtype,
                shape,
                len,
                payload,
                failure: Mutex::new(None),
            },
        ));
    }
    let total: u64 = outgoing.iter().map(|(_, t)| t.len as u64).sum();
    let limit = max_shard_bytes.filter(|&max| total > max);
    let Some(limit) = limit else {
        write_one(path, &outgoing, metadata)?.commit(path, true)?;
        return Ok(vec![path.to_path_buf()]);
    };
    // Greedy, in module order.
    let mut groups: Vec<&[(String, Outgoing)]> = Vec::new();
    let mut start = 0;
    let mut size = 0u64;
    for (i, (_, t)) in outgoing.iter().enumerate() {
        if i > start && size + t.len as u64 > limit {
            groups.push(&outgoing[start..i]);
            start = i;
            size = 0;
        }
        size += t.len as u64;
    }
    groups.push(&outgoing[start..]);
    let stem = path
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let dir = path.parent().unwrap_or(Path::new(""));
    let count = groups.len();
    let mut written = Vec::with_capacity(count + 1);
    let mut weight_map = BTreeMap::new();
    // Every shard is written into a scratch file first and renamed into place only once all
    // are: a conversion that fails part-way leaves no shard behind (and replaces none).
    let mut ready = Vec::with_capacity(count);
    for (k, group) in groups.into_iter().enumerate() {
        let file = format!("{stem}-{:05}-of-{count:05}.safetensors", k + 1);
        ready.push((
            write_one(&dir.join(&file), group, metadata)?,
            dir.join(&file),
        ));
        for (name, _) in group {
            weight_map.insert(name.clone(), file.clone());
        }
    }
    for (scratch, shard) in ready {
        scratch.commit(&shard, true)?;
        written.push(shard);
    }
    let index_name = format!(
        "{}.index.json",
        path.file_name()
            .map_or_else(|| "model.safetensors".into(), |n| n.to_string_lossy())
    );
    let index = dir.join(index_name);
    let json = serde_json::json!({
        "metadata": {"total_size": total},
        "weight_map": weight_map,
    });
    let scratch = Scratch::create(&index)?;
    std::fs::write(scratch.path(), json.to_string()).map_err(ConvertError::io(&index, "write"))?;
    scratch.commit(&index, true)?;
    written.push(index);
    Ok(written)
}

/// Refuses, before anything is written, a header that safetensors readers (this crate's and
/// the `safetensors` crate's) would refuse: over [`MAX_HEADER`](super::header::MAX_HEADER)
/// bytes of JSON. Counted from above (every name and value as JSON escapes it at most, and
/// each tensor's dtype, shape and offsets), so that a header this passes the crate writes.
fn check_header(
    entries: &[Entry],
    path: &Path,
    metadata: Option<&HashMap<String, String>>,
) -> Result<(), ConvertError> {
    // JSON escapes a character in at most 6 bytes (`\u0000`); a tensor's row is its name and
    // at most about 200 bytes of dtype, shape and offsets.
    let escaped = |s: &str| s.len() * 6 + 8;
    let tensors = entries
        .iter()
        .map(|e| escaped(e.name()) + 200 + e.shape().len() * 21)
        .sum::<usize>();
    let meta = metadata.map_or(0, |m| {
        m.iter()
            .map(|(k, v)| escaped(k) + escaped(v))
            .sum::<usize>()
            + 20
    });
    if tensors + meta <= super::header::MAX_HEADER {
        return Ok(());
    }
    // Exactly, now that it may matter.
    let exact = entries
        .iter()
        .map(|e| {
            serde_json::to_string(e.name()).map_or(0, |n| n.len()) + 200 + e.shape().len() * 21
        })
        .sum::<usize>()
        + metadata.map_or(0, |m| serde_json::to_string(m).map_or(0, |j| j.len()) + 20);
    if exact <= super::header::MAX_HEADER {
        return Ok(());
    }
    let largest = metadata
        .and_then(|m| m.iter().max_by_key(|(k, v)| k.len() + v.len()))
        .map(|(k, v)| format!("; the largest metadata entry is '{k}' ({} bytes)", v.len()))
        .unwrap_or_default();
    Err(ConvertError::Header {
        path: path.to_path_buf(),
        reason: format!(
            "a safetensors header of about {exact} bytes, over the {} bytes its readers accept{largest}",
            super::header::MAX_HEADER
        ),
    })
}

/// The header key of a safetensors file's string metadata, never a tensor's name.
const METADATA_KEY: &str = "__metadata__";

/// One safetensors file from `tensors`, atomically.
/// Writes `tensors` into a scratch file for `path`, returned to be committed (renamed over
/// `path`) by the caller; dropped, it is removed.
fn write_one(
    path: &Path,
    tensors: &[(String, Outgoing)],
    metadata: Option<&HashMap<String, String>>,
) -> Result<Scratch, ConvertError> {
    let mut scratch = Scratch::create(path)?;
    safetensors::serialize_to_file(
        tensors.iter().map(|(name, t)| (name.as_str(), t)),
        metadata.cloned(),
        scratch.path(),
    )
    .map_err(|e| ConvertError::Safetensors {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    for (_, t) in tensors {
        if let Some(e) = t.failure.lock().ok().and_then(|mut f| f.take()) {
            return Err(e.into());
        }
    }
    // The crate wrote a temp file of its own and renamed it over the scratch path.
    replaced(&mut scratch)?;
    Ok(scratch)
}

/// Takes the file now at the scratch path after another writer replaced it (the
/// `safetensors` crate writes through a temp file of its own, renamed over the path it is
/// given): that file gets the scratch's permissions (the temp file's are `0600`) and its
/// lock, and it is the one `Scratch::commit` makes durable.
fn replaced(scratch: &mut Scratch) -> Result<(), crate::write::WriteError> {
    let path = scratch.path().to_path_buf();
    let io = |action, e| crate::write::WriteError::io(action, &path, e);
    let permissions = scratch
        .file
        .metadata()
        .map_err(|e| io("read the permissions of", e))?
        .permissions();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io("reopen", e))?;
    // Best effort, as in `create`: a filesystem without locks relies on the age limit.
    let _ = file.try_lock();
    std::fs::set_permissions(&path, permissions).map_err(|e| io("set the permissions of", e))?;
    scratch.file = file;
    Ok(())
}
