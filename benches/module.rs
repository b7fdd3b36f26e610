//! Module save/load benchmark, side by side with Burn 0.22 in one run. Operations: save, open
//! (`Reader::open` alone), load, load + read every parameter, and the cold loads (every input
//! file dropped from the page cache first) with and without reading, beside one pass of 8 MiB
//! reads over the file. Save children first warm the memory the save needs
//! (`common::warm_memory`; `BURNPACK_BENCH_COLD_MEMORY=1` leaves it out).
//!
//! `cargo bench --features store --bench module` prints a markdown table. Every measurement runs in a child
//! process of this binary (one operation per child); the child resets its peak resident size
//! just before the operation, so the peak is the operation's own, and reports wall time, CPU
//! time (user + system, all threads) and resident size before the operation. Contenders run
//! interleaved, one round after another, each round starting with the next contender, so
//! drift in the machine (page cache, disk, thermal) spreads over all of them; a row gives
//! the median with min-max and the median over rounds of the ratio to the operation's
//! reference (the floor for saves, the first contender otherwise). Every save writes a fresh
//! file (the destination is removed first), in-place included. Contenders: burnpack, this crate's
//! `PackStore` through burn-store's `save_into` / `load_from` (`pack-store`), Burn's
//! `save_file` / `load_file`, burn-store's `BurnpackStore` and `SafetensorsStore`; for loads
//! of safetensors weights, this crate's `SafetensorsSource` on one file and on 4 shards with an
//! index, and converting to a pack first; for weights in PyTorch's layout (Linear weights
//! `[out, in]`), `SafetensorsSource` with `LoadOptions::pytorch`, and burn-store's
//! `PyTorchToBurnAdapter` in `PackStore` and in `SafetensorsStore`. Env:
//! `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_SIZES` (default `512m,1g,emb,10k`),
//! `BURNPACK_BENCH_ONLY` (contenders to run, comma-separated; each operation's reference always
//! runs), `BURNPACK_BENCH_DIR` (default `.`).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{DType, Device, Tensor};
use burn_store::{
    BurnToPyTorchAdapter, BurnpackStore, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};
use burnpack::interop::safetensors::{
    SafetensorsSource, safetensors_to_burnpack, save_safetensors,
};
use burnpack::module::{PackModule, SaveOptions};
use burnpack::store::PackStore;
use burnpack::write::WriteOptions;
use burnpack::write::{WriteMode, Writer};

#[derive(Module, Debug)]
struct Stack {
    embedding: Option<Embedding>,
    layers: Vec<Linear>,
}

/// `256m`, `512m` and `1g`: square 1024x1024 f32 layers; `emb`: a 50,257 x 512 embedding
/// (98 MiB, a GPT-2 vocabulary) and 8 layers of 512; `10k`: 5,000 tiny layers (10,000 tensors).
fn model(size: &str, device: &Device) -> Stack {
    let (count, width) = match size {
        "256m" => (64, 1024),
        "512m" => (128, 1024),
        "1g" => (256, 1024),
        "emb" => (8, 512),
        "10k" => (5000, 8),
        other => panic!("unknown size {other}"),
    };
    Stack {
        embedding: (size == "emb").then(|| EmbeddingConfig::new(50_257, 512).init(device)),
        layers: (0..count)
            .map(|_| LinearConfig::new(width, width).init(device))
            .collect(),
    }
}

/// What any saver must do per parameter through Burn 0.22's API: the save mapper's value.
#[derive(Default)]
struct SaveWalk(Vec<Tensor<2>>, Vec<Tensor<1>>);

impl ModuleVisitor for SaveWalk {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.transform_for_save().val();
        match D {
            1 => self.1.push(t.reshape([-1])),
            _ => self.0.push(t.reshape([0, -1])),
        }
    }
}

