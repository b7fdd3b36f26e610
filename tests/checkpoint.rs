//! Checkpoints: exact resume in a new process, the layout, the manager's retention and crash
//! safety, asynchronous saves, and Burn's own checkpoint files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burnpack::checkpoint::{
    AsyncSaver, Checkpoint, CheckpointManager, Progress, TrainingState, WhenBusy,
};
use burnpack::module::PackModule;
use burnpack::read::Reader;

const STEPS: u64 = 12;
const SAVE_AT: u64 = 5;

#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    act: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Self {
            a: LinearConfig::new(4, 16).init(device),
            b: LinearConfig::new(16, 1).init(device),
            act: Relu::new(),
        }
    }
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.b.forward(self.act.forward(self.a.forward(x)))
    }
}

fn device() -> Device {
    Device::flex().autodiff()
}

fn optimizer() -> ModuleOptimizer {
    AdamConfig::new().init()
}

fn scheduler() -> ModuleLrScheduler {
    LinearLrSchedulerConfig::new(1e-2, 1e-3, STEPS as usize)
        .init()
        .unwrap()
}

/// A fixed synthetic batch for step `step` (no RNG: every process sees the same data).
fn batch(step: u64, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let xs: Vec<f32> = (0..32)
        .map(|i| ((i as u64 * 7 + step * 13) % 17) as f32 / 17.0 - 0.5)
        .collect();
    let ys: Vec<f32> = xs
        .chunks(4)
        .map(|r| r[0] * 2.0 - r[1] + r[2] * r[3])
        .collect();
    (
        Tensor::from_data(TensorData::new(xs, [8, 4]), device),
        Tensor::from_data(TensorData::new(ys, [8, 1]), device),
    )
}

fn train(
    mut model: Mlp,
    optim: &mut ModuleOptimizer,
    sched: &mut ModuleLrScheduler,
    steps: std::ops::Range<u64>,
) -> Mlp {
    let device = device();
    for step in steps {
        let (x, y) = batch(step, &device);
        let loss = (model.forward(x) - y).powf_scalar(2.0).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(sched.step(), model, grads);
    }
    model
}

/// The shared starting point: a model initialized once, saved, loaded by every run.
fn initial(dir: &Path) -> PathBuf {
    let path = dir.join("init.bpk");
    Mlp::new(&device()).save_pack(&path).unwrap();
    path
}

/// Child side of the resume test: runs only when the parent sets the variables.
#[test]
fn resume_child() {
    let (Ok(from), Ok(out)) = (
        std::env::var("BURNPACK_RESUME_FROM"),
        std::env::var("BURNPACK_RESUME_OUT"),
    ) else {
        return;
    };
    let device = device();
    let ckpt = Checkpoint::open(&from).unwrap();
    let model = ckpt.load_model(Mlp::new(&device)).unwrap();
    let mut optim = ckpt.load_optimizer(optimizer()).unwrap();
    let mut sched = scheduler().load_record(ckpt.scheduler_record().unwrap());
    let start = ckpt.progress().step;
    let model = train(model, &mut optim, &mut sched, start..STEPS);
    state(&model, &optim, &sched, STEPS).save(&out).unwrap();
}

/// One tensor of a checkpoint: name, dtype, shape, param id, bytes.
type Stored = (String, String, Vec<usize>, Option<u64>, Vec<u8>);

/// Every tensor of a checkpoint.
fn contents(path: &Path) -> Vec<Stored> {
    let reader = Reader::open(path).unwrap();
    reader
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                format!("{:?}", t.dtype()),
                t.shape().to_vec(),
                t.param_id(),
                reader.read(t).unwrap().to_vec(),
            )
        })
        .collect()
}

/// From the shared starting point, `steps` of training with a fresh optimizer and scheduler.
fn run_from(init: &Path, steps: std::ops::Range<u64>) -> (Mlp, ModuleOptimizer, ModuleLrScheduler) {
    let (mut optim, mut sched) = (optimizer(), scheduler());
    let model = train(
        Mlp::new(&device()).load_pack(init).unwrap(),
        &mut optim,
        &mut sched,
        steps,
    );
    (model, optim, sched)
}

/// All `STEPS` without stopping, saved in `dir`: what a resumed run must reproduce.
fn straight_run(dir: &Path, init: &Path) -> PathBuf {
    let (model, optim, sched) = run_from(init, 0..STEPS);
    let path = dir.join("straight.bpk");
    state(&model, &optim, &sched, STEPS).save(&path).unwrap();
    path
}

/// Everything a run has at `step`, to save.
fn state<'a, M: Module>(
    model: &'a M,
    optim: &'a ModuleOptimizer,
    sched: &ModuleLrScheduler,
    step: u64,
) -> TrainingState<'a, M> {
    TrainingState::new(model, Progress::new(0, step))
        .optimizer(optim)
        .scheduler(sched.to_record())
}

