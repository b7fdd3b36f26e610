//! `.npz` loading: burnpack's `NumpySource` beside candle's `.npz` readers (`candle-core`'s
//! `npy` module), on the same file, with the method of burnpack's own benchmarks
//! (`benches/common`, shared through `#[path]`).
//!
//! One file of about `BURNPACK_BENCH_MIB` MiB (default 1024), written by NumPy itself
//! (`np.savez`: stored members, NumPy's own zip64 layout, no alignment of the arrays) through
//! `python3 -c` (with `PYTHONPATH` from `BURNPACK_PYTHONPATH` when set): layers
//! `layers.{i}.weight` `[1024, 1024]` and `layers.{i}.bias` `[1024]`, f32, values
//! `np.random.default_rng(0).standard_normal(..., dtype=np.float32)` drawn in file order.
//! Without python3 or NumPy the benchmark says so and exits successfully.
//!
//! Contenders, each "load + read of every tensor", every tensor kept until the end (as a model
//! load keeps them) and every byte touched (a wrapping sum of its 8-byte words, printed by the
//! child as `SUM ...`; the same for every contender):
//! - `burnpack`: `NumpySource::open`, then `TensorSource::read` of each tensor in file order
//!   (by offset: `tensors()` is sorted by name). Where an array's data is aligned for f32 in
//!   the file, a zero-copy window of the mapping; else a copy (NumPy does not align members).
//! - `candle`: `Tensor::read_npz(path)`: every member in archive order, each read through
//!   `zip` (which keeps a CRC-32 of what it reads) into a `Vec<f32>` of its own, a CPU tensor.
//! - `candle-lazy`: `npy::NpzTensors::new(path)` (what `candle-nn`'s `VarBuilder::from_npz`
//!   uses), then `get(name)` of each tensor in file order: each `get` opens the file again and
//!   parses the zip's central directory again, then reads as `candle` does.
//! - `from-memory` (the reference): the file read into a heap buffer before the timer starts;
//!   timed: `NumpySource::from_bytes` over it (the parse of the archive) and the same reads as
//!   `burnpack`. Its cold rows are warm ones too.
//!
//! Every measurement runs in a child process (this program with `--child`); contenders
//! interleaved, the order rotated each round; warm = the file read once before each child,
//! cold = the file dropped from the page cache (`posix_fadvise(DONTNEED)`) before each child;
//! then, warm and cold alike, a scratch file of twice the file's size written and deleted
//! (`common::warm_memory`, as burnpack's `formats` benchmark does before its cold loads), so
//! that the memory a load fills is not memory the VM just gave back to its host
//! (`BURNPACK_BENCH_COLD_MEMORY=1` leaves it out). Before the rounds, each contender runs once, untimed, and their sums are compared.
//!
//! ```sh
//! cd tools/bench-npz
//! CARGO_TARGET_DIR=../../target cargo build --release
//! BURNPACK_PYTHONPATH=/path/to/site-packages BURNPACK_BENCH_DIR=/tmp BURNPACK_BENCH_RUNS=5 \
//!     ../../target/release/bench-npz
//! ```
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_MIB` (default 1024),
//! `BURNPACK_BENCH_DIR` (the file is kept there, in `bench-npz-files/`, and reused by later
//! runs; default: a temporary directory, removed at the end), `BURNPACK_PYTHONPATH`,
//! `BURNPACK_BENCH_COLD_MEMORY`.

#[path = "../../../benches/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burnpack::interop::numpy::NumpySource;
use burnpack::read::TensorSource;

/// Bytes of one layer: a `[1024, 1024]` f32 weight and a `[1024]` f32 bias.
const LAYER_BYTES: u64 = (1024 * 1024 + 1024) * 4;

/// The contenders, the reference first.
const CONTENDERS: [&str; 4] = ["from-memory", "burnpack", "candle", "candle-lazy"];

/// Layers in a file of about `mib` MiB (at most `mib` MiB of arrays, at least one layer).
fn layers(mib: u64) -> u64 {
    ((mib << 20) / LAYER_BYTES).max(1)
}

/// The tensors' names in file order.
fn names(layers: u64) -> Vec<String> {
    (0..layers)
        .flat_map(|i| [format!("layers.{i}.weight"), format!("layers.{i}.bias")])
        .collect()
}

/// Writes the `.npz` with NumPy (`np.savez`, to a temporary name, synced, then renamed).
const SCRIPT: &str = r#"
import os, sys
import numpy as np
path, layers = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
arrays = {}
for i in range(layers):
    arrays[f"layers.{i}.weight"] = rng.standard_normal((1024, 1024), dtype=np.float32)
    arrays[f"layers.{i}.bias"] = rng.standard_normal(1024, dtype=np.float32)
tmp = path + ".tmp"
with open(tmp, "wb") as f:
    np.savez(f, **arrays)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, path)
print(np.__version__)
"#;

fn python() -> Command {
    let mut command = Command::new("python3");
    if let Ok(path) = std::env::var("BURNPACK_PYTHONPATH") {
        command.env("PYTHONPATH", path);
    }
    command
}

/// NumPy's version, or why there is none.
fn numpy_version() -> Result<String, String> {
    let out = python()
        .args(["-c", "import numpy; print(numpy.__version__)"])
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "python3 has no NumPy ({})",
            err.lines().last().unwrap_or("").trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn write(path: &Path, layers: u64) {
    let status = python()
        .args(["-c", SCRIPT, path.to_str().unwrap(), &layers.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "NumPy could not write {}", path.display());
}

/// Every byte of `bytes` read: the wrapping sum of its 8-byte words (the same in every
/// contender).
fn touch(acc: u64, bytes: &[u8]) -> u64 {
    let (words, rest) = bytes.as_chunks::<8>();
    let acc = words
        .iter()
        .fold(acc, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
    rest.iter()
        .fold(acc, |acc, b| acc.wrapping_add(u64::from(*b)))
}

/// burnpack: every tensor read in file order, kept; returns the checksum and what it kept.
fn burnpack_read_all(source: &NumpySource) -> (u64, Vec<burn::tensor::Bytes>) {
    let mut infos: Vec<_> = source.tensors().iter().collect();
    infos.sort_by_key(|info| info.offset());
    let mut sum = 0u64;
    let mut kept = Vec::with_capacity(infos.len());
    for info in infos {
        let bytes = source.read(info).unwrap();
        sum = touch(sum, &bytes);
        kept.push(bytes);
    }
    (sum, kept)
}

/// candle's bytes of a CPU tensor (f32, contiguous), summed.
fn candle_f32_bytes(acc: u64, t: &candle_core::Tensor) -> u64 {
    let (storage, layout) = t.storage_and_layout();
    assert!(layout.is_contiguous() && layout.start_offset() == 0);
    match &*storage {
        candle_core::Storage::Cpu(cpu) => {
            let values = cpu.as_slice::<f32>().unwrap();
            touch(acc, bytemuck::cast_slice(values))
        }
        _ => unreachable!("CPU only"),
    }
}

fn child(who: &str, file: &Path, mib: u64) {
    match who {
        "from-memory" => {
            // Untimed: the file's bytes in memory.
            let buffer = burnpack::source::bytes_from_vec(std::fs::read(file).unwrap());
            let meter = common::Meter::start();
            let start = Instant::now();
            let source = NumpySource::from_bytes(buffer, &Default::default()).unwrap();
            let (sum, kept) = burnpack_read_all(&source);
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop(kept);
        }
        "burnpack" => {
            let meter = common::Meter::start();
            let start = Instant::now();
            let source = NumpySource::open(file).unwrap();
            let (sum, kept) = burnpack_read_all(&source);
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop(kept);
        }
        "candle" => {
            let meter = common::Meter::start();
            let start = Instant::now();
            let tensors = candle_core::Tensor::read_npz(file).unwrap();
            let mut sum = 0u64;
            for (_, t) in &tensors {
                sum = candle_f32_bytes(sum, t);
            }
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            assert_eq!(tensors.len() as u64, layers(mib) * 2);
            drop(tensors);
        }
        "candle-lazy" => {
            let meter = common::Meter::start();
            let start = Instant::now();
            let npz = candle_core::npy::NpzTensors::new(file).unwrap();
            let mut sum = 0u64;
            let mut kept = Vec::new();
            for name in names(layers(mib)) {
                let t = npz.get(&name).unwrap().unwrap();
                sum = candle_f32_bytes(sum, &t);
                kept.push(t);
            }
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            assert_eq!(npz.names().len(), kept.len());
            drop(kept);
        }
        _ => panic!("unknown contender {who}"),
    }
}

/// Runs this program as a child measuring `who`.
fn run(who: &str, file: &Path, mib: u64) -> common::Sample {
    let args = [who, file.to_str().unwrap(), &mib.to_string()].map(str::to_string);
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.arg("--child").args(&args);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::run_command(command, &args)
}

/// Runs each contender once (untimed) and returns its `SUM` line's value.
fn sums(file: &Path, mib: u64) -> Vec<String> {
    CONTENDERS
        .iter()
        .map(|who| {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--child", who, file.to_str().unwrap(), &mib.to_string()])
                .output()
                .unwrap();
            assert!(out.status.success(), "{who} failed: {out:?}");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("SUM ").map(str::to_string))
                .unwrap_or_else(|| panic!("{who} printed no sum"))
        })
        .collect()
}

/// `contender | time | x from-memory | x candle | CPU | peak RSS rise | anon` rows.
fn print_rows(label: &str, samples: &[Vec<common::Sample>]) {
    let candle = CONTENDERS.iter().position(|c| *c == "candle").unwrap();
    let ratio_to = |i: usize, r: usize| -> String {
        let ratios: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[r])
            .map(|(s, reference)| s.time.as_secs_f64() / reference.time.as_secs_f64())
            .collect();
        format!("{:.2}", common::median_ratio(ratios))
    };
    for (i, who) in CONTENDERS.iter().enumerate() {
        let times: Vec<Duration> = samples[i].iter().map(|s| s.time).collect();
        let cpu = common::median(samples[i].iter().map(|s| s.cpu).collect());
        let rise = samples[i]
            .iter()
            .map(|s| s.peak_kib.saturating_sub(s.base_kib))
            .max()
            .unwrap_or(0);
        let anon = samples[i]
            .iter()
            .filter_map(|s| s.anon_kib)
            .max()
            .unwrap_or(0);
        println!(
            "| {label} | {who} | {} | {} | {} | {:.0} | {} MiB | {} MiB |",
            common::spread(&times),
            ratio_to(i, 0),
            ratio_to(i, candle),
            cpu.as_secs_f64() * 1e3,
            rise >> 10,
            anon >> 10
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], Path::new(&args[3]), args[4].parse().unwrap());
        return;
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let mib = common::env_or("BURNPACK_BENCH_MIB", 1024) as u64;
    let numpy = match numpy_version() {
        Ok(v) => v,
        Err(why) => {
            println!("bench-npz: skipped, {why} (set BURNPACK_PYTHONPATH to where NumPy is)");
            return;
        }
    };
    // The file in a folder of its own (evicted whole before each cold child).
    let (_temp, dir): (Option<tempfile::TempDir>, PathBuf) =
        match std::env::var("BURNPACK_BENCH_DIR") {
            Ok(d) => {
                let dir = Path::new(&d).join("bench-npz-files");
                std::fs::create_dir_all(&dir).unwrap();
                (None, dir)
            }
            Err(_) => {
                let t = tempfile::tempdir().unwrap();
                let dir = t.path().to_path_buf();
                (Some(t), dir)
            }
        };
    let warm_memory = std::env::var_os("BURNPACK_BENCH_COLD_MEMORY").is_none();
    let layers = layers(mib);
    let file = dir.join(format!("bench-{mib}m.npz"));
    if !file.exists() {
        let t = Instant::now();
        write(&file, layers);
        eprintln!(
            "wrote {} with NumPy {numpy} in {:.1?}",
            file.display(),
            t.elapsed()
        );
    }
    let len = std::fs::metadata(&file).unwrap().len();

    // Untimed: how burnpack serves the tensors, and every contender's sum.
    let source = NumpySource::open(&file).unwrap();
    let copied: Vec<_> = source
        .tensors()
        .iter()
        .filter(|info| source.copy_reason(info).is_some())
        .collect();
    let copies = copied.len();
    let copied_mib = copied.iter().map(|info| info.len()).sum::<u64>() >> 20;
    let example = source
        .tensors()
        .iter()
        .find_map(|info| source.copy_reason(info));
    drop(source);
    println!(
        "{}: {} tensors ({layers} layers), {len} bytes; NumPy {numpy}; burnpack copies {copies} of them ({copied_mib} MiB){}",
        file.display(),
        layers * 2,
        example.map_or_else(String::new, |r| format!(" (e.g. {r:?})")),
    );
    let sums = sums(&file, mib);
    let agree = sums.iter().all(|s| *s == sums[0]);
    let listed: Vec<String> = CONTENDERS
        .iter()
        .zip(&sums)
        .map(|(who, sum)| format!("{who} {sum}"))
        .collect();
    println!(
        "sums {}: {}",
        if agree { "agree" } else { "DISAGREE" },
        listed.join(", ")
    );
    println!();
    println!(
        "| file (cache) | contender | time, ms: median (min-max) | x from-memory | x candle | CPU, ms | peak RSS rise | anon |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for cold in [false, true] {
        let (samples, _) = common::interleave(runs, CONTENDERS.len(), |i| {
            if cold {
                common::evict_dir(&dir);
            } else {
                common::read_sequentially(&file);
            }
            // Fresh pages for what the load will fill (see `common::warm_memory`: this VM
            // gives freed memory back to its host, whose faults then land in the next
            // child), the same for every contender, warm and cold.
            if warm_memory {
                common::warm_memory(&dir, 2 * len);
            }
            run(CONTENDERS[i], &file, mib)
        });
        print_rows(
            &format!(
                "npz, {} MiB ({})",
                len >> 20,
                if cold { "cold" } else { "warm" }
            ),
            &samples,
        );
    }
    if !agree {
        std::process::exit(1);
    }
}
