//! Checkpoint stall benchmark: how long the training thread is blocked by a checkpoint of a
//! 256 MiB model with Adam state (768 MiB in all), side by side in one run:
//!
//! - burnpack synchronous save (`TrainingState::save`: the whole write, atomic + fsync);
//! - burnpack asynchronous save (`AsyncSaver::save` returns after the hand-over);
//! - Burn's records on the training thread, then a background write: `Module::into_record`,
//!   `ModuleOptimizer::to_record`, `LrScheduler::to_record` — what burn-train's
//!   `AsyncCheckpointer` does before handing over (three files per checkpoint);
//! - Burn's three files written synchronously (`save_file`, `ModuleOptimizer::save`,
//!   `LrSchedulerRecord::save`).
//!
//! `cargo bench --bench checkpoint` (env `BURNPACK_BENCH_RUNS`, default 5; `BURNPACK_BENCH_DIR`).

mod common;

use std::time::{Duration, Instant};

use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor};
use burnpack::checkpoint::{AsyncSaver, CheckpointManager, Progress, TrainingState, WhenBusy};

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn main() {
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let dir = common::bench_dir();
    let device = Device::flex().autodiff();

    // 64 layers of 1024x1024 f32 = 256 MiB; one Adam step creates two moments per parameter.
    let mut model = Stack {
        layers: (0..64)
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

    let manager = CheckpointManager::new(dir.path().join("managed"))
        .unwrap()
        .keep_last(1);
    let mut rows: Vec<(&str, Duration, Duration)> = Vec::new();
    let mut measure = |who: &'static str, f: &mut dyn FnMut(u64) -> Duration| {
        let mut stalls = Vec::new();
        let mut totals = Vec::new();
        for run in 0..runs {
            let start = Instant::now();
            stalls.push(f(run as u64));
            totals.push(start.elapsed());
        }
        rows.push((who, common::median(stalls), common::median(totals)));
    };

    measure("burnpack, synchronous (one file)", &mut |run| {
        let start = Instant::now();
        let state = TrainingState::new(&model, Progress::new(0, run))
            .optimizer(&optim)
            .scheduler(sched.to_record());
        state.save(dir.path().join("sync.bpk")).unwrap();
        start.elapsed()
    });
    measure("burnpack, AsyncSaver (one file)", &mut |run| {
        let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
        let start = Instant::now();
        let state = TrainingState::new(&model, Progress::new(0, run))
            .optimizer(&optim)
            .scheduler(sched.to_record());
        saver.save(state).unwrap();
        let stall = start.elapsed();
        saver.wait().unwrap();
        stall
    });
    measure(
        "Burn records on the training thread + background write (burn-train style, 3 files)",
        &mut |run| {
            let start = Instant::now();
            let model_record = model.clone().into_record();
            let optim_record = optim.to_record();
            let sched_record = sched.to_record();
            let stall = start.elapsed();
            let d = dir.path().to_path_buf();
            std::thread::spawn(move || {
                model_record
                    .save(d.join(format!("model-{run}.bpk")))
                    .unwrap();
                optim_record
                    .save(d.join(format!("optim-{run}.bpk")))
                    .unwrap();
                sched_record
                    .save(d.join(format!("scheduler-{run}.bpk")))
                    .unwrap();
            })
            .join()
            .unwrap();
            stall
        },
    );
    measure(
        "Burn, synchronous (save_file + optimizer + scheduler files)",
        &mut |run| {
            let start = Instant::now();
            model
                .clone()
                .save_file(dir.path().join(format!("m-{run}.bpk")))
                .unwrap();
            optim.save(dir.path().join(format!("o-{run}.bpk"))).unwrap();
            sched
                .to_record()
                .save(dir.path().join(format!("s-{run}.bpk")))
                .unwrap();
            start.elapsed()
        },
    );

    println!("\n256 MiB f32 model + Adam state (768 MiB), median of {runs} runs\n");
    println!("| checkpoint | training thread blocked | whole save |");
    println!("|---|---:|---:|");
    for (who, stall, total) in rows {
        println!(
            "| {who} | {:.0} ms | {:.0} ms |",
            stall.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );
    }
}
