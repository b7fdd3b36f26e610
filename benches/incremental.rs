//! Incremental checkpoint benchmark: what a checkpoint costs when a fine-tuning run changes only
//! its adapters, side by side in one run.
//!
//! The LoRA-shaped run: a frozen base of 1 GiB (256 linear layers of 1024 x 1024 f32, with
//! biases), rank-8 adapters on each (16 MiB: `down` 1024 x 8, `up` 8 x 1024), Adam on the
//! adapters (two moments: 32 MiB), one optimizer step between checkpoints. Ten consecutive
//! checkpoints, each written by every contender, into a directory of its own (kept: disk use is
//! measured after the ten):
//!
//! - `incremental`: `CheckpointManager::incremental(true)` (hashes every tensor, writes what
//!   changed into a data file, then the manifest; atomic + fsync each);
//! - `full`: the same manager without it (today's checkpoints: one self-contained file);
//! - `Burn 3 files`: Burn's own `save_file` + `ModuleOptimizer::save` + the scheduler record,
//!   what burn-train writes per epoch (no fsync: Burn does not sync);
//! - `changed bytes floor`: the changed tensors' bytes (adapters and Adam state, as the
//!   checkpoint holds them), produced before the timing, written into one new file with one
//!   `write` and `fsync`: the least any checkpoint of the change can cost;
//! - `Burn's serialization + floor`: the same, the bytes produced inside the timing (the
//!   adapters read back, the optimizer's record through `into_bytes`, Burn's only access to
//!   it): the least any checkpoint through Burn's API can cost;
//! - `incremental, optimizer bytes given`: `incremental`, the optimizer's state handed over as
//!   `into_bytes` gave it before the timing (`TrainingState::optimizer_bytes`): the save's own
//!   work, Burn's serialization out of the measure;
//! - `changed bytes floor, atomic`: `changed bytes floor` written as a checkpoint must be: a
//!   scratch file, `write`, `fsync`, rename, directory `fsync`.
//!
//! Then where the time of `incremental, optimizer bytes given` goes, part by part
//! (`SaveReport::phases`), median over checkpoints 2-10.
//!
//! Contenders rotate their order at each checkpoint. Rows: wall time and CPU (getrusage,
//! every thread) per checkpoint after the first, median (min-max); bytes written per
//! checkpoint (files created in the contender's directory); disk use after ten. Then the full
//! training case (a 256 MiB model, every tensor trained, Adam): incremental vs full, 5 rounds
//! interleaved. Then opening the tenth checkpoint (`latest`, warm), incremental vs full,
//! interleaved, with nothing of the previous open held and with it held. Then loading the
//! tenth checkpoint (model + optimizer, every tensor read), incremental vs full, warm and cold
//! page cache.
//!
//! `cargo bench --features train --bench incremental` (env `BURNPACK_BENCH_RUNS`, default 5,
//! the rounds of the full-training part, twice that for the loads; `BURNPACK_BENCH_OPENS`,
//! default 40, the rounds of the opens; `BURNPACK_BENCH_LAYERS`, default 256 (1 GiB);
//! `BURNPACK_BENCH_DIR`; `BURNPACK_BENCH_PHASES=1` prints each load's phases).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};

#[derive(Module, Debug)]
struct Adapted {
    base: Vec<Linear>,
    down: Vec<Linear>,
    up: Vec<Linear>,
}

impl Adapted {
    fn new(layers: usize, device: &Device) -> Self {
        Self {
            base: (0..layers)
                .map(|_| LinearConfig::new(1024, 1024).init(device).no_grad())
                .collect(),
            down: (0..layers)
                .map(|_| LinearConfig::new(1024, 8).with_bias(false).init(device))
                .collect(),
            up: (0..layers)
                .map(|_| LinearConfig::new(8, 1024).with_bias(false).init(device))
                .collect(),
        }
    }

    /// Every layer on the input, summed (no depth: the values stay finite, so Adam's moments
    /// change at every step).
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let mut out = Tensor::zeros([x.dims()[0], 1024], &x.device());
        for ((b, d), u) in self.base.iter().zip(&self.down).zip(&self.up) {
            out = out + b.forward(x.clone()) + u.forward(d.forward(x.clone()));
        }
        out
    }
}

