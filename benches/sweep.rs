//! How cost grows with the model, up to models larger than memory: 1, 4, 16 and 32 GiB
//! (`BURNPACK_SWEEP_SIZES`, GiB) of `Linear(4096, 4096)` layers (64 MiB weights).
//!
//! - **save (deferred)**: `Writer::write_to_file` (atomic, fsync) of entries whose bytes are
//!   produced on demand, as a GPU module's are: each provider copies its layer's values into a
//!   fresh buffer when the writer reaches it (a device-to-host download's cost and memory),
//!   so no more than the writer threads' chunks exist at once, whatever the model's size.
//! - **load + read (cold)**: `load_pack` (mapped) into a fresh, lazily initialized Burn model,
//!   then every parameter taken out of it and its bytes summed (`common::consume_all`: no copy
//!   where the load made none); the file dropped from the page cache first.
//!   Past the machine's memory, pages already read are evicted by the kernel as new ones come.
//! - **Burn 0.22** `save_file` (of the same model built in memory) and `load_file` + read,
//!   each in a child limited to the machine's memory less 1 GiB (`RLIMIT_AS`), up to the
//!   first size where they fail, which the table says.
//! - **convert**: `safetensors_to_burnpack` of a safetensors file of `BURNPACK_SWEEP_CONVERT`
//!   GiB (default 16; written beforehand by streaming), file to file, fsync.
//!
//! Every measurement runs in a child (peak resident size reset first); wall time, throughput
//! (GiB/s of the file), CPU (user + system, every thread), peak RSS during the operation
//! (mapped file pages included) and the anonymous memory it added. `BURNPACK_BENCH_RUNS`
//! rounds (default 3) at sizes up to 4 GiB, one above; contenders interleaved.
//!
//! ```sh
//! cargo bench --features store --bench sweep
//! ```
//!
//! Env: `BURNPACK_SWEEP_SIZES` (default `1,4,16,32`), `BURNPACK_SWEEP_CONVERT` (default 16,
//! 0: skip), `BURNPACK_BENCH_RUNS`, `BURNPACK_BENCH_DIR`.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Bytes, DType, Device};
use burnpack::interop::safetensors::safetensors_to_burnpack;
use burnpack::module::PackModule;
use burnpack::write::{Entry, Writer};

const WIDTH: usize = 4096;
const LAYER_BYTES: u64 = (WIDTH * WIDTH * 4) as u64;

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn layers(gib: u64) -> usize {
    (gib * (1 << 30) / LAYER_BYTES) as usize
}

fn stack(gib: u64, device: &Device, initializer: Option<Initializer>) -> Stack {
    let mut config = LinearConfig::new(WIDTH, WIDTH);
    if let Some(init) = initializer {
        config = config.with_initializer(init);
    }
    Stack {
        layers: (0..layers(gib)).map(|_| config.init(device)).collect(),
    }
}

/// Every parameter of the model as deferred entries: each weight's bytes copied from a shared
/// template (its first bytes the layer's number) into a fresh buffer when the writer asks.
fn deferred_entries(gib: u64) -> Vec<Entry> {
    let template: std::sync::Arc<Vec<f32>> =
        std::sync::Arc::new((0..WIDTH * WIDTH).map(|k| (k % 1021) as f32).collect());
    let mut entries = Vec::new();
    for i in 0..layers(gib) {
        let t = template.clone();
        entries.push(Entry::deferred(
            format!("layers.{i}.weight"),
            DType::F32,
            vec![WIDTH, WIDTH],
            LAYER_BYTES,
            move || {
                // A download into fresh host memory: one copy of the layer's bytes.
                let mut out: Vec<u8> = Vec::with_capacity(LAYER_BYTES as usize);
                out.extend_from_slice(bytemuck::cast_slice(&t));
                out[..8].copy_from_slice(&(i as u64).to_le_bytes());
                Ok(Bytes::from_bytes_vec(out))
            },
        ));
        let bias: Vec<u8> = (0..WIDTH)
            .flat_map(|k| (k as f32 * 0.5).to_le_bytes())
            .collect();
        entries.push(Entry::resident(
            format!("layers.{i}.bias"),
            DType::F32,
            vec![WIDTH],
            Bytes::from_bytes_vec(bias),
        ));
    }
    entries
}

/// Caps this process's address space at the machine's memory less 1 GiB, so that a contender
/// that needs more fails with an allocation error instead of calling the OOM killer.
fn cap_memory() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    let limit = (total_kib << 10).saturating_sub(1 << 30);
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: a plain system call with a pointer to a local struct.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &rlimit);
    }
}

/// A safetensors file of `gib` GiB of f32 weights, written by streaming (header, then each
/// tensor), so that writing it needs no more memory than one tensor.
fn write_safetensors(path: &Path, gib: u64) {
    let n = layers(gib);
    let mut header = String::from("{");
    for i in 0..n {
        let (start, end) = (i as u64 * LAYER_BYTES, (i as u64 + 1) * LAYER_BYTES);
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"layers.{i}.weight\":{{\"dtype\":\"F32\",\"shape\":[{WIDTH},{WIDTH}],\"data_offsets\":[{start},{end}]}}"
        ));
    }
    header.push('}');
    while !(8 + header.len()).is_multiple_of(8) {
        header.push(' ');
    }
    let mut file = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path).unwrap());
    file.write_all(&(header.len() as u64).to_le_bytes())
        .unwrap();
    file.write_all(header.as_bytes()).unwrap();
    let layer: Vec<u8> = (0..WIDTH * WIDTH)
        .flat_map(|k| ((k % 1021) as f32).to_le_bytes())
        .collect();
    for _ in 0..n {
        file.write_all(&layer).unwrap();
    }
    file.into_inner().unwrap().sync_all().unwrap();
}

