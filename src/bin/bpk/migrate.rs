//! `bpk migrate`: a burn-train 0.14-0.21 checkpoint directory into one checkpoint per epoch.

use burnpack::interop::burn_record::SchedulerKind;
use burnpack::read::human_bytes;
use std::path::Path;

use crate::Failure;
use crate::progress::Bar;

/// `migrate`: every epoch of a burn-train 0.14-0.21 checkpoint directory into one checkpoint
/// in `new`, named as `PackCheckpointer` names it.
pub(crate) fn migrate(old: &Path, new: &Path, kind: SchedulerKind) -> Result<u8, Failure> {
    use burnpack::interop::burn_record::{burn_train_epochs, import_legacy_burn_train};
    let epochs = burn_train_epochs(old).map_err(Failure::file)?;
    if epochs.is_empty() {
        return Err(Failure::file(format!(
            "{}: no model-<epoch> record (a burn-train checkpoint directory holds model-1.mpk.gz, ...)",
            old.display()
        )));
    }
    let manager = burnpack::checkpoint::CheckpointManager::new(new).map_err(Failure::file)?;
    let bar = Bar::steps(epochs.len() as u64, "epochs");
    for epoch in epochs {
        let out = manager.path_for(epoch);
        let size = import_legacy_burn_train(old, epoch, kind, &out).map_err(Failure::file)?;
        bar.0.suspend(|| {
            println!(
                "{} epoch {epoch} -> {} ({})",
                old.display(),
                out.display(),
                human_bytes(size)
            );
        });
        bar.inc(1);
    }
    bar.finish();
    Ok(0)
}
