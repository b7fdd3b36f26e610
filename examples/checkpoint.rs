//! Trains a small MLP with Adam and a linear LR schedule, checkpointing every few steps in a
//! child process that is killed with SIGKILL mid-run; resumes from the latest checkpoint and
//! checks that the result is bit-identical to a run that was never interrupted.
//!
//! `cargo run --release --example checkpoint`

use std::time::{Duration, Instant};

use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burnpack::checkpoint::{AsyncSaver, CheckpointManager, Progress, TrainingState, WhenBusy};
use burnpack::module::PackModule;

const STEPS: u64 = 400;
const EVERY: u64 = 20;

#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    act: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Self {
            a: LinearConfig::new(8, 256).init(device),
            b: LinearConfig::new(256, 1).init(device),
            act: Relu::new(),
        }
    }
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.b.forward(self.act.forward(self.a.forward(x)))
    }
}

fn batch(step: u64, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let xs: Vec<f32> = (0..128)
        .map(|i| ((i * 7 + step * 13) % 29) as f32 / 29.0 - 0.5)
        .collect();
    let ys: Vec<f32> = xs
        .chunks(8)
        .map(|r| r[0] * 2.0 - r[1] + r[2] * r[3] - r[7])
        .collect();
    (
        Tensor::from_data(TensorData::new(xs, [16, 8]), device),
        Tensor::from_data(TensorData::new(ys, [16, 1]), device),
    )
}

fn optimizer() -> ModuleOptimizer {
    AdamConfig::new().init()
}

fn scheduler() -> ModuleLrScheduler {
    LinearLrSchedulerConfig::new(1e-2, 1e-4, STEPS as usize)
        .init()
        .expect("valid schedule")
}

/// Trains from `start` to `STEPS`; checkpoints asynchronously every `EVERY` steps when given
/// a saver. Returns the model and the last loss.
fn train(
    mut model: Mlp,
    optim: &mut ModuleOptimizer,
    sched: &mut ModuleLrScheduler,
    start: u64,
    mut saver: Option<&mut AsyncSaver<CheckpointManager>>,
) -> (Mlp, f32) {
    let device = Device::flex().autodiff();
    let mut last = 0.0;
    for step in start..STEPS {
        let (x, y) = batch(step, &device);
        let loss = (model.forward(x) - y).powf_scalar(2.0).mean();
        last = loss.clone().into_scalar::<f32>();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(sched.step(), model, grads);
        if let Some(saver) = saver.as_deref_mut()
            && (step + 1) % EVERY == 0
        {
            let state = TrainingState::new(
                &model,
                Progress::new(0, step + 1).with("loss", f64::from(last)),
            )
            .optimizer(optim)
            .scheduler(sched.to_record());
            saver.save(state).expect("checkpoint");
        }
    }
    (model, last)
}

fn weights(model: &Mlp) -> Vec<u8> {
    let mut out = model.a.weight.val().into_data().as_bytes().to_vec();
    out.extend_from_slice(model.b.weight.val().into_data().as_bytes());
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex().autodiff();
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, dir] = &args[..]
        && mode == "--child"
    {
        // The process that gets killed: trains from the start, checkpointing as it goes.
        let manager = CheckpointManager::new(dir)?.keep_last(3);
        let mut saver = AsyncSaver::new(manager, WhenBusy::Wait);
        let model = Mlp::new(&device).load_pack(std::path::Path::new(dir).join("init.bpk"))?;
        let (mut optim, mut sched) = (optimizer(), scheduler());
        train(model, &mut optim, &mut sched, 0, Some(&mut saver));
        saver.wait()?;
        return Ok(());
    }

    let dir = tempfile::tempdir()?;
    Mlp::new(&device).save_pack(dir.path().join("init.bpk"))?;

    // 1. The reference: never interrupted.
    let start = Instant::now();
    let (mut optim, mut sched) = (optimizer(), scheduler());
    let (reference, loss) = train(
        Mlp::new(&device).load_pack(dir.path().join("init.bpk"))?,
        &mut optim,
        &mut sched,
        0,
        None,
    );
    println!(
        "uninterrupted run: {STEPS} steps, final loss {loss:.5} ({:.0} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );

    // 2. A child process trains and checkpoints; it is killed with SIGKILL mid-run.
    let manager = CheckpointManager::new(dir.path())?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["--child", dir.path().to_str().unwrap()])
        .spawn()?;
    while manager.list()?.last().is_none_or(|c| c.step < STEPS / 2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill()?;
    child.wait()?;
    let steps: Vec<u64> = manager.list()?.iter().map(|c| c.step).collect();
    println!("killed the training process (SIGKILL); checkpoints on disk at steps {steps:?}");

    // 3. Resume from the latest checkpoint in this process.
    let manager = CheckpointManager::new(dir.path())?; // removes the killed process's scratch file
    let ckpt = manager.latest()?.ok_or("no checkpoint survived")?;
    let at = ckpt.progress().step;
    let model = ckpt.load_model(Mlp::new(&device))?;
    let mut optim = ckpt.load_optimizer(optimizer())?;
    let mut sched = scheduler().load_record(ckpt.scheduler_record()?);
    println!(
        "resumed from step {at} (loss then {:?})",
        ckpt.progress().scalars.get("loss")
    );
    let (resumed, loss) = train(model, &mut optim, &mut sched, at, None);
    println!("resumed run finished: final loss {loss:.5}");

    if weights(&resumed) == weights(&reference) {
        println!("the resumed run matches the uninterrupted one bit for bit");
        Ok(())
    } else {
        Err("the resumed run differs from the uninterrupted one".into())
    }
}
