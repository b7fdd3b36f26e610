//! Reading ahead of a module load on every core, for sources whose reads are copies (a pack
//! opened buffered, a Burn record whose tensors are unaligned): a tensor's bytes are read into
//! memory of their own, and on a cold file or a virtual machine's fresh pages that copy, not
//! the disk, is what a one-thread load waits on.
//!
//! The walk reads tensors in a known order (the loader's `wanted` list). Worker threads read
//! them in that order, at most [`AHEAD_BYTES`] (or one tensor, if larger) ahead of what the
//! walk has taken, so memory stays bounded whatever the model's size; the walk takes each
//! tensor's bytes (or its error, exactly the one a direct read gives) when it reaches it. A
//! read the list does not foresee goes to the source directly.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, PoisonError};

use burn::tensor::Bytes;

use crate::format::TensorInfo;
use crate::read::{CopyReason, ReadError, TensorSource};

/// Bytes read ahead of the walk, at most (one larger tensor is read alone).
const AHEAD_BYTES: u64 = 64 << 20;

/// Bytes under which a load is not worth the threads.
const MIN_BYTES: u64 = 16 << 20;

/// Whether a load of `wanted` from `source` reads ahead: threads exist, the source can be
/// shared with them, its reads of these tensors are copies, and there is enough to read.
pub(super) fn worth_it<'s>(
    source: &'s dyn TensorSource,
    wanted: &[&TensorInfo],
) -> Option<&'s (dyn TensorSource + Sync)> {
    let shared = source.shared()?;
    let copies = wanted
        .iter()
        .filter(|info| source.copy_reason(info).is_some())
        .map(|info| info.len())
        .sum::<u64>();
    (copies >= MIN_BYTES && crate::platform::threads_available()).then_some(shared)
}

/// What the workers and the walk share.
struct State {
    /// Next position of the list a worker reads.
    next: usize,
    /// Bytes read or being read that the walk has not taken.
    ahead: u64,
    /// Reads done, by position, until taken.
    ready: HashMap<usize, Result<Bytes, ReadError>>,
    /// Positions the walk has taken (or read itself).
    taken: Vec<bool>,
    /// The walk is over: workers stop.
    stop: bool,
}

/// A source that serves reads from the workers' results (see the module docs).
pub(super) struct ReadAhead<'s> {
    source: &'s (dyn TensorSource + Sync),
    order: Vec<&'s TensorInfo>,
    position: HashMap<&'s str, usize>,
    state: Mutex<State>,
    /// Signalled when a read is ready.
    done: Condvar,
    /// Signalled when the walk takes bytes (room to read further) or stops.
    room: Condvar,
}

impl<'s> ReadAhead<'s> {
    pub(super) fn new(source: &'s (dyn TensorSource + Sync), order: Vec<&'s TensorInfo>) -> Self {
        let position = order
            .iter()
            .enumerate()
            .map(|(i, info)| (info.name(), i))
            .collect();
        let taken = vec![false; order.len()];
        Self {
            source,
            order,
            position,
            state: Mutex::new(State {
                next: 0,
                ahead: 0,
                ready: HashMap::new(),
                taken,
                stop: false,
            }),
            done: Condvar::new(),
            room: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `walk` with `workers` threads reading ahead of it; returns what `walk` returns
    /// once every worker has stopped.
    pub(super) fn run<R>(&self, workers: usize, walk: impl FnOnce(&Self) -> R) -> R {
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| self.work());
            }
            let result = walk(self);
            self.lock().stop = true;
            self.room.notify_all();
            result
        })
    }

    /// One worker: reads the next tensor of the list while there is room ahead of the walk.
    fn work(&self) {
        loop {
            let i = {
                let mut state = self.lock();
                loop {
                    if state.stop || state.next >= self.order.len() {
                        return;
                    }
                    let len = self.order[state.next].len();
                    if state.taken[state.next] {
                        state.next += 1;
                    } else if state.ahead == 0 || state.ahead + len <= AHEAD_BYTES {
                        break;
                    } else {
                        state = self
                            .room
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                }
                let i = state.next;
                state.next += 1;
                state.ahead += self.order[i].len();
                i
            };
            let result = self.read_direct(self.order[i]);
            self.lock().ready.insert(i, result);
            self.done.notify_all();
        }
    }

    /// A read by the source itself, a panic in it an error naming the tensor (a worker must
    /// always hand a result back: the walk waits for it).
    fn read_direct(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        crate::panic::catch_quiet(|| self.source.read(info)).unwrap_or_else(|message| {
            Err(ReadError::Io {
                file: self.source.file().to_string(),
                action: "read a tensor",
                source: std::io::Error::other(format!(
                    "reading '{}' panicked: {message}",
                    info.name()
                )),
            })
        })
    }
}

impl TensorSource for ReadAhead<'_> {
    fn file(&self) -> &str {
        self.source.file()
    }

    fn tensors(&self) -> &[TensorInfo] {
        self.source.tensors()
    }

    fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.source.tensor(name)
    }

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let Some(&i) = self.position.get(info.name()) else {
            return self.read_direct(info);
        };
        let mut state = self.lock();
        loop {
            if let Some(result) = state.ready.remove(&i) {
                state.ahead -= self.order[i].len();
                state.taken[i] = true;
                drop(state);
                self.room.notify_all();
                return result;
            }
            if state.taken[i] || i >= state.next {
                // Read again, or not reached by the workers yet: the walk reads it itself
                // (and the workers skip it).
                state.taken[i] = true;
                drop(state);
                return self.read_direct(info);
            }
            // A worker is reading it.
            state = self
                .done
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn namespace(&self) -> Option<&str> {
        self.source.namespace()
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        self.source.copy_reason(info)
    }

    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        self.source.check(info, bytes)
    }

    fn verify_structure(&self) -> Result<(), ReadError> {
        self.source.verify_structure()
    }
}
