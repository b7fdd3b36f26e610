//! burn-train's `Learner` with an incremental `PackCheckpointer` on a LoRA-shaped model (a
//! frozen base, small trained adapters, Adam): after the first epoch, each epoch writes about
//! the bytes that changed (the adapters and Adam's moments), far below the base; burn-train's
//! `KeepLastN` retention never breaks a kept epoch and leaves no data file unnamed; resuming
//! is bit-identical to a run never stopped; and every door reads an epoch's checkpoint
//! (`Checkpoint`, the manager, `PackStore`, the registry, `bpk inspect` / `verify`,
//! burn-train's own restore), `load_pack` refusing it with the way to load it.

mod common;

use std::collections::HashMap;
use std::path::Path;

use burn::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::logger::InMemoryMetricLogger;
use burn::train::metric::LossMetric;
use burn::train::{Learner, RegressionOutput, SupervisedTraining};
use burnpack::checkpoint::{Checkpoint, CheckpointManager};
use burnpack::module::PackModule;
use burnpack::source::TensorSource;
use burnpack::train::PackCheckpointer;
use common::train::{Batch, device, file_names as names, loaders};

/// Width of the frozen base (a 512 x 512 f32 matrix: 1 MiB) and rank of the adapters.
const WIDTH: usize = 512;
const RANK: usize = 4;

/// A LoRA-shaped model: frozen `embed`, `base` and `head`, trained adapters `a` and `b`
/// beside `base`.
#[derive(Module, Debug)]
struct Lora {
    embed: Linear,
    base: Linear,
    a: Param<Tensor<2>>,
    b: Param<Tensor<2>>,
    head: Linear,
}

impl Lora {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self.embed.forward(x).tanh();
        let adapted = h.clone().matmul(self.a.val()).matmul(self.b.val());
        self.head.forward((self.base.forward(h) + adapted).tanh())
    }

    fn regression(&self, batch: Batch) -> RegressionOutput {
        let output = self.forward(batch.x);
        let loss = (output.clone() - batch.y.clone()).powi_scalar(2).mean();
        RegressionOutput::new(loss, output, batch.y)
    }
}

regression_steps!(Lora);

fn fill(n: usize, k: f32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + k) * 0.37).sin() * scale)
        .collect()
}

fn param<const D: usize>(
    shape: [usize; D],
    k: f32,
    scale: f32,
    device: &Device,
) -> Param<Tensor<D>> {
    let n = shape.iter().product();
    Param::from_data(TensorData::new(fill(n, k, scale), shape), device)
}

/// The same starting point in every run (weights from a formula); the base frozen.
fn initial(device: &Device) -> Lora {
    let mut embed = LinearConfig::new(4, WIDTH).init(device);
    embed.weight = param([4, WIDTH], 1.0, 0.5, device);
    embed.bias = Some(param([WIDTH], 2.0, 0.1, device));
    let mut base = LinearConfig::new(WIDTH, WIDTH).init(device);
    base.weight = param([WIDTH, WIDTH], 3.0, 0.05, device);
    base.bias = Some(param([WIDTH], 4.0, 0.1, device));
    let mut head = LinearConfig::new(WIDTH, 2).init(device);
    head.weight = param([WIDTH, 2], 5.0, 0.05, device);
    head.bias = Some(param([2], 6.0, 0.1, device));
    Lora {
        embed: embed.no_grad(),
        base: base.no_grad(),
        a: param([WIDTH, RANK], 7.0, 0.05, device),
        b: param([RANK, WIDTH], 8.0, 0.05, device),
        head: head.no_grad(),
    }
}

/// Random weights: a resumed run must not depend on the model it starts from.
fn random(device: &Device) -> Lora {
    Lora {
        embed: LinearConfig::new(4, WIDTH).init(device).no_grad(),
        base: LinearConfig::new(WIDTH, WIDTH).init(device).no_grad(),
        a: param([WIDTH, RANK], 0.5, 1.0, device),
        b: param([RANK, WIDTH], 0.25, 1.0, device),
        head: LinearConfig::new(WIDTH, 2).init(device).no_grad(),
    }
}

/// Trains to `epochs` (from `resume` when given), checkpoints in `dir/checkpoint` kept by
/// `KeepLastN(keep)`, incremental or not; returns the trained model.
fn train(
    dir: &Path,
    incremental: bool,
    model: Lora,
    epochs: usize,
    resume: Option<usize>,
    keep: usize,
) -> Lora {
    let (train, valid) = loaders();
    let pack = PackCheckpointer::new(dir.join("checkpoint"))
        .unwrap()
        .incremental(incremental);
    let mut training = SupervisedTraining::new(dir, train, valid)
        .num_epochs(epochs)
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(keep))
        .with_metric_logger(InMemoryMetricLogger::new())
        .metric_train_numeric(LossMetric::new())
        .with_application_logger(None)
        .with_custom_checkpointers(pack.clone(), pack.clone(), pack);
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    let scheduler = ExponentialLrSchedulerConfig::new(0.01, 0.8)
        .init()
        .expect("valid scheduler");
    training
        .launch(Learner::new(model, AdamConfig::new().init(), scheduler))
        .model
}