/// Two checkpoints hold the same tensors (names, dtypes, shapes, ids, bytes) and scalars.
fn assert_same_run(straight: &Path, resumed: &Path) -> Vec<Stored> {
    let (a, b) = (contents(straight), contents(resumed));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((&x.0, &x.1, &x.2, x.3), (&y.0, &y.1, &y.2, y.3));
        assert_eq!(x.4, y.4, "{} differs after resuming", x.0);
    }
    assert_eq!(
        Reader::open(straight).unwrap().scalars(),
        Reader::open(resumed).unwrap().scalars(),
        "optimizer time, scheduler state and progress agree"
    );
    a
}

#[test]
fn resuming_in_a_new_process_is_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let init = initial(dir.path());

    let straight = straight_run(dir.path(), &init);

    // Stopped at SAVE_AT, resumed by another process.
    let (model, optim, sched) = run_from(&init, 0..SAVE_AT);
    let ckpt = dir.path().join("at-5.bpk");
    state(&model, &optim, &sched, SAVE_AT).save(&ckpt).unwrap();
    drop((model, optim, sched));
    let resumed = dir.path().join("resumed.bpk");
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["resume_child", "--exact", "--test-threads=1"])
        .env("BURNPACK_RESUME_FROM", &ckpt)
        .env("BURNPACK_RESUME_OUT", &resumed)
        .status()
        .unwrap();
    assert!(status.success());

    let a = assert_same_run(&straight, &resumed);
    let moments = a.iter().filter(|t| t.0.contains("moment")).count();
    assert_eq!(
        moments, 8,
        "Adam keeps two moments for each of the four parameters"
    );
    // The run actually trained: parameters moved away from the initial ones.
    assert_ne!(
        contents(&init)[0].4,
        a.iter().find(|t| t.0 == "model.a.bias").unwrap().4
    );
}

#[test]
fn layout_is_namespaced_and_matches_burns_own_records() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let (mut optim, mut sched) = (optimizer(), scheduler());
    let model = train(Mlp::new(&device), &mut optim, &mut sched, 0..3);
    let path = dir.path().join("ckpt.bpk");
    TrainingState::new(&model, Progress::new(1, 3).with("loss", 0.5))
        .optimizer(&optim)
        .scheduler(sched.to_record())
        .save(&path)
        .unwrap();

    let reader = Reader::open(&path).unwrap();
    assert_eq!(reader.metadata()["burnpack.kind"], "checkpoint");
    assert!(
        reader
            .tensors()
            .iter()
            .all(|t| t.name().starts_with("model.") || t.name().starts_with("optim."))
    );
    let ckpt = Checkpoint::open(&path).unwrap();
    assert_eq!(ckpt.progress(), Progress::new(1, 3).with("loss", 0.5));

    // The optimizer part is exactly what Burn's `ModuleOptimizer::save` writes.
    let burn_optim = dir.path().join("optim-1.bpk");
    optim.save(&burn_optim).unwrap();
    let theirs = Reader::open(&burn_optim).unwrap();
    for t in theirs.tensors() {
        let ours = reader.tensor(&format!("optim.{}", t.name())).unwrap();
        assert_eq!(
            (ours.dtype(), ours.shape(), ours.param_id()),
            (t.dtype(), t.shape(), t.param_id())
        );
        assert_eq!(
            &reader.read(ours).unwrap()[..],
            &theirs.read(t).unwrap()[..]
        );
    }
    for (k, v) in theirs.scalars() {
        assert_eq!(reader.scalars()[&format!("optim.{k}")], *v);
    }

    // The model part loads as a plain model, with the plain module loader and with Burn's
    // `load_file` after export.
    let plain = Mlp::new(&device).load_pack(&path).unwrap();
    assert_eq!(
        plain.a.weight.val().into_data(),
        model.a.weight.val().into_data()
    );
    assert_eq!(plain.a.weight.id, model.a.weight.id);
}

fn tiny_state_save(manager: &CheckpointManager, model: &Mlp, step: u64, loss: f64) -> PathBuf {
    manager
        .save(TrainingState::new(
            model,
            Progress::new(0, step).with("loss", loss),
        ))
        .unwrap()
        .location
}

#[test]
fn manager_keeps_the_last_n_and_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Mlp::new(&device);
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(2)
        .keep_best("loss", true);
    for (step, loss) in [(1, 0.9), (2, 0.2), (3, 0.5), (4, 0.7), (5, 0.6)] {
        tiny_state_save(&manager, &model, step, loss);
    }
    let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, [2, 4, 5], "last two plus the best loss");
    assert_eq!(manager.latest().unwrap().unwrap().progress().step, 5);
}

