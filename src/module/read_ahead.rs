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
use crate::source::{CopyReason, ReadError, TensorSource};

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
        /// Stops the workers when the walk ends, returning or unwinding (a worker waiting for
        /// room would otherwise wait for ever, and the scope with it).
        struct Stop<'a, 's>(&'a ReadAhead<'s>);
        impl Drop for Stop<'_, '_> {
            fn drop(&mut self) {
                self.0.lock().stop = true;
                self.0.room.notify_all();
            }
        }
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| self.work());
            }
            let _stop = Stop(self);
            walk(self)
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

    fn withheld(&self) -> &[crate::source::Withheld] {
        self.source.withheld()
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

#[cfg(test)]
mod tests {
    use super::{ReadAhead, TensorSource};
    use crate::format::TensorInfo;
    use crate::source::ReadError;
    use burn::tensor::{Bytes, DType};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tensors of 8 MiB whose bytes are their index; tensor 5 fails to read; counts reads.
    struct Fake {
        tensors: Vec<TensorInfo>,
        reads: AtomicUsize,
    }

    impl Fake {
        fn new(n: usize) -> Self {
            let len = 8u64 << 20;
            Self {
                tensors: (0..n)
                    .map(|i| {
                        TensorInfo::external(
                            format!("t{i}"),
                            DType::U8,
                            vec![8 << 20],
                            i as u64 * len,
                            len,
                        )
                    })
                    .collect(),
                reads: AtomicUsize::new(0),
            }
        }
    }

    impl TensorSource for Fake {
        #[allow(clippy::unnecessary_literal_bound)] // the trait's signature
        fn file(&self) -> &str {
            "fake"
        }

        fn tensors(&self) -> &[TensorInfo] {
            &self.tensors
        }

        fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let i: u8 = info.name()[1..].parse().unwrap();
            if i == 5 {
                return Err(ReadError::Io {
                    file: "fake".into(),
                    action: "read tensor data",
                    source: std::io::Error::other("bad sector"),
                });
            }
            Ok(Bytes::from_bytes_vec(vec![i; 8 << 20]))
        }
    }

    #[test]
    fn the_walk_gets_each_tensor_its_error_and_what_it_did_not_foresee() {
        let fake = Fake::new(24);
        let order: Vec<&TensorInfo> = fake.tensors.iter().take(20).collect();
        let ahead = ReadAhead::new(&fake, order);
        ahead.run(2, |ahead| {
            for (i, info) in fake.tensors.iter().enumerate() {
                let got = ahead.read(info);
                if i == 5 {
                    assert!(got.unwrap_err().to_string().contains("bad sector"));
                } else {
                    let bytes = got.unwrap();
                    assert!(bytes.iter().all(|&b| usize::from(b) == i), "t{i}");
                }
            }
            // Read again: served by the source itself.
            assert_eq!(ahead.read(&fake.tensors[3]).unwrap()[0], 3);
        });
        // Every tensor once, the one read again twice; nothing else.
        assert_eq!(fake.reads.load(Ordering::Relaxed), 25);
    }

    #[test]
    fn a_walk_out_of_order_or_that_panics_ends() {
        let fake = Fake::new(30);
        let order: Vec<&TensorInfo> = fake.tensors.iter().collect();
        let ahead = ReadAhead::new(&fake, order);
        ahead.run(2, |ahead| {
            for i in (0..30).rev().step_by(3) {
                if i != 5 {
                    assert_eq!(ahead.read(&fake.tensors[i]).unwrap()[0], i as u8);
                }
            }
        });
        let order: Vec<&TensorInfo> = fake.tensors.iter().collect();
        let ahead = ReadAhead::new(&fake, order);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ahead.run(2, |ahead| {
                let _ = ahead.read(&fake.tensors[0]);
                std::thread::sleep(std::time::Duration::from_millis(50));
                panic!("the walk fails");
            });
        }));
        assert!(panicked.is_err());
    }
}
