//! Checkpoint benchmark: how long the training thread is blocked by a checkpoint of a 256 MiB
//! (or 1 GiB) model with Adam state (768 MiB, 3 GiB in all), and how long the whole save takes,
//! side by side in one run:
//!
//! - burnpack synchronous save (`TrainingState::save`: the whole write, atomic + fsync; the
//!   model goes to the file while the optimizer's record is serialized), and the same state
//!   written in one pass (`into_writer` + `write_to_file`);
//! - burnpack asynchronous save (`AsyncSaver::save` returns after the hand-over);
//! - Burn's records on the training thread, then a background write: `Module::into_record`,
//!   `ModuleOptimizer::to_record`, `LrScheduler::to_record` — what burn-train's
//!   `AsyncCheckpointer` does before handing over (three files per checkpoint);
//! - burn-train's `AsyncCheckpointer`s as `LearningCheckpointer` drives them, with its default
//!   `FileCheckpointer`s (three files) and with this crate's `PackCheckpointer` (one file);
//! - Burn's three files written synchronously (`save_file`, `ModuleOptimizer::save`,
//!   `LrSchedulerRecord::save`).
//!
//! - the reference: `save_pack` of a model of the checkpoint's size (same bytes, one file,
//!   atomic + fsync).
//!
//! Contenders run interleaved (each round starts one further along), each writing into a fresh
//! directory that is removed, untimed, after it; rows give the median and the range over
//! rounds. `BURNPACK_BENCH_PHASES=1` prints instead where a synchronous checkpoint's time goes,
//! phase by phase (wall, CPU of every thread, resident growth: the copies).
//!
//! `cargo bench --features train --bench checkpoint` (env `BURNPACK_BENCH_RUNS`, default 5;
//! `BURNPACK_BENCH_SIZE`, `256m` (default) or `1g`; `BURNPACK_BENCH_ONLY`, contenders whose
//! label contains one of these comma-separated words; `BURNPACK_BENCH_DIR`).

mod common;

use std::time::{Duration, Instant};