#[test]
fn latest_skips_a_damaged_newer_file_and_retention_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Mlp::new(&device);
    let manager = CheckpointManager::new(dir.path()).unwrap().keep_last(1);
    tiny_state_save(&manager, &model, 10, 1.0);
    // A newer file that is not a valid checkpoint (e.g. copied in half by hand).
    std::fs::write(manager.path_for(11), b"NRUB garbage").unwrap();
    assert_eq!(manager.latest().unwrap().unwrap().progress().step, 10);
    manager.retain().unwrap();
    let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(
        steps,
        [10, 11],
        "the newest valid checkpoint survives retention"
    );

    // A failed save deletes nothing.
    let state = TrainingState::new(&model, Progress::new(0, 12))
        .options(burnpack::SaveOptions::new().overwrite(false));
    std::fs::write(manager.path_for(12), b"occupied").unwrap();
    assert!(manager.save(state).is_err());
    assert_eq!(manager.latest().unwrap().unwrap().progress().step, 10);
}

#[test]
fn stray_scratch_files_of_dead_processes_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    // Nobody holds the lock of a dead writer's file; a live writer holds its file's lock.
    let dead = dir
        .path()
        .join(".ckpt-00000000000000000007.bpk.99999999-0-0.bpk-tmp");
    let mine = dir
        .path()
        .join(format!(".ckpt-1.bpk.{}-5-0.bpk-tmp", std::process::id()));
    std::fs::write(&dead, b"partial").unwrap();
    std::fs::write(&mine, b"in flight").unwrap();
    let held = std::fs::File::open(&mine).unwrap();
    held.lock().unwrap();
    let manager = CheckpointManager::new(dir.path()).unwrap();
    assert!(!dead.exists());
    assert!(mine.exists(), "a live writer's scratch file is left alone");
    assert_eq!(manager.clean_scratch().unwrap(), 0);
    drop(held);
    assert_eq!(
        manager.clean_scratch().unwrap(),
        1,
        "its writer is gone now"
    );
    assert!(!mine.exists());
}

#[test]
fn async_saves_run_in_the_background_and_surface_errors() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Mlp::new(&device);
    let manager = CheckpointManager::new(dir.path()).unwrap().keep_last(10);
    let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
    for step in 1..=3 {
        saver
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
    saver.wait().unwrap();
    assert_eq!(manager.list().unwrap().len(), 3);

    // An error in the background comes back on the next call.
    std::fs::write(manager.path_for(4), b"x").unwrap();
    let opts = burnpack::SaveOptions::new().overwrite(false);
    saver
        .save(TrainingState::new(&model, Progress::new(0, 4)).options(opts.clone()))
        .unwrap();
    let err = saver
        .save(TrainingState::new(&model, Progress::new(0, 5)))
        .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    saver.wait().unwrap();
    assert_eq!(
        manager.latest().unwrap().unwrap().progress().step,
        3,
        "step 5 was not started after the error"
    );

    // Refusing while busy: a 64 MiB save (with fsync) is still running right after it starts.
    let mut refusing = AsyncSaver::new(manager.clone(), WhenBusy::Refuse);
    let big = Mlp {
        a: LinearConfig::new(4096, 4096).init(&device),
        b: LinearConfig::new(4096, 1).init(&device),
        act: Relu::new(),
    };
    let _ = big.a.weight.val();
    refusing
        .save(TrainingState::new(&big, Progress::new(0, 6)))
        .unwrap();
    let second = refusing.save(TrainingState::new(&big, Progress::new(0, 7)));
    assert!(
        matches!(second, Err(burnpack::checkpoint::CheckpointError::Busy)),
        "{second:?}"
    );
    assert_eq!(
        refusing.wait().unwrap().map(|s| s.location),
        Some(manager.path_for(6))
    );
    assert_eq!(manager.latest().unwrap().unwrap().progress().step, 6);
}

#[test]
fn burn_train_layout_imports_and_exports() {
    use burn::lr_scheduler::LrSchedulerRecord;
    use burnpack::checkpoint::import_burn_train;
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let (mut optim, mut sched) = (optimizer(), scheduler());
    let model = train(Mlp::new(&device), &mut optim, &mut sched, 0..4);

    // burn-train's files for epoch 2, written by Burn itself.
    let train_dir = dir.path().join("checkpoint");
    std::fs::create_dir_all(&train_dir).unwrap();
    model
        .clone()
        .save_file(train_dir.join("model-2.bpk"))
        .unwrap();
    optim.save(train_dir.join("optim-2.bpk")).unwrap();
    sched
        .to_record()
        .save(train_dir.join("scheduler-2.bpk"))
        .unwrap();

    let imported = dir.path().join("imported.bpk");
    import_burn_train(&train_dir, 2, &imported).unwrap();
    let ckpt = Checkpoint::open(&imported).unwrap();
    assert_eq!(ckpt.progress().epoch, 2);

    // Continuing from the import equals continuing from Burn's own loaders.
    let run = |model: Mlp, mut optim: ModuleOptimizer, mut sched: ModuleLrScheduler| {
        let model = train(model, &mut optim, &mut sched, 4..7);
        (
            model.a.weight.val().into_data(),
            model.b.bias.as_ref().unwrap().val().into_data(),
        )
    };
    let ours = run(
        ckpt.load_model(Mlp::new(&device)).unwrap(),
        ckpt.load_optimizer(optimizer()).unwrap(),
        scheduler().load_record(ckpt.scheduler_record().unwrap()),
    );
    let burns = run(
        Mlp::new(&device).load_file(train_dir.join("model-2.bpk")),
        optimizer().load(train_dir.join("optim-2.bpk")).unwrap(),
        scheduler()
            .load_record(LrSchedulerRecord::load(train_dir.join("scheduler-2.bpk")).unwrap()),
    );
    assert_eq!(ours, burns);

    // Export back: Burn loads each file with its own API, with the same contents.
    let out = dir.path().join("exported");
    std::fs::create_dir_all(&out).unwrap();
    ckpt.export_burn_train(&out, 7).unwrap();
    let exported = run(
        Mlp::new(&device).load_file(out.join("model-7.bpk")),
        optimizer().load(out.join("optim-7.bpk")).unwrap(),
        scheduler().load_record(LrSchedulerRecord::load(out.join("scheduler-7.bpk")).unwrap()),
    );
    assert_eq!(exported, burns);
    assert_eq!(
        contents_plain(&out.join("optim-7.bpk")),
        contents_plain(&train_dir.join("optim-2.bpk"))
    );
}

