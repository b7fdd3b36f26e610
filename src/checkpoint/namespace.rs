//! How a checkpoint is laid out in one pack: each part under its own name prefix, and the
//! moves of a stand-alone pack (Burn's records, burn-train's files) into and out of it.

use std::collections::BTreeMap;

use burn::tensor::Bytes;

use super::error::CheckpointError;
use crate::format::{NAMESPACE_KEY, Scalar};
use crate::module::SaveOptions;
use crate::read::Reader;
use crate::write::{Entry, Writer};

/// Metadata key marking a training checkpoint.
pub const KIND_KEY: &str = "burnpack.kind";
/// Value of [`KIND_KEY`] in checkpoints.
pub const KIND: &str = "checkpoint";
/// Namespace of the model's parameters in a checkpoint (declared under
/// [`NAMESPACE_KEY`], so the module loader reads only it).
pub const MODEL_PREFIX: &str = "model.";
/// Metadata key listing the optional parts a checkpoint holds (`optim`, `scheduler`), so a
/// part that is present but empty (a fresh optimizer that has not stepped yet) is told from
/// one that is absent.
pub const PARTS_KEY: &str = "burnpack.parts";
pub(crate) const OPTIM_PREFIX: &str = "optim.";
pub(crate) const SCHEDULER_PREFIX: &str = "scheduler.";
pub(crate) const PROGRESS_PREFIX: &str = "progress.";

/// Moves a pack Burn serialized (an optimizer or scheduler record) under `prefix`: its tensors
/// become entries that are windows into `bytes`, its scalars and metadata prefixed keys.
pub(crate) fn absorb(
    bytes: Bytes,
    prefix: &str,
    entries: &mut Vec<Entry>,
    scalars: &mut BTreeMap<String, Scalar>,
    metadata: &mut BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    absorb_reader(
        &Reader::from_bytes(bytes)?,
        prefix,
        entries,
        scalars,
        metadata,
    )
}

/// [`absorb`] from an open reader.
pub(crate) fn absorb_reader(
    reader: &Reader,
    prefix: &str,
    entries: &mut Vec<Entry>,
    scalars: &mut BTreeMap<String, Scalar>,
    metadata: &mut BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    for info in reader.tensors_by_position() {
        entries.push(Entry::from_stored(info, reader.read(info)?).prefixed(prefix));
    }
    for (k, v) in reader.scalars() {
        scalars.insert(format!("{prefix}{k}"), *v);
    }
    for (k, v) in reader.metadata() {
        metadata.insert(format!("{prefix}{k}"), v.clone());
    }
    Ok(())
}

/// A checkpoint writer: `options` applied, namespaced scalars and metadata, the kind marker
/// and the namespace of the model's parameters.
pub(crate) fn assemble(
    options: &SaveOptions,
    entries: Vec<Entry>,
    scalars: BTreeMap<String, Scalar>,
    metadata: BTreeMap<String, String>,
) -> Writer {
    let (metadata, scalars) = head(options, scalars, metadata);
    let mut writer = Writer::new(entries).options(options.write);
    for (k, v) in metadata {
        writer = writer.metadata(k, v);
    }
    for (k, v) in scalars {
        writer = writer.scalar(k, v);
    }
    writer
}

/// A checkpoint's metadata and scalars: `options`' own, then the parts' (namespaced), then
/// the kind marker and the namespace of the model's parameters.
pub(crate) fn head(
    options: &SaveOptions,
    scalars: BTreeMap<String, Scalar>,
    metadata: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, Scalar>) {
    let mut all_metadata = options.metadata.clone();
    all_metadata.extend(metadata);
    all_metadata.insert(KIND_KEY.to_string(), KIND.to_string());
    all_metadata.insert(NAMESPACE_KEY.to_string(), MODEL_PREFIX.to_string());
    let mut all_scalars = options.scalars.clone();
    all_scalars.extend(scalars);
    (all_metadata, all_scalars)
}