/// Fresh pages for up to 4 GiB of what the operation fills (see `common::warm_memory`: on
/// this project's VMs memory freed a while ago costs a host fault on its next use), the same
/// for every contender; past 4 GiB, the kernel recycles the pages it reclaims as it goes.
fn warm(dir: &Path, gib: u64) {
    common::warm_memory(dir, gib.min(4) << 30);
}

fn child(op: &str, gib: u64, dir: &Path) {
    let device = Device::flex();
    let pack = dir.join(format!("sweep-{gib}g.bpk"));
    let burn_file = dir.join(format!("sweep-{gib}g-burn.bpk"));
    match op {
        "save" => {
            let entries = deferred_entries(gib);
            warm(dir, gib);
            let meter = common::Meter::start();
            let start = Instant::now();
            Writer::new(entries).write_to_file(&pack).unwrap();
            meter.report(start.elapsed());
        }
        "load-read" | "burn-load-read" => {
            if op.starts_with("burn") {
                cap_memory();
            }
            let target = stack(gib, &device, None);
            common::evict_dir(dir);
            warm(dir, gib);
            let meter = common::Meter::start();
            let start = Instant::now();
            let model = if op.starts_with("burn") {
                target.try_load_file(&burn_file).unwrap()
            } else {
                target.load_pack(&pack).unwrap()
            };
            std::hint::black_box(common::consume_all(model));
            meter.report(start.elapsed());
        }
        "burn-save" => {
            cap_memory();
            let model = stack(gib, &device, Some(Initializer::Constant { value: 0.5 }));
            std::hint::black_box(common::read_all(&model));
            warm(dir, gib);
            let meter = common::Meter::start();
            let start = Instant::now();
            model.save_file(&burn_file).unwrap();
            meter.report(start.elapsed());
        }
        "convert" => {
            let source = dir.join(format!("sweep-{gib}g.safetensors"));
            let out = dir.join(format!("sweep-{gib}g-converted.bpk"));
            let _ = std::fs::remove_file(&out);
            common::evict_dir(dir);
            warm(dir, gib);
            let meter = common::Meter::start();
            let start = Instant::now();
            safetensors_to_burnpack(&source, &out).unwrap();
            meter.report(start.elapsed());
        }
        other => panic!("{other}"),
    }
}

fn row(gib: u64, op: &str, who: &str, samples: &[common::Sample]) {
    let times: Vec<Duration> = samples.iter().map(|s| s.time).collect();
    let median = common::median(times.clone()).as_secs_f64();
    let cpu = common::median(samples.iter().map(|s| s.cpu).collect());
    let peak = samples.iter().map(|s| s.peak_kib).max().unwrap();
    let anon = samples.iter().filter_map(|s| s.anon_kib).max().unwrap_or(0);
    println!(
        "| {gib} GiB | {op} | {who} | {} | {:.2} | {:.0} | {} MiB | {} MiB |",
        common::spread(&times),
        gib as f64 / median,
        cpu.as_secs_f64() * 1e3,
        peak >> 10,
        anon >> 10
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], args[3].parse().unwrap(), Path::new(&args[4]));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let sizes: Vec<u64> = std::env::var("BURNPACK_SWEEP_SIZES")
        .unwrap_or_else(|_| "1,4,16,32".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let convert = common::env_or("BURNPACK_SWEEP_CONVERT", 16) as u64;
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 3);
    let dir = common::bench_dir();
    let dir_arg = dir.path().to_str().unwrap().to_string();
    println!(
        "| model | operation | contender | time, ms: median (min-max) | GiB/s | CPU, ms | peak RSS | anon added |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let run = |op: &str, gib: u64| {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.args(["--child", op, &gib.to_string(), &dir_arg]);
        common::try_run_command(command)
    };
    let mut burn_fails: Option<String> = None;
    for &gib in &sizes {
        let rounds = if gib <= 4 { runs } else { 1 };
        let mut ours = (Vec::new(), Vec::new());
        let mut burn = (Vec::new(), Vec::new());
        let mut failure = None;
        for _ in 0..rounds {
            ours.0.push(run("save", gib).unwrap());
            ours.1.push(run("load-read", gib).unwrap());
            if burn_fails.is_none() && failure.is_none() {
                match run("burn-save", gib).and_then(|s| Ok((s, run("burn-load-read", gib)?))) {
                    Ok((save, load)) => {
                        burn.0.push(save);
                        burn.1.push(load);
                    }
                    Err(e) => failure = Some(e),
                }
            }
            let _ = std::fs::remove_file(dir.path().join(format!("sweep-{gib}g-burn.bpk")));
        }
        let _ = std::fs::remove_file(dir.path().join(format!("sweep-{gib}g.bpk")));
        row(gib, "save (deferred entries)", "burnpack", &ours.0);
        if !burn.0.is_empty() {
            row(gib, "save", "burn-save-file", &burn.0);
        }
        row(gib, "cold: load + read all", "burnpack (mapped)", &ours.1);
        if !burn.1.is_empty() {
            row(gib, "cold: load + read all", "burn-load-file", &burn.1);
        }
        if let Some(e) = failure {
            println!("| {gib} GiB | save, load | Burn 0.22 | fails: {e} | | | | |");
            burn_fails = Some(e);
        }
    }
    if convert > 0 {
        let source = dir.path().join(format!("sweep-{convert}g.safetensors"));
        write_safetensors(&source, convert);
        let sample = run("convert", convert).unwrap();
        row(
            convert,
            "convert safetensors -> pack (cold)",
            "burnpack",
            &[sample],
        );
    }
}
