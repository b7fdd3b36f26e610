//! Loading a `torch.save` file (1 GiB by default: square 1024 `nn.Linear` layers with biases,
//! in the zip layout PyTorch 2 writes, storages aligned to 64 bytes, written by the tests' own
//! writer) into the same Burn model with PyTorch's conventions, every parameter read back:
//! this crate's `PytorchSource` beside burn-store's `PytorchStore`, the same read of a model
//! already in memory (the reference: what the load cannot beat) and one pass of 8 MiB reads
//! over the file (the disk's part), with the page cache warm, then cold (the file dropped
//! from it before each child). Every measurement runs in a child process (peak resident size
//! reset first); contenders interleaved, the order rotated each round; medians (min-max),
//! ratios the median of per-round ratios to the reference. "anon" is the anonymous memory the
//! load left the process with (the model's own copy, if it made one); the rest of a peak is
//! the mapping's page-cache pages.
//!
//! ```sh
//! cargo bench --bench pytorch
//! ```
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_LAYERS` (default 256: 1 GiB),
//! `BURNPACK_BENCH_DIR`.

mod common;
#[path = "../tests/common/torch.rs"]
#[allow(dead_code)]
mod torch;

use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burn_store::{ModuleSnapshot, PytorchStore};
use burnpack::interop::pytorch::PytorchSource;
use burnpack::{LoadOptions, PackModule};

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn stack(layers: usize, device: &Device) -> Stack {
    Stack {
        layers: (0..layers)
            .map(|_| LinearConfig::new(1024, 1024).init(device))
            .collect(),
    }
}

/// `layers` PyTorch `nn.Linear(1024, 1024)` state: `layers.{i}.weight` `[out, in]` and
/// `layers.{i}.bias`, each its own storage.
fn write(path: &Path, layers: usize) {
    let mut storages = Vec::with_capacity(2 * layers);
    let mut views = Vec::with_capacity(2 * layers);
    for i in 0..layers {
        let weight: Vec<f32> = (0..1024 * 1024)
            .map(|k| ((k + i) % 97) as f32 / 97.0)
            .collect();
        views.push(torch::View::whole(
            &format!("layers.{i}.weight"),
            storages.len(),
            &[1024, 1024],
        ));
        storages.push(torch::StorageSpec::f32(&weight));
        views.push(torch::View::whole(
            &format!("layers.{i}.bias"),
            storages.len(),
            &[1024],
        ));
        storages.push(torch::StorageSpec::f32(&vec![i as f32; 1024]));
    }
    torch::save(path, &storages, &views);
}

fn child(who: &str, file: &Path, layers: usize) {
    let device = Device::flex();
    let target = stack(layers, &device);
    if who == "in-memory" {
        // The same model already in memory: reading it is what no load can beat.
        common::read_all(&target);
        let meter = common::Meter::start();
        let start = Instant::now();
        std::hint::black_box(common::read_all(&target));
        meter.report(start.elapsed());
        return;
    }
    if who == "sequential-read" {
        let meter = common::Meter::start();
        let start = Instant::now();
        std::hint::black_box(common::read_sequentially(file));
        meter.report(start.elapsed());
        return;
    }
    let meter = common::Meter::start();
    let start = Instant::now();
    let model = match who {
        "burnpack" => {
            let source = PytorchSource::open(file).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new().pytorch(true))
                .unwrap()
        }
        "pytorch-store" => {
            let mut model = target;
            model.load_from(&mut PytorchStore::from_file(file)).unwrap();
            model
        }
        _ => panic!("{who}"),
    };
    std::hint::black_box(common::read_all(&model));
    meter.report(start.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], Path::new(&args[3]), args[4].parse().unwrap());
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let layers = common::env_or("BURNPACK_BENCH_LAYERS", 256);
    let dir = common::bench_dir();
    let file = dir.path().join("model.pt");
    write(&file, layers);
    let size = std::fs::metadata(&file).unwrap().len();
    println!(
        "| cache | contender | time, ms: median (min-max) | x in-memory read (median of rounds) | CPU, ms | peak RSS rise | anon |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let contenders = ["in-memory", "burnpack", "pytorch-store", "sequential-read"];
    let file_arg = file.to_str().unwrap().to_string();
    let layers_arg = layers.to_string();
    for cold in [false, true] {
        let (samples, ratios) = common::interleave(runs, contenders.len(), |i| {
            if cold {
                common::evict_dir(dir.path());
            } else {
                // Warm: the file in the page cache.
                common::read_sequentially(&file);
            }
            common::run_child(&[contenders[i], &file_arg, &layers_arg])
        });
        common::print_rows(
            &format!(
                "{} ({} MiB)",
                if cold { "cold" } else { "warm" },
                size >> 20
            ),
            &contenders,
            &samples,
            &ratios,
            true,
        );
    }
}
