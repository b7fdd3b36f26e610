//! An incremental checkpoint opened again by its manager while an earlier open is still held
//! is that open, shared (its references parsed once, its data files mapped once), as long as
//! its manifest and data files are unchanged and settled; anything changed, replaced, gone or
//! changed too recently to tell opens anew.

use std::path::Path;
use std::time::Duration;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::checkpoint::{Checkpoint, CheckpointManager, Progress, TrainingState};

#[derive(Module, Debug)]
struct M {
    base: Linear,
    adapter: Linear,
}

fn model(device: &Device) -> M {
    M {
        base: LinearConfig::new(16, 8).init(device),
        adapter: LinearConfig::new(16, 8).with_bias(false).init(device),
    }
}

/// An incremental manager of `dir` keeping five checkpoints.
fn incremental(dir: &Path) -> CheckpointManager {
    CheckpointManager::new(dir)
        .unwrap()
        .keep_last(5)
        .incremental(true)
}

/// Longer than the time after its last change that a file is taken for settled.
fn settle() {
    std::thread::sleep(Duration::from_millis(3300));
}

fn same(a: &Checkpoint, b: &Checkpoint) -> bool {
    std::ptr::eq(a.chain().unwrap(), b.chain().unwrap())
}

fn weights(ckpt: &Checkpoint, device: &Device) -> Vec<f32> {
    let m = ckpt.load_model(model(device)).unwrap();
    let mut out = m.base.weight.val().into_data().to_vec::<f32>().unwrap();
    out.extend(m.adapter.weight.val().into_data().to_vec::<f32>().unwrap());
    out
}

fn data_file_of(ckpt: &Checkpoint, tensor: &str) -> String {
    ckpt.chain().unwrap().location(tensor).unwrap().to_string()
}

#[test]
fn an_open_held_is_shared_until_a_file_changes() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = incremental(dir.path());
    let first = model(&device);
    manager
        .save(TrainingState::new(&first, Progress::new(0, 1)))
        .unwrap();
    let second = M {
        base: first.base.clone(),
        adapter: LinearConfig::new(16, 8).with_bias(false).init(&device),
    };
    manager
        .save(TrainingState::new(&second, Progress::new(0, 2)))
        .unwrap();

    // Just written: nothing is settled, every open is its own.
    let a = manager.latest().unwrap().unwrap();
    let b = manager.latest().unwrap().unwrap();
    assert!(
        !same(&a, &b),
        "files changed within the last seconds are not shared"
    );
    drop((a, b));

    settle();
    let a = manager.latest().unwrap().unwrap();
    let b = manager.latest().unwrap().unwrap();
    assert!(
        same(&a, &b),
        "an unchanged, settled checkpoint opened again is shared"
    );
    // A clone of the manager shares too; `checkpoint(step)` as `latest` does.
    let c = manager.clone().checkpoint(2).unwrap();
    assert!(same(&a, &c));
    assert_eq!(weights(&b, &device), weights(&a, &device));
    b.verify().unwrap();
    // Another manager of the same directory opens its own.
    let other = CheckpointManager::new(dir.path())
        .unwrap()
        .incremental(true);
    assert!(!same(&a, &other.latest().unwrap().unwrap()));
    drop((b, c));

    // Nothing held any more: opened anew.
    drop(a);
    let fresh = manager.latest().unwrap().unwrap();
    let again = manager.latest().unwrap().unwrap();
    assert!(same(&fresh, &again));
    drop(again);

    // The base's data file replaced by rename with another run's bytes of the same name:
    // not shared; the open sees the new file (its checksums are not the recorded ones).
    let base = data_file_of(&fresh, "model.base.weight");
    let copy = dir.path().join("copy.tmp");
    let mut bytes = std::fs::read(dir.path().join(&base)).unwrap();
    let chain = fresh.chain().unwrap();
    let (_, source) = chain.data_files().find(|(n, _)| *n == base).unwrap();
    let stored = chain.stored_as("model.base.weight").unwrap();
    let at = source.layout().tensor(stored).unwrap().offset() as usize;
    bytes[at] ^= 1;
    std::fs::write(&copy, &bytes).unwrap();
    std::fs::rename(&copy, dir.path().join(&base)).unwrap();
    settle();
    let replaced = manager.checkpoint(2).unwrap();
    assert!(
        !same(&fresh, &replaced),
        "a replaced data file is opened anew"
    );
    assert!(
        replaced.verify().is_err(),
        "the new bytes are the file's, not the held ones"
    );
    fresh.verify().unwrap();
    // The held checkpoint still reads what it mapped.
    assert_eq!(weights(&fresh, &device).len(), 16 * 8 * 2);
}

