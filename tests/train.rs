//! burn-train's `SupervisedTraining` with `PackCheckpointer`: one file per epoch, retention by
//! burn-train's strategy, bit-identical resumption (also against burn-train's own
//! checkpointers), and a training process killed with SIGKILL that resumes from the newest
//! complete checkpoint; each with full and with incremental checkpoints
//! (`PackCheckpointer::incremental`).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
use burnpack::train::PackCheckpointer;
use common::train::{Batch, device, file_names as files, loaders};

#[derive(Module, Debug)]
struct Toy {
    hidden: Linear,
    out: Linear,
}

impl Toy {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out.forward(self.hidden.forward(x).tanh())
    }

    fn regression(&self, batch: Batch) -> RegressionOutput {
        let output = self.forward(batch.x);
        let loss = (output.clone() - batch.y.clone()).powi_scalar(2).mean();
        RegressionOutput::new(loss, output, batch.y)
    }
}

regression_steps!(Toy);

/// The same starting point in every process: weights from a formula, not a random generator.
fn initial(device: &Device) -> Toy {
    let mut toy = Toy {
        hidden: LinearConfig::new(4, 8).init(device),
        out: LinearConfig::new(8, 2).init(device),
    };
    let fill = |n: usize, k: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + k) * 0.37).sin() * 0.5)
            .collect()
    };
    toy.hidden.weight = Param::from_data(TensorData::new(fill(32, 1.0), [4, 8]), device);
    toy.out.weight = Param::from_data(TensorData::new(fill(16, 2.0), [8, 2]), device);
    toy.hidden.bias = Some(Param::from_data(TensorData::new(fill(8, 3.0), [8]), device));
    toy.out.bias = Some(Param::from_data(TensorData::new(fill(2, 4.0), [2]), device));
    toy
}

/// Random weights: a resumed run must not depend on the model it starts from.
fn random(device: &Device) -> Toy {
    Toy {
        hidden: LinearConfig::new(4, 8).init(device),
        out: LinearConfig::new(8, 2).init(device),
    }
}

fn learner(model: Toy) -> Learner<Toy> {
    let scheduler = ExponentialLrSchedulerConfig::new(0.05, 0.8)
        .init()
        .expect("valid scheduler");
    Learner::new(model, AdamConfig::new().init(), scheduler)
}

/// Which checkpointers a run uses.
#[derive(Clone, Copy)]
enum With {
    /// `PackCheckpointer`, incremental or not.
    Pack(bool),
    BurnDefault,
}

/// Both modes of `PackCheckpointer`: full, then incremental.
const MODES: [bool; 2] = [false, true];

fn checkpointer(dir: impl AsRef<Path>, incremental: bool) -> PackCheckpointer {
    PackCheckpointer::new(dir).unwrap().incremental(incremental)
}

/// The names of a checkpoint's tensors (an incremental one's through its manifest).
fn tensor_names(ckpt: &Checkpoint) -> Vec<String> {
    match ckpt.chain() {
        Some(chain) => chain.locations().map(|(n, _)| n.to_string()).collect(),
        None => ckpt
            .reader()
            .tensors()
            .iter()
            .map(|t| t.name().to_string())
            .collect(),
    }
}

/// Trains `model` to `epochs` (from `resume` when given) with checkpoints in `dir/checkpoint`;
/// returns the trained model.
fn train(
    dir: &Path,
    with: With,
    model: Toy,
    epochs: usize,
    resume: Option<usize>,
    keep: usize,
) -> Toy {
    let (train, valid) = loaders();
    let mut training = SupervisedTraining::new(dir, train, valid)
        .num_epochs(epochs)
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(keep))
        .with_metric_logger(InMemoryMetricLogger::new())
        .metric_train_numeric(LossMetric::new())
        .with_application_logger(None);
    training = match with {
        With::Pack(incremental) => {
            let pack = checkpointer(dir.join("checkpoint"), incremental);
            training.with_custom_checkpointers(pack.clone(), pack.clone(), pack)
        }
        With::BurnDefault => training.with_default_checkpointers(),
    };
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    training.launch(learner(model)).model
}

