//! burn-train 0.14-0.21 checkpoints (`model-<epoch>`, `optim-<epoch>`, `scheduler-<epoch>`
//! records, `.mpk.gz` by default) into one checkpoint of this crate that Burn 0.22's
//! `ModuleOptimizer` and LR schedulers resume from.
//!
//! Burn 0.21 records an optimizer as a map from each parameter's id to its state, wrapped in
//! the state's rank (`<id>.V1.Rank2.momentum.moment_1`, `<id>.V1.Rank2.momentum.time`); Burn
//! 0.22 names the same state `<id as decimal>.momentum.moment_1` and `<id>.momentum.time`, with
//! `<id>.__rank` and the parameter's module path beside it. The fields are the same for Adam,
//! `AdamW` and SGD with momentum (checked against files Burn 0.21 wrote, resumed to the same
//! values under Burn 0.22). An LR scheduler of Burn 0.21 records a bare number, which says
//! nothing of the scheduler it belongs to: [`SchedulerKind`] names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::LegacySource;
use super::node::Leaf;
use super::param_id;
use crate::format::Scalar;
use crate::source::SourceError;
use crate::source::TensorSource;
use crate::write::{Entry, Writer};

/// The LR scheduler a Burn 0.14-0.21 scheduler record belongs to (its record is a bare
/// number, or nothing), and so the field Burn 0.22's scheduler keeps it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum SchedulerKind {
    /// `ConstantLr` (and a plain learning rate): nothing recorded (a record holding a number
    /// is refused: it was another scheduler's).
    Constant,
    /// `ExponentialLrScheduler`: the previous learning rate.
    Exponential,
    /// `CosineAnnealingLrScheduler`: the current iteration.
    Cosine,
    /// `LinearLrScheduler`: the remaining iterations.
    Linear,
    /// `StepLrScheduler`: the iteration index.
    Step,
    /// `NoamLrScheduler`: the step count (a float under Burn 0.22).
    Noam,
}

impl SchedulerKind {
    /// Burn 0.22's scalar for the recorded number.
    fn scalar(self, leaf: Leaf) -> Result<(&'static str, Scalar), String> {
        let (name, value) = match (self, leaf) {
            (Self::Constant, _) => {
                return Err(
                    "the record holds a number, which a constant learning rate does not record: \
                     name the scheduler the run used (bpk migrate --scheduler KIND; \
                     SchedulerKind in Rust)"
                        .to_string(),
                );
            }
            (Self::Exponential, Leaf::Float(v)) => ("0.previous_lr", Scalar::Float(v)),
            #[allow(clippy::cast_precision_loss)] // a learning rate written as an integer
            (Self::Exponential, Leaf::UInt(v)) => ("0.previous_lr", Scalar::Float(v as f64)),
            (Self::Cosine, Leaf::UInt(v)) => ("0.current_iter", Scalar::UInt(v)),
            (Self::Linear, Leaf::UInt(v)) => ("0.remaining_iters", Scalar::UInt(v)),
            (Self::Step, Leaf::Int(v)) => ("0.iter_idx", Scalar::Int(v)),
            #[allow(clippy::cast_precision_loss)] // a step count, exact below 2^53
            (Self::Noam, Leaf::UInt(v)) => ("0.step", Scalar::Float(v as f64)),
            (Self::Step, Leaf::UInt(v)) => match i64::try_from(v) {
                Ok(v) => ("0.iter_idx", Scalar::Int(v)),
                Err(_) => return Err(format!("an iteration index past i64: {v}")),
            },
            (kind, leaf) => {
                return Err(format!(
                    "a {kind:?} scheduler records a number of another type than {leaf:?}"
                ));
            }
        };
        Ok((name, value))
    }
}

