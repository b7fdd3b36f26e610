//! Crash safety with real processes: a child saving checkpoints in a loop is killed with
//! SIGKILL in the middle of a save, again and again; every time, the previous checkpoint is
//! intact, `latest()` is correct, and the next manager removes the stray scratch file.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::checkpoint::{Checkpoint, CheckpointManager, Progress, TrainingState};

#[derive(Module, Debug)]
struct Model {
    layer: Linear,
}

fn model(device: &Device) -> Model {
    Model {
        layer: LinearConfig::new(1024, 4096).init(device),
    } // 16 MiB
}

/// Child side: saves checkpoints forever, continuing from the latest one.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("BURNPACK_CRASH_DIR") else {
        return;
    };
    let device = Device::flex();
    let manager = CheckpointManager::new(&dir).unwrap().keep_last(2);
    let mut step = manager.latest().unwrap().map_or(0, |c| c.progress().step);
    let model = model(&device);
    loop {
        step += 1;
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
}

fn spawn(dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--test-threads=1", "--nocapture"])
        .env("BURNPACK_CRASH_DIR", dir)
        .spawn()
        .unwrap()
}

#[test]
fn killing_a_saving_process_never_loses_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let mut last_step = 0;
    let mut killed_mid_save = 0;
    for round in 0..6 {
        let mut child = spawn(dir.path());
        let deadline = Instant::now() + Duration::from_secs(60);
        // Wait for a save newer than the last one to be underway, then kill in the middle of it.
        loop {
            assert!(Instant::now() < deadline, "the child made no progress");
            let listed = CheckpointManager::new(dir.path()).unwrap().list().unwrap();
            let newest = listed.last().map_or(0, |c| c.step);
            if newest > last_step && common::scratch_files(dir.path()) > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Vary the moment within the save.
        std::thread::sleep(Duration::from_millis(round * 7));
        let mid_save = common::scratch_files(dir.path()) > 0;
        child.kill().unwrap();
        child.wait().unwrap();
        killed_mid_save += usize::from(mid_save);

        let manager = CheckpointManager::new(dir.path()).unwrap();
        assert_eq!(
            common::scratch_files(dir.path()),
            0,
            "the stray scratch file is removed"
        );
        for entry in manager.list().unwrap() {
            // Every visible checkpoint is complete: atomic rename.
            let ckpt = Checkpoint::open(&entry.path).unwrap();
            assert_eq!(ckpt.progress().step, entry.step);
        }
        let latest = manager.latest().unwrap().expect("a checkpoint survives");
        let step = latest.progress().step;
        assert!(
            step >= last_step,
            "latest went backwards: {step} < {last_step}"
        );
        assert_eq!(step, manager.list().unwrap().last().unwrap().step);
        latest.load_model(model(&device)).unwrap();
        assert_eq!(
            latest.reader().verify_all().unwrap(),
            2,
            "the surviving checkpoint verifies (weight and bias)"
        );
        last_step = step;
    }
    assert!(
        killed_mid_save >= 3,
        "only {killed_mid_save} kills landed mid-save"
    );
}

/// Writes version `version` of the test pack: 8 tensors of 4 MiB, each filled with
/// `version * 100 + index`.
fn write_version(path: &Path, version: u64) {
    let entries = (0..8u64)
        .map(|i| {
            burnpack::Entry::deferred(
                format!("t{i}"),
                burn::tensor::DType::U64,
                vec![1 << 19],
                4 << 20,
                move || {
                    Ok(burn::tensor::Bytes::from_elems(vec![
                        version * 100 + i;
                        1 << 19
                    ]))
                },
            )
        })
        .collect();
    burnpack::Writer::new(entries)
        .with_scalar("version", version)
        .write_to_file(path)
        .unwrap();
}

/// Child side: rewrites one 32 MiB pack forever, each version tagged with its number.
#[test]
fn pack_child() {
    let Ok(path) = std::env::var("BURNPACK_PACK_PATH") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let start =
        burnpack::Reader::open(&path).map_or(0, |r| u64::try_from(r.scalars()["version"]).unwrap());
    for version in start + 1.. {
        write_version(&path, version);
    }
}

#[test]
fn killing_a_process_rewriting_a_pack_leaves_a_complete_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    let mut last = 0u64;
    for round in 0..6u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["pack_child", "--exact", "--test-threads=1"])
            .env("BURNPACK_PACK_PATH", &path)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(path.exists() && common::scratch_files(dir.path()) > 0) {
            assert!(Instant::now() < deadline, "the child made no progress");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(round * 5));
        child.kill().unwrap();
        child.wait().unwrap();

        // The destination is a complete version: it opens, verifies and is self-consistent.
        let reader = burnpack::Reader::open(&path).unwrap();
        assert_eq!(reader.verify_all().unwrap(), 8);
        let version = u64::try_from(reader.scalars()["version"]).unwrap();
        for i in 0..8u64 {
            let bytes = reader.bytes(&format!("t{i}")).unwrap();
            assert!(
                bytes
                    .chunks_exact(8)
                    .all(|w| u64::from_le_bytes(w.try_into().unwrap()) == version * 100 + i)
            );
        }
        assert!(
            version >= last,
            "went back from version {last} to {version}"
        );
        last = version;

        // The next save recognises the killed process's scratch file and removes it.
        write_version(&path, version);
        assert_eq!(common::scratch_files(dir.path()), 0);
    }
}