/// Every parameter's bytes, in module order.
fn params(model: &Toy) -> Vec<Vec<u8>> {
    let mut all = vec![
        model.hidden.weight.val().into_data().bytes().to_vec(),
        model.out.weight.val().into_data().bytes().to_vec(),
    ];
    for bias in [&model.hidden.bias, &model.out.bias] {
        all.push(bias.as_ref().unwrap().val().into_data().bytes().to_vec());
    }
    all
}

#[test]
fn one_file_per_epoch_with_the_strategys_retention() {
    for incremental in MODES {
        one_file_per_epoch(incremental);
    }
}

fn one_file_per_epoch(incremental: bool) {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let trained = train(
        dir.path(),
        With::Pack(incremental),
        initial(&device),
        4,
        None,
        2,
    );
    let ckpt_dir = dir.path().join("checkpoint");
    let pack = checkpointer(&ckpt_dir, incremental);
    // KeepLastN(2) after 4 epochs: epochs 3 and 4, one file each, named as the README and the
    // `train` docs say (`ckpt-00000000000000000001.bpk` for epoch 1); incremental, with the
    // data files they name and no other.
    let (ckpts, data): (Vec<String>, Vec<String>) = files(&ckpt_dir)
        .into_iter()
        .partition(|n| n.starts_with("ckpt-"));
    assert_eq!(
        ckpts,
        [
            "ckpt-00000000000000000003.bpk",
            "ckpt-00000000000000000004.bpk"
        ]
    );
    let mut named: Vec<String> = [3, 4]
        .iter()
        .flat_map(|&e| {
            let ckpt = Checkpoint::open(pack.path_for(e)).unwrap();
            assert_eq!(ckpt.is_incremental(), incremental);
            ckpt.chain()
                .map(|c| c.data_files().map(|(n, _)| n.to_string()).collect())
                .unwrap_or_else(Vec::new)
        })
        .collect();
    named.sort();
    named.dedup();
    assert_eq!(data, named, "incremental: {incremental}");
    assert_eq!(data.is_empty(), !incremental);
    assert_eq!(
        pack.path_for(4),
        ckpt_dir.join("ckpt-00000000000000000004.bpk")
    );
    assert_eq!(pack.latest_epoch().unwrap(), Some(4));
    // An ordinary checkpoint: the manager lists it, `Checkpoint` opens it, the model loads
    // from it with `load_pack`, and it holds the optimizer (Adam moments) and the scheduler.
    let manager = CheckpointManager::new(&ckpt_dir).unwrap();
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().epoch, 4);
    assert!(latest.has_optimizer() && latest.has_scheduler());
    assert!(
        tensor_names(&latest)
            .iter()
            .any(|t| t.starts_with("optim.")),
        "Adam's moments are in the checkpoint"
    );
    assert_eq!(latest.verify().unwrap(), tensor_names(&latest).len());
    let loaded = if incremental {
        // `load_pack` refuses a manifest, saying how to load it; the checkpoint loads it.
        let err = random(&device).load_pack(pack.path_for(4)).unwrap_err();
        assert!(err.to_string().contains("Checkpoint::open"), "{err}");
        latest.load_model(random(&device)).unwrap()
    } else {
        random(&device).load_pack(pack.path_for(4)).unwrap()
    };
    assert_eq!(params(&loaded), params(&trained));
}

