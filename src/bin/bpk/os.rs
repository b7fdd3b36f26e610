//! What `bpk` asks of the operating system before it starts, chosen once per platform.

/// Raises the soft limit of open files towards the hard limit. `verify` reads every data file
/// of an incremental checkpoint through a descriptor of its own (buffered reads, so that a
/// file cut while it is read is an error, not a signal); a chain of more data files than the
/// common soft limit of 1,024 would otherwise fail with "Too many open files".
#[cfg(unix)]
pub(crate) fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the `rlimit` it is given a valid pointer to, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    // The hard limit, or (macOS refuses more than its per-process maximum) a common ceiling.
    for wanted in [limit.rlim_max, 10_240] {
        if wanted <= limit.rlim_cur {
            return;
        }
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `setrlimit` reads the `rlimit` it is given a valid pointer to; a refused
        // value changes nothing.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return;
        }
    }
}

/// Elsewhere there is no soft limit to raise.
#[cfg(not(unix))]
pub(crate) fn raise_open_files() {}

/// A failed write to standard output (a full disk, a file closed under it) ends `bpk` with one
/// line on stderr and exit code 3 (an I/O error), never a panic: Rust's `println!` panics when
/// it cannot write. (A closed pipe is SIGPIPE's, restored to its default at start.) Other
/// panics go to the hook in force before.
pub(crate) fn stdout_failures_exit() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(why) = text.strip_prefix("failed printing to stdout") {
            use std::io::Write as _;
            let why = why.trim_start_matches(':').trim();
            let _ = writeln!(
                std::io::stderr(),
                "bpk: standard output: cannot write: {why}"
            );
            std::process::exit(3);
        }
        previous(info);
    }));
}

/// Address space left free beyond a worker thread's stack when it starts: its signal stack
/// and first allocations need room. Where less is left, `bpk` says so and stops.
const ROOM_BEYOND_STACK: usize = 1 << 20;

/// A thread's stack where rayon names none: `RUST_MIN_STACK`, or Rust's default of 2 MiB.
fn default_stack() -> usize {
    std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|size| size.parse().ok())
        .unwrap_or(2 << 20)
}

/// The threads rayon would start: `RAYON_NUM_THREADS` where it is a positive number, else one
/// per processor.
fn threads_wanted() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Starts rayon's global pool one thread at a time, each only where there is room for it, and
/// each waited for until it has run its first allocation. A thread that cannot be started (a
/// process limit, an address space limit) is then an error before any work, with exit code 3,
/// never a panic inside a half-started thread: Rust's thread start panics where it cannot map
/// the signal stack, which happens when address space runs out between a thread's stack and
/// its signal stack.
///
/// The room for all of them is looked for first: rayon's own books for a pool are sized by its
/// thread count, and an allocation that fails there aborts.
pub(crate) fn start_worker_threads() -> Result<(), String> {
    let threads = threads_wanted();
    let room = default_stack() + ROOM_BEYOND_STACK;
    if !address_space_left(threads.saturating_mul(room)) {
        return Err(format!(
            "{threads} worker threads need {} MiB of address space, more than is left \
             (RAYON_NUM_THREADS sets fewer)",
            threads.saturating_mul(room) >> 20
        ));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .spawn_handler(|thread| {
            let index = thread.index();
            let room = thread.stack_size().unwrap_or(room - ROOM_BEYOND_STACK) + ROOM_BEYOND_STACK;
            if !address_space_left(room) {
                return Err(std::io::Error::other(format!(
                    "not enough address space left for worker thread {} (each needs {} MiB; \
                     RAYON_NUM_THREADS sets fewer)",
                    index + 1,
                    room >> 20
                )));
            }
            let mut builder = std::thread::Builder::new();
            if let Some(name) = thread.name() {
                builder = builder.name(name.to_owned());
            }
            if let Some(size) = thread.stack_size() {
                builder = builder.stack_size(size);
            }
            let (started, running) = std::sync::mpsc::sync_channel(1);
            builder.spawn(move || {
                // The thread's first allocation (where the C allocator reserves the thread's
                // own arena) before the next thread's room is looked for.
                drop(std::hint::black_box(Box::new([0u8; 64])));
                let _ = started.send(());
                thread.run()
            })?;
            running.recv().map_err(|_| {
                std::io::Error::other(format!("worker thread {} stopped as it started", index + 1))
            })
        })
        .build_global()
        .map_err(|e| e.to_string())
}

/// Whether `bytes` of address space can still be mapped: mapped (never touched, no memory) and
/// given back at once.
#[cfg(unix)]
fn address_space_left(bytes: usize) -> bool {
    // SAFETY: an anonymous, inaccessible mapping at an address the kernel chooses touches no
    // existing memory; it is unmapped at once with the same length, and nothing reads it.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANON | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if at == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(at, bytes);
    }
    true
}

/// Elsewhere no address space limit is set per process; a thread that cannot start is an
/// error from the spawn itself.
#[cfg(not(unix))]
fn address_space_left(_bytes: usize) -> bool {
    true
}
