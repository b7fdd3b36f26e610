//! Every format a Burn user loads, side by side, warm and cold: the same model (square 1024
//! `Linear` layers with biases, 512 MiB by default) in each file, loaded into a fresh Burn
//! model on flex and every parameter read back, beside one pass of 8 MiB reads over the same
//! file(s) (the disk's part of any load: each format's reference), and burn-store's loader
//! where it has one.
//!
//! Every parameter is read back by taking it out of the model (`Param::into_value`, then
//! `into_data`, summed): zero-copy where the load left the tensor zero-copy, so a row is the
//! loader's cost and the bytes' (Burn's `val().into_data()` would add one copy per parameter
//! to every row alike).
//!
//! Files, each written by its format's writer: a pack (`save_pack`), one safetensors file and
//! 4 safetensors shards with an index (`save_safetensors`), a `torch.save` zip with the
//! weights in PyTorch's `[out, in]` layout (loaded with `LoadOptions::pytorch`: each weight
//! transposed by strides, or laid out at load with `LoadOptions::contiguous`), the same with views (a layer's weight and bias two views of one
//! storage), and, where `BURNPACK_LEGACY_FIXTURES` names the built `tools/legacy-fixtures`
//! binary, a Burn 0.21 `.mpk` record (Burn 0.21's `NamedMpkFileRecorder`). Where `python3`
//! imports `numpy` and `onnx` (from `BURNPACK_PYTHONPATH` if set), an `.npz` written by
//! `np.savez` (stored members) and an ONNX model whose initializers are in an external data
//! file (`onnx.save_model(.., save_as_external_data=True)`), each with the same tensors (values
//! drawn by NumPy), loaded as stored (`NumpySource`, `OnnxSource`) beside the pass of reads and
//! `read-into-memory` (the files read whole into memory: what a loader that reads before it
//! parses pays).
//!
//! A contender named `...-unread` is the load alone, its parameters not read back: for the
//! loads that copy (a buffered pack; a record's unaligned tensors, three in four here) those
//! bytes are in memory of its own by then, so the row shows what the load itself costs
//! beside the reading back (a record's zero-copy windows may still be being read ahead).
//!
//! Cold: every file of the directory is dropped from the page cache
//! (`posix_fadvise(POSIX_FADV_DONTNEED)`) right before each child; warm: the file is read once
//! right before it. Every measurement runs in a child (peak resident size reset first);
//! contenders interleaved, the order rotated each round; medians (min-max), ratios the median
//! of per-round ratios to the sequential read of the same file(s) in the same round.
//!
//! ```sh
//! cargo bench --features store --bench formats
//! ```
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_LAYERS` (default 128: 512 MiB),
//! `BURNPACK_BENCH_DIR`, `BURNPACK_LEGACY_FIXTURES`, `BURNPACK_BENCH_FILES` (only these files,
//! comma-separated: `model.bpk`, `model.safetensors`, `shards`, `model.pt`, `views.pt`,
//! `big.mpk`, `model.npz`, `model.onnx`), `BURNPACK_PYTHONPATH`.

mod common;
#[path = "../tests/common/torch.rs"]
#[allow(dead_code)]
mod torch;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::Device;
use burn_store::{BurnpackStore, ModuleSnapshot, PytorchStore, SafetensorsStore};
use burnpack::interop::burn_record::LegacySource;
use burnpack::interop::numpy::NumpySource;
use burnpack::interop::onnx::OnnxSource;
use burnpack::interop::pytorch::PytorchSource;
use burnpack::interop::safetensors::{SafetensorsSource, save_safetensors};
use burnpack::module::{LoadOptions, PackModule};
use common::{Stack, stack};

/// The model's tensors as `torch.save` writes them: `[out, in]` weights; with `views`, a
/// layer's weight and bias are two views of one storage (weight first, then bias).
fn write_torch(model: &Stack, path: &Path, views: bool) {
    let mut storages = Vec::new();
    let mut specs = Vec::new();
    for (i, layer) in model.layers.iter().enumerate() {
        let weight = layer.weight.val().transpose().into_data();
        let bias = layer.bias.as_ref().unwrap().val().into_data();
        let (w, b) = (weight.as_bytes().to_vec(), bias.as_bytes().to_vec());
        let spec = |bytes: Vec<u8>| torch::StorageSpec {
            kind: "FloatStorage",
            element: 4,
            bytes,
        };
        let weight_view = torch::View::whole(&format!("layers.{i}.weight"), 0, &[1024, 1024]);
        let bias_view = torch::View::whole(&format!("layers.{i}.bias"), 0, &[1024]);
        if views {
            let storage = storages.len();
            storages.push(spec([w, b].concat()));
            specs.push(torch::View {
                storage,
                ..weight_view
            });
            specs.push(torch::View {
                storage,
                offset: 1024 * 1024,
                ..bias_view
            });
        } else {
            specs.push(torch::View {
                storage: storages.len(),
                ..weight_view
            });
            storages.push(spec(w));
            specs.push(torch::View {
                storage: storages.len(),
                ..bias_view
            });
            storages.push(spec(b));
        }
    }
    torch::save(path, &storages, &specs);
}

/// Writes `model.npz` (`np.savez`: stored members) and `model.onnx` with its initializers in
/// `model.onnx.data` (`onnx.save_model(.., save_as_external_data=True)`), each holding `layers`
/// layers' `layers.{i}.weight` `[1024, 1024]` and `layers.{i}.bias` `[1024]` in `f32`, drawn
/// by NumPy. The ONNX graph is the chain of `Gemm`s these weights make. `false` where
/// `python3` cannot import `numpy` and `onnx`.
fn write_numpy_and_onnx(dir: &Path, layers: usize) -> bool {
    const SCRIPT: &str = r#"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
d, layers = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
arrays = {}
for i in range(layers):
    arrays[f"layers.{i}.weight"] = rng.standard_normal((1024, 1024), dtype=np.float32)
    arrays[f"layers.{i}.bias"] = rng.standard_normal(1024, dtype=np.float32)
np.savez(f"{d}/model.npz", **arrays)
nodes = [helper.make_node("Gemm", [f"x{i}", f"layers.{i}.weight", f"layers.{i}.bias"], [f"x{i+1}"])
         for i in range(layers)]
inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
del arrays
graph = helper.make_graph(nodes, "stack",
    [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 1024])],
    [helper.make_tensor_value_info(f"x{layers}", TensorProto.FLOAT, [1, 1024])], inits)
del inits
model = helper.make_model(graph, producer_name="burnpack-bench")
onnx.save_model(model, f"{d}/model.onnx", save_as_external_data=True,
    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
"#;
    let mut command = Command::new("python3");
    command.args(["-c", SCRIPT, dir.to_str().unwrap(), &layers.to_string()]);
    if let Some(path) = std::env::var_os("BURNPACK_PYTHONPATH") {
        command.env("PYTHONPATH", path);
    }
    match command.status() {
        Ok(status) if status.success() => true,
        _ => {
            println!(
                "(python3 with numpy and onnx is not available: the .npz and ONNX files are \
                 not measured; BURNPACK_PYTHONPATH names a folder that has them)\n"
            );
            false
        }
    }
}

/// The files a contender reads (the sequential read's input).
fn inputs(dir: &Path, file: &str) -> Vec<PathBuf> {
    if file == "model.onnx" {
        return vec![dir.join("model.onnx"), dir.join("model.onnx.data")];
    }
    if file == "shards" {
        let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("shards")
            })
            .collect();
        shards.sort();
        shards
    } else {
        vec![dir.join(file)]
    }
}

/// One load (or the sequential read) in this process, reported with `common::Meter`.
fn child(who: &str, file: &str, dir: &Path, layers: usize) {
    let device = Device::flex();
    let target = stack(layers, &device);
    let path = dir.join(file);
    let meter = common::Meter::start();
    let start = Instant::now();
    let pytorch = LoadOptions::new().pytorch(true);
    // `<contender>-unread`: the load alone, its parameters not read back (for a load that
    // copies, the copies are in memory of their own when it returns).
    let (who, unread) = match who.strip_suffix("-unread") {
        Some(who) => (who, true),
        None => (who, false),
    };
    let model = match who {
        "sequential-read" => {
            for input in inputs(dir, file) {
                std::hint::black_box(common::read_sequentially(&input));
            }
            meter.report(start.elapsed());
            return;
        }
        "read-into-memory" => {
            // Every file read whole into memory of its own, then summed (no loader).
            let mut sum = 0u64;
            for input in inputs(dir, file) {
                let bytes = std::fs::read(&input).unwrap();
                sum = bytes
                    .iter()
                    .step_by(4096)
                    .fold(sum, |a, b| a + u64::from(*b));
            }
            std::hint::black_box(sum);
            meter.report(start.elapsed());
            return;
        }
        "numpy-source" => {
            let source = NumpySource::open(&path).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new())
                .unwrap()
        }
        "onnx-source" => {
            let source = OnnxSource::open(&path).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new())
                .unwrap()
        }
        "burnpack" => target.load_pack(&path).unwrap(),
        "burnpack-buffered" => target
            .load_pack_with(&path, &LoadOptions::new().buffered(true))
            .unwrap(),
        "burn-load-file" => target.try_load_file(&path).unwrap(),
        "burnpack-store" => {
            let mut t = target;
            t.load_from(&mut BurnpackStore::from_file(&path)).unwrap();
            t
        }
        "safetensors-source" => {
            let path = if file == "shards" {
                dir.join("shards.safetensors.index.json")
            } else {
                path
            };
            let source = SafetensorsSource::open(path).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new())
                .unwrap()
        }
        "safetensors-store" => {
            let mut t = target;
            t.load_from(&mut SafetensorsStore::from_file(&path))
                .unwrap();
            t
        }
        "pytorch-source" => {
            let source = PytorchSource::open(&path).unwrap();
            target.load_from_source(&source, &pytorch).unwrap()
        }
        "pytorch-source-contiguous" => {
            // The transposes laid out at load (`LoadOptions::contiguous`) instead of views.
            let source = PytorchSource::open(&path).unwrap();
            target
                .load_from_source(&source, &pytorch.clone().contiguous(true))
                .unwrap()
        }
        "pytorch-source-as-stored" => {
            // The same file without PyTorch's conventions: the square weights taken as
            // stored, no transpose (what the container costs; the values differ).
            let source = PytorchSource::open(&path).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new())
                .unwrap()
        }
        "pytorch-store" => {
            let mut t = target;
            t.load_from(&mut PytorchStore::from_file(&path)).unwrap();
            t
        }
        "legacy-source" => {
            let source = LegacySource::open(&path).unwrap();
            target
                .load_from_source(&source, &LoadOptions::new())
                .unwrap()
        }
        other => panic!("{other}"),
    };
    if unread {
        meter.report(start.elapsed());
        drop(std::hint::black_box(model));
        return;
    }
    std::hint::black_box(common::consume_all(model));
    meter.report(start.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(
            &args[2],
            &args[3],
            Path::new(&args[4]),
            args[5].parse().unwrap(),
        );
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let layers = common::env_or("BURNPACK_BENCH_LAYERS", 128);
    let dir = common::bench_dir();
    let d = dir.path();
    // `BURNPACK_BENCH_FILES=model.bpk,big.mpk`: only these files (written and measured).
    let only = std::env::var("BURNPACK_BENCH_FILES").ok();
    let wanted = |file: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|f| f == file))
    };
    {
        let model = stack(layers, &Device::flex());
        if wanted("model.bpk") {
            model.save_pack(d.join("model.bpk")).unwrap();
        }
        if wanted("model.safetensors") {
            save_safetensors(&model, d.join("model.safetensors"), None).unwrap();
        }
        if wanted("shards") {
            let bytes = (layers as u64) * (1024 * 1024 + 1024) * 4;
            save_safetensors(&model, d.join("shards.safetensors"), Some(bytes / 4 + 1)).unwrap();
        }
        if wanted("model.pt") {
            write_torch(&model, &d.join("model.pt"), false);
        }
        if wanted("views.pt") {
            write_torch(&model, &d.join("views.pt"), true);
        }
    }
    let mut files: Vec<(&str, Vec<&str>)> = vec![
        (
            "model.bpk",
            vec![
                "burnpack",
                "burnpack-buffered",
                "burnpack-buffered-unread",
                "burn-load-file",
                "burnpack-store",
            ],
        ),
        (
            "model.safetensors",
            vec!["safetensors-source", "safetensors-store"],
        ),
        ("shards", vec!["safetensors-source"]),
        (
            "model.pt",
            vec![
                "pytorch-source",
                "pytorch-source-contiguous",
                "pytorch-source-as-stored",
                "pytorch-store",
            ],
        ),
        (
            "views.pt",
            vec![
                "pytorch-source",
                "pytorch-source-contiguous",
                "pytorch-store",
            ],
        ),
    ];
    if (wanted("model.npz") || wanted("model.onnx")) && write_numpy_and_onnx(d, layers) {
        files.push((
            "model.npz",
            vec!["read-into-memory", "numpy-source", "numpy-source-unread"],
        ));
        files.push((
            "model.onnx",
            vec!["read-into-memory", "onnx-source", "onnx-source-unread"],
        ));
    }
    if let Some(fixtures) =
        std::env::var_os("BURNPACK_LEGACY_FIXTURES").filter(|_| wanted("big.mpk"))
    {
        let status = Command::new(&fixtures)
            .args(["big", d.to_str().unwrap(), &layers.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "the fixture writer failed");
        let _ = std::fs::remove_file(d.join("big.mpk.gz"));
        files.push(("big.mpk", vec!["legacy-source", "legacy-source-unread"]));
    } else {
        println!(
            "(BURNPACK_LEGACY_FIXTURES is not set: the Burn 0.21 record is not measured; see \
             benches/legacy.rs)\n"
        );
    }
    println!(
        "| file | cache | contender | time, ms: median (min-max) | x sequential read (median of rounds) | CPU, ms | peak RSS rise |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    let layers_arg = layers.to_string();
    let dir_arg = d.to_str().unwrap().to_string();
    for (file, loaders) in &files {
        if !wanted(file) {
            continue;
        }
        let size: u64 = inputs(d, file)
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        let mut contenders = vec!["sequential-read"];
        contenders.extend(loaders.iter().copied());
        for cold in [false, true] {
            let (samples, ratios) = common::interleave(runs, contenders.len(), |i| {
                if cold {
                    common::evict_dir(d);
                    // Fresh pages for what the load will fill (see `common::warm_memory`),
                    // the same for every contender.
                    common::warm_memory(d, 2 * size);
                } else {
                    for input in inputs(d, file) {
                        common::read_sequentially(&input);
                    }
                }
                common::run_child(&[contenders[i], file, &dir_arg, &layers_arg])
            });
            let label = format!(
                "{file} ({} MiB) | {}",
                size >> 20,
                if cold { "cold" } else { "warm" }
            );
            common::print_rows(&label, &contenders, &samples, &ratios, false);
        }
    }
}