impl LegacySource {
    /// This record, a Burn 0.14-0.21 optimizer's (`optim-<epoch>`), as the pack Burn 0.22's
    /// `ModuleOptimizer::from_bytes` / `load_record` reads: each parameter's state under its
    /// id, its rank, and (from `model`, the same epoch's model record, when given) its module
    /// path.
    ///
    /// # Errors
    /// [`SourceError::Tensor`] for a tensor that is not a parameter's state (an id Burn did
    /// not write, no rank).
    pub fn optimizer_writer(&self, model: Option<&LegacySource>) -> Result<Writer, SourceError> {
        let paths: BTreeMap<u64, &str> = model
            .map(|m| {
                m.tensors()
                    .iter()
                    .filter_map(|t| Some((t.param_id()?, t.name())))
                    .collect()
            })
            .unwrap_or_default();
        let mut ranks = BTreeMap::new();
        let mut entries = Vec::with_capacity(self.table.tensors().len());
        let mut infos: Vec<_> = self.table.tensors().iter().collect();
        infos.sort_by_key(|t| t.offset());
        for info in infos {
            let (id, rank, field) = self.state_path(info.name())?;
            ranks.insert(id, rank);
            let bytes = self.read(info).map_err(|e| SourceError::Tensor {
                path: PathBuf::from(&self.file),
                tensor: info.name().to_string(),
                reason: e.to_string(),
            })?;
            entries.push(
                Entry::from_stored(info, bytes)
                    .renamed(format!("{id}.{field}"))
                    .with_param_id(id),
            );
        }
        let mut writer = Writer::new(entries);
        for (path, leaf) in &self.leaves {
            let (id, rank, field) = self.state_path(path)?;
            ranks.insert(id, rank);
            let value = match *leaf {
                Leaf::UInt(v) => Scalar::UInt(v),
                Leaf::Int(v) => Scalar::Int(v),
                Leaf::Float(v) => Scalar::Float(v),
                Leaf::Bool(v) => Scalar::Bool(v),
            };
            writer = writer.scalar(format!("{id}.{field}"), value);
        }
        for (id, rank) in ranks {
            writer = writer.scalar(format!("{id}.__rank"), Scalar::UInt(rank));
            if let Some(path) = paths.get(&id) {
                writer = writer.metadata(id.to_string(), (*path).to_string());
            }
        }
        Ok(writer)
    }

    /// `<id in base32>.V1.Rank<r>.<field>` (the `V1` absent in older records) as (id, rank,
    /// field).
    fn state_path(&self, path: &str) -> Result<(u64, u64, String), SourceError> {
        let bad = |reason: &str| SourceError::Tensor {
            path: PathBuf::from(&self.file),
            tensor: path.to_string(),
            reason: format!("not an optimizer state of Burn 0.14-0.21: {reason}"),
        };
        let mut segments = path.split('.');
        let id = segments
            .next()
            .and_then(param_id)
            .ok_or_else(|| bad("the first segment is not a parameter id"))?;
        let mut next = segments.next();
        if next == Some("V1") {
            next = segments.next();
        }
        let rank = next
            .and_then(|s| s.strip_prefix("Rank"))
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| bad("no `Rank<n>` after the id"))?;
        let field: Vec<&str> = segments.collect();
        if field.is_empty() {
            return Err(bad("no state field"));
        }
        Ok((id, rank, field.join(".")))
    }

    /// This record, a Burn 0.14-0.21 LR scheduler's (`scheduler-<epoch>`), as the pack Burn
    /// 0.22's scheduler of `kind` reads with `load_record`.
    ///
    /// # Errors
    /// [`SourceError::Invalid`] when the record holds tensors, more than one number, or a
    /// number of another type than `kind` records.
    pub fn scheduler_writer(&self, kind: SchedulerKind) -> Result<Writer, SourceError> {
        let invalid = |reason: String| SourceError::Invalid {
            path: PathBuf::from(&self.file),
            reason,
        };
        if !self.table.tensors().is_empty() || self.leaves.len() > 1 {
            return Err(invalid(
                "not an LR scheduler's record: it holds tensors or several numbers".into(),
            ));
        }
        let mut writer = Writer::new(Vec::new());
        if let Some(&(_, leaf)) = self.leaves.first() {
            let (name, value) = kind.scalar(leaf).map_err(invalid)?;
            writer = writer.scalar(name, value);
        }
        Ok(writer)
    }
}