/// Every parameter's bytes, in module order.
fn params(model: &Lora) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for linear in [&model.embed, &model.base, &model.head] {
        all.push(linear.weight.val().into_data().bytes().to_vec());
        all.push(
            linear
                .bias
                .as_ref()
                .unwrap()
                .val()
                .into_data()
                .bytes()
                .to_vec(),
        );
    }
    all.push(model.a.val().into_data().bytes().to_vec());
    all.push(model.b.val().into_data().bytes().to_vec());
    all
}

/// Every tensor of a checkpoint with its bytes (an incremental one's through its chain).
fn contents(path: &Path) -> HashMap<String, Vec<u8>> {
    let ckpt = Checkpoint::open(path).unwrap();
    let chain = ckpt.chain().expect("an incremental checkpoint");
    chain
        .tensors()
        .iter()
        .map(|t| (t.name().to_string(), chain.read(t).unwrap().to_vec()))
        .collect()
}

/// The bytes each epoch wrote: its manifest and the data files of its step.
fn written_by(dir: &Path, epoch: usize) -> u64 {
    let data = format!("data-{epoch:020}-");
    let ckpt = format!("ckpt-{epoch:020}.bpk");
    names(dir)
        .iter()
        .filter(|n| n.starts_with(&data) || **n == ckpt)
        .map(|n| std::fs::metadata(dir.join(n)).unwrap().len())
        .sum()
}

/// After epoch 1, an epoch writes its changed tensors (adapters, Adam's moments) and a
/// manifest: within 1.2x those bytes plus a small constant, far below the frozen base.
#[test]
fn each_epoch_writes_the_bytes_that_changed() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    let epochs = 4;
    train(dir.path(), true, initial(&device), epochs, None, epochs + 1);
    let ckpt_dir = dir.path().join("checkpoint");
    let pack = PackCheckpointer::new(&ckpt_dir).unwrap();
    let base_bytes = (WIDTH * WIDTH * 4) as u64;
    let first = written_by(&ckpt_dir, 1);
    assert!(first > base_bytes, "epoch 1 writes the base: {first}");
    let mut before = contents(&pack.path_for(1));
    for epoch in 2..=epochs {
        let now = contents(&pack.path_for(epoch));
        // What changed since the epoch before, tensor by tensor, from the bytes themselves.
        let changed: u64 = now
            .iter()
            .filter(|(name, bytes)| before.get(*name) != Some(*bytes))
            .map(|(_, bytes)| bytes.len() as u64)
            .sum();
        let adapters = (2 * WIDTH * RANK * 4) as u64;
        // The adapters and Adam's two moments of each changed.
        assert!(changed >= 3 * adapters, "epoch {epoch}: {changed} changed");
        assert!(
            changed < base_bytes / 8,
            "epoch {epoch}: the base did not change, yet {changed} bytes did"
        );
        let written = written_by(&ckpt_dir, epoch);
        println!("epoch {epoch}: {written} bytes written, {changed} changed, base {base_bytes}");
        assert!(
            written as f64 <= 1.2 * changed as f64 + 16_384.0,
            "epoch {epoch}: {written} bytes written for {changed} changed"
        );
        assert!(written < base_bytes / 4, "epoch {epoch}: {written}");
        let chain_ckpt = Checkpoint::open(pack.path_for(epoch)).unwrap();
        let chain = chain_ckpt.chain().unwrap();
        assert!(
            chain
                .referred()
                .any(|(name, _)| name == "model.base.weight"),
            "epoch {epoch} refers to the base"
        );
        before = now;
    }
}