use burn::lr_scheduler::LrSchedulerRecord;
use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::OptimizerRecord;
use burn::optim::{AdamConfig, GradientsParams};
use burn::store::ModuleRecord;
use burn::tensor::{Device, Tensor};
use burn::train::checkpoint::{AsyncCheckpointer, Checkpointer, FileCheckpointer};
use burnpack::checkpoint::{AsyncSaver, CheckpointManager, Progress, TrainingState, WhenBusy};
use burnpack::module::PackModule;
use burnpack::train::PackCheckpointer;

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn main() {
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let dir = common::bench_dir();
    let device = Device::flex().autodiff();

    // 64 (256) layers of 1024x1024 f32 = 256 MiB (1 GiB); one Adam step creates two moments
    // per parameter.
    let size = std::env::var("BURNPACK_BENCH_SIZE").unwrap_or_else(|_| "256m".into());
    let layers = match size.as_str() {
        "256m" => 64,
        "1g" => 256,
        other => panic!("BURNPACK_BENCH_SIZE: 256m or 1g, not {other}"),
    };
    let mut model = Stack {
        layers: (0..layers)
            .map(|_| LinearConfig::new(1024, 1024).init(&device))
            .collect(),
    };
    let mut optim = AdamConfig::new().init();
    let mut sched = LinearLrSchedulerConfig::new(1e-3, 1e-4, 100)
        .init()
        .unwrap();
    let x = Tensor::<2>::ones([2, 1024], &device);
    let loss = model.layers.iter().fold(x, |h, l| l.forward(h)).mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    model = optim.step(sched.step(), model, grads);

    // Every contender writes into `out`, a fresh directory each run, removed after it (untimed):
    // no save pays for replacing or deleting the files of an earlier one.
    let out = dir.path().join("out");
    // burn-train's own path, as `LearningCheckpointer::checkpoint` takes it: the three records
    // on the training thread, each handed to its `AsyncCheckpointer` thread; the whole save
    // ends when the three threads are done (dropping an `AsyncCheckpointer` joins it).
    let burn_train = |checkpointers: (
        AsyncCheckpointer<ModuleRecord>,
        AsyncCheckpointer<OptimizerRecord>,
        AsyncCheckpointer<LrSchedulerRecord>,
    ),
                      epoch: usize| {
        let (m, o, s) = checkpointers;
        let start = Instant::now();
        m.save(epoch, model.clone().into_record()).unwrap();
        o.save(epoch, optim.to_record()).unwrap();
        s.save(epoch, sched.to_record()).unwrap();
        let stall = start.elapsed();
        drop((m, o, s));
        stall
    };
    let train_dir = out.join("burn-train");
    let pack_dir = out.join("pack-checkpointer");
    // A model of the checkpoint's size, for the reference row below.
    let same_bytes = Stack {
        layers: (0..3 * layers)
            .map(|_| LinearConfig::new(1024, 1024).init(&device))
            .collect(),
    };
    common::read_all(&same_bytes);
    // The state every burnpack contender saves: the model, Adam's state, the scheduler.
    let state = |run| {
        TrainingState::new(&model, Progress::new(0, run))
            .optimizer(&optim)
            .scheduler(sched.to_record())
    };
    // Each contender returns how long the training thread was blocked; the whole save is
    // timed around it (every file written and synced where the contender syncs).
    type Contender<'a> = (&'static str, Box<dyn FnMut(u64) -> Duration + 'a>);
    let mut contenders: Vec<Contender> = Vec::new();
    contenders.push((
        "burnpack, synchronous (one file)",
        Box::new(|run| {
            let start = Instant::now();
            let state = state(run);
            state.save(out.join("sync.bpk")).unwrap();
            start.elapsed()
        }),
    ));
    contenders.push((
        "burnpack, synchronous, one pass (into_writer + write_to_file)",
        Box::new(|run| {
            let start = Instant::now();
            let state = state(run);
            state
                .into_writer()
                .unwrap()
                .write_to_file(out.join("one-pass.bpk"))
                .unwrap();
            start.elapsed()
        }),
    ));
    contenders.push((
        "burnpack, AsyncSaver (one file)",
        Box::new(|run| {
            let manager = CheckpointManager::new(out.join("managed")).unwrap();
            let mut saver = AsyncSaver::new(manager, WhenBusy::Wait);
            let start = Instant::now();
            let state = state(run);
            saver.save(state).unwrap();
            let stall = start.elapsed();
            saver.wait().unwrap();
            stall
        }),
    ));
    contenders.push((
        "burn-train default checkpointers (FileCheckpointer x3: 3 files)",
        Box::new(|run| {
            let checkpointers = (
                AsyncCheckpointer::new(FileCheckpointer::new(&train_dir, "model")),
                AsyncCheckpointer::new(FileCheckpointer::new(&train_dir, "optim")),
                AsyncCheckpointer::new(FileCheckpointer::new(&train_dir, "scheduler")),
            );
            burn_train(checkpointers, run as usize)
        }),
    ));
    contenders.push((
        "burnpack PackCheckpointer in burn-train (one file)",
        Box::new(|run| {
            let pack = PackCheckpointer::new(&pack_dir).unwrap();
            let checkpointers = (
                AsyncCheckpointer::new(pack.clone()),
                AsyncCheckpointer::new(pack.clone()),
                AsyncCheckpointer::new(pack),
            );
            burn_train(checkpointers, run as usize)
        }),
    ));
    contenders.push((
        "Burn, synchronous (save_file + optimizer + scheduler files)",
        Box::new(|_| {
            let start = Instant::now();
            model.clone().save_file(out.join("m.bpk")).unwrap();
            optim.save(out.join("o.bpk")).unwrap();
            sched.to_record().save(out.join("s.bpk")).unwrap();
            start.elapsed()
        }),
    ));

    // The reference of a checkpoint's cost: `save_pack` of a model of the same number of
    // bytes (768 MiB: three times the layers), atomic and fsynced like the checkpoint.
    contenders.push((
        "reference: save_pack of a model of the same bytes (one file)",
        Box::new(|_| {
            let start = Instant::now();
            same_bytes.save_pack(out.join("same.bpk")).unwrap();
            start.elapsed()
        }),
    ));

    if std::env::var_os("BURNPACK_BENCH_PHASES").is_some() {
        phases(runs, &model, &optim, &sched, dir.path());
        return;
    }

    // `BURNPACK_BENCH_ONLY=a,b`: only the contenders whose label contains one of these.
    if let Ok(only) = std::env::var("BURNPACK_BENCH_ONLY") {
        contenders.retain(|(who, _)| only.split(',').any(|o| who.contains(o)));
    }
    // Interleaved: each round runs every contender, starting one further along.
    let n = contenders.len();
    // Per contender: training thread blocked, whole save, CPU, ratio to Burn's three files.
    type Samples = (Vec<Duration>, Vec<Duration>, Vec<Duration>, Vec<f64>);
    let mut samples: Vec<Samples> = vec![(Vec::new(), Vec::new(), Vec::new(), Vec::new()); n];
    let reference = contenders
        .iter()
        .position(|(who, _)| who.starts_with("Burn, synchronous"));
    for run in 0..runs {
        let mut totals = vec![Duration::ZERO; n];
        for k in 0..n {
            let i = (run + k) % n;
            std::fs::create_dir_all(&out).unwrap();
            // Fresh pages for what the save fills (see `common::warm_memory`), alike for all.
            common::warm_memory(dir.path(), 2 * ((3 * layers as u64) << 22));
            let cpu = common::cpu_time();
            let start = Instant::now();
            let stall = (contenders[i].1)(run as u64);
            totals[i] = start.elapsed();
            samples[i].0.push(stall);
            samples[i].1.push(totals[i]);
            samples[i].2.push(common::cpu_time() - cpu);
            std::fs::remove_dir_all(&out).unwrap();
        }
        if let Some(r) = reference {
            for i in 0..n {
                samples[i]
                    .3
                    .push(totals[i].as_secs_f64() / totals[r].as_secs_f64());
            }
        }
    }
    let cell = |v: &[Duration]| format!("{} ms", common::spread(v));
    let label = if layers == 64 {
        "256 MiB f32 model + Adam state (768 MiB)"
    } else {
        "1 GiB f32 model + Adam state (3 GiB)"
    };
    println!("\n{label}, {runs} interleaved rounds: median (min-max)\n");
    println!(
        "| checkpoint | training thread blocked | whole save | x Burn's three files (median of rounds) | CPU, ms (every thread) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for ((who, _), (stalls, totals, cpus, ratios)) in contenders.iter().zip(&samples) {
        let ratio = if ratios.is_empty() {
            String::new()
        } else {
            format!("{:.2}", common::median_ratio(ratios.clone()))
        };
        println!(
            "| {who} | {} | {} | {ratio} | {:.0} |",
            cell(stalls),
            cell(totals),
            common::median(cpus.clone()).as_secs_f64() * 1e3
        );
    }
}