fn contents_plain(path: &Path) -> Vec<(String, Vec<u8>)> {
    let reader = Reader::open(path).unwrap();
    reader
        .tensors()
        .iter()
        .map(|t| (t.name().to_string(), reader.read(t).unwrap().to_vec()))
        .collect()
}

#[test]
fn a_fresh_optimizer_that_has_not_stepped_saves_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let model = Mlp::new(&device);
    let path = dir.path().join("fresh.bpk");
    let optim = optimizer();
    TrainingState::new(&model, Progress::new(0, 0))
        .optimizer(&optim)
        .scheduler(scheduler().to_record())
        .save(&path)
        .unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    assert!(ckpt.has_optimizer() && ckpt.has_scheduler());
    let mut restored = ckpt.load_optimizer(optimizer()).unwrap();
    let mut sched = scheduler().load_record(ckpt.scheduler_record().unwrap());
    // The restored (empty) optimizer trains exactly like a fresh one.
    let model = ckpt.load_model(Mlp::new(&device)).unwrap();
    let a = train(model.clone(), &mut restored, &mut sched, 0..3);
    let b = train(model, &mut optimizer(), &mut scheduler(), 0..3);
    assert_eq!(a.b.weight.val().into_data(), b.b.weight.val().into_data());
    // A checkpoint saved without an optimizer still says so.
    let bare = dir.path().join("bare.bpk");
    TrainingState::new(&Mlp::new(&device), Progress::new(0, 0))
        .save(&bare)
        .unwrap();
    let bare = Checkpoint::open(&bare).unwrap();
    assert!(!bare.has_optimizer() && !bare.has_scheduler());
    let Err(err) = bare.load_optimizer(optimizer()) else {
        panic!("a checkpoint without an optimizer restored one")
    };
    assert!(err.to_string().contains("no optimizer state"), "{err}");
}

#[test]
fn saving_below_a_newer_run_is_refused_instead_of_deleted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = Mlp::new(&Device::flex());
    let manager = CheckpointManager::new(dir.path()).unwrap().keep_last(2);
    for step in [1000, 2000] {
        tiny_state_save(&manager, &model, step, 0.5);
    }
    // A new run in the same directory, synchronous and asynchronous.
    let err = manager
        .save(TrainingState::new(&model, Progress::new(0, 10)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            burnpack::checkpoint::CheckpointError::NewerExists {
                step: 10,
                newer_step: 2000,
                ..
            }
        ),
        "{err}"
    );
    let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
    let err = saver
        .save(TrainingState::new(&model, Progress::new(0, 20)))
        .unwrap_err();
    assert!(err.to_string().contains("newer than step 20"), "{err}");
    let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, [1000, 2000], "nothing written, nothing deleted");
    // Rolling back is explicit.
    assert_eq!(manager.discard_after(10).unwrap(), 2);
    let path = manager
        .save(TrainingState::new(&model, Progress::new(0, 10)))
        .unwrap()
        .location;
    assert!(path.exists(), "the returned file is there");
    // A damaged newer file does not block (latest() skips it too).
    std::fs::write(manager.path_for(5000), b"damaged").unwrap();
    let path = manager
        .save(TrainingState::new(&model, Progress::new(0, 20)))
        .unwrap()
        .location;
    assert!(path.exists());
}

#[test]
fn latest_right_after_an_async_save_is_that_checkpoint() {
    // The README's snippet, as written: no wait() between save and latest().
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Mlp::new(&device);
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(3)
        .keep_best("val_loss", true);
    let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
    for step in 1..=3u64 {
        saver
            .save(TrainingState::new(
                &model,
                Progress::new(0, step).with("val_loss", 1.0 / step as f64),
            ))
            .unwrap();
        let ckpt = manager.latest().unwrap().expect("a checkpoint");
        assert_eq!(ckpt.progress().step, step);
    }
}

