//! Upload throughput onto a wgpu device, side by side with Burn 0.22 in one run.
//!
//! `cargo bench --features wgpu --bench gpu` prints a markdown table. Each measurement runs in
//! a child process of this binary (one load per child, after the device is created and warmed
//! up), so peak resident memory (`VmHWM`) is that load's own. The file is in the page cache
//! (written just before); the timer stops once the device has finished (`Device::sync`).
//!
//! Contenders: burnpack's `load_pack` (mapped file), Burn's `load_file`, burn-store's
//! `BurnpackStore`, and the floor: `Tensor::from_data` from values already in host memory.
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 3), `BURNPACK_BENCH_GPU_MIB` (total size, default 256,
//! in 64 MiB tensors: lavapipe refuses buffers above 128 MiB), `BURNPACK_BENCH_GPU`
//! (`default`, `discrete` or `integrated`), `BURNPACK_BENCH_DIR` (default `.`).

mod common;
#[path = "../tests/common/lazy.rs"]
mod lazy;

use std::path::Path;
use std::time::{Duration, Instant};

use burn::module::{Module, Param, ParamId};
use burn::tensor::{Device, DeviceKind, Tensor, TensorData};
use burn_store::{BurnpackStore, ModuleSnapshot};
use burnpack::module::PackModule;

const ROWS: usize = 4096;
const COLS: usize = 4096; // 64 MiB of f32 per tensor

#[derive(Module, Debug)]
struct Big {
    layers: Vec<Param<Tensor<2>>>,
}

fn value(layer: usize, i: usize) -> f32 {
    (layer * 31 + i % 977) as f32 * 0.5
}

fn layer_data(layer: usize) -> TensorData {
    TensorData::new(
        (0..ROWS * COLS)
            .map(|i| value(layer, i))
            .collect::<Vec<f32>>(),
        [ROWS, COLS],
    )
}

fn layers() -> usize {
    (common::env_or("BURNPACK_BENCH_GPU_MIB", 256) / 64).max(1)
}

fn device() -> Device {
    let kind = match std::env::var("BURNPACK_BENCH_GPU").as_deref() {
        Ok("discrete") => DeviceKind::DiscreteGpu(0),
        Ok("integrated") => DeviceKind::IntegratedGpu(0),
        _ => DeviceKind::DefaultDevice,
    };
    Device::wgpu(kind)
}

/// A model whose parameters are not yet initialized: loading fills them without running an
/// initializer, so the timed work is the load alone.
fn lazy(device: &Device) -> Big {
    Big {
        layers: lazy::lazy_matrices(layers(), ROWS, COLS, device),
    }
}

/// Checks the last two rows of every layer against the values written.
fn check(model: &Big) {
    for (l, p) in model.layers.iter().enumerate() {
        let back: Vec<f32> = p
            .val()
            .slice([ROWS - 2..ROWS, 0..COLS])
            .into_data()
            .try_to_vec()
            .unwrap();
        let expected: Vec<f32> = ((ROWS - 2) * COLS..ROWS * COLS)
            .map(|i| value(l, i))
            .collect();
        assert!(back == expected, "layers.{l}: values differ on the device");
    }
}

/// One load in this process, reported with `common::report`.
fn child(who: &str, path: &Path) {
    let device = device();
    // Adapter creation and shader compilation are not upload time.
    Tensor::<1>::from_data([0.0f32], &device).into_data();
    let target = lazy(&device);
    let (loaded, time) = match who {
        "floor" => {
            let data: Vec<TensorData> = (0..layers()).map(layer_data).collect();
            let start = Instant::now();
            let layers = data
                .into_iter()
                .map(|d| Param::initialized(ParamId::new(), Tensor::from_data(d, &device)))
                .collect::<Vec<_>>();
            let model = Big { layers };
            model.layers.iter().for_each(|p| drop(p.val()));
            device.sync().unwrap();
            (model, start.elapsed())
        }
        _ => {
            let start = Instant::now();
            let model = match who {
                "burnpack" => target.load_pack(path).unwrap(),
                "burn-load-file" => target.try_load_file(path).unwrap(),
                "burnpack-store" => {
                    let mut t = target;
                    t.load_from(&mut BurnpackStore::from_file(path)).unwrap();
                    t
                }
                other => panic!("unknown contender {other}"),
            };
            // Lazy parameters that a loader left alone would be initialized here, not later.
            model.layers.iter().for_each(|p| drop(p.val()));
            device.sync().unwrap();
            (model, start.elapsed())
        }
    };
    // Reported before the check, whose read-back is not part of the load; a failed check
    // still fails the child, and so the benchmark.
    common::report(time);
    check(&loaded);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], Path::new(&args[3]));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 3);
    let dir = common::bench_dir();
    let path = dir.path().join("gpu.bpk");
    // One file for every contender, written on the CPU: burnpack files are Burn's format.
    let flex = Device::flex();
    let model = Big {
        layers: (0..layers())
            .map(|l| Param::initialized(ParamId::new(), Tensor::from_data(layer_data(l), &flex)))
            .collect(),
    };
    let size = model.save_pack(&path).unwrap();
    drop(model);
    std::hint::black_box(std::fs::read(&path).unwrap()); // into the page cache
    let mib = size as f64 / f64::from(1u32 << 20);
    println!(
        "{} tensors of 64 MiB ({mib:.0} MiB) onto {:?}, median of {runs}",
        layers(),
        device()
    );
    println!();
    println!("| contender | median time | throughput | peak RSS |");
    println!("|---|---:|---:|---:|");
    let contenders = ["floor", "burnpack", "burn-load-file", "burnpack-store"];
    let mut results: Vec<Vec<(Duration, u64)>> = vec![Vec::new(); contenders.len()];
    // Round robin, so drift in the machine's state spreads over every contender.
    for _ in 0..runs {
        for (who, out) in contenders.iter().zip(&mut results) {
            let sample = common::run_child(&[who, path.to_str().unwrap()]);
            out.push((sample.time, sample.peak_kib));
        }
    }
    for (who, mut out) in contenders.iter().zip(results) {
        out.sort();
        let (time, _) = out[out.len() / 2];
        let peak = out.iter().map(|(_, p)| *p).max().unwrap();
        let label = match *who {
            "floor" => "floor: `Tensor::from_data` from host memory",
            "burnpack" => "burnpack `load_pack` (mapped)",
            "burn-load-file" => "Burn 0.22 `load_file`",
            _ => "burn-store `BurnpackStore`",
        };
        println!(
            "| {label} | {:.1} ms | {:.2} GiB/s | {} MiB |",
            time.as_secs_f64() * 1e3,
            size as f64 / time.as_secs_f64() / f64::from(1u32 << 30),
            peak / 1024
        );
    }
}
