//! burn-train's checkpoint layout (`model-<epoch>.bpk`, `optim-<epoch>.bpk`,
//! `scheduler-<epoch>.bpk`) into one checkpoint and back.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::CheckpointError;
use super::file::Checkpoint;
use super::namespace::{
    MODEL_PREFIX, OPTIM_PREFIX, PARTS_KEY, PROGRESS_PREFIX, SCHEDULER_PREFIX, absorb_reader,
    assemble,
};
use crate::format::Scalar;
use crate::module::SaveOptions;
use crate::read::Reader;
use crate::write::Writer;

impl Checkpoint {
    /// Writes the checkpoint in burn-train's layout: `<dir>/model-<epoch>.bpk` (as
    /// `Module::save_file` writes it), `optim-<epoch>.bpk` and `scheduler-<epoch>.bpk` (as
    /// Burn's records write them, when the checkpoint has them), each atomically. An
    /// incremental checkpoint's tensors are read from its data files.
    ///
    /// # Errors
    /// A file could not be written; an incremental checkpoint opened without its data files
    /// ([`Checkpoint::from_reader`]) is refused, naming it.
    pub fn export_burn_train(
        &self,
        dir: impl AsRef<Path>,
        epoch: u64,
    ) -> Result<(), CheckpointError> {
        let dir = dir.as_ref();
        let pack = self.pack()?;
        Writer::from_part(pack, MODEL_PREFIX)?
            .write_to_file(dir.join(format!("model-{epoch}.bpk")))?;
        if self.has_optimizer() {
            Writer::from_part(pack, OPTIM_PREFIX)?
                .write_to_file(dir.join(format!("optim-{epoch}.bpk")))?;
        }
        if self.has_scheduler() {
            Writer::from_part(pack, SCHEDULER_PREFIX)?
                .write_to_file(dir.join(format!("scheduler-{epoch}.bpk")))?;
        }
        Ok(())
    }
}

/// Builds one checkpoint at `out` from burn-train's files for `epoch` in `dir`:
/// `model-<epoch>.bpk` (required), `optim-<epoch>.bpk` and `scheduler-<epoch>.bpk` (when
/// present). Tensors are copied from the mapped files straight into the new one; the progress
/// is `epoch` (burn-train's files carry no step: it is 0). Returns the size written.
///
/// # Errors
/// A file is missing or invalid, or the checkpoint could not be written.
pub fn import_burn_train(
    dir: impl AsRef<Path>,
    epoch: u64,
    out: impl AsRef<Path>,
) -> Result<u64, CheckpointError> {
    let dir = dir.as_ref();
    let model = Reader::open(dir.join(format!("model-{epoch}.bpk")))?;
    let part = |name: &str| -> Result<Option<Reader>, CheckpointError> {
        let path = dir.join(format!("{name}-{epoch}.bpk"));
        Ok(if path.exists() {
            Some(Reader::open(&path)?)
        } else {
            None
        })
    };
    let (optim, scheduler) = (part("optim")?, part("scheduler")?);
    import_parts(&model, optim.as_ref(), scheduler.as_ref(), epoch, out)
}

/// Builds one checkpoint at `out` of epoch `epoch` from the packs of burn-train's three parts
/// (the model, as `Module::save_file` writes it; the optimizer's and scheduler's records, as
/// Burn writes them), wherever they were read from. Returns the size written.
pub(crate) fn import_parts(
    model: &Reader,
    optim: Option<&Reader>,
    scheduler: Option<&Reader>,
    epoch: u64,
    out: impl AsRef<Path>,
) -> Result<u64, CheckpointError> {
    let mut entries = Vec::new();
    let mut scalars = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    absorb_reader(
        model,
        MODEL_PREFIX,
        &mut entries,
        &mut scalars,
        &mut metadata,
    )?;
    let mut parts = Vec::new();
    for (name, prefix, reader) in [
        ("optim", OPTIM_PREFIX, optim),
        ("scheduler", SCHEDULER_PREFIX, scheduler),
    ] {
        if let Some(reader) = reader {
            parts.push(name);
            absorb_reader(reader, prefix, &mut entries, &mut scalars, &mut metadata)?;
        }
    }
    // The model file's own metadata (burn-store's `producer`...) is not the checkpoint's.
    metadata.retain(|k, _| !k.starts_with(MODEL_PREFIX));
    metadata.insert(PARTS_KEY.to_string(), parts.join(","));
    scalars.insert(format!("{PROGRESS_PREFIX}epoch"), Scalar::UInt(epoch));
    scalars.insert(format!("{PROGRESS_PREFIX}step"), Scalar::UInt(0));
    Ok(assemble(&SaveOptions::new(), entries, scalars, metadata).write_to_file(out)?)
}