/// What any loader must do per parameter through Burn 0.22's API, with the bytes already in
/// memory (no file): `TensorData::from_bytes` over a shared buffer, `Tensor::from_data` with
/// the dtype, `transform_for_load`.
struct ApiLoad(burn::tensor::Bytes);

impl burn::module::ModuleMapper for ApiLoad {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let shape = param.lazy_shape();
        let bytes = self.0.view(0, shape.num_elements() * 4).unwrap();
        let data = burn::tensor::TensorData::from_bytes(bytes, shape, DType::F32);
        let tensor = Tensor::from_data(data, (&param.lazy_device(), DType::F32));
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

fn read_all(module: &Stack) -> u64 {
    common::read_all(module)
}

fn materialize(module: Stack) -> Stack {
    read_all(&module);
    module
}

fn file(dir: &Path, size: &str, format: &str) -> PathBuf {
    dir.join(format!("{size}-{format}"))
}

/// One operation in this process, reported with `common::report`.
fn child(op: &str, who: &str, size: &str, dir: &Path) {
    let device = Device::flex();
    let ext = if who == "safetensors-store" {
        "safetensors"
    } else {
        "bpk"
    };
    let out = dir.join(format!("out-{who}-{size}.{ext}"));
    let _ = std::fs::remove_file(&out);
    let time = match op {
        "save" => {
            let m = materialize(model(size, &device));
            let bytes = m.pack_writer(&SaveOptions::new()).unwrap().size().unwrap();
            let warm = || {
                if std::env::var_os("BURNPACK_BENCH_COLD_MEMORY").is_none() {
                    common::warm_memory(dir, bytes);
                }
            };
            if !who.starts_with("floor") {
                warm();
            }
            let meter = common::Meter::start();
            let start = Instant::now();
            match who {
                "burnpack" => drop(m.save_pack(&out).unwrap()),
                "burnpack-no-checksums" => drop(
                    m.save_pack_with(
                        &out,
                        &SaveOptions::new().write(WriteOptions::new().checksums(false)),
                    )
                    .unwrap(),
                ),
                "burnpack-in-place" => drop(
                    m.save_pack_with(&out, &SaveOptions::new().mode(WriteMode::InPlace))
                        .unwrap(),
                ),
                "burn-save-file" => m.save_file(&out).unwrap(),
                "burnpack-store" => m.save_into(&mut BurnpackStore::from_file(&out)).unwrap(),
                "pack-store" => m.save_into(&mut PackStore::from_file(&out)).unwrap(),
                "safetensors-store" => m.save_into(&mut SafetensorsStore::from_file(&out)).unwrap(),
                "floor" | "floor-pipelined" | "floor-atomic-api" => {
                    // floor: one write(2) + fsync of a ready-made buffer of the same size.
                    // floor-pipelined: the same buffer in 32 MiB writes, the kernel asked to
                    // start writeback after each (`sync_file_range`), then one fsync: the disk
                    // works while the process writes, the least a durable write costs here.
                    // floor-atomic-api: the least an atomic, durable save through Burn's API
                    // can cost: the walk that reads every parameter's saved value, then the
                    // buffer written to a scratch file, fsync, rename, directory fsync.
                    let atomic = who == "floor-atomic-api";
                    let bytes = m
                        .pack_writer(&SaveOptions::new())
                        .unwrap()
                        .into_bytes()
                        .unwrap();
                    warm();
                    let meter = common::Meter::start();
                    let start = Instant::now();
                    let mut walk = SaveWalk::default();
                    if atomic {
                        m.visit(&mut walk);
                    }
                    let target = if atomic {
                        dir.join(format!(".scratch-{size}"))
                    } else {
                        out.clone()
                    };
                    let mut f = std::fs::File::create(&target).unwrap();
                    if who == "floor-pipelined" {
                        for piece in bytes.chunks(32 << 20) {
                            std::io::Write::write_all(&mut f, piece).unwrap();
                            common::start_writeback(&f);
                        }
                    } else {
                        std::io::Write::write_all(&mut f, &bytes).unwrap();
                    }
                    f.sync_all().unwrap();
                    if atomic {
                        std::fs::rename(&target, &out).unwrap();
                        std::fs::File::open(dir).unwrap().sync_all().unwrap();
                    }
                    meter.report(start.elapsed());
                    std::hint::black_box(walk);
                    return;
                }
                _ => panic!("{who}"),
            }
            (meter, start.elapsed())
        }
        "open" => {
            // Opening alone: header, metadata decoded and validated, the tensor table.
            let path = file(dir, size, "burnpack.bpk");
            let meter = common::Meter::start();
            let start = Instant::now();
            let reader = burnpack::read::Reader::open(&path).unwrap();
            let time = start.elapsed();
            std::hint::black_box(reader);
            (meter, time)
        }
        "load" | "load-read" | "load-cold" | "load-read-cold" => {
            let target = model(size, &device);
            if op.ends_with("-cold") {
                common::evict_dir(dir);
            }
            let meter = common::Meter::start();
            let start = Instant::now();
            let loaded = match who {
                "burnpack" => target.load_pack(file(dir, size, "burnpack.bpk")).unwrap(),
                "burnpack-buffered" => target
                    .load_pack_with(
                        file(dir, size, "burnpack.bpk"),
                        &burnpack::module::LoadOptions::new().buffered(true),
                    )
                    .unwrap(),
                "sequential-read" => {
                    // One pass of large reads over the file, nothing loaded: the disk's speed.
                    let total = common::read_sequentially(&file(dir, size, "burnpack.bpk"));
                    std::hint::black_box(total);
                    meter.report(start.elapsed());
                    return;
                }
                "burn-load-file" => target.try_load_file(file(dir, size, "burn.bpk")).unwrap(),
                "burnpack-store" => {
                    let mut t = target;
                    t.load_from(&mut BurnpackStore::from_file(file(dir, size, "burn.bpk")))
                        .unwrap();
                    t
                }
                "pack-store" => {
                    let mut t = target;
                    t.load_from(&mut PackStore::from_file(file(dir, size, "burnpack.bpk")))
                        .unwrap();
                    t
                }
                "safetensors-source" | "safetensors-shards" => {
                    let name = if who == "safetensors-source" {
                        "model.safetensors"
                    } else {
                        "shards.safetensors.index.json"
                    };
                    let source = SafetensorsSource::open(file(dir, size, name)).unwrap();
                    target
                        .load_from_source(&source, &burnpack::module::LoadOptions::new())
                        .unwrap()
                }
                "safetensors-pytorch" => {
                    // PyTorch's layout ([out, in] Linear weights): transposed by strides.
                    let source =
                        SafetensorsSource::open(file(dir, size, "pytorch.safetensors")).unwrap();
                    target
                        .load_from_source(
                            &source,
                            &burnpack::module::LoadOptions::new().pytorch(true),
                        )
                        .unwrap()
                }
                "safetensors-store-pytorch" | "pack-store-pytorch" => {
                    // burn-store's `PyTorchToBurnAdapter`, which transposes each weight into
                    // a new buffer as the applier reaches it.
                    let path = file(dir, size, "pytorch.safetensors");
                    let mut t = target;
                    if who == "pack-store-pytorch" {
                        let source = SafetensorsSource::open(path).unwrap();
                        t.load_from(
                            &mut PackStore::from_source(source)
                                .with_from_adapter(PyTorchToBurnAdapter),
                        )
                        .unwrap();
                    } else {
                        t.load_from(
                            &mut SafetensorsStore::from_file(path)
                                .with_from_adapter(PyTorchToBurnAdapter),
                        )
                        .unwrap();
                    }
                    t
                }
                "convert-then-load" => {
                    let pack = dir.join(format!("converted-{size}.bpk"));
                    let _ = std::fs::remove_file(&pack);
                    safetensors_to_burnpack(file(dir, size, "model.safetensors"), &pack).unwrap();
                    target.load_pack(&pack).unwrap()
                }
                "safetensors-store" => {
                    let mut t = target;
                    t.load_from(&mut SafetensorsStore::from_file(file(
                        dir,
                        size,
                        "model.safetensors",
                    )))
                    .unwrap();
                    t
                }
                "api-floor" => {
                    let largest = 50_257 * 512 * 4;
                    let buffer = burn::tensor::Bytes::from_shared(
                        bytes::Bytes::from(vec![0u8; largest]),
                        burn::tensor::AllocationProperty::Other,
                    );
                    let meter = common::Meter::start();
                    let start = Instant::now();
                    let loaded = target.map(&mut ApiLoad(buffer));
                    if op.starts_with("load-read") {
                        std::hint::black_box(read_all(&loaded));
                    }
                    meter.report(start.elapsed());
                    return;
                }
                "in-memory" => {
                    let loaded = materialize(target);
                    // Reading the parameters of a model already in memory.
                    let meter = common::Meter::start();
                    let start = Instant::now();
                    std::hint::black_box(read_all(&loaded));
                    meter.report(start.elapsed());
                    return;
                }
                _ => panic!("{who}"),
            };
            if op.starts_with("load-read") {
                std::hint::black_box(read_all(&loaded));
            }
            (meter, start.elapsed())
        }
        _ => panic!("{op}"),
    };
    let (meter, time) = time;
    meter.report(time);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], &args[3], &args[4], Path::new(&args[5]));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let sizes = std::env::var("BURNPACK_BENCH_SIZES").unwrap_or_else(|_| "512m,1g,emb,10k".into());
    let dir = common::bench_dir();
    let device = Device::flex();

    println!(
        "| model | operation | contender | time, ms: median (min-max) | x reference (median of rounds) | CPU, ms | peak RSS during the operation |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    for size in sizes.split(',') {
        // Inputs for the loads, written once by each format's own writer.
        let m = materialize(model(size, &device));
        m.save_pack(file(dir.path(), size, "burnpack.bpk")).unwrap();
        m.clone()
            .save_file(file(dir.path(), size, "burn.bpk"))
            .unwrap();
        m.save_into(&mut SafetensorsStore::from_file(file(
            dir.path(),
            size,
            "model.safetensors",
        )))
        .unwrap();
        // The same weights in PyTorch's layout, as Hugging Face files have them.
        m.save_into(
            &mut SafetensorsStore::from_file(file(dir.path(), size, "pytorch.safetensors"))
                .with_to_adapter(BurnToPyTorchAdapter),
        )
        .unwrap();
        let bytes = Writer::new(m.pack_entries().unwrap()).size().unwrap();
        // The same weights in 4 safetensors shards with an index.
        save_safetensors(
            &m,
            file(dir.path(), size, "shards.safetensors"),
            Some(bytes / 4 + 1),
        )
        .unwrap();
        drop(m);
        let label = match size {
            "10k" => "10,000 tensors".to_string(),
            "emb" => format!("{} MiB f32, one 98 MiB tensor", bytes >> 20),
            _ => format!("{} MiB f32", bytes >> 20),
        };
        let plan: [(&str, &[&str]); 6] = [
            (
                "save",
                &[
                    "floor-pipelined",
                    "floor",
                    "floor-atomic-api",
                    "burnpack",
                    "burnpack-no-checksums",
                    "burnpack-in-place",
                    "burn-save-file",
                    "burnpack-store",
                    "pack-store",
                    "safetensors-store",
                ],
            ),
            ("open", &["burnpack"]),
            (
                "load",
                &[
                    "burnpack",
                    "burn-load-file",
                    "burnpack-store",
                    "pack-store",
                    "safetensors-store",
                    "safetensors-pytorch",
                    "pack-store-pytorch",
                ],
            ),
            (
                "load-read",
                &[
                    // The reference of load + read: the same parameters built through Burn's
                    // API from bytes already in memory.
                    "api-floor",
                    "in-memory",
                    "burnpack",
                    "burn-load-file",
                    "burnpack-store",
                    "pack-store",
                    "safetensors-store",
                    "safetensors-source",
                    "safetensors-shards",
                    "convert-then-load",
                    "safetensors-pytorch",
                    "pack-store-pytorch",
                    "safetensors-store-pytorch",
                ],
            ),
            (
                "load-cold",
                &[
                    "sequential-read",
                    "burnpack-buffered",
                    "burnpack",
                    "burn-load-file",
                ],
            ),
            (
                "load-read-cold",
                &[
                    "sequential-read",
                    "burnpack",
                    "burnpack-buffered",
                    "burn-load-file",
                    "burnpack-store",
                    "pack-store",
                    "safetensors-store",
                    "safetensors-source",
                ],
            ),
        ];
        // `BURNPACK_BENCH_ONLY=a,b`: only these contenders (and each operation's reference).
        let only = std::env::var("BURNPACK_BENCH_ONLY").ok();
        let wanted = |who: &str, reference: &str| {
            who == reference || only.as_ref().is_none_or(|o| o.split(',').any(|w| w == who))
        };
        // `BURNPACK_BENCH_OPS=save,load-read-cold`: only these operations.
        let ops = std::env::var("BURNPACK_BENCH_OPS").ok();
        for (op, contenders) in plan {
            if ops.as_ref().is_some_and(|o| !o.split(',').any(|w| w == op)) {
                continue;
            }
            let contenders: Vec<&str> = contenders
                .iter()
                .copied()
                .filter(|who| wanted(who, contenders[0]))
                .collect();
            // burn-store's safetensors loader takes minutes on 10,000 tensors (188 s in one
            // run): not measured there.
            let slow =
                |who: &str| size == "10k" && who.starts_with("safetensors-store") && op != "save";
            let mut samples: Vec<Vec<common::Sample>> = vec![Vec::new(); contenders.len()];
            for round in 0..runs {
                for k in 0..contenders.len() {
                    let i = (round + k) % contenders.len();
                    if slow(contenders[i]) {
                        continue;
                    }
                    let dir = dir.path().to_str().unwrap();
                    samples[i].push(common::run_child(&[op, contenders[i], size, dir]));
                }
            }
            for (who, own) in contenders.iter().zip(&samples) {
                if own.is_empty() {
                    continue;
                }
                let ratios: Vec<f64> = own
                    .iter()
                    .zip(&samples[0])
                    .map(|(s, r)| s.time.as_secs_f64() / r.time.as_secs_f64())
                    .collect();
                let times: Vec<Duration> = own.iter().map(|s| s.time).collect();
                let cpus: Vec<Duration> = own.iter().map(|s| s.cpu).collect();
                let peak = own.iter().map(|s| s.peak_kib).max().unwrap();
                let over = own
                    .iter()
                    .map(|s| s.peak_kib.saturating_sub(s.base_kib))
                    .max()
                    .unwrap();
                let op_label = match (op, *who) {
                    ("load-read", "in-memory") => "read all params",
                    (_, "sequential-read") => "cold: read the file (8 MiB reads)",
                    ("load-cold", _) => "cold: load",
                    ("open", _) => "open (Reader::open)",
                    ("load-read-cold", _) => "cold: load + read all params",
                    ("load-read", _) => "load + read all params",
                    (op, _) => op,
                };
                println!(
                    "| {label} | {op_label} | {who} | {} | {:.2} | {:.0} | {} MiB (+{} MiB) |",
                    common::spread(&times),
                    common::median_ratio(ratios),
                    common::median(cpus).as_secs_f64() * 1e3,
                    peak >> 10,
                    over >> 10
                );
            }
        }
    }
}
