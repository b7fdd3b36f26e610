//! Asynchronous saves: the training thread hands the state over and returns.

use std::thread::JoinHandle;

use burn::module::Module;

use super::error::CheckpointError;
use super::in_flight::InFlightGuard;
use super::manager::Manager;
use super::state::{PreparedState, TrainingState};
use super::storage::Storage;

/// What [`AsyncSaver`] does when a save is requested while one is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenBusy {
    /// Wait for the running save to finish (default).
    #[default]
    Wait,
    /// Refuse with [`CheckpointError::Busy`].
    Refuse,
}

/// Where an [`AsyncSaver`] saves: a checkpoint [`Manager`] over any [`Storage`] (a
/// [`CheckpointManager`](super::CheckpointManager), a `RemoteCheckpointManager`, a backend of
/// one's own). Sealed: implemented by `Manager` only.
pub trait CheckpointTarget: target::Target {}

impl<T: target::Target> CheckpointTarget for T {}

pub(crate) mod target {
    use super::{CheckpointError, InFlightGuard, PreparedState};

    /// What a background save needs of a manager (sealed: the module is private).
    pub trait Target: Clone + Send + 'static {
        /// What a save returns: the file's path, the object's location.
        type Saved: Send + 'static;
        /// Refuses `step` when a valid checkpoint of a later step exists.
        fn check_newer(&self, step: u64) -> Result<(), CheckpointError>;
        /// Writes the checkpoint of `state`'s step, then applies retention.
        fn save_prepared(&self, state: PreparedState) -> Result<Self::Saved, CheckpointError>;
        /// Counts a background save as in flight until the guard drops (`latest` waits).
        fn begin_background(&self) -> InFlightGuard;
    }
}

impl<S: Storage> target::Target for Manager<S> {
    type Saved = super::SaveReport<S::Location>;

    fn check_newer(&self, step: u64) -> Result<(), CheckpointError> {
        Manager::check_newer(self, step)
    }

    fn save_prepared(&self, state: PreparedState) -> Result<Self::Saved, CheckpointError> {
        self.write(state)
    }

    fn begin_background(&self) -> InFlightGuard {
        Manager::begin_background(self)
    }
}

/// Saves checkpoints on a background thread, one at a time.
///
/// [`save`](Self::save) turns the state into entries on the calling thread — parameter
/// handles, not bytes: on CPU backends no tensor byte is copied (tensors are immutable
/// handles, and later training steps create new ones) — and returns; a background thread
/// writes the file, or uploads the object (see [`CheckpointTarget`]), and applies the
/// manager's retention. An error of a background save is returned by the next call to `save`
/// or by [`wait`](Self::wait); dropping the saver waits for the running save and prints its
/// error to stderr rather than losing it. The manager's `latest` (on any clone) waits for a
/// save still running, so the checkpoint just handed over is the one it returns.
///
/// The optimizer is cloned on the calling thread (shared tensor handles: no byte is copied);
/// its record (`ModuleOptimizer::to_record`, Burn's only access to its state) is taken and
/// serialized on the background thread.
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{Device, Tensor};
/// use burnpack::checkpoint::{AsyncSaver, CheckpointManager, Progress, TrainingState, WhenBusy};
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
///
/// let device = Device::flex();
/// let dir = tempfile::tempdir().unwrap();
/// let manager = CheckpointManager::new(dir.path()).unwrap();
/// let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
/// let model = Tiny { w: Param::from_data([1.0], &device) };
/// saver.save(TrainingState::new(&model, Progress::new(0, 1))).unwrap();
/// saver.wait().unwrap();
/// assert_eq!(manager.latest().unwrap().unwrap().progress().step, 1);
/// ```
pub struct AsyncSaver<T: CheckpointTarget> {
    manager: T,
    when_busy: WhenBusy,
    in_flight: Option<JoinHandle<Result<T::Saved, CheckpointError>>>,
}

impl<T: CheckpointTarget> AsyncSaver<T> {
    /// A saver writing through `manager` (a [`CheckpointManager`](super::CheckpointManager),
    /// a `RemoteCheckpointManager`, any [`Manager`]).
    #[must_use]
    pub fn new(manager: T, when_busy: WhenBusy) -> Self {
        Self {
            manager,
            when_busy,
            in_flight: None,
        }
    }

    /// Whether a save is running.
    #[must_use]
    pub fn is_busy(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Hands `state` to the background thread and returns.
    ///
    /// # Errors
    /// The previous background save's error, [`CheckpointError::Busy`] under
    /// [`WhenBusy::Refuse`], [`CheckpointError::NewerExists`] (checked before the hand-over),
    /// or an error turning the state into entries.
    pub fn save<M: Module>(&mut self, state: TrainingState<'_, M>) -> Result<(), CheckpointError> {
        if self.is_busy() && self.when_busy == WhenBusy::Refuse {
            return Err(CheckpointError::Busy);
        }
        self.wait()?;
        self.manager.check_newer(state.progress.step)?;
        let prepared = state.prepare()?;
        let manager = self.manager.clone();
        let guard = manager.begin_background();
        // Without threads (WebAssembly), the save is made here, before `save` returns.
        if !crate::platform::threads_available() {
            let _guard = guard;
            manager.save_prepared(prepared)?;
            return Ok(());
        }
        self.in_flight = Some(std::thread::spawn(move || {
            let _guard = guard;
            manager.save_prepared(prepared)
        }));
        Ok(())
    }

    /// Waits for the running save, if any. Returns where it saved (a path, an object
    /// location).
    ///
    /// # Errors
    /// The background save's error.
    pub fn wait(&mut self) -> Result<Option<T::Saved>, CheckpointError> {
        let Some(handle) = self.in_flight.take() else {
            return Ok(None);
        };
        match handle.join() {
            Ok(result) => result.map(Some),
            Err(panic) => Err(CheckpointError::Panicked(crate::panic::message(
                panic.as_ref(),
            ))),
        }
    }
}

impl<T: CheckpointTarget> Drop for AsyncSaver<T> {
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            eprintln!("burnpack: background checkpoint save failed: {e}");
        }
    }
}