#[test]
fn resuming_is_bit_identical_to_training_straight_through() {
    let device = device();
    let straight_dir = tempfile::tempdir().unwrap();
    let straight = train(
        straight_dir.path(),
        With::Pack(false),
        initial(&device),
        5,
        None,
        5,
    );

    for incremental in MODES {
        let straight_here = tempfile::tempdir().unwrap();
        let here = train(
            straight_here.path(),
            With::Pack(incremental),
            initial(&device),
            5,
            None,
            5,
        );
        assert_eq!(
            params(&here),
            params(&straight),
            "incremental: {incremental}"
        );
        let resumed_dir = tempfile::tempdir().unwrap();
        train(
            resumed_dir.path(),
            With::Pack(incremental),
            initial(&device),
            2,
            None,
            5,
        );
        let resumed = train(
            resumed_dir.path(),
            With::Pack(incremental),
            random(&device),
            5,
            Some(2),
            5,
        );
        assert_eq!(
            params(&resumed),
            params(&straight),
            "incremental: {incremental}"
        );
    }

    // burn-train's own checkpointers (three files per epoch) resume to the same bits.
    let burn_dir = tempfile::tempdir().unwrap();
    train(
        burn_dir.path(),
        With::BurnDefault,
        initial(&device),
        2,
        None,
        5,
    );
    assert!(burn_dir.path().join("checkpoint/optim-2.bpk").exists());
    let burn_resumed = train(
        burn_dir.path(),
        With::BurnDefault,
        random(&device),
        5,
        Some(2),
        5,
    );
    assert_eq!(params(&burn_resumed), params(&straight));
}

#[test]
fn restore_of_a_missing_or_damaged_epoch_names_the_file() {
    for incremental in MODES {
        restore_of_a_missing_or_damaged_epoch(incremental);
    }
}

fn restore_of_a_missing_or_damaged_epoch(incremental: bool) {
    use burn::store::ModuleRecord;
    use burn::train::checkpoint::Checkpointer;
    let dir = tempfile::tempdir().unwrap();
    let pack = checkpointer(dir.path(), incremental);
    let err = Checkpointer::<ModuleRecord>::restore(&pack, 7).unwrap_err();
    assert!(err.to_string().contains("ckpt-"), "{err}");

    // A complete epoch, then one byte of its data flipped.
    let device = Device::flex();
    let model = initial(&device);
    Checkpointer::save(&pack, 1, model.clone().into_record()).unwrap();
    let optim: burn::optim::ModuleOptimizer = AdamConfig::new().init();
    Checkpointer::save(&pack, 1, optim.to_record()).unwrap();
    let scheduler = ExponentialLrSchedulerConfig::new(0.05, 0.8).init().unwrap();
    Checkpointer::save(&pack, 1, scheduler.to_record()).unwrap();
    // The file that holds the tensors: the checkpoint, or its one data file.
    let path = if incremental {
        let data: Vec<String> = files(dir.path())
            .into_iter()
            .filter(|n| n.starts_with("data-"))
            .collect();
        assert_eq!(data.len(), 1, "{data:?}");
        dir.path().join(&data[0])
    } else {
        pack.path_for(1)
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let err = Checkpointer::<ModuleRecord>::restore(&pack, 1).unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("checksum"), "{message}");
}

#[test]
fn deletes_remove_a_file_only_when_all_three_parts_are_deleted() {
    for incremental in MODES {
        deletes_remove_a_file_only_when_all_three_parts_are(incremental);
    }
}