/// Every epoch's checkpoint in `ckpt_dir` opens, verifies and loads; every data file is
/// named by one of them.
fn assert_sound(ckpt_dir: &Path, epochs: &[usize], last: &Lora) {
    let pack = PackCheckpointer::new(ckpt_dir).unwrap();
    let (ckpts, data): (Vec<String>, Vec<String>) = names(ckpt_dir)
        .into_iter()
        .partition(|n| n.starts_with("ckpt-"));
    let expected: Vec<String> = epochs
        .iter()
        .map(|e| {
            pack.path_for(*e)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(ckpts, expected);
    let mut named = Vec::new();
    for &epoch in epochs {
        let ckpt = Checkpoint::open(pack.path_for(epoch)).unwrap();
        assert!(ckpt.is_incremental() && ckpt.has_optimizer() && ckpt.has_scheduler());
        let chain = ckpt.chain().unwrap();
        assert_eq!(ckpt.verify().unwrap(), chain.tensors().len());
        named.extend(chain.data_files().map(|(n, _)| n.to_string()));
        ckpt.load_model(random(&device())).unwrap();
        let _: burn::optim::OptimizerRecord =
            burn::train::checkpoint::Checkpointer::restore(&pack, epoch).unwrap();
    }
    named.sort();
    named.dedup();
    assert_eq!(data, named, "every data file is named by a kept checkpoint");
    let latest = CheckpointManager::new(ckpt_dir)
        .unwrap()
        .latest()
        .unwrap()
        .unwrap();
    let newest = *epochs.last().unwrap();
    assert_eq!(latest.progress().epoch, newest as u64);
    let loaded = latest.load_model(random(&device())).unwrap();
    assert_eq!(params(&loaded), params(last));
    assert_eq!(pack.latest_epoch().unwrap(), Some(newest));
}

/// `KeepLastN(2)`: the deleted epochs' data files go, the base's stays (the kept epochs
/// refer to it); resuming from the latest epoch gives the bits of a run never stopped.
#[test]
fn retention_keeps_what_kept_epochs_name_and_resuming_is_bit_identical() {
    let device = device();
    let straight_dir = tempfile::tempdir().unwrap();
    let straight = train(straight_dir.path(), true, initial(&device), 5, None, 2);
    let ckpt_dir = straight_dir.path().join("checkpoint");
    assert_sound(&ckpt_dir, &[4, 5], &straight);
    let data = names(&ckpt_dir);
    assert!(
        data.iter()
            .any(|n| n.starts_with(&format!("data-{:020}-", 1))),
        "the base's data file is kept: {data:?}"
    );
    assert!(
        !data
            .iter()
            .any(|n| n.starts_with(&format!("data-{:020}-", 2))),
        "epoch 2's data file is gone with it: {data:?}"
    );

    // Full checkpoints train to the same bits.
    let full_dir = tempfile::tempdir().unwrap();
    let full = train(full_dir.path(), false, initial(&device), 5, None, 2);
    assert_eq!(params(&full), params(&straight));

    let resumed_dir = tempfile::tempdir().unwrap();
    train(resumed_dir.path(), true, initial(&device), 3, None, 2);
    let ckpt_dir = resumed_dir.path().join("checkpoint");
    let pack = PackCheckpointer::new(&ckpt_dir).unwrap();
    assert_eq!(pack.latest_epoch().unwrap(), Some(3));
    let resumed = train(resumed_dir.path(), true, random(&device), 5, Some(3), 2);
    assert_eq!(params(&resumed), params(&straight));
    assert_sound(&ckpt_dir, &[4, 5], &straight);
}

/// Every door reads an epoch's incremental checkpoint.
#[test]
fn every_door_reads_an_epoch() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    let trained = train(dir.path(), true, initial(&device), 2, None, 2);
    let pack = PackCheckpointer::new(dir.path().join("checkpoint")).unwrap();
    let path = pack.path_for(2);
    assert!(Checkpoint::open(&path).unwrap().is_incremental());

    // burn-train's restore.
    let record =
        burn::train::checkpoint::Checkpointer::<burn::store::ModuleRecord>::restore(&pack, 2)
            .unwrap();
    assert_eq!(
        params(&random(&device).load_record(record)),
        params(&trained)
    );

    // `load_pack` refuses a manifest, naming the way to load it.
    let err = random(&device).load_pack(&path).unwrap_err().to_string();
    assert!(
        err.contains("incremental checkpoint") && err.contains("Checkpoint::open"),
        "{err}"
    );

    // The registry: the manifest with its data files, under the checkpoint's names.
    let any = burnpack::interop::open_any(&path).unwrap();
    let weight = any.tensor("model.base.weight").unwrap();
    assert_eq!(
        any.read(weight).unwrap().to_vec(),
        trained.base.weight.val().into_data().bytes().to_vec()
    );

    // PackStore over the manifest's file (the checkpoint's namespace, `model.`, read as its module).
    #[cfg(feature = "store")]
    {
        use burn::store::ModuleSnapshot;
        use burnpack::store::PackStore;
        let mut fresh = random(&device);
        let mut store = PackStore::from_file(&path);
        fresh.load_from(&mut store).unwrap();
        assert_eq!(params(&fresh), params(&trained));
    }

    // bpk.
    #[cfg(feature = "cli")]
    {
        let bpk = |command: &str| {
            std::process::Command::new(env!("CARGO_BIN_EXE_bpk"))
                .arg(command)
                .arg(&path)
                .output()
                .unwrap()
        };
        let inspected = bpk("inspect");
        let text = String::from_utf8_lossy(&inspected.stdout);
        assert!(inspected.status.success(), "{text}");
        assert!(
            text.contains("model.base.weight")
                && text.contains("optim.")
                && text.contains("referred"),
            "{text}"
        );
        let verified = bpk("verify");
        assert!(
            verified.status.success(),
            "{}",
            String::from_utf8_lossy(&verified.stderr)
        );
    }
}

/// A part-order case: a directory, its `PackCheckpointer` (incremental or not), the device, an
/// optimizer to save records of.
fn part_order_case(
    incremental: bool,
) -> (
    tempfile::TempDir,
    PackCheckpointer,
    Device,
    burn::optim::ModuleOptimizer,
) {
    let dir = tempfile::tempdir().unwrap();
    let pack = PackCheckpointer::new(dir.path())
        .unwrap()
        .incremental(incremental);
    (dir, pack, device(), burn::optim::SgdConfig::new().init())
}

/// burn-train's three checkpointer threads run apart: under `KeepLastN(1)` the scheduler's
/// thread can save epochs 1 and 2 and delete its part of epoch 1 before the model's part of
/// epoch 1 arrives. That delete is kept: once the other two parts delete epoch 1, its
/// manifest and the data files no kept epoch names go (full and incremental alike).
#[test]
fn a_delete_that_comes_while_the_epoch_is_assembled_is_kept() {
    use burn::lr_scheduler::{LrScheduler, constant::ConstantLr};
    use burn::train::checkpoint::Checkpointer;
    for incremental in [false, true] {
        let (dir, pack, device, optim) = part_order_case(incremental);
        let sched = || ConstantLr::new(0.1).to_record();
        let (one, two) = (initial(&device), random(&device));
        pack.save(1, sched()).unwrap();
        pack.save(2, sched()).unwrap();
        Checkpointer::<burn::lr_scheduler::LrSchedulerRecord>::delete(&pack, 1).unwrap();
        pack.save(1, one.into_record()).unwrap();
        pack.save(1, optim.to_record()).unwrap();
        pack.save(2, two.into_record()).unwrap();
        pack.save(2, optim.to_record()).unwrap();
        Checkpointer::<burn::store::ModuleRecord>::delete(&pack, 1).unwrap();
        Checkpointer::<burn::optim::OptimizerRecord>::delete(&pack, 1).unwrap();
        assert!(
            !pack.path_for(1).exists(),
            "incremental {incremental}: epoch 1 deleted"
        );
        let left = names(dir.path());
        let data: Vec<_> = left.iter().filter(|n| n.starts_with("data-")).collect();
        assert_eq!(data.len(), usize::from(incremental), "{left:?}");
        Checkpoint::open(pack.path_for(2))
            .unwrap()
            .verify()
            .unwrap();
    }
}

/// The same part saved twice before the epoch completes: the second replaces the first while
/// it is held (small parts, and every part of an incremental epoch).
#[test]
fn a_part_saved_again_before_the_epoch_completes_replaces_the_first() {
    use burn::lr_scheduler::{LrScheduler, constant::ConstantLr};
    use burn::train::checkpoint::Checkpointer;
    for incremental in [false, true] {
        let (_dir, pack, device, optim) = part_order_case(incremental);
        let second = random(&device);
        pack.save(1, initial(&device).into_record()).unwrap();
        pack.save(1, second.clone().into_record()).unwrap();
        pack.save(1, optim.to_record()).unwrap();
        pack.save(1, ConstantLr::new(0.1).to_record()).unwrap();
        let loaded = Checkpoint::open(pack.path_for(1))
            .unwrap()
            .load_model(initial(&device))
            .unwrap();
        assert_eq!(
            params(&loaded),
            params(&second),
            "incremental {incremental}"
        );
    }
}

/// Optimizer bytes that are a pack this crate wrote (a checkpoint, a manifest, a model saved
/// here) are refused by name: Burn's optimizer record has no marker, those do.
#[test]
fn optimizer_bytes_refuse_what_is_not_an_optimizer_record() {
    use burn::tensor::Bytes;
    use burnpack::checkpoint::{Progress, TrainingState};
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let model = initial(&device);
    let full = dir.path().join("full.bpk");
    TrainingState::new(&model, Progress::new(0, 1))
        .save(&full)
        .unwrap();
    let saved_model = dir.path().join("model.bpk");
    model.clone().save_pack(&saved_model).unwrap();
    for wrong in [&full, &saved_model] {
        let bytes = Bytes::from_bytes_vec(std::fs::read(wrong).unwrap());
        let err = TrainingState::new(&model, Progress::new(0, 2))
            .optimizer_bytes(bytes)
            .save(dir.path().join("out.bpk"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("optimizer"), "{err}");
        assert!(err.contains("not an optimizer record"), "{err}");
        assert!(!dir.path().join("out.bpk").exists());
    }
}
