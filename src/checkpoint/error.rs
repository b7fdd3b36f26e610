//! Errors of checkpointing.

use std::path::PathBuf;

use crate::module::ModuleError;
use crate::source::ReadError;
use crate::write::WriteError;

/// Why a checkpoint could not be saved, listed or restored.
///
/// ```
/// use burnpack::checkpoint::{Checkpoint, CheckpointError};
/// let err = Checkpoint::open("/no/such/checkpoint.bpk").unwrap_err();
/// assert!(matches!(err, CheckpointError::Read(_)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file could not be read or is not a valid pack.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The checkpoint could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The model part does not match the model. A read or write error of the model part is
    /// [`Read`](Self::Read) or [`Write`](Self::Write), never this.
    #[error(transparent)]
    Module(ModuleError),
    /// The file is a valid pack but not a checkpoint written by this crate.
    #[error("{file}: not a burnpack checkpoint (metadata 'burnpack.kind' is {found:?})")]
    NotACheckpoint {
        /// The file.
        file: String,
        /// The `burnpack.kind` found, if any.
        found: Option<String>,
    },
    /// A required entry is missing or has the wrong type.
    #[error("{file}: {what}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong.
        what: String,
    },
    /// Burn refused an optimizer or scheduler record.
    #[error("{context}: {message}")]
    Record {
        /// What was being done.
        context: String,
        /// Burn's error.
        message: String,
    },
    /// A directory operation of the checkpoint manager failed.
    #[error("cannot {action} '{}': {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An asynchronous save is still running and the saver refuses to queue another.
    #[error("a checkpoint save is already in flight")]
    Busy,
    /// The directory holds a valid checkpoint of a later step (another run, or a run rolled
    /// back): retention keeps the newest steps, so the new file would be deleted at once.
    #[error(
        "{dir}: holds a checkpoint of step {newer_step} ({newer}), newer than step {step} being \
         saved; use another directory or remove the newer ones (discard_after)"
    )]
    NewerExists {
        /// The managed storage, as its user named it (a directory, a URL prefix).
        dir: String,
        /// The step being saved.
        step: u64,
        /// The step of the newer checkpoint.
        newer_step: u64,
        /// Where it is (a path, a URL).
        newer: String,
    },
    /// A storage backend failed (object storage: a request; see `checkpoint::Storage`).
    #[error("cannot {action} {location}: {source}")]
    Storage {
        /// What was being done.
        action: &'static str,
        /// Where, as its user named it (a path, a URL).
        location: String,
        /// The backend's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// [`Manager::latest`](super::Manager::latest): the storage lists checkpoints, and none of
    /// them opens (each with its error, newest first).
    #[error("{storage}: no checkpoint opens: {}", list_skipped(skipped))]
    NoneOpens {
        /// The managed storage, as its user named it.
        storage: String,
        /// Every checkpoint listed, with why it does not open.
        skipped: Vec<Skipped>,
    },
    /// The background save thread panicked.
    #[error("the background checkpoint save panicked: {0}")]
    Panicked(String),
}

/// The first few checkpoints passed over, for a message of bounded length.
fn list_skipped(skipped: &[Skipped]) -> String {
    const MOST: usize = 4;
    let mut text: Vec<String> = skipped.iter().take(MOST).map(ToString::to_string).collect();
    if skipped.len() > MOST {
        text.push(format!("and {} more", skipped.len() - MOST));
    }
    text.join("; ")
}

impl From<ModuleError> for CheckpointError {
    fn from(e: ModuleError) -> Self {
        e.lift(Self::Module)
    }
}

impl CheckpointError {
    /// A Burn record refused to serialize or restore, in `context`.
    pub(crate) fn record(context: &str, e: &impl std::fmt::Display) -> Self {
        Self::Record {
            context: context.to_string(),
            message: e.to_string(),
        }
    }
}

/// A checkpoint that [`Manager::latest`](super::Manager::latest) passed over: newer than the one it returned (or
/// than none), but it does not open.
#[derive(Debug)]
#[non_exhaustive]
pub struct Skipped {
    /// Its step.
    pub step: u64,
    /// Where it is, as its user would name it (a path, a URL).
    pub location: String,
    /// Why it does not open.
    pub error: CheckpointError,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} ({}): {}", self.step, self.location, self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_error_of_the_model_part_is_a_read_error_of_the_checkpoint() {
        let read = ReadError::NotFound {
            file: "ckpt.bpk".into(),
            tensor: "model.w".into(),
        };
        let err = CheckpointError::from(ModuleError::Read(read));
        assert!(matches!(err, CheckpointError::Read(_)), "{err:?}");
        let mismatch = ModuleError::Option {
            option: "limits",
            reason: "is not honoured".into(),
        };
        let err = CheckpointError::from(mismatch);
        assert!(matches!(err, CheckpointError::Module(_)), "{err:?}");
    }
}