fn deletes_remove_a_file_only_when_all_three_parts_are(incremental: bool) {
    use burn::optim::OptimizerRecord;
    use burn::store::ModuleRecord;
    use burn::train::checkpoint::Checkpointer;
    let dir = tempfile::tempdir().unwrap();
    let pack = checkpointer(dir.path(), incremental);
    let device = Device::flex();
    let model = initial(&device);
    let optim: burn::optim::ModuleOptimizer = AdamConfig::new().init();
    let scheduler = ExponentialLrSchedulerConfig::new(0.05, 0.8).init().unwrap();
    Checkpointer::save(&pack, 3, optim.to_record()).unwrap();
    Checkpointer::save(&pack, 3, scheduler.to_record()).unwrap();
    assert!(
        files(dir.path()).is_empty(),
        "two parts of three write nothing"
    );
    Checkpointer::save(&pack, 3, model.clone().into_record()).unwrap();
    assert!(pack.path_for(3).exists());
    Checkpointer::<ModuleRecord>::delete(&pack, 3).unwrap();
    Checkpointer::<OptimizerRecord>::delete(&pack, 3).unwrap();
    assert!(
        pack.path_for(3).exists(),
        "the scheduler part is still wanted"
    );
    Checkpointer::<burn::lr_scheduler::LrSchedulerRecord>::delete(&pack, 3).unwrap();
    // The file, and (incremental) its data file: no checkpoint names it any more.
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    // Deleting an epoch that was never saved is not an error (burn-train's strategies may).
    Checkpointer::<ModuleRecord>::delete(&pack, 9).unwrap();
}

const CHILD_DIR: &str = "BURNPACK_TRAIN_CHILD_DIR";
const CHILD_INCREMENTAL: &str = "BURNPACK_TRAIN_CHILD_INCREMENTAL";

/// The training process the SIGKILL test starts (this test binary, this test alone): trains
/// for many epochs until it is killed.
#[test]
#[ignore = "run by killed_training_resumes_from_the_newest_complete_checkpoint"]
fn training_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let device = device();
    let incremental = std::env::var_os(CHILD_INCREMENTAL).is_some();
    train(
        &PathBuf::from(dir),
        With::Pack(incremental),
        initial(&device),
        100_000,
        None,
        2,
    );
}

#[cfg(unix)]
#[test]
fn killed_training_resumes_from_the_newest_complete_checkpoint() {
    let device = device();
    for (round, incremental) in (0..6u64).zip(MODES.iter().cycle().copied()) {
        let dir = tempfile::tempdir().unwrap();
        let ckpt_dir = dir.path().join("checkpoint");
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "training_child", "--ignored", "--nocapture"])
            .env(CHILD_DIR, dir.path());
        if incremental {
            command.env(CHILD_INCREMENTAL, "1");
        }
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Let it write a few epochs, then kill it at a point that varies by round.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let epochs = std::fs::read_dir(&ckpt_dir).map_or(0, |d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))
                })
                .count()
            });
            if epochs >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "the child wrote no checkpoints");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(7 * (round / 2) + 3));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        // Every checkpoint name visible is a complete, valid file.
        // Every checkpoint name visible is a complete, valid checkpoint (incremental: its
        // data files are all there).
        let manager = CheckpointManager::new(&ckpt_dir).unwrap();
        for entry in manager.list().unwrap() {
            let ckpt = Checkpoint::open(&entry.path).unwrap();
            assert!(ckpt.has_optimizer() && ckpt.has_scheduler());
            assert_eq!(ckpt.is_incremental(), incremental);
            assert_eq!(ckpt.verify().unwrap(), tensor_names(&ckpt).len());
        }
        let pack = checkpointer(&ckpt_dir, incremental);
        let k = pack
            .latest_epoch()
            .unwrap()
            .expect("a complete checkpoint survived");
        let resumed = train(
            dir.path(),
            With::Pack(incremental),
            random(&device),
            k + 2,
            Some(k),
            2,
        );

        let straight_dir = tempfile::tempdir().unwrap();
        let straight = train(
            straight_dir.path(),
            With::Pack(false),
            initial(&device),
            k + 2,
            None,
            2,
        );
        assert_eq!(
            params(&resumed),
            params(&straight),
            "round {round} (incremental: {incremental}), resumed from {k}"
        );
    }
}

