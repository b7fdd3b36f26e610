//! Loading a model saved by Burn 0.21 (`NamedMpkFileRecorder`, `.mpk`, and
//! `NamedMpkGzFileRecorder`, `.mpk.gz`, of 1 GiB by default) into Burn 0.22 with
//! `LegacySource`, beside Burn 0.21's own recorder loading the same file into the same model
//! (run by `tools/legacy-fixtures`, which also writes the files; the reference), and one pass
//! of 8 MiB reads over the file (the disk's part of any load). Every measurement runs in a child process (peak resident
//! size reset first), every parameter read back; contenders interleaved, the order rotated
//! each round; medians (min-max), ratios the median of per-round ratios to the reference.
//!
//! ```sh
//! cargo build --release --manifest-path tools/legacy-fixtures/Cargo.toml
//! BURNPACK_LEGACY_FIXTURES=tools/legacy-fixtures/target/release/legacy-fixtures \
//!   cargo bench --bench legacy
//! ```
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_LAYERS` (square 1024 layers,
//! default 256: 1 GiB), `BURNPACK_BENCH_DIR`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::interop::burn_record::LegacySource;
use burnpack::module::{LoadOptions, PackModule};

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn child(file: &Path, layers: usize) {
    let device = Device::flex();
    let target = Stack {
        layers: (0..layers)
            .map(|_| LinearConfig::new(1024, 1024).init(&device))
            .collect(),
    };
    let meter = common::Meter::start();
    let start = Instant::now();
    let source = LegacySource::open(file).unwrap();
    let model = target
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    std::hint::black_box(common::read_all(&model));
    meter.report(start.elapsed());
}

fn sequential_read(file: &Path) {
    let meter = common::Meter::start();
    let start = Instant::now();
    std::hint::black_box(common::read_sequentially(file));
    meter.report(start.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let file = Path::new(&args[3]);
        match args[2].as_str() {
            "burnpack" => child(file, args[4].parse().unwrap()),
            _ => sequential_read(file),
        }
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let Some(fixtures) = std::env::var_os("BURNPACK_LEGACY_FIXTURES") else {
        println!(
            "BURNPACK_LEGACY_FIXTURES is not set: build tools/legacy-fixtures (Burn 0.21) and \
             name its binary (see benches/legacy.rs)"
        );
        return;
    };
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let layers = common::env_or("BURNPACK_BENCH_LAYERS", 256);
    let dir = common::bench_dir();
    let status = Command::new(&fixtures)
        .args(["big", dir.path().to_str().unwrap(), &layers.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "the fixture writer failed");
    println!(
        "| file | contender | time, ms: median (min-max) | x reference (median of rounds) | CPU, ms | peak RSS rise |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    // The reference is Burn 0.21's own recorder on the same file.
    let contenders = ["burn-0.21", "burnpack", "sequential-read"];
    for name in ["big.mpk", "big.mpk.gz"] {
        let file = dir.path().join(name);
        let size = std::fs::metadata(&file).unwrap().len();
        let file_arg = file.to_str().unwrap().to_string();
        let layers_arg = layers.to_string();
        let (samples, ratios) = common::interleave(runs, contenders.len(), |i| {
            let args = [contenders[i], file_arg.as_str(), layers_arg.as_str()];
            if contenders[i] == "burn-0.21" {
                let mut command = Command::new(&fixtures);
                command.args(["load", &file_arg, &layers_arg]);
                common::run_command(command, &args)
            } else {
                common::run_child(&args)
            }
        });
        common::print_rows(
            &format!("{name} ({} MiB)", size >> 20),
            &contenders,
            &samples,
            &ratios,
            false,
        );
    }
}
