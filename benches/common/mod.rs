//! What every benchmark shares: environment settings, medians, and one measurement per child
//! process (so a peak resident size is that measurement's own).
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

/// `layers` square 1024 `Linear` layers with biases (4 MiB weights): the model of the
/// format benchmarks.
#[derive(burn::module::Module, Debug)]
pub struct Stack {
    pub layers: Vec<burn::nn::Linear>,
}

/// A [`Stack`] of `layers` layers, initialized (lazily where the device allows) on `device`.
pub fn stack(layers: usize, device: &burn::tensor::Device) -> Stack {
    Stack {
        layers: (0..layers)
            .map(|_| burn::nn::LinearConfig::new(1024, 1024).init(device))
            .collect(),
    }
}

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

/// A line of `/proc/self/status` (`VmHWM`, `VmRSS`), in KiB.
fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// This process's peak resident memory (`VmHWM`), in KiB.
pub fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

/// This process's resident memory now (`VmRSS`), in KiB.
pub fn resident_kib() -> u64 {
    status_kib("VmRSS:")
}

/// CPU time (user + system, every thread) this process has used so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One child's measurement: wall time, CPU time, the peak resident memory during the
/// operation and the resident memory before it (the model, for a save).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub time: Duration,
    pub cpu: Duration,
    pub peak_kib: u64,
    pub base_kib: u64,
    /// Anonymous memory (`RssAnon`) gained from the start of the operation to its end: memory
    /// of the process's own, not the page cache's (absent from children of other programs).
    pub anon_kib: Option<u64>,
}

impl Sample {
    /// A sample of time and CPU only (no memory measured).
    pub fn timed(time: Duration, cpu: Duration) -> Self {
        Self {
            time,
            cpu,
            peak_kib: 0,
            base_kib: 0,
            anon_kib: None,
        }
    }
}

/// Meters one operation in a child: [`Meter::start`] resets the peak resident size (Linux
/// `clear_refs` 5) and notes CPU time and resident size; [`Meter::report`] prints the sample
/// for [`run_child`].
pub struct Meter {
    cpu: Duration,
    base_kib: u64,
    anon_kib: u64,
}

impl Meter {
    pub fn start() -> Self {
        // Resets VmHWM to the current VmRSS, so the peak is this operation's own.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        Self {
            cpu: cpu_time(),
            base_kib: status_kib("VmRSS:"),
            anon_kib: status_kib("RssAnon:"),
        }
    }

    pub fn report(self, time: Duration) {
        println!(
            "RESULT {} {} {} {} {}",
            time.as_nanos(),
            peak_kib(),
            (cpu_time() - self.cpu).as_nanos(),
            self.base_kib,
            status_kib("RssAnon:").saturating_sub(self.anon_kib)
        );
    }
}

/// Reports a child's measurement to [`run_child`]: its time and this process's peak memory
/// over its whole life (CPU time likewise).
pub fn report(time: Duration) {
    Meter {
        cpu: Duration::ZERO,
        base_kib: 0,
        anon_kib: 0,
    }
    .report(time);
}

/// Runs this benchmark binary again as `--child ARGS...` and returns what it [`report`]ed.
pub fn run_child(args: &[&str]) -> Sample {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.arg("--child").args(args);
    run_command(command, args)
}

/// Runs `command` (a child that prints a `RESULT` line as [`Meter::report`] does) and returns
/// its sample; `args` name it in failures.
pub fn run_command(command: Command, args: &[&str]) -> Sample {
    try_run_command(command).unwrap_or_else(|e| panic!("{} failed: {e}", args.join(" ")))
}