/// The files are ordinary packs for `bpk` (built when the `cli` feature is on).
#[cfg(feature = "cli")]
#[test]
fn bpk_inspects_and_verifies_the_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    train(dir.path(), With::Pack(false), initial(&device), 1, None, 1);
    let path = PackCheckpointer::new(dir.path().join("checkpoint"))
        .unwrap()
        .path_for(1);
    let bpk = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("bpk")
            .unwrap()
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bpk {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listing = bpk(&["inspect"]);
    assert!(listing.contains("model.hidden.weight"), "{listing}");
    assert!(listing.contains("optim."), "{listing}");
    bpk(&["verify"]);
    // The checkpointer's file names this crate as producer, and every single-bit flip in its
    // header and metadata is noticed.
    common::assert_written_here("PackCheckpointer", &std::fs::read(&path).unwrap());
}

/// Parts large enough to go to the epoch's file as they arrive (a 64 MiB model, Adam's 128
/// MiB of moments) make, in any order of arrival, the checkpoint the small-part path makes.
#[test]
fn large_parts_are_written_as_they_arrive_in_any_order() {
    use burn::optim::GradientsParams;
    use burn::train::checkpoint::Checkpointer;

    #[derive(Module, Debug)]
    struct Large {
        layer: Linear,
    }
    let device = device();
    let mut model = Large {
        layer: LinearConfig::new(4096, 4096).init(&device),
    };
    let mut optim = AdamConfig::new().init();
    let mut sched = ExponentialLrSchedulerConfig::new(1e-3, 0.5).init().unwrap();
    let x = Tensor::<2>::ones([1, 4096], &device);
    let grads = GradientsParams::from_grads(model.layer.forward(x).mean().backward(), &model);
    model = optim.step(sched.step(), model, grads);

    let dir = tempfile::tempdir().unwrap();
    let pack = PackCheckpointer::new(dir.path()).unwrap();
    let orders: [[u8; 3]; 3] = [[0, 1, 2], [2, 1, 0], [1, 2, 0]];
    for (epoch, order) in orders.iter().enumerate() {
        let epoch = epoch + 1;
        for (k, part) in order.iter().enumerate() {
            if k > 0 {
                assert_eq!(
                    pack.latest_epoch().unwrap(),
                    (epoch > 1).then_some(epoch - 1),
                    "nothing visible before the third part"
                );
            }
            match part {
                0 => pack.save(epoch, model.clone().into_record()).unwrap(),
                1 => pack.save(epoch, optim.to_record()).unwrap(),
                _ => pack.save(epoch, sched.to_record()).unwrap(),
            }
        }
        assert_eq!(pack.latest_epoch().unwrap(), Some(epoch));
    }
    let contents = |epoch: usize| {
        let reader = burnpack::read::Reader::open(pack.path_for(epoch)).unwrap();
        assert_eq!(reader.verify_all().unwrap(), reader.tensors().len());
        assert!(reader.metadata().contains_key("burnpack.padding"));
        let mut tensors: Vec<(String, Vec<u8>)> = reader
            .tensors()
            .iter()
            .map(|t| (t.name().to_string(), reader.read(t).unwrap().to_vec()))
            .collect();
        tensors.sort();
        let scalars: Vec<(String, String)> = reader
            .scalars()
            .iter()
            .filter(|(k, _)| k.as_str() != "progress.epoch")
            .map(|(k, v)| (k.clone(), format!("{v:?}")))
            .collect();
        (tensors, scalars)
    };
    let first = contents(1);
    assert_eq!(contents(2), first);
    assert_eq!(contents(3), first);
    // Each record restores as Burn wrote it.
    let restored = Large {
        layer: LinearConfig::new(4096, 4096).init(&device),
    }
    .load_record(Checkpointer::<burn::store::ModuleRecord>::restore(&pack, 3).unwrap());
    assert_eq!(
        restored.layer.weight.val().into_data(),
        model.layer.weight.val().into_data()
    );
    let _: burn::optim::OptimizerRecord = Checkpointer::restore(&pack, 2).unwrap();
    assert_eq!(common::scratch_files(dir.path()), 0);
}