/// Where a synchronous checkpoint's time goes, phase by phase in this process
/// (`BURNPACK_BENCH_PHASES=1`): wall and CPU time (every thread) and the growth of resident
/// memory (new copies of tensor bytes), median over `runs` rounds.
fn phases(
    runs: usize,
    model: &Stack,
    optim: &burn::optim::ModuleOptimizer,
    sched: &burn::lr_scheduler::module_lr_scheduler::ModuleLrScheduler,
    dir: &std::path::Path,
) {
    let names = [
        "model entries (pack_entries)",
        "optimizer clone",
        "ModuleOptimizer::to_record",
        "OptimizerRecord::into_bytes",
        "scheduler to_record + into_bytes",
        "assemble (parse, windows)",
        "write + fsync + rename",
    ];
    let mut samples: Vec<Vec<(Duration, Duration, i64)>> = vec![Vec::new(); names.len()];
    let warm = std::env::var_os("BURNPACK_BENCH_COLD").is_none();
    for run in 0..runs {
        if warm {
            common::warm_memory(dir, 3 * (768 << 20));
        }
        let mut marks = Vec::new();
        let mark = || {
            (
                Instant::now(),
                common::cpu_time(),
                common::resident_kib() as i64,
            )
        };
        marks.push(mark());
        let entries = model.pack_entries().unwrap();
        marks.push(mark());
        let clone = optim.clone();
        marks.push(mark());
        let record = clone.to_record();
        marks.push(mark());
        let bytes = record.into_bytes().unwrap();
        marks.push(mark());
        let sched_bytes = sched.to_record().into_bytes().unwrap();
        marks.push(mark());
        let reader = burnpack::read::Reader::from_bytes(bytes).unwrap();
        let sched_reader = burnpack::read::Reader::from_bytes(sched_bytes).unwrap();
        let mut all = entries;
        for (r, prefix) in [(&reader, "optim."), (&sched_reader, "scheduler.")] {
            for info in r.tensors_by_position() {
                all.push(
                    burnpack::write::Entry::from_stored(info, r.read(info).unwrap())
                        .prefixed(prefix),
                );
            }
        }
        let writer = burnpack::write::Writer::new(all);
        marks.push(mark());
        writer
            .write_to_file(dir.join(format!("phases-{run}.bpk")))
            .unwrap();
        marks.push(mark());
        for (i, w) in marks.windows(2).enumerate() {
            samples[i].push((w[1].0 - w[0].0, w[1].1 - w[0].1, w[1].2 - w[0].2));
        }
        drop((reader, sched_reader));
        let _ = std::fs::remove_file(dir.join(format!("phases-{run}.bpk")));
    }
    println!("\nWhere a synchronous checkpoint's time goes, {runs} rounds: median (min-max)\n");
    println!("| phase | wall, ms | CPU, ms | resident growth, MiB |");
    println!("|---|---:|---:|---:|");
    for (name, s) in names.iter().zip(&samples) {
        let walls: Vec<Duration> = s.iter().map(|x| x.0).collect();
        let cpus: Vec<Duration> = s.iter().map(|x| x.1).collect();
        let mut growth: Vec<i64> = s.iter().map(|x| x.2).collect();
        growth.sort_unstable();
        println!(
            "| {name} | {} | {:.0} | {} |",
            common::spread(&walls),
            common::median(cpus).as_secs_f64() * 1e3,
            growth[growth.len() / 2] >> 10
        );
    }
}
