//! What every benchmark shares: environment settings, medians, and one measurement per child
//! process (so a peak resident size is that measurement's own).
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

/// The unsigned integer in environment variable `name`, or `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A scratch directory under `BURNPACK_BENCH_DIR` (default: the current directory).
pub fn bench_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(std::env::var("BURNPACK_BENCH_DIR").unwrap_or_else(|_| ".".into()))
        .unwrap()
}

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// This process's peak resident memory (`VmHWM`), in KiB.
pub fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Reports a child's measurement to [`run_child`]: its time and this process's peak memory.
pub fn report(time: Duration) {
    println!("RESULT {} {}", time.as_nanos(), peak_kib());
}

/// Runs this benchmark binary again as `--child ARGS...` and returns what it [`report`]ed.
pub fn run_child(args: &[&str]) -> (Duration, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or_else(|| {
            panic!(
                "{} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let mut parts = line.split_whitespace().skip(1);
    let nanos: u64 = parts.next().unwrap().parse().unwrap();
    let peak: u64 = parts.next().unwrap().parse().unwrap();
    (Duration::from_nanos(nanos), peak)
}
