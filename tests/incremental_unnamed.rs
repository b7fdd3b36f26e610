//! An incremental save writes its data file before the manifest that names it: a save killed
//! in between leaves a data file no manifest names, complete or cut short. Such a file is
//! never referred to by a later save (even when it holds the very tensors that save needs),
//! and the first save of its step or a later one collects it.

mod common;

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
use common::incremental::{data_files, named};

#[derive(Module, Debug)]
struct Model {
    frozen: Param<Tensor<2>>,
    trained: Param<Tensor<2>>,
}

fn model(device: &Device, seed: f32) -> Model {
    let values = |offset: f32| -> Vec<f32> { (0..4096).map(|i| i as f32 + offset).collect() };
    Model {
        frozen: Param::from_data(burn::tensor::TensorData::new(values(0.5), [64, 64]), device),
        trained: Param::from_data(
            burn::tensor::TensorData::new(values(seed), [64, 64]),
            device,
        ),
    }
}

#[test]
fn a_data_file_no_manifest_names_is_never_referred_to_and_is_collected() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(2)
        .incremental(true);
    let first = model(&device, 1.0);
    manager
        .save(TrainingState::new(&first, Progress::new(0, 1)))
        .unwrap();
    let step1_data = data_files(dir.path());
    assert_eq!(step1_data.len(), 1);
    let step1_data = dir.path().join(step1_data.first().unwrap());

    // What a save of step 2 killed before its manifest leaves: one data file complete (it
    // holds the very tensors step 2 saves), one cut short in the middle of its tensors.
    let second = model(&device, 2.0);
    let scratch = tempfile::tempdir().unwrap();
    let donor = CheckpointManager::new(scratch.path())
        .unwrap()
        .incremental(true);
    donor
        .save(TrainingState::new(&second, Progress::new(0, 2)))
        .unwrap();
    let donor_data = data_files(scratch.path());
    let donor_data = scratch.path().join(donor_data.first().unwrap());
    let complete = dir
        .path()
        .join(format!("data-{:020}-{:016x}.bpk", 2, 0xdead));
    let cut = dir
        .path()
        .join(format!("data-{:020}-{:016x}.bpk", 2, 0xbeef));
    std::fs::copy(&donor_data, &complete).unwrap();
    let bytes = std::fs::read(&donor_data).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    // A killed save of step 1's data file, cut short too (its step is already saved).
    let cut_old = dir
        .path()
        .join(format!("data-{:020}-{:016x}.bpk", 1, 0xf00d));
    let bytes = std::fs::read(&step1_data).unwrap();
    std::fs::write(&cut_old, &bytes[..bytes.len() - 1]).unwrap();

    let report = manager
        .save(TrainingState::new(&second, Progress::new(0, 2)))
        .unwrap();
    // The save wrote the changed tensor itself, referred to step 1's frozen one, and named
    // neither leftover.
    assert_eq!((report.tensors_written, report.tensors_referred), (1, 1));
    let in_use = named(&manager);
    for leftover in [&complete, &cut, &cut_old] {
        let name = leftover.file_name().unwrap().to_str().unwrap();
        assert!(!in_use.contains(name), "{name} is named by a checkpoint");
        assert!(!leftover.exists(), "{name} was not collected");
    }
    assert_eq!(data_files(dir.path()), in_use);
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 2);
    assert_eq!(latest.verify().unwrap(), 2);
    let loaded = latest.load_model(model(&device, 0.0)).unwrap();
    assert_eq!(
        loaded.trained.val().into_data(),
        second.trained.val().into_data()
    );
}
