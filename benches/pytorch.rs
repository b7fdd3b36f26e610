//! Loading a `torch.save` file (1 GiB by default: square 1024 `nn.Linear` layers with biases,
//! in the zip layout PyTorch 2 writes, storages aligned to 64 bytes, written by the tests' own
//! writer) into the same Burn model with PyTorch's conventions, every parameter read back:
//! this crate's `PytorchSource` beside burn-store's `PytorchStore`, the reference, and one
//! pass of 8 MiB reads over the file (the disk's part), with the page cache warm, then cold
//! (the file dropped from it before each child).
//!
//! The reference (`from-memory`) is the load's work from bytes already in memory: the file is
//! read into memory before the timer starts, and each parameter is built from a window of that
//! buffer at the offset where `PytorchSource` found its tensor, as the load builds it from the
//! mapping (`TensorData::from_bytes` with the stored shape, `Tensor::from_data`, the weight's
//! transpose, `transform_for_load`), then read back the same way. What the load adds: opening
//! the file (the pickle), the mapping's page faults, the loader's own checks per parameter.
//! The reference reads the file before its timer, so its cold rows are warm ones too.
//!
//! Every measurement runs in a child process (peak resident size reset first); contenders
//! interleaved, the order rotated each round; medians (min-max), ratios the median of
//! per-round ratios to the reference. "anon" is the anonymous memory the load left the
//! process with (the model's own copy, if it made one); the rest of a peak is the mapping's
//! page-cache pages.
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

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_store::{ModuleSnapshot, PytorchStore};
use burnpack::interop::pytorch::PytorchSource;
use burnpack::module::{LoadOptions, PackModule};
use common::stack;

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

/// A tensor's place in the file: start, end, stored shape (`[out, in]` for a weight).
type Place = (usize, usize, Vec<usize>);

/// The load's work per parameter (`src/module/apply.rs` with `LoadOptions::pytorch`), from a
/// buffer holding the file's bytes instead of its mapping: a window of the buffer,
/// `TensorData::from_bytes` with the stored shape, `Tensor::from_data` with the dtype, the
/// transpose of a `Linear` weight (by strides), `transform_for_load`. Parameters come in the
/// module's order: each layer's weight (rank 2) and bias (rank 1).
struct FromMemory {
    buffer: burn::tensor::Bytes,
    weights: std::vec::IntoIter<Place>,
    biases: std::vec::IntoIter<Place>,
}

impl ModuleMapper for FromMemory {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let place = if D == 2 {
            self.weights.next()
        } else {
            self.biases.next()
        };
        let (start, end, shape) = place.unwrap();
        let bytes = self.buffer.view(start, end).unwrap();
        let data = TensorData::from_bytes(bytes, shape, DType::F32);
        let tensor = Tensor::<D>::from_data(data, (&param.lazy_device(), DType::F32));
        let tensor = if D == 2 { tensor.transpose() } else { tensor };
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

fn child(who: &str, file: &Path, layers: usize) {
    let device = Device::flex();
    let target = stack(layers, &device);
    if who == "from-memory" {
        // Untimed: where each tensor is (as the load finds it), and the file's bytes in memory.
        let source = PytorchSource::open(file).unwrap();
        let place = |name: String| {
            let info = source.tensor(&name).unwrap();
            let offset = usize::try_from(info.offset()).unwrap();
            let end = offset + usize::try_from(info.len()).unwrap();
            (offset, end, info.shape().to_vec())
        };
        let weights: Vec<_> = (0..layers)
            .map(|i| place(format!("layers.{i}.weight")))
            .collect();
        let biases: Vec<_> = (0..layers)
            .map(|i| place(format!("layers.{i}.bias")))
            .collect();
        drop(source);
        let buffer = burn::tensor::Bytes::from_shared(
            bytes::Bytes::from(std::fs::read(file).unwrap()),
            burn::tensor::AllocationProperty::Other,
        );
        let mut mapper = FromMemory {
            buffer,
            weights: weights.into_iter(),
            biases: biases.into_iter(),
        };
        let meter = common::Meter::start();
        let start = Instant::now();
        let model = target.map(&mut mapper);
        std::hint::black_box(common::read_all(&model));
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
        "| cache | contender | time, ms: median (min-max) | x from-memory (median of rounds) | CPU, ms | peak RSS rise | anon |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let contenders = [
        "from-memory",
        "burnpack",
        "pytorch-store",
        "sequential-read",
    ];
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