#[derive(Module, Debug)]
struct Full {
    layers: Vec<Linear>,
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[derive(Default, Clone)]
struct Row {
    times: Vec<Duration>,
    cpus: Vec<Duration>,
    bytes: Vec<u64>,
}

fn measure(dir: &Path, f: impl FnOnce()) -> (Duration, Duration, u64) {
    let before = dir_bytes(dir);
    let cpu = common::cpu_time();
    let start = Instant::now();
    f();
    let time = start.elapsed();
    (
        time,
        common::cpu_time() - cpu,
        dir_bytes(dir).saturating_sub(before),
    )
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1 << 20)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Opening the tenth checkpoint warm (`latest`: listing, the manifest, for an incremental one
/// its references and data files), full (contender 0) against incremental, `rounds` rounds
/// interleaved after one open each. `held`: the previous round's checkpoint of the same
/// contender is still held when the next is opened (a process that holds the checkpoint it
/// opened and opens it again: an incremental checkpoint held, its files unchanged and
/// settled, is shared by its manager; a full one is opened again); otherwise nothing of it
/// is (each open maps and parses every file).
fn open_rounds(managers: [&CheckpointManager; 2], rounds: usize, held: bool) {
    let mut kept: [Option<burnpack::checkpoint::Checkpoint>; 2] = [None, None];
    for (manager, kept) in managers.iter().zip(&mut kept) {
        *kept = manager.latest().unwrap();
    }
    let (samples, ratios) = common::interleave(rounds, 2, |i| {
        if !held {
            kept[i] = None;
        }
        let cpu = common::cpu_time();
        let start = Instant::now();
        let ckpt = managers[i].latest().unwrap().unwrap();
        let time = start.elapsed();
        let cpu = common::cpu_time() - cpu;
        assert_eq!(ckpt.is_incremental(), i == 1);
        kept[i] = Some(ckpt);
        common::Sample::timed(time, cpu)
    });
    println!(
        "\nopen (`latest`) of checkpoint 10, warm, {rounds} rounds{}: full {} ms, incremental {} ms, \
         ratio {:.2} (CPU: full {:.2} ms, incremental {:.2} ms)",
        if held {
            ", the previous one held"
        } else {
            ", nothing held"
        },
        common::spread(&samples[0].iter().map(|s| s.time).collect::<Vec<_>>()),
        common::spread(&samples[1].iter().map(|s| s.time).collect::<Vec<_>>()),
        common::median_ratio(ratios[1].clone()),
        ms(common::median(samples[0].iter().map(|s| s.cpu).collect())),
        ms(common::median(samples[1].iter().map(|s| s.cpu).collect())),
    );
}

/// The changed tensors' bytes (adapters and Adam moments) as one buffer.
fn changed_bytes(model: &Adapted, optim: &ModuleOptimizer) -> Vec<u8> {
    let mut out = Vec::new();
    for l in model.down.iter().chain(&model.up) {
        out.extend_from_slice(&l.weight.val().into_data().into_bytes());
    }
    let record = optim.clone().into_bytes().unwrap();
    out.extend_from_slice(&record);
    out
}

fn write_fsync(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

/// `write_fsync` made atomic: a scratch file beside `path`, renamed onto it, then the
/// directory synced (what a checkpoint's commit costs at the least).
fn write_atomic(path: &Path, bytes: &[u8]) {
    let scratch = path.with_extension("tmp");
    write_fsync(&scratch, bytes);
    std::fs::rename(&scratch, path).unwrap();
    std::fs::File::open(path.parent().unwrap())
        .unwrap()
        .sync_all()
        .unwrap();
}

fn main() {
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let layers = common::env_or("BURNPACK_BENCH_LAYERS", 256);
    let bench = common::bench_dir();
    let device = Device::flex().autodiff();
    let mut model = Adapted::new(layers, &device);
    let mut optim = AdamConfig::new().init();
    let mut sched = LinearLrSchedulerConfig::new(1e-3, 1e-4, 100)
        .init()
        .unwrap();
    let base_bytes = layers as u64 * (1024 * 1024 + 1024) * 4;
    println!(
        "LoRA-shaped run: frozen base {:.0} MiB, adapters {:.0} MiB, Adam on the adapters; 10 checkpoints\n",
        mib(base_bytes),
        mib(layers as u64 * 2 * 8 * 1024 * 4)
    );

    let names = [
        "incremental",
        "full",
        "Burn 3 files",
        "changed bytes floor",
        "Burn's serialization + floor",
        "incremental, optimizer bytes given",
        "changed bytes floor, atomic",
    ];
    let dirs: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let d = bench.path().join(format!("c{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let incremental = CheckpointManager::new(&dirs[0])
        .unwrap()
        .keep_last(10)
        .incremental(true);
    let full = CheckpointManager::new(&dirs[1]).unwrap().keep_last(10);
    let given = CheckpointManager::new(&dirs[5])
        .unwrap()
        .keep_last(10)
        .incremental(true);
    // Where the time of `incremental, optimizer bytes given` went, part by part, per
    // checkpoint after the first.
    let mut phases: Vec<(&'static str, Vec<Duration>)> = Vec::new();
    let mut rows = vec![Row::default(); names.len()];
    let mut changed = Vec::new();
    for step in 1..=10u64 {
        let x = Tensor::<2>::ones([2, 1024], &device);
        let loss = model.forward(x).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(sched.step(), model, grads);
        let floor_bytes = changed_bytes(&model, &optim);
        changed.push(floor_bytes.len() as u64);
        let mut optim_bytes = Some(optim.clone().into_bytes().unwrap());
        for k in 0..names.len() {
            let i = (k + step as usize) % names.len();
            common::warm_memory(bench.path(), if step == 1 { base_bytes } else { 64 << 20 });
            let dir = &dirs[i];
            let sample = measure(dir, || match i {
                0 => {
                    incremental
                        .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
                        .unwrap();
                }
                1 => {
                    full.save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
                        .unwrap();
                }
                2 => {
                    model
                        .clone()
                        .save_file(dir.join(format!("model-{step}.bpk")))
                        .unwrap();
                    optim.save(dir.join(format!("optim-{step}.bpk"))).unwrap();
                    sched
                        .to_record()
                        .save(dir.join(format!("scheduler-{step}.bpk")))
                        .unwrap();
                }
                3 => write_fsync(&dir.join(format!("changed-{step}.bin")), &floor_bytes),
                4 => write_fsync(
                    &dir.join(format!("serialized-{step}.bin")),
                    &changed_bytes(&model, &optim),
                ),
                5 => {
                    let report = given
                        .save(
                            TrainingState::new(&model, Progress::new(0, step))
                                .optimizer_bytes(optim_bytes.take().unwrap()),
                        )
                        .unwrap();
                    if step > 1 {
                        for (name, time) in report.phases {
                            match phases.iter_mut().find(|(n, _)| *n == name) {
                                Some((_, times)) => times.push(time),
                                None => phases.push((name, vec![time])),
                            }
                        }
                    }
                }
                _ => write_atomic(&dir.join(format!("changed-{step}.bin")), &floor_bytes),
            });
            if step > 1 {
                rows[i].times.push(sample.0);
                rows[i].cpus.push(sample.1);
                rows[i].bytes.push(sample.2);
            } else {
                println!(
                    "first checkpoint, {}: {:.0} ms, {:.1} MiB",
                    names[i],
                    ms(sample.0),
                    mib(sample.2)
                );
            }
        }
    }
    let full_size = std::fs::metadata(full.path_for(1)).unwrap().len();
    let change = common::median(changed.iter().map(|b| Duration::from_nanos(*b)).collect())
        .as_nanos() as u64;
    println!("\nCheckpoints 2-10 (median (min-max) over 9 checkpoints):\n");
    println!(
        "| contender | wall ms | vs floor | CPU ms | written per checkpoint | disk after 10 |"
    );
    println!("|---|---|---|---|---|---|");
    let floor = common::median(rows[3].times.clone());
    for (i, name) in names.iter().enumerate() {
        let time = common::median(rows[i].times.clone());
        let written = common::median(
            rows[i]
                .bytes
                .iter()
                .map(|b| Duration::from_nanos(*b))
                .collect(),
        )
        .as_nanos() as u64;
        println!(
            "| {name} | {} | {:.2} | {:.0} | {:.1} MiB | {:.0} MiB |",
            common::spread(&rows[i].times),
            time.as_secs_f64() / floor.as_secs_f64(),
            ms(common::median(rows[i].cpus.clone())),
            mib(written),
            mib(dir_bytes(&dirs[i]))
        );
    }
    let inc_written = common::median(
        rows[0]
            .bytes
            .iter()
            .map(|b| Duration::from_nanos(*b))
            .collect(),
    )
    .as_nanos() as u64;
    println!(
        "\nincremental: written per checkpoint {:.2}x the changed bytes ({:.1} MiB); wall {:.2}x the floor, \
         {:.2}x Burn's serialization + floor; disk after 10 {:.2}x (one full checkpoint + 10 x the change = {:.0} MiB)",
        inc_written as f64 / change as f64,
        mib(change),
        common::median(rows[0].times.clone()).as_secs_f64() / floor.as_secs_f64(),
        common::median(rows[0].times.clone()).as_secs_f64()
            / common::median(rows[4].times.clone()).as_secs_f64(),
        dir_bytes(&dirs[0]) as f64 / (full_size + 10 * change) as f64,
        mib(full_size + 10 * change)
    );
    let given_time = common::median(rows[5].times.clone());
    let atomic_floor = common::median(rows[6].times.clone());
    println!(
        "incremental, optimizer bytes given: wall {:.2}x the atomic floor ({:.1} ms vs {:.1} ms)",
        given_time.as_secs_f64() / atomic_floor.as_secs_f64(),
        ms(given_time),
        ms(atomic_floor)
    );
    println!(
        "\nWhere incremental, optimizer bytes given, goes (checkpoints 2-10, median (min-max)):\n"
    );
    println!("| part | wall ms |");
    println!("|---|---|");
    let mut parts = Duration::ZERO;
    for (name, times) in &phases {
        parts += common::median(times.clone());
        println!("| {name} | {} |", common::spread(times));
    }
    println!(
        "| rest (preparing the state, untimed) | {:.1} |",
        ms(given_time.saturating_sub(parts))
    );

    // What hashing the unchanged base costs: XXH3-128 of every base tensor, 1 and all threads.
    let base: Vec<Vec<u8>> = model
        .base
        .iter()
        .map(|l| l.weight.val().into_data().into_bytes().to_vec())
        .collect();
    let start = Instant::now();
    let one: u128 = base
        .iter()
        .map(|b| burnpack::checkpoint::content_hash(b))
        .fold(0, u128::wrapping_add);
    let single = start.elapsed();
    let start = Instant::now();
    let all: u128 = {
        use rayon::prelude::*;
        base.par_iter()
            .map(|b| burnpack::checkpoint::content_hash(b))
            .reduce(|| 0, u128::wrapping_add)
    };
    let parallel = start.elapsed();
    assert_eq!(one, all);
    println!(
        "hashing the base ({:.0} MiB): {:.0} ms on one thread ({:.1} GB/s), {:.0} ms on {} threads",
        mib(base_bytes),
        ms(single),
        base_bytes as f64 / single.as_secs_f64() / 1e9,
        ms(parallel),
        rayon::current_num_threads()
    );
    drop(base);

    // Loading the tenth checkpoint: model + optimizer, every tensor read. The files no load
    // reads go first (Burn's, the floor's, the full checkpoints 1-9), so that both
    // checkpoints fit in the page cache and a warm load is warm for both.
    for dir in &dirs[2..] {
        std::fs::remove_dir_all(dir).unwrap();
    }
    for step in 1..10 {
        std::fs::remove_file(full.path_for(step)).unwrap();
    }
    // Deleting 20 GiB keeps the disk busy a while (ext4 `discard`): let it settle.
    // SAFETY: `sync` takes no argument and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_secs(10));
    let load = |manager: &CheckpointManager| {
        let start = Instant::now();
        let ckpt = manager.latest().unwrap().unwrap();
        let opened = start.elapsed();
        let m = ckpt.load_model(Adapted::new(layers, &device)).unwrap();
        let model = start.elapsed();
        let o = ckpt.load_optimizer(AdamConfig::new().init()).unwrap();
        let optim = start.elapsed();
        std::hint::black_box((common::read_all(&m), o));
        if std::env::var_os("BURNPACK_BENCH_PHASES").is_some() {
            eprintln!(
                "  load phases ({}): open {:.1} ms, model {:.1} ms, optimizer {:.1} ms, read {:.1} ms",
                if ckpt.is_incremental() {
                    "incremental"
                } else {
                    "full"
                },
                ms(opened),
                ms(model - opened),
                ms(optim - model),
                ms(start.elapsed() - optim)
            );
        }
    };
    // Opens and loads as a process that did not save: the saving managers hold the files
    // their last save opened (mapped, their heads parsed), which would make the incremental
    // loads below neither first opens nor cold. Fresh managers of the same directories.
    drop((given, incremental));
    let incremental = CheckpointManager::new(&dirs[0])
        .unwrap()
        .keep_last(10)
        .incremental(true);
    let opens = common::env_or("BURNPACK_BENCH_OPENS", 40);
    for held in [false, true] {
        open_rounds([&full, &incremental], opens, held);
    }
    for cold in [false, true] {
        let (samples, ratios) = common::interleave(2 * runs, 2, |i| {
            let (manager, dir) = if i == 0 {
                (&full, &dirs[1])
            } else {
                (&incremental, &dirs[0])
            };
            if cold {
                common::evict_dir(dir);
            } else {
                load(manager);
            }
            let (time, cpu, _) = measure(dir, || load(manager));
            common::Sample::timed(time, cpu)
        });
        println!(
            "\nload + read of checkpoint 10 ({}): full {} ms, incremental {} ms, ratio {:.2}",
            if cold { "cold page cache" } else { "warm" },
            common::spread(&samples[0].iter().map(|s| s.time).collect::<Vec<_>>()),
            common::spread(&samples[1].iter().map(|s| s.time).collect::<Vec<_>>()),
            common::median_ratio(ratios[1].clone())
        );
    }
    drop((model, optim));

    // Full training: every tensor changes between checkpoints (256 MiB model + Adam).
    let mut model = Full {
        layers: (0..64)
            .map(|_| LinearConfig::new(1024, 1024).init(&device))
            .collect(),
    };
    let mut optim = AdamConfig::new().init();
    let dirs: Vec<_> = (0..2)
        .map(|i| {
            let d = bench.path().join(format!("full{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let managers = [
        CheckpointManager::new(&dirs[0]).unwrap().keep_last(2),
        CheckpointManager::new(&dirs[1])
            .unwrap()
            .keep_last(2)
            .incremental(true),
    ];
    let mut step = 0u64;
    let mut calls = 0usize;
    let (samples, ratios) = common::interleave(runs, 2, |i| {
        // A training step at the start of each round: both contenders save the same state.
        calls += 1;
        if calls % 2 == 1 {
            let x = Tensor::<2>::ones([2, 1024], &device);
            let loss = model.layers.iter().fold(x, |h, l| l.forward(h)).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(1e-3, model.clone(), grads);
            step += 1;
        }
        common::warm_memory(bench.path(), 768 << 20);
        let (time, cpu, _) = measure(&dirs[i], || {
            managers[i]
                .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
                .unwrap();
        });
        common::Sample::timed(time, cpu)
    });
    println!(
        "\nFull training (256 MiB model, every tensor trained, Adam: 768 MiB a checkpoint):\n"
    );
    println!("| contender | wall ms | ratio | CPU ms |");
    println!("|---|---|---|---|");
    for (i, name) in ["full", "incremental"].iter().enumerate() {
        println!(
            "| {name} | {} | {:.2} | {:.0} |",
            common::spread(&samples[i].iter().map(|s| s.time).collect::<Vec<_>>()),
            common::median_ratio(ratios[i].clone()),
            ms(common::median(samples[i].iter().map(|s| s.cpu).collect()))
        );
    }
}