/// Child side of the namespace test: saves into `BURNPACK_NS_DIR` with a provider that holds
/// the save open until the file `release` appears, and prints the outcome.
#[test]
fn namespace_child() {
    let Ok(dir) = std::env::var("BURNPACK_NS_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let release = dir.join("release");
    let entry = burnpack::Entry::deferred("w", burn::tensor::DType::U8, vec![4], 4, move || {
        while !release.exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(burn::tensor::Bytes::from_bytes_vec(vec![1, 2, 3, 4]))
    });
    match burnpack::Writer::new(vec![entry])
        .write_to_file(dir.join("ckpt-00000000000000000001.bpk"))
    {
        Ok(_) => println!("CHILD SAVED"),
        Err(e) => println!("CHILD FAILED: {e}"),
    }
}

#[test]
fn a_live_writer_in_another_pid_namespace_keeps_its_scratch_file() {
    let dir = tempfile::tempdir().unwrap();
    // The writer runs in a new PID namespace, as pid 77777 where the namespace lets us pick
    // it: its pid names no process out here (a pid check would take the file for dead).
    let child = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "sh",
            "-c",
        ])
        .arg(r#"echo 77776 > /proc/sys/kernel/ns_last_pid 2>/dev/null; "$@""#)
        .arg("sh")
        .arg(std::env::current_exe().unwrap())
        .args([
            "namespace_child",
            "--exact",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("BURNPACK_NS_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(child) = child else {
        common::skip("cannot create a PID namespace here (CI runs as root)");
        return;
    };
    let scratch = || common::scratch_files(dir.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while scratch() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never started its save"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    println!("scratch of the namespaced writer: {names:?}");
    // Another process's manager and a save to the same file both clean up stale scratch.
    CheckpointManager::new(dir.path()).unwrap();
    burnpack::Writer::new(vec![])
        .write_to_file(dir.path().join("ckpt-00000000000000000001.bpk"))
        .unwrap();
    assert_eq!(
        scratch(),
        1,
        "the live writer's scratch file is still there"
    );
    std::fs::write(dir.path().join("release"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("unshare failed") || !out.status.success() && !stdout.contains("CHILD") {
        let stderr = String::from_utf8_lossy(&out.stderr);
        panic!("the namespaced child did not run: {stdout}{stderr}");
    }
    assert!(stdout.contains("CHILD SAVED"), "{stdout}");
    assert_eq!(
        Reader::open(dir.path().join("ckpt-00000000000000000001.bpk"))
            .unwrap()
            .bytes("w")
            .unwrap()
            .to_vec(),
        [1, 2, 3, 4]
    );
}

/// Checkpoints under a bucket prefix (`object_store`'s `InMemory`, and a real S3 server when
/// `.ci/run` starts one): resuming from one is bit-identical to training straight through,
/// each part fetches only its own tensors, retention and `latest` behave as for directories.
#[cfg(feature = "object-store")]
mod remote {
    use std::sync::Arc;

    use burnpack::checkpoint::CheckpointError;
    use burnpack::interop::object_store::{Bucket, RemoteCheckpointManager, UploadOptions};
    use burnpack::source::TensorSource;

    use super::*;

    fn resume_and_retention(manager: &RemoteCheckpointManager) {
        let dir = tempfile::tempdir().unwrap();
        let init = initial(dir.path());
        let device = device();

        let straight = straight_run(dir.path(), &init);

        // Stopped at SAVE_AT, saved to the bucket, everything dropped.
        let (model, optim, sched) = run_from(&init, 0..SAVE_AT);
        let saved = manager
            .save(state(&model, &optim, &sched, SAVE_AT))
            .unwrap()
            .location;
        drop((model, optim, sched));

        // Resumed from `latest`: header and metadata first, then each part's tensors only.
        let ckpt = manager.latest().unwrap().unwrap();
        assert_eq!(ckpt.source().location().to_string(), saved.to_string());
        assert_eq!(ckpt.progress().step, SAVE_AT);
        let source = ckpt.source();
        assert_eq!(
            source.requests(),
            2,
            "opening reads header and metadata only"
        );
        let head = source.fetched_bytes();
        let model = ckpt.load_model(Mlp::new(&device)).unwrap();
        let model_tensors: Vec<_> = source
            .tensors()
            .iter()
            .filter(|t| t.name().starts_with("model."))
            .collect();
        let model_bytes: u64 = model_tensors.iter().map(|t| t.len()).sum();
        let fetched = source.fetched_bytes() - head;
        assert!(
            fetched >= model_bytes && fetched <= model_bytes + 256 * model_tensors.len() as u64,
            "the model's {model_bytes} bytes (and padding between them), fetched {fetched}"
        );
        let mut optim = ckpt.load_optimizer(optimizer()).unwrap();
        let mut sched = scheduler().load_record(ckpt.scheduler_record().unwrap());
        let size = saved.size().unwrap().unwrap();
        assert!(source.fetched_bytes() <= size, "nothing fetched twice");
        let model = train(model, &mut optim, &mut sched, SAVE_AT..STEPS);
        let resumed = dir.path().join("resumed.bpk");
        state(&model, &optim, &sched, STEPS).save(&resumed).unwrap();
        assert_same_run(&straight, &resumed);

        // Retention: the last two plus the best loss.
        let manager = manager.clone().keep_last(2).keep_best("loss", true);
        let model = Mlp::new(&Device::flex());
        let save = |step: u64, loss: f64| {
            manager
                .save(TrainingState::new(
                    &model,
                    Progress::new(0, step).with("loss", loss),
                ))
                .map_err(Box::new)
        };
        for (step, loss) in [(11, 0.9), (12, 0.2), (13, 0.5), (14, 0.7), (15, 0.6)] {
            save(step, loss).unwrap();
        }
        let steps = |m: &RemoteCheckpointManager| -> Vec<u64> {
            m.list().unwrap().iter().map(|c| c.step).collect()
        };
        assert_eq!(steps(&manager), [12, 14, 15], "last two plus the best loss");
        // Behind a newer checkpoint: refused, nothing uploaded or deleted.
        let err = save(13, 0.1).unwrap_err();
        assert!(
            matches!(*err, CheckpointError::NewerExists { newer_step: 15, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("ckpt-00000000000000000015.bpk"),
            "{err}"
        );
        assert_eq!(steps(&manager), [12, 14, 15]);
        // A damaged newer object is skipped by `latest` and survives no policy of its own.
        manager
            .location_for(16)
            .put_all(b"NRUB garbage".to_vec())
            .unwrap();
        assert_eq!(manager.latest().unwrap().unwrap().progress().step, 15);
        manager.retain().unwrap();
        assert_eq!(steps(&manager), [12, 15, 16], "the newest valid one stays");
        assert_eq!(manager.discard_after(15).unwrap(), 1);
        assert_eq!(manager.latest().unwrap().unwrap().progress().step, 15);
        // Not a checkpoint: a plain pack under a checkpoint's name is skipped too.
        Mlp::new(&Device::flex())
            .pack_writer(&burnpack::SaveOptions::new())
            .map(|w| {
                burnpack::interop::object_store::upload(
                    w,
                    &manager.location_for(17),
                    &UploadOptions::new(),
                )
            })
            .unwrap()
            .unwrap();
        assert_eq!(manager.latest().unwrap().unwrap().progress().step, 15);
    }

    /// An [`AsyncSaver`] uploading in the background: `latest` waits for the upload in flight,
    /// `wait` names the object, retention runs after each upload, a save behind a newer
    /// checkpoint is refused before the hand-over.
    fn async_saves(manager: &RemoteCheckpointManager) {
        let manager = manager.clone().keep_last(2);
        let device = Device::flex();
        let models: Vec<Mlp> = (0..3).map(|_| Mlp::new(&device)).collect();
        let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
        for (model, step) in models.iter().zip(31..) {
            saver
                .save(TrainingState::new(model, Progress::new(0, step)))
                .unwrap();
        }
        // Handed over, maybe still uploading: `latest` (on a clone) waits for it.
        let latest = manager.clone().latest().unwrap().unwrap();
        assert_eq!(latest.progress().step, 33);
        let restored = latest.load_model(Mlp::new(&device)).unwrap();
        assert_eq!(
            restored.a.weight.val().into_data(),
            models[2].a.weight.val().into_data()
        );
        let saved = saver.wait().unwrap().expect("a save was in flight");
        assert_eq!(
            saved.location.to_string(),
            manager.location_for(33).to_string()
        );
        assert_eq!(saver.wait().unwrap().map(|l| l.location.to_string()), None);
        let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
        assert_eq!(steps, [32, 33], "retention ran after each upload");

        let err = saver
            .save(TrainingState::new(&models[0], Progress::new(0, 32)))
            .unwrap_err();
        assert!(
            matches!(err, CheckpointError::NewerExists { newer_step: 33, .. }),
            "{err}"
        );
        assert!(!saver.is_busy(), "nothing was handed over");
        let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
        assert_eq!(steps, [32, 33]);
        assert_eq!(manager.discard_after(30).unwrap(), 2);
    }

    #[test]
    fn checkpoints_in_memory_store() {
        let store: Arc<dyn Bucket> = Arc::new(::object_store::memory::InMemory::new());
        resume_and_retention(&RemoteCheckpointManager::new(Arc::clone(&store), "runs/7"));
        async_saves(&RemoteCheckpointManager::new(Arc::clone(&store), "runs/8"));
        // Objects beside and below the prefix are not the manager's.
        let empty = RemoteCheckpointManager::new(store, "runs");
        assert!(empty.list().unwrap().is_empty());
        assert!(empty.latest().unwrap().is_none());
    }

    #[test]
    fn checkpoints_on_a_real_s3_server() {
        let Some(bucket) = common::s3_bucket() else {
            return;
        };
        let url = format!("s3://{bucket}/{}/ckpts/", std::process::id());
        resume_and_retention(&RemoteCheckpointManager::parse(&url).unwrap());
        let url = format!("s3://{bucket}/{}/async/", std::process::id());
        async_saves(&RemoteCheckpointManager::parse(&url).unwrap());
    }
}

/// Every checkpoint file name the README, the documents beside it (`docs/`, CONTRIBUTING,
/// ARCHITECTURE) and the API docs show is the one written for its step:
/// `ckpt-` and the step zero-padded to 20 digits (no `ckpt-<epoch>.bpk` placeholder that
/// reads as `ckpt-3.bpk`).
#[test]
fn documented_checkpoint_names_are_the_written_ones() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents: Vec<_> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    let mut dirs = vec![root.join("src"), root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "md") {
                documents.push(path);
            }
        }
    }
    let name = regex::Regex::new(r"ckpt-([^./\s`'\x22]*)\.bpk").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manager = CheckpointManager::new(dir.path()).unwrap();
    let mut seen = 0;
    for document in &documents {
        let text = std::fs::read_to_string(document).unwrap();
        for found in name.captures_iter(&text) {
            let step = &found[1];
            assert!(
                step.len() == 20 && step.bytes().all(|b| b.is_ascii_digit()),
                "{}: '{}' is not a name this crate writes",
                document.display(),
                &found[0]
            );
            let written = manager.path_for(step.parse().unwrap());
            assert_eq!(written.file_name().unwrap().to_str(), Some(&found[0]));
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "the README and the docs name checkpoint files ({seen} found)"
    );
}

/// A third storage backend is one small type: an in-memory store (a map of names to bytes)
/// gets the whole manager: retention, `latest` skipping a damaged newest checkpoint, the
/// newer-checkpoint refusal naming the location as the backend names it, rollback and
/// background saves.
mod memory_backend {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use burn::tensor::{Bytes, Device};
    use burnpack::Writer;
    use burnpack::checkpoint::{
        AsyncSaver, CheckpointError, Manager, Progress, Storage, TrainingState, WhenBusy,
    };
    use burnpack::read::Reader;

    use super::Mlp;

    #[derive(Clone, Default)]
    struct Memory(Arc<Mutex<BTreeMap<String, Vec<u8>>>>);

    impl Storage for Memory {
        type Location = String;
        type Source = Reader;
        type Entry = u64;

        fn location(&self, name: &str) -> String {
            name.to_string()
        }
        fn names(&self) -> Result<Vec<String>, CheckpointError> {
            Ok(self.0.lock().unwrap().keys().cloned().collect())
        }
        fn open(&self, name: &String) -> Result<Reader, CheckpointError> {
            let bytes = self
                .0
                .lock()
                .unwrap()
                .get(name)
                .cloned()
                .unwrap_or_default();
            Ok(Reader::from_bytes(Bytes::from_bytes_vec(bytes))?)
        }
        fn write(&self, name: &String, writer: Writer) -> Result<(), CheckpointError> {
            let bytes = writer.into_bytes()?.to_vec();
            self.0.lock().unwrap().insert(name.clone(), bytes);
            Ok(())
        }
        fn delete(&self, name: &String) -> Result<(), CheckpointError> {
            self.0.lock().unwrap().remove(name);
            Ok(())
        }
        fn describe(&self) -> String {
            "memory".into()
        }
        fn describe_location(&self, name: &String) -> String {
            format!("memory:{name}")
        }
        fn entry(step: u64, _: String) -> u64 {
            step
        }
    }

    #[test]
    fn a_backend_of_ones_own_gets_the_whole_manager() {
        let device = Device::flex();
        let model = Mlp::new(&device);
        let memory = Memory::default();
        let manager = Manager::with_storage(memory.clone()).keep_last(2);
        for step in [1, 2, 3] {
            let saved = manager
                .save(TrainingState::new(&model, Progress::new(0, step)))
                .unwrap();
            assert_eq!(saved.location, format!("ckpt-{step:020}.bpk"));
            assert_eq!((saved.step, saved.tensors_referred), (step, 0));
            assert!(saved.tensors_written > 0 && saved.bytes_written > 0);
        }
        assert_eq!(manager.list().unwrap(), [2, 3], "retention");
        // A damaged newest checkpoint is skipped by `latest`, and kept by retention's rule
        // of the newest valid one.
        memory
            .0
            .lock()
            .unwrap()
            .insert(format!("ckpt-{:020}.bpk", 9), b"not a pack".to_vec());
        assert_eq!(manager.latest().unwrap().unwrap().progress().step, 3);
        // Saving behind a newer valid checkpoint is refused, naming it as the backend does.
        manager
            .save(TrainingState::new(&model, Progress::new(0, 8)))
            .unwrap();
        assert_eq!(manager.list().unwrap(), [8, 9], "the last two by name");
        let err = manager
            .save(TrainingState::new(&model, Progress::new(0, 4)))
            .unwrap_err();
        assert!(
            matches!(&err, CheckpointError::NewerExists { newer_step: 8, newer, dir, .. }
                if newer == &format!("memory:ckpt-{:020}.bpk", 8) && dir == "memory"),
            "{err}"
        );
        // Rollback, then background saves through the same trait.
        assert_eq!(manager.discard_after(3).unwrap(), 2);
        let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
        saver
            .save(TrainingState::new(&model, Progress::new(0, 4)))
            .unwrap();
        assert_eq!(manager.latest().unwrap().unwrap().progress().step, 4);
        assert_eq!(
            saver.wait().unwrap().map(|s| s.location),
            Some(format!("ckpt-{:020}.bpk", 4))
        );
        assert_eq!(manager.list().unwrap(), [4]);
    }
}

/// A state handed over (prepared) is the state of that step: training steps taken before the
/// background writer gets to it change neither the model's nor the optimizer's saved tensors
/// (the prepared state holds immutable tensor handles; the optimizer is a clone of shared
/// state, its record taken only when written).
#[test]
fn a_prepared_state_is_the_state_of_its_step_while_training_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let init = initial(dir.path());
    let (model, mut optim, mut sched) = run_from(&init, 0..SAVE_AT);
    let now = dir.path().join("now.bpk");
    state(&model, &optim, &sched, SAVE_AT).save(&now).unwrap();
    let prepared = state(&model, &optim, &sched, SAVE_AT).prepare().unwrap();
    // Training goes on: new parameters, new moments, the scheduler moves.
    let later = train(model, &mut optim, &mut sched, SAVE_AT..STEPS);
    let handed = dir.path().join("handed.bpk");
    prepared
        .into_writer()
        .unwrap()
        .write_to_file(&handed)
        .unwrap();
    assert_same_run(&now, &handed);
    // And the training that went on is not the saved state.
    let after = dir.path().join("after.bpk");
    state(&later, &optim, &sched, SAVE_AT).save(&after).unwrap();
    assert_ne!(contents(&now), contents(&after));
}

/// A model of 64 MiB and a bias: large enough for the staged write (the model goes to the file
/// while the optimizer's record is serialized, the head reserved and padded).
#[derive(Module, Debug)]
struct Large {
    layer: Linear,
}

fn large_trained() -> (Large, ModuleOptimizer, ModuleLrScheduler) {
    let device = device();
    let mut model = Large {
        layer: LinearConfig::new(4096, 4096).init(&device),
    };
    let (mut optim, mut sched) = (optimizer(), scheduler());
    let x = Tensor::<2>::ones([1, 4096], &device);
    let grads = GradientsParams::from_grads(model.layer.forward(x).mean().backward(), &model);
    model = optim.step(sched.step(), model, grads);
    (model, optim, sched)
}

/// Every tensor (name, dtype, shape, id, bytes) and scalar of a checkpoint, and its metadata
/// without the staged write's padding.
fn everything(path: &Path) -> (Vec<Stored>, String, Vec<(String, String)>) {
    let reader = Reader::open(path).unwrap();
    let metadata = reader
        .metadata()
        .iter()
        .filter(|(k, _)| k.as_str() != "burnpack.padding")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (contents(path), format!("{:?}", reader.scalars()), metadata)
}

#[test]
fn a_large_checkpoint_written_in_stages_is_the_one_pass_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (model, optim, sched) = large_trained();
    let staged = dir.path().join("staged.bpk");
    let size = state(&model, &optim, &sched, 3).save(&staged).unwrap();
    assert_eq!(size, std::fs::metadata(&staged).unwrap().len());
    let one_pass = dir.path().join("one-pass.bpk");
    state(&model, &optim, &sched, 3)
        .into_writer()
        .unwrap()
        .write_to_file(&one_pass)
        .unwrap();
    let reader = Reader::open(&staged).unwrap();
    assert!(
        reader.metadata().contains_key("burnpack.padding"),
        "the staged path was taken"
    );
    assert_eq!(reader.verify_all().unwrap(), reader.tensors().len());
    assert_eq!(everything(&staged), everything(&one_pass));
    // Burn reads it, and it resumes.
    burn_pack::Reader::from_file(&staged).unwrap();
    let ckpt = Checkpoint::open(&staged).unwrap();
    let restored = ckpt
        .load_model(Large {
            layer: LinearConfig::new(4096, 4096).init(&device()),
        })
        .unwrap();
    assert_eq!(
        restored.layer.weight.val().into_data(),
        model.layer.weight.val().into_data()
    );
    ckpt.load_optimizer(optimizer()).unwrap();
    // Through the manager as well, with no scratch file left.
    let manager = CheckpointManager::new(dir.path().join("managed")).unwrap();
    let saved = manager
        .save(state(&model, &optim, &sched, 3))
        .unwrap()
        .location;
    assert_eq!(everything(&saved), everything(&one_pass));
    assert_eq!(common::scratch_files(&dir.path().join("managed")), 0);
}
