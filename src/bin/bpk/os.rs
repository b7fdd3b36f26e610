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
