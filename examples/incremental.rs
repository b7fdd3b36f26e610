//! Fine-tuning with incremental checkpoints: a frozen base (8 MiB) under rank-4 adapters,
//! trained with Adam, checkpointed after every step into a directory (the first argument, or a
//! temporary one). The first checkpoint writes the base; every later one writes only the
//! adapters and their optimizer state, and refers to the base. The run then resumes from the
//! latest checkpoint in a fresh model and optimizer and checks that it continues exactly as a
//! run never stopped.
//!
//! `cargo run --release --example incremental [DIR]`

use std::time::Instant;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};

#[derive(Module, Debug)]
struct Adapted {
    base: Linear,
    down: Linear,
    up: Linear,
}

impl Adapted {
    fn new(device: &Device) -> Self {
        Self {
            base: LinearConfig::new(1024, 2048).init(device).no_grad(),
            down: LinearConfig::new(1024, 4).with_bias(false).init(device),
            up: LinearConfig::new(4, 2048).with_bias(false).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.base.forward(x.clone()) + self.up.forward(self.down.forward(x))
    }
}

fn step(model: Adapted, optim: &mut ModuleOptimizer, step: u64, device: &Device) -> Adapted {
    let x = Tensor::<2>::ones([4, 1024], device) * (step as f32 + 1.0).recip();
    let loss = model.forward(x).powf_scalar(2.0).mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    optim.step(1e-3, model, grads)
}

fn bytes(model: &Adapted) -> Vec<u8> {
    [&model.base.weight, &model.down.weight, &model.up.weight]
        .iter()
        .flat_map(|p| p.val().into_data().into_bytes().to_vec())
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| temp.path().to_path_buf(), Into::into);
    let device = Device::flex().autodiff();
    let manager = CheckpointManager::new(&dir)?.keep_last(3).incremental(true);

    let init = Adapted::new(&device);
    let mut optim = AdamConfig::new().init();
    let mut model = init.clone();
    for s in 0..6 {
        model = step(model, &mut optim, s, &device);
        let start = Instant::now();
        manager.save(TrainingState::new(&model, Progress::new(0, s + 1)).optimizer(&optim))?;
        let took = start.elapsed();
        let ckpt = manager.latest()?.ok_or("no checkpoint")?;
        let chain = ckpt.chain().ok_or("not incremental")?;
        let held: Vec<&str> = chain.held().map(|(name, _)| name).collect();
        let written: u64 = chain
            .data_files()
            .filter(|(name, _)| chain.held().any(|(_, file)| file == *name))
            .map(|(_, source)| source.layout().file_len())
            .sum();
        println!(
            "step {}: {:>5.1} ms, wrote {:>8} bytes, holds {} tensors, refers to {} ({})",
            s + 1,
            took.as_secs_f64() * 1e3,
            written,
            held.len(),
            chain.referred().count(),
            held.join(", ")
        );
    }
    let files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    println!("{} files in {}: {files:?}", files.len(), dir.display());

    // Resume from the latest checkpoint in a fresh model and optimizer, two more steps.
    let ckpt = manager.latest()?.ok_or("no checkpoint")?;
    let start = ckpt.progress().step;
    let mut resumed = ckpt.load_model(Adapted::new(&device))?;
    let mut resumed_optim = ckpt.load_optimizer(AdamConfig::new().init())?;
    ckpt.verify()?;
    for s in start..start + 2 {
        resumed = step(resumed, &mut resumed_optim, s, &device);
        model = step(model, &mut optim, s, &device);
    }
    assert_eq!(bytes(&resumed), bytes(&model), "the resumed run differs");
    println!("resumed from step {start}: bit-identical to the run never stopped");
    Ok(())
}
