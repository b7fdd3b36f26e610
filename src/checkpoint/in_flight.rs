//! The count of a manager's saves still being written in the background.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A count of background saves of a manager and its clones, and a way to wait for it to reach
/// zero.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: Mutex<usize>,
    done: Condvar,
}

impl InFlight {
    /// Counts one background save until the guard is dropped (also when the save panics).
    pub(crate) fn begin(self: &Arc<Self>) -> InFlightGuard {
        *self.count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        InFlightGuard(Arc::clone(self))
    }

    /// Waits until no background save is being written.
    pub(crate) fn wait(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        while *count > 0 {
            count = self
                .done
                .wait(count)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Counts one background save as in flight until dropped.
pub struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        self.0.done.notify_all();
    }
}
