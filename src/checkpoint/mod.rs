//! Training checkpoints: the model, the optimizer state, the LR scheduler record and the
//! training progress in one crash-safe file; a manager for a directory of them (latest, keep
//! last N / best), asynchronous saves, and incremental checkpoints for fine-tuning.
//!
//! # Layout
//!
//! One burnpack file, namespaced so each part is readable on its own:
//!
//! | entry | holds |
//! |---|---|
//! | tensors `model.<path>` | model parameters, with their `ParamId`s (as `save_pack` writes them) |
//! | tensors `optim.<param id>.<field>` | optimizer state (`ModuleOptimizer::to_record`), dtypes kept |
//! | scalars `optim.<key>`, metadata `optim.<param id>` | optimizer scalars and parameter paths |
//! | scalars `scheduler.<key>` | the LR scheduler record |
//! | scalars `progress.epoch`, `progress.step`, `progress.<name>` | training progress |
//! | metadata `burnpack.kind` = `checkpoint`, `producer`, user keys | |
//!
//! A checkpoint loads as a plain model with [`PackModule::load_pack`](crate::module::PackModule::load_pack):
//! the checkpoint declares `model.` as its namespace (`burnpack.namespace`), which the module
//! loader honours.
//!
//! ```
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::checkpoint::{Checkpoint, Progress, TrainingState};
//! use burnpack::module::PackModule;
//!
//! #[derive(Module, Debug)]
//! struct Tiny { w: Param<Tensor<1>> }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("ckpt.bpk");
//! let model = Tiny { w: Param::from_data([1.0, 2.0], &device) };
//! TrainingState::new(&model, Progress::new(3, 1200)).save(&path).unwrap();
//!
//! let ckpt = Checkpoint::open(&path).unwrap();
//! assert_eq!((ckpt.progress().epoch, ckpt.progress().step), (3, 1200));
//! let restored = ckpt.load_model(Tiny { w: Param::from_data([0.0, 0.0], &device) }).unwrap();
//! // The same file loads as a plain model.
//! let plain = Tiny { w: Param::from_data([0.0, 0.0], &device) }.load_pack(&path).unwrap();
//! assert_eq!(restored.w.val().into_data(), plain.w.val().into_data());
//! ```

//!
//! # Incremental checkpoints
//!
//! For fine-tuning (a frozen base under adapters, a new head on a frozen encoder), a manager
//! with [`incremental(true)`](Manager::incremental) writes at each save only the tensors that
//! no checkpoint in its storage holds already, into a data file `data-<step>-<nonce>.bpk`,
//! and the checkpoint (`ckpt-00000000000000000007.bpk` for step 7) becomes a manifest naming where each tensor is (a
//! frozen base is written once, then referred to). Retention deletes a data file only when no
//! manifest names it. [`Checkpoint::open`], the manager's `latest`, `bpk` and
//! [`Checkpoint::chain`] (a [`Chain`]: which tensors the checkpoint holds and which it refers
//! to) open a manifest with its data files; `bpk convert` writes one self-contained pack.
//! `examples/incremental.rs` fine-tunes adapters, checkpoints every step and resumes bit for
//! bit; docs/guide.md ("Incremental checkpoints") and docs/format.md ("Incremental
//! checkpoints") have the rest.
//!
//! ```
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
//!
//! #[derive(Module, Debug)]
//! struct Tuned { base: Param<Tensor<1>>, head: Param<Tensor<1>> }
//!
//! let device = Device::flex();
//! let dir = tempfile::tempdir().unwrap();
//! let manager = CheckpointManager::new(dir.path()).unwrap().incremental(true);
//! let mut model = Tuned { base: Param::from_data([1.0, 2.0], &device), head: Param::from_data([0.0], &device) };
//! manager.save(TrainingState::new(&model, Progress::new(0, 1))).unwrap();
//! model.head = Param::from_data([0.5], &device); // the base does not change
//! manager.save(TrainingState::new(&model, Progress::new(0, 2))).unwrap();
//!
//! let ckpt = manager.latest().unwrap().unwrap();
//! let chain = ckpt.chain().unwrap();
//! assert_eq!(chain.held().map(|(t, _)| t).collect::<Vec<_>>(), ["model.head"]);
//! assert_eq!(chain.referred().map(|(t, _)| t).collect::<Vec<_>>(), ["model.base"]);
//! ```
//!
//! One file a concern: [`progress`](Progress) and the [`TrainingState`] to save, the
//! namespaces that lay a checkpoint out, the open [`Checkpoint`], burn-train's three-file
//! layout, the [`CheckpointManager`] of a directory and the [`AsyncSaver`]; `incremental`
//! (what an incremental save writes), `refs` (a manifest's references) and `chain` (a
//! manifest opened with its data files).

mod async_save;
pub(crate) mod burn_train;
mod chain;
mod collect;
mod directory;
mod error;
mod fields;
mod file;
mod in_flight;
mod incremental;
mod known;
mod local;
mod manager;
mod manifest;
mod namespace;
mod opened;
mod phases;
mod progress;
pub(crate) mod refs;
mod retention;
mod sightings;
mod state;
mod storage;

pub use async_save::{AsyncSaver, CheckpointTarget, WhenBusy};
pub use burn_train::import_burn_train;
pub use chain::Chain;
pub use directory::{CheckpointEntry, Directory};
pub use error::{CheckpointError, Skipped};
pub use file::Checkpoint;
pub use local::CheckpointManager;
pub use manager::{Manager, SaveReport};
pub use namespace::{KIND, KIND_KEY, MODEL_PREFIX, PARTS_KEY};
#[cfg(feature = "train")]
pub(crate) use namespace::{
    OPTIM_PREFIX, PROGRESS_PREFIX, SCHEDULER_PREFIX, absorb_reader, assemble, head,
};
pub use progress::Progress;
pub use refs::{DATA_KIND, INCREMENTAL_KEY, REFS_KEY, content_hash};
pub use state::{PreparedState, TrainingState};
pub use storage::Storage;