/// Reads the LR scheduler record of every epoch of a burn-train 0.14-0.21 checkpoint directory
/// as `scheduler` says, writing nothing: what [`import_legacy_burn_train`] would refuse for
/// the scheduler (a record that holds a number of another type than `scheduler` records, or
/// is no scheduler's record) is refused before anything is created. `bpk migrate` calls it
/// first.
///
/// ```no_run
/// use burnpack::interop::burn_record::{SchedulerKind, check_burn_train_schedulers};
/// check_burn_train_schedulers("old-run/checkpoint", SchedulerKind::Exponential).unwrap();
/// ```
///
/// # Errors
/// The directory cannot be listed, or a scheduler record cannot be read as `scheduler`.
#[cfg(feature = "optim")]
pub fn check_burn_train_schedulers(
    dir: impl AsRef<Path>,
    scheduler: SchedulerKind,
) -> Result<(), SourceError> {
    let dir = dir.as_ref();
    for epoch in burn_train_epochs(dir)? {
        if let Some(record) = find_part(dir, "scheduler", epoch) {
            LegacySource::open(record)?.scheduler_writer(scheduler)?;
        }
    }
    Ok(())
}

/// The record of `part` for `epoch` in a burn-train directory, whichever recorder wrote it.
#[cfg(feature = "optim")]
fn find_part(dir: &Path, part: &str, epoch: u64) -> Option<PathBuf> {
    ["mpk.gz", "mpk", "json.gz", "json"]
        .into_iter()
        .map(|ext| dir.join(format!("{part}-{epoch}.{ext}")))
        .find(|p| p.exists())
}

/// The epochs of a burn-train 0.14-0.21 checkpoint directory: those with a model record.
///
/// # Errors
/// The directory cannot be listed.
pub fn burn_train_epochs(dir: impl AsRef<Path>) -> Result<Vec<u64>, SourceError> {
    let dir = dir.as_ref();
    let mut epochs: Vec<u64> = std::fs::read_dir(dir)
        .map_err(|source| SourceError::Io {
            path: dir.to_path_buf(),
            action: "list",
            source,
        })?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let rest = name.strip_prefix("model-")?;
            rest.split('.').next()?.parse().ok()
        })
        .collect();
    epochs.sort_unstable();
    epochs.dedup();
    Ok(epochs)
}

