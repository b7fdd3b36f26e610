//! The parallel slot writer: workers on rayon threads take entries in file order, produce
//! their bytes and write them into their slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::entry::{Data, Entry, Source};
use super::error::WriteError;

/// Runs every job with `run`, on at most `workers` rayon tasks at once, in the given order.
///
/// Each task runs one job at a time (a job materializes its entries and drops their bytes
/// before the task takes the next), so at most `workers` jobs' bytes exist at any moment,
/// whatever the providers do (a provider that itself uses rayon may let its thread pick up
/// another task, but there are only `workers` tasks). The first error stops the remaining work
/// and is returned.
pub(crate) fn fill<J, R>(jobs: Vec<J>, workers: usize, run: R) -> Result<(), WriteError>
where
    J: Send,
    R: Fn(J) -> Result<(), WriteError> + Sync,
{
    let items = jobs;
    let workers = workers.clamp(1, items.len().max(1));
    let queue = Mutex::new(items.into_iter());
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<WriteError>> = Mutex::new(None);
    let work = || {
        while !failed.load(Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some(job) = next else { break };
            if let Err(e) = run(job) {
                failed.store(true, Ordering::Relaxed);
                failure
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(e);
            }
        }
    };
    rayon::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|_| work());
        }
    });
    match failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Produces an entry's bytes, turning a failing, panicking or lying provider into an error
/// that names the entry.
pub(crate) fn materialize(entry: Entry) -> Result<Data, WriteError> {
    let Entry { name, source, .. } = entry;
    match source {
        Source::Resident(bytes) => Ok(Data::Bytes(bytes)),
        Source::Lent(lent) => Ok(Data::Lent(lent)),
        Source::Deferred { len, provider } => match crate::panic::catch_quiet(provider) {
            Ok(Ok(bytes)) if bytes.len() as u64 == len => Ok(Data::Bytes(bytes)),
            Ok(Ok(bytes)) => Err(WriteError::ProviderLength {
                tensor: name,
                declared: len,
                produced: bytes.len() as u64,
            }),
            Ok(Err(source)) => Err(WriteError::Provider {
                tensor: name,
                source,
            }),
            Err(message) => Err(WriteError::ProviderPanicked {
                tensor: name,
                message,
            }),
        },
    }
}