/// [`run_command`], with a failing child (killed, out of memory) an error: how it ended and
/// the end of what it printed to stderr.
pub fn try_run_command(mut command: Command) -> Result<Sample, String> {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = || {
        let lines: Vec<&str> = stderr.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    };
    if !out.status.success() {
        return Err(format!("{} ({})", out.status, tail()));
    }
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .ok_or_else(|| format!("no result ({})", tail()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|p| p.parse().unwrap())
        .collect();
    Ok(Sample {
        time: Duration::from_nanos(v[0]),
        peak_kib: v[1],
        cpu: Duration::from_nanos(v[2]),
        base_kib: v[3],
        anon_kib: v.get(4).copied(),
    })
}

/// `median (min-max)` of durations, in milliseconds.
pub fn spread(samples: &[Duration]) -> String {
    let mut s = samples.to_vec();
    s.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let prec = if ms(s[s.len() - 1]) < 100.0 { 1 } else { 0 };
    format!(
        "{:.prec$} ({:.prec$}-{:.prec$})",
        ms(s[s.len() / 2]),
        ms(s[0]),
        ms(s[s.len() - 1])
    )
}

/// The median of a list of ratios.
pub fn median_ratio(mut ratios: Vec<f64>) -> f64 {
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// Reads every float parameter's bytes back to the host and sums them (as u64 words), so
/// that nothing can be skipped.
#[derive(Default)]
struct ReadAll(u64);

impl burn::module::ModuleVisitor for ReadAll {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        let data = param.val().into_data();
        let (words, _) = data.as_bytes().as_chunks::<8>();
        self.0 = words
            .iter()
            .fold(self.0, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
    }
}

/// Every float parameter of `module` read back to the host (see [`ReadAll`]).
pub fn read_all<M: burn::module::Module>(module: &M) -> u64 {
    let mut reader = ReadAll::default();
    module.visit(&mut reader);
    reader.0
}

/// Takes every float parameter out of `module` (`Param::into_value`) and sums its bytes: a
/// parameter the module alone holds comes out of flex's `into_data` without a copy, so this
/// reads each tensor where the load put it (a mapping's pages, a loader's buffer). Reading
/// through `val().into_data()` instead ([`read_all`]) copies every parameter on flex (the
/// module keeps its handle), the same copy for every contender.
pub fn consume_all<M: burn::module::Module>(module: M) -> u64 {
    let mut consumer = ConsumeAll::default();
    let _ = module.map(&mut consumer);
    consumer.0
}

#[derive(Default)]
struct ConsumeAll(u64);

impl burn::module::ModuleMapper for ConsumeAll {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<burn::tensor::Tensor<D>>,
    ) -> burn::module::Param<burn::tensor::Tensor<D>> {
        let id = param.id;
        let tensor = param.into_value();
        let device = tensor.device();
        let data = tensor.into_data();
        let (words, _) = data.as_bytes().as_chunks::<8>();
        self.0 = words
            .iter()
            .fold(self.0, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
        burn::module::Param::initialized(id, burn::tensor::Tensor::zeros([1; D], &device))
    }
}

/// Makes `bytes` of the machine's free memory ready for use, right before a measurement, by
/// writing and deleting a scratch file of that size in `dir` (no fsync).
///
/// On a virtual machine whose balloon driver reports free pages to the host (this project's
/// benchmark machines do), memory freed a few seconds earlier is given back, and its next use
/// costs a fault in the host: a 512 MiB write into the page cache then takes 1.5 s of CPU
/// instead of 0.17 s, whichever process does it. Pages freed by deleting a file are reused at
/// once, by the page cache as by anonymous memory, so after this every contender starts from
/// the same state and a save's time is its own, not the host's.
pub fn warm_memory(dir: &std::path::Path, bytes: u64) {
    use std::io::Write;
    let path = dir.join(".warm-memory");
    let chunk = vec![0x5au8; 8 << 20];
    let mut file = std::fs::File::create(&path).unwrap();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    drop(file);
    std::fs::remove_file(&path).unwrap();
}

/// Drops every file of `dir` from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`, no
/// root needed; the files were written and synced before), so that the next load reads the
/// disk.
pub fn evict_dir(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        if let Ok(file) = std::fs::File::open(&path) {
            let _ = file.sync_all();
            // SAFETY: a plain system call on an open descriptor; no memory is passed.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

/// Asks the kernel to start writing back `file`'s dirty pages now, without waiting (Linux
/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`): what a pipelined durable write does after each
/// piece.
pub fn start_writeback(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// One pass of 8 MiB reads over `path`, nothing kept: the disk's (or page cache's) part of
/// any load. Returns the bytes read.
pub fn read_sequentially(path: &std::path::Path) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    loop {
        let n = std::io::Read::read(&mut f, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    total
}

/// Prints one markdown row a contender: `| label | name | time median (min-max) | ratio |
/// CPU | peak RSS rise |`, and the anonymous memory gained when `anon` (the largest of the
/// rounds for memory, medians otherwise).
pub fn print_rows(
    label: &str,
    contenders: &[&str],
    samples: &[Vec<Sample>],
    ratios: &[Vec<f64>],
    anon: bool,
) {
    for (i, who) in contenders.iter().enumerate() {
        let times: Vec<_> = samples[i].iter().map(|s| s.time).collect();
        let cpu = median(samples[i].iter().map(|s| s.cpu).collect());
        let rise = samples[i]
            .iter()
            .map(|s| s.peak_kib.saturating_sub(s.base_kib))
            .max()
            .unwrap_or(0);
        let anon_column = if anon {
            let kib = samples[i]
                .iter()
                .filter_map(|s| s.anon_kib)
                .max()
                .unwrap_or(0);
            format!(" {} MiB |", kib >> 10)
        } else {
            String::new()
        };
        println!(
            "| {label} | {who} | {} | {:.2} | {:.0} | {} MiB |{anon_column}",
            spread(&times),
            median_ratio(ratios[i].clone()),
            cpu.as_secs_f64() * 1e3,
            rise >> 10
        );
    }
}

/// `runs` rounds over `count` contenders, the order rotated each round (round `r` starts
/// with contender `r % count`); `measure(i)` measures contender `i`. Returns each contender's
/// samples and its per-round ratio of time to contender 0's (the reference).
pub fn interleave(
    runs: usize,
    count: usize,
    mut measure: impl FnMut(usize) -> Sample,
) -> (Vec<Vec<Sample>>, Vec<Vec<f64>>) {
    let mut samples = vec![Vec::new(); count];
    let mut ratios = vec![Vec::new(); count];
    for round in 0..runs {
        let mut this_round = vec![None; count];
        for k in 0..count {
            let i = (round + k) % count;
            this_round[i] = Some(measure(i));
        }
        let this_round: Vec<Sample> = this_round.into_iter().flatten().collect();
        let reference = this_round[0].time.as_secs_f64();
        for (i, sample) in this_round.into_iter().enumerate() {
            ratios[i].push(sample.time.as_secs_f64() / reference);
            samples[i].push(sample);
        }
    }
    (samples, ratios)
}