#[test]
fn a_manifest_rewritten_or_a_data_file_gone_is_opened_anew() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = incremental(dir.path());
    let m = model(&device);
    for step in 1..=2 {
        manager
            .save(TrainingState::new(&m, Progress::new(0, step)))
            .unwrap();
    }
    settle();
    let held = manager.latest().unwrap().unwrap();
    assert!(same(&held, &manager.latest().unwrap().unwrap()));
    // The manifest rewritten in place with its own bytes: its times change, so the next open
    // is its own (and, the file changed just now, not offered to later opens either).
    let manifest = manager.path_for(2);
    let bytes = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &bytes).unwrap();
    let after = manager.latest().unwrap().unwrap();
    assert!(!same(&held, &after));
    assert!(!same(&after, &manager.latest().unwrap().unwrap()));
    drop(after);
    // The data file removed: the held checkpoint is not handed out; the open fails and
    // `latest` passes over it to step 1, which refers to the same file: none opens.
    let data = data_file_of(&held, "model.base.weight");
    std::fs::remove_file(dir.path().join(&data)).unwrap();
    assert!(manager.checkpoint(2).is_err());
    assert!(manager.latest().is_err());
    // What is held still reads.
    assert_eq!(weights(&held, &device).len(), 16 * 8 * 2);
    assert!(!Path::new(&dir.path().join(&data)).exists());
}

/// A manifest that is a symbolic link is never shared (its own times do not change with the
/// file it points to: outside attack, a held checkpoint was handed out after the file the
/// link points to was replaced); an open held from before a data file was replaced does not
/// keep later opens of the same manifest from sharing with each other (outside attack).
#[test]
fn a_linked_manifest_is_not_shared_and_a_stale_open_does_not_block_sharing() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = incremental(dir.path());
    let first = model(&device);
    let second = model(&device);
    for (step, m) in [(1, &first), (2, &second), (3, &second)] {
        manager
            .save(TrainingState::new(m, Progress::new(0, step)))
            .unwrap();
    }
    // Step 2's manifest moved aside and linked back in its place.
    let real = dir.path().join("real2.manifest");
    std::fs::rename(manager.path_for(2), &real).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&real, manager.path_for(2)).unwrap();
    #[cfg(not(unix))]
    std::fs::copy(&real, manager.path_for(2)).unwrap();
    settle();
    let held = manager.checkpoint(2).unwrap();
    assert!(!same(&held, &manager.checkpoint(2).unwrap()));
    // The file the link points to replaced by step 1's manifest: the next open loads it.
    let copy = dir.path().join("copy.tmp");
    std::fs::copy(manager.path_for(1), &copy).unwrap();
    std::fs::rename(&copy, &real).unwrap();
    settle();
    #[cfg(unix)]
    assert_eq!(
        weights(&manager.checkpoint(2).unwrap(), &device),
        weights(&manager.checkpoint(1).unwrap(), &device)
    );
    assert_ne!(
        weights(&held, &device),
        weights(&manager.checkpoint(1).unwrap(), &device)
    );

    // Step 3 held, then its data file replaced by an identical copy (another inode): opens
    // after that share with each other, not with the one held from before.
    let stale = manager.checkpoint(3).unwrap();
    let data = data_file_of(&stale, "model.adapter.weight");
    std::fs::copy(dir.path().join(&data), &copy).unwrap();
    std::fs::rename(&copy, dir.path().join(&data)).unwrap();
    settle();
    let b = manager.checkpoint(3).unwrap();
    let c = manager.checkpoint(3).unwrap();
    assert!(!same(&stale, &b));
    assert!(
        same(&b, &c),
        "opens after the replacement share with each other"
    );
    assert_eq!(weights(&b, &device), weights(&stale, &device));
}
