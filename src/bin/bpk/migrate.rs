//! `bpk migrate`: a burn-train 0.14-0.21 checkpoint directory into one checkpoint per epoch.
//! Nothing is created before the inputs are known good (every epoch's scheduler record read
//! as `--scheduler` says), and a migration that fails on the way removes what it wrote.

use burnpack::interop::Migration;
use burnpack::source::human_bytes;
use std::path::{Path, PathBuf};

use crate::Failure;
use crate::progress::Bar;

/// The migration `bpk migrate` runs, from the registry's output side.
const LAYOUT: &str = "burn-train";

/// The LR schedulers `--scheduler` takes: the migration's (none where this build has none).
pub(crate) fn schedulers() -> clap::builder::PossibleValuesParser {
    let names = burnpack::interop::migration(LAYOUT).map_or(&[][..], |m| m.schedulers);
    clap::builder::PossibleValuesParser::new(
        names
            .iter()
            .map(|(name, what)| clap::builder::PossibleValue::new(*name).help(*what)),
    )
}

/// `migrate`: every epoch of a burn-train 0.14-0.21 checkpoint directory into one checkpoint
/// in `new`, named as `PackCheckpointer` names it.
pub(crate) fn migrate(old: &Path, new: &Path, kind: &str) -> Result<u8, Failure> {
    let Some(migration) = burnpack::interop::migration(LAYOUT) else {
        return Err(Failure::usage(format!(
            "this bpk was built without the {LAYOUT} migration"
        )));
    };
    let epochs = (migration.epochs)(old).map_err(|e| Failure::of(&e))?;
    if epochs.is_empty() {
        return Err(Failure::file(format!(
            "{}: no model-<epoch> record (a burn-train checkpoint directory holds model-1.mpk.gz, ...)",
            old.display()
        )));
    }
    // The scheduler records are small and are what a wrong --scheduler fails on: all read
    // before anything is created.
    (migration.check)(old, kind).map_err(|e| Failure::of(&e))?;
    // The first directory of `new` that is not there yet: what this migration creates, and
    // removes again if it fails.
    let created = new
        .ancestors()
        .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
        .last()
        .map(Path::to_path_buf);
    let mut written = Vec::new();
    let result = write_epochs(migration, (old, new), kind, &epochs, &mut written);
    if result.is_err() {
        undo(new, created.as_deref(), &written);
    }
    result
}

/// Writes every epoch, pushing each file written onto `written`.
fn write_epochs(
    migration: &Migration,
    (old, new): (&Path, &Path),
    kind: &str,
    epochs: &[u64],
    written: &mut Vec<PathBuf>,
) -> Result<u8, Failure> {
    let manager = burnpack::checkpoint::CheckpointManager::new(new).map_err(Failure::file)?;
    // A checkpoint already there is a user's: never replaced (and so never lost by a
    // migration that fails later).
    if let Some(there) = epochs
        .iter()
        .map(|&epoch| manager.path_for(epoch))
        .find(|out| out.exists())
    {
        return Err(Failure::usage(format!(
            "{}: already exists; migrate does not replace checkpoints (remove it, or migrate \
             into another directory)",
            there.display()
        )));
    }
    let bar = Bar::steps(epochs.len() as u64, "epochs");
    // Said once every epoch is written: a migration that fails removes what it wrote.
    let mut done = Vec::with_capacity(epochs.len());
    for &epoch in epochs {
        let out = manager.path_for(epoch);
        let size = (migration.epoch)(old, epoch, kind, &out).map_err(|e| Failure::of(&e))?;
        written.push(out.clone());
        done.push(format!(
            "{} epoch {epoch} -> {} ({})",
            old.display(),
            out.display(),
            human_bytes(size)
        ));
        bar.inc(1);
    }
    bar.finish();
    for line in done {
        println!("{line}");
    }
    Ok(0)
}

/// Removes what a failed migration made: the files it wrote, and the directories from `new`
/// up to `created` (the first one it created), each only when empty.
fn undo(new: &Path, created: Option<&Path>, written: &[PathBuf]) {
    for file in written {
        let _ = std::fs::remove_file(file);
    }
    let Some(created) = created else {
        return;
    };
    for dir in new.ancestors() {
        if std::fs::remove_dir(dir).is_err() || dir == created {
            break;
        }
    }
}