/// Builds one checkpoint of this crate at `out` from epoch `epoch` of a burn-train 0.14-0.21
/// checkpoint directory (`model-<epoch>`, and `optim-<epoch>` / `scheduler-<epoch>` when
/// present; `.mpk.gz` as burn-train writes them, or another self-describing recorder's file).
/// `CheckpointManager`, `PackCheckpointer` and `Checkpoint` resume from it with Burn 0.22's
/// `ModuleOptimizer` (`load_optimizer`) and LR schedulers (`scheduler_record`); `scheduler`
/// names the scheduler the run used. Returns the size written.
///
/// ```no_run
/// use burnpack::interop::burn_record::{SchedulerKind, import_legacy_burn_train};
/// import_legacy_burn_train("old-run/checkpoint", 3, SchedulerKind::Exponential, "ckpt.bpk").unwrap();
/// ```
///
/// # Errors
/// A record is missing or invalid, or the checkpoint could not be written.
#[cfg(feature = "optim")]
pub fn import_legacy_burn_train(
    dir: impl AsRef<Path>,
    epoch: u64,
    scheduler: SchedulerKind,
    out: impl AsRef<Path>,
) -> Result<u64, SourceError> {
    let dir = dir.as_ref();
    let out = out.as_ref();
    let missing = || SourceError::Invalid {
        path: dir.join(format!("model-{epoch}.mpk.gz")),
        reason: "no model record of this epoch in the directory".into(),
    };
    let model = LegacySource::open(find_part(dir, "model", epoch).ok_or_else(missing)?)?;
    let optim = find_part(dir, "optim", epoch)
        .map(LegacySource::open)
        .transpose()?;
    let sched = find_part(dir, "scheduler", epoch)
        .map(LegacySource::open)
        .transpose()?;
    // In-memory packs of Burn 0.22's three files, as burn-train 0.22 would have written them
    // (no checksums: the checkpoint written from them carries its own). What goes wrong here
    // is the input record's fault (a tensor twice, a shape Burn 0.22 refuses): its errors
    // name that record.
    let pack = |writer: Writer, from: &LegacySource| -> Result<crate::read::Reader, SourceError> {
        let invalid = |reason: String| SourceError::Invalid {
            path: PathBuf::from(&from.file),
            reason,
        };
        let bytes = writer
            .checksums(false)
            .into_bytes()
            .map_err(|e| invalid(e.to_string()))?;
        crate::read::Reader::from_bytes(bytes).map_err(|e| invalid(e.to_string()))
    };
    let model_pack = pack(
        model.to_writer().map_err(|e| SourceError::Invalid {
            path: PathBuf::from(&model.file),
            reason: e.to_string(),
        })?,
        &model,
    )?;
    let optim_pack = optim
        .as_ref()
        .map(|o| pack(o.optimizer_writer(Some(&model))?, o))
        .transpose()?;
    let sched_pack = sched
        .as_ref()
        .map(|s| pack(s.scheduler_writer(scheduler)?, s))
        .transpose()?;
    crate::checkpoint::burn_train::import_parts(
        &model_pack,
        optim_pack.as_ref(),
        sched_pack.as_ref(),
        epoch,
        out,
    )
    .map_err(|e| SourceError::Invalid {
        path: out.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The schedulers by the names `bpk migrate --scheduler` takes, with what each records, in
/// the order of [`SCHEDULER_KINDS`].
#[cfg(feature = "optim")]
const SCHEDULER_NAMES: &[(&str, &str)] = &[
    (
        "constant",
        "ConstantLr (and a plain learning rate): nothing recorded",
    ),
    (
        "exponential",
        "ExponentialLrScheduler: the previous learning rate",
    ),
    (
        "cosine",
        "CosineAnnealingLrScheduler: the current iteration",
    ),
    ("linear", "LinearLrScheduler: the remaining iterations"),
    ("step", "StepLrScheduler: the iteration index"),
    ("noam", "NoamLrScheduler: the step count"),
];

/// The scheduler of each of [`SCHEDULER_NAMES`].
#[cfg(feature = "optim")]
const SCHEDULER_KINDS: [SchedulerKind; 6] = [
    SchedulerKind::Constant,
    SchedulerKind::Exponential,
    SchedulerKind::Cosine,
    SchedulerKind::Linear,
    SchedulerKind::Step,
    SchedulerKind::Noam,
];

/// The scheduler named `name` (one of [`SCHEDULER_NAMES`]); an unknown name is `dir`'s error.
#[cfg(feature = "optim")]
fn scheduler_named(dir: &Path, name: &str) -> Result<SchedulerKind, SourceError> {
    SCHEDULER_NAMES
        .iter()
        .position(|(n, _)| *n == name)
        .map(|at| SCHEDULER_KINDS[at])
        .ok_or_else(|| SourceError::Invalid {
            path: dir.to_path_buf(),
            reason: format!(
                "no LR scheduler '{name}' (known: {})",
                SCHEDULER_NAMES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// The migration of a burn-train 0.14-0.21 checkpoint directory into one checkpoint per
/// epoch, as the registry's output side lists it ([`crate::interop::migrations`]).
#[cfg(feature = "optim")]
pub(crate) const BURN_TRAIN: crate::interop::Migration = crate::interop::Migration {
    name: "burn-train",
    schedulers: SCHEDULER_NAMES,
    epochs: |dir| burn_train_epochs(dir),
    check: |dir, scheduler| check_burn_train_schedulers(dir, scheduler_named(dir, scheduler)?),
    epoch: |dir, epoch, scheduler, out| {
        import_legacy_burn_train(dir, epoch, scheduler_named(dir, scheduler)?, out)
    },
};
