//! Incremental checkpoints: a LoRA-shaped run (a frozen base under trained adapters, Adam)
//! writes the base once; every later checkpoint refers to it and holds only what changed; the
//! run resumes bit-identically; retention never deletes bytes a kept checkpoint names;
//! damaged or missing data files are found; the directory copies whole; hostile manifests are
//! refused with the file and the reason; a child killed mid-save loses nothing.

mod common;

use common::incremental::data_files;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Bytes, DType, Device, Tensor, TensorData};
use burnpack::checkpoint::{
    AsyncSaver, Checkpoint, CheckpointError, CheckpointManager, INCREMENTAL_KEY, KIND, KIND_KEY,
    Progress, REFS_KEY, TrainingState, WhenBusy,
};
use burnpack::read::Reader;
use burnpack::source::TensorSource;
use burnpack::{Entry, Writer};

#[derive(Module, Debug)]
struct Lora {
    base: Linear,
    down: Linear,
    up: Linear,
}

impl Lora {
    /// A frozen base (`base`, 64 x 512) under a rank-4 adapter (`down`, `up`).
    fn new(device: &Device, base_in: usize) -> Self {
        Self {
            base: LinearConfig::new(base_in, 512).init(device).no_grad(),
            down: LinearConfig::new(base_in, 4).with_bias(false).init(device),
            up: LinearConfig::new(4, 512).with_bias(false).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.base.forward(x.clone()) + self.up.forward(self.down.forward(x))
    }

    /// The same base (its very tensors) under newly initialized adapters.
    fn with_new_adapters(&self, device: &Device) -> Self {
        let fresh = Self::new(device, self.base.weight.dims()[0]);
        Self {
            base: self.base.clone(),
            down: fresh.down,
            up: fresh.up,
        }
    }
}

fn device() -> Device {
    Device::flex().autodiff()
}

fn optimizer() -> ModuleOptimizer {
    AdamConfig::new().init()
}

/// A fixed synthetic batch for `step` (no RNG: every run sees the same data).
fn batch(step: u64, width: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let xs: Vec<f32> = (0..8 * width)
        .map(|i| ((i as u64 * 7 + step * 13) % 17) as f32 / 17.0 - 0.5)
        .collect();
    (
        Tensor::from_data(TensorData::new(xs, [8, width]), device),
        Tensor::zeros([8, 512], device),
    )
}

fn train(mut model: Lora, optim: &mut ModuleOptimizer, steps: std::ops::Range<u64>) -> Lora {
    let device = device();
    let width = model.base.weight.dims()[0];
    for step in steps {
        let (x, y) = batch(step, width, &device);
        let loss = (model.forward(x) - y).powf_scalar(2.0).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    model
}

/// Every parameter's bytes, by path.
fn params(model: &Lora) -> Vec<Vec<u8>> {
    [
        model.base.weight.val(),
        model.down.weight.val(),
        model.up.weight.val(),
    ]
    .into_iter()
    .map(|t| t.into_data().into_bytes().to_vec())
    .chain(std::iter::once(
        model
            .base
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .into_bytes()
            .to_vec(),
    ))
    .collect()
}

/// The steps of the data files in `dir` (a save writes up to two: the model's, the
/// optimizer's).
fn data_steps(dir: &Path) -> Vec<u64> {
    let steps: BTreeSet<u64> = data_files(dir)
        .iter()
        .map(|n| n[5..25].parse().unwrap())
        .collect();
    steps.into_iter().collect()
}

fn steps(manager: &CheckpointManager) -> Vec<u64> {
    manager.list().unwrap().iter().map(|c| c.step).collect()
}

fn held(ckpt: &Checkpoint) -> BTreeSet<String> {
    let chain = ckpt.chain().expect("an incremental checkpoint");
    chain.held().map(|(name, _)| name.to_string()).collect()
}

#[test]
fn lora_checkpoints_hold_what_changed_and_resume_bit_identically() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(3)
        .incremental(true);
    let init = Lora::new(&device, 64);

    // Straight through: 8 steps, no checkpoint.
    let mut optim = optimizer();
    let straight = train(init.clone(), &mut optim, 0..8);

    // The same run, checkpointed after each of the first 6 steps.
    let mut optim = optimizer();
    let mut model = init;
    let base_bytes = 64 * 512 * 4 + 512 * 4;
    for step in 1..=6 {
        model = train(model, &mut optim, step - 1..step);
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
            .unwrap();
        let ckpt = manager.latest().unwrap().unwrap();
        assert_eq!(ckpt.progress().step, step);
        let chain = ckpt.chain().unwrap();
        let held = held(&ckpt);
        if step == 1 {
            assert_eq!(
                held.len(),
                chain.tensors().len(),
                "the first holds everything"
            );
        } else {
            assert!(
                held.contains("model.down.weight") && held.contains("model.up.weight"),
                "{held:?}"
            );
            assert!(
                held.iter().all(|n| n.starts_with("optim.")
                    || n.starts_with("model.down")
                    || n.starts_with("model.up")),
                "only the adapters and their optimizer state change: {held:?}"
            );
            let base = chain.location("model.base.weight").unwrap();
            assert!(base.starts_with("data-00000000000000000001-"), "{base}");
            let own = chain
                .location("model.up.weight")
                .map(|f| dir.path().join(f))
                .unwrap();
            let size = std::fs::metadata(own).unwrap().len();
            assert!(size < base_bytes, "step {step} wrote {size} bytes");
        }
        // Everything it refers to reads back, checksums and content hashes checked.
        assert_eq!(ckpt.verify().unwrap(), chain.tensors().len());
    }
    assert_eq!(steps(&manager), [4, 5, 6]);
    // The base's data file (of step 1) stays, those of steps 2 and 3 are gone.
    let data = data_steps(dir.path());
    assert_eq!(data, [1, 4, 5, 6]);

    // Resumed in a fresh model and optimizer from the latest: bit-identical to straight.
    let ckpt = manager.latest().unwrap().unwrap();
    let loaded = ckpt.load_model(Lora::new(&device, 64)).unwrap();
    assert_eq!(
        params(&loaded),
        params(&model),
        "the saved model loads exactly"
    );
    let mut resumed_optim = ckpt.load_optimizer(optimizer()).unwrap();
    let resumed = train(loaded, &mut resumed_optim, 6..8);
    assert_eq!(params(&resumed), params(&straight));

    // The tensors of the loaded model are views of the mapped data files.
    let chain = ckpt.chain().unwrap();
    for info in chain.tensors() {
        assert_eq!(chain.copy_reason(info), None, "{}", info.name());
    }
}

#[test]
fn unchanged_saves_write_no_data_and_full_training_holds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true);
    let device = Device::flex();
    let model = Lora::new(&device, 16);
    for step in 1..=3 {
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
    assert_eq!(
        data_files(dir.path()).len(),
        1,
        "nothing changed after the first"
    );
    assert!(held(&manager.latest().unwrap().unwrap()).is_empty());

    // Every tensor different at every save (a new model each time): each holds all.
    for step in 4..=5 {
        let model = Lora::new(&device, 16);
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
        let ckpt = manager.latest().unwrap().unwrap();
        assert_eq!(held(&ckpt).len(), 4);
        assert_eq!(
            params(&ckpt.load_model(Lora::new(&device, 16)).unwrap()),
            params(&model)
        );
    }

    // Two equal tensors of one save are stored once: a model of zeros where `base.weight`
    // and `up.weight` have one shape (4 x 512).
    let zeros = Lora::new(&device, 4).map(&mut Zeroer);
    manager
        .save(TrainingState::new(&zeros, Progress::new(0, 6)))
        .unwrap();
    let ckpt = manager.latest().unwrap().unwrap();
    let chain = ckpt.chain().unwrap();
    assert_eq!(
        params(&ckpt.load_model(Lora::new(&device, 4)).unwrap()),
        params(&zeros)
    );
    let distinct: BTreeSet<(String, String)> = chain
        .tensors()
        .iter()
        .map(|t| {
            let stored = chain.stored_as(t.name()).unwrap();
            (
                chain.location(t.name()).unwrap().to_string(),
                stored.to_string(),
            )
        })
        .collect();
    assert_eq!(distinct.len(), 3, "{distinct:?}");
    let stored = std::fs::metadata(dir.path().join(chain.location("model.up.weight").unwrap()))
        .unwrap()
        .len();
    assert!(
        stored < 2 * 4 * 512 * 4,
        "one copy of the 8 KiB of zeros: {stored}"
    );
}

/// Sets every float parameter to zeros of its shape.
struct Zeroer;

impl burn::module::ModuleMapper for Zeroer {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<Tensor<D>>,
    ) -> burn::module::Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let zeros = tensor.zeros_like();
        burn::module::Param::from_mapped_value(id, zeros, mapper)
    }
}

#[test]
fn retention_keeps_what_kept_checkpoints_name() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(2)
        .keep_best("loss", true)
        .incremental(true);
    let base = Lora::new(&device, 16);
    let mut models = Vec::new();
    for (step, loss) in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.7), (5, 0.6)] {
        // The same base; new adapters each time.
        let model = base.with_new_adapters(&device);
        manager
            .save(TrainingState::new(
                &model,
                Progress::new(0, step).with("loss", loss),
            ))
            .unwrap();
        models.push(model);
    }
    assert_eq!(
        steps(&manager),
        [2, 4, 5],
        "the last two plus the best loss"
    );
    // Data files: step 1's (the base, named by all), and those of the kept ones.
    let data = data_steps(dir.path());
    assert_eq!(data, [1, 2, 4, 5]);
    for (step, model) in [(2, &models[1]), (4, &models[3]), (5, &models[4])] {
        let ckpt = Checkpoint::open(manager.path_for(step)).unwrap();
        let loaded = ckpt.load_model(Lora::new(&device, 16)).unwrap();
        assert_eq!(params(&loaded), params(model));
    }

    // Deleting the oldest checkpoint of the chain (its manifest) keeps the others loadable,
    // and the data it alone named goes at the next retention.
    std::fs::remove_file(manager.path_for(2)).unwrap();
    manager.retain().unwrap();
    let data = data_steps(dir.path());
    assert_eq!(data, [1, 4, 5]);
    let ckpt = manager.latest().unwrap().unwrap();
    assert_eq!(
        params(&ckpt.load_model(Lora::new(&device, 16)).unwrap()),
        params(&models[4])
    );

    // Rolling back removes the later checkpoints and the data files they wrote.
    assert_eq!(manager.discard_after(4).unwrap(), 1);
    let data = data_steps(dir.path());
    assert_eq!(data, [1, 4]);
    assert_eq!(manager.latest().unwrap().unwrap().progress().step, 4);

    // A save in flight (its data file written, its manifest not yet) is not collected.
    let orphan = dir.path().join(data_name(9));
    std::fs::copy(dir.path().join(data_name_of(dir.path(), 4)), &orphan).unwrap();
    manager.retain().unwrap();
    assert!(
        orphan.exists(),
        "a data file newer than every checkpoint stays"
    );
}

fn data_name(step: u64) -> String {
    format!("data-{step:020}-{:016x}.bpk", 0xfeed)
}

fn data_name_of(dir: &Path, step: u64) -> String {
    data_files(dir)
        .into_iter()
        .find(|n| n[5..25].parse::<u64>().unwrap() == step)
        .unwrap()
}

#[test]
fn missing_or_damaged_data_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true);
    let base = Lora::new(&device, 16);
    for step in 1..=3 {
        let model = base.with_new_adapters(&device);
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
    // The newest checkpoint's own data file goes missing: `latest` passes over it, and says
    // which and why.
    let gone = data_name_of(dir.path(), 3);
    std::fs::remove_file(dir.path().join(&gone)).unwrap();
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 2);
    assert_eq!(latest.skipped().len(), 1);
    assert_eq!(latest.skipped()[0].step, 3);
    assert!(
        latest.skipped()[0].error.to_string().contains(&gone),
        "{}",
        latest.skipped()[0].error
    );
    let err = Checkpoint::open(manager.path_for(3)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ckpt-00000000000000000003.bpk")
            && text.contains("data-00000000000000000003-"),
        "{text}"
    );

    // A flipped bit in the base's bytes: verification names the tensor and the file.
    let base_file = dir.path().join(data_name_of(dir.path(), 1));
    let reader = Reader::open(&base_file).unwrap();
    let offset = reader.tensor("model.base.weight").unwrap().offset();
    drop(reader);
    let mut bytes = std::fs::read(&base_file).unwrap();
    bytes[usize::try_from(offset).unwrap() + 5] ^= 0x10;
    std::fs::write(&base_file, &bytes).unwrap();
    let ckpt = Checkpoint::open(manager.path_for(2)).unwrap();
    let err = ckpt.verify().unwrap_err().to_string();
    assert!(
        err.contains("model.base.weight") && err.contains("checksum"),
        "{err}"
    );
    bytes[usize::try_from(offset).unwrap() + 5] ^= 0x10;
    std::fs::write(&base_file, &bytes).unwrap();
    assert_eq!(ckpt.verify().unwrap(), 4);

    // A data file swapped for another valid one of the same name: the content hash differs.
    let own = dir.path().join(data_name_of(dir.path(), 2));
    let other = Writer::new(
        Reader::open(&own)
            .unwrap()
            .tensors()
            .iter()
            .map(|t| {
                // The same tensors, names and parameter ids; other bytes.
                let zeros = vec![0u8; usize::try_from(t.len()).unwrap()];
                Entry::from_stored(t, Bytes::from_bytes_vec(zeros))
            })
            .collect(),
    )
    .with_metadata(KIND_KEY, "checkpoint-data");
    other.write_to_file(&own).unwrap();
    // Refused when opened (the data file's checksums are not the ones the checkpoint
    // recorded): a plain load never gets the other file's values.
    let err = Checkpoint::open(manager.path_for(2))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("replaced or damaged") && err.contains("ckpt-00000000000000000002.bpk"),
        "{err}"
    );
    let err = manager.checkpoint(2).unwrap_err().to_string();
    assert!(err.contains("replaced or damaged"), "{err}");
}

#[test]
fn a_directory_copies_whole_and_a_manifest_alone_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .incremental(true);
    let model = Lora::new(&device, 16);
    for step in 1..=2 {
        manager
            .save(TrainingState::new(&model, Progress::new(3, step)))
            .unwrap();
    }
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    drop(dir);
    let ckpt = Checkpoint::open(copy.path().join("ckpt-00000000000000000002.bpk")).unwrap();
    assert_eq!(ckpt.progress().epoch, 3);
    assert_eq!(
        params(&ckpt.load_model(Lora::new(&device, 16)).unwrap()),
        params(&model)
    );
    // Opened from its bytes alone, without the storage: loading says why it cannot.
    let alone = Checkpoint::from_reader(
        Reader::open(copy.path().join("ckpt-00000000000000000002.bpk")).unwrap(),
    )
    .unwrap();
    assert!(alone.is_incremental());
    let err = alone
        .load_model(Lora::new(&device, 16))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("incremental") && err.contains("ckpt-00000000000000000002.bpk"),
        "{err}"
    );
}

/// Writes a manifest with `refs` (and optionally a tensor of its own) as step 7.
fn manifest(dir: &Path, refs: &str, own: bool) -> PathBuf {
    let path = dir.join("ckpt-00000000000000000007.bpk");
    let entries = if own {
        vec![Entry::resident(
            "model.x",
            DType::U8,
            vec![1],
            Bytes::from_bytes_vec(vec![1]),
        )]
    } else {
        Vec::new()
    };
    Writer::new(entries)
        .with_metadata(KIND_KEY, KIND)
        .with_metadata(INCREMENTAL_KEY, "1")
        .with_metadata(REFS_KEY, refs)
        .write_to_file(&path)
        .unwrap();
    path
}

#[test]
fn hostile_manifests_are_refused_with_the_file_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(data_name(1));
    Writer::new(vec![Entry::resident(
        "model.w",
        DType::U8,
        vec![2],
        Bytes::from_bytes_vec(vec![1, 2]),
    )])
    .with_metadata(KIND_KEY, "checkpoint-data")
    .write_to_file(&data)
    .unwrap();
    let hash = burnpack::checkpoint::content_hash(&[1, 2]);
    let plain = dir.path().join(data_name(2));
    Writer::new(vec![]).write_to_file(&plain).unwrap();
    let file = data_name(1);
    let cases = [
        (
            format!("model.w\t../../etc/passwd\t\t\tU8\t2\t{hash:032x}\n"),
            "not the name of a data file",
        ),
        (
            format!("model.w\t{file}\tmodel.v\t\tU8\t2\t{hash:032x}\n"),
            "holds no tensor 'model.v'",
        ),
        (
            format!(
                "model.w\t{file}\t\t\tU8\t2\t{hash:032x}\nmodel.w\t{file}\t\t\tU8\t2\t{hash:032x}\n"
            ),
            "listed twice",
        ),
        (
            format!("model.w\t{}\t\t\tU8\t2\t{hash:032x}\n", data_name(3)),
            "data-00000000000000000003-",
        ),
        (
            format!("model.w\t{}\t\t\tU8\t2\t{hash:032x}\n", data_name(2)),
            "not a checkpoint data file",
        ),
        (
            format!("model.w\t{file}\t\t\tU8\t2\tabc\n"),
            "32 hex digits",
        ),
        (
            format!("model.w\t{file}\t\t-1\tU8\t2\t{hash:032x}\n"),
            "parameter id",
        ),
        ("model.w\n".to_string(), "1 fields"),
    ];
    for (refs, why) in cases {
        let path = manifest(dir.path(), &refs, false);
        let err = Checkpoint::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(why) && err.contains("ckpt-00000000000000000007.bpk"),
            "{why}: {err}"
        );
    }
    let path = manifest(
        dir.path(),
        &format!("model.w\t{file}\t\t\tU8\t2\t{hash:032x}\n"),
        true,
    );
    let err = Checkpoint::open(&path).unwrap_err().to_string();
    assert!(err.contains("tensors of its own"), "{err}");
    // The well-formed one opens, and the manager's retention keeps its data.
    let path = manifest(
        dir.path(),
        &format!("model.w\t{file}\t\t\tU8\t2\t{hash:032x}\n"),
        false,
    );
    let ckpt = Checkpoint::open(&path).unwrap();
    assert_eq!(ckpt.verify().unwrap(), 1);

    // What an attack through `bpk` found, each refused now:
    let good = format!("model.w\t{file}\t\t\tU8\t2\t{hash:032x}\n");
    let refused = |path: &Path, why: &str| {
        let err = Checkpoint::open(path).unwrap_err().to_string();
        assert!(err.contains(why), "{why}: {err}");
        assert!(err.len() < 2000, "a short message: {} bytes", err.len());
    };
    // A data file of a later step than the checkpoint's.
    std::fs::copy(&data, dir.path().join(data_name(9))).unwrap();
    let later = format!("model.w\t{}\t\t\tU8\t2\t{hash:032x}\n", data_name(9));
    refused(
        &manifest(dir.path(), &later, false),
        "after this checkpoint's (7)",
    );
    // A data file that is a link (to a file outside the directory, or inside it).
    #[cfg(unix)]
    {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("elsewhere.bpk");
        std::fs::copy(&data, &target).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(data_name(4))).unwrap();
        let linked = format!("model.w\t{}\t\t\tU8\t2\t{hash:032x}\n", data_name(4));
        refused(&manifest(dir.path(), &linked, false), "not a regular file");
    }
    // Its own tensor with another parameter id than its data file's: the reference's id is
    // the checkpoint's (the bytes were stored for a parameter of another id).
    let id = format!("model.w\t{file}\t\t5\tU8\t2\t{hash:032x}\n");
    let ckpt = Checkpoint::open(manifest(dir.path(), &id, false)).unwrap();
    let chain = ckpt.chain().unwrap();
    assert_eq!(chain.tensor("model.w").unwrap().param_id(), Some(5));
    // A data file checksum other than the data file's: another file of the same name.
    let checksum = Reader::open(&data).unwrap().tensors()[0]
        .checksum()
        .unwrap();
    let line = |c: u64| format!("model.w\t{file}\t\t\tU8\t2\t{hash:032x}\t{c:016x}\n");
    assert!(Checkpoint::open(manifest(dir.path(), &line(checksum), false)).is_ok());
    refused(
        &manifest(dir.path(), &line(checksum ^ 1), false),
        "replaced or damaged",
    );
    // A 10,000-character name: named, not echoed whole.
    let long = "n".repeat(10_000);
    let named = format!("{long}\t{file}\tmodel.x\t\tU8\t2\t{hash:032x}\n");
    refused(&manifest(dir.path(), &named, false), "(10000 bytes)");
    // More references than a pack may hold tensors.
    let many: String = (0..100_001)
        .map(|i| format!("m.{i}\t{file}\tmodel.w\t\tU8\t2\t{hash:032x}\n"))
        .collect();
    refused(
        &manifest(dir.path(), &many, false),
        "above the limit of 100000",
    );
    // The layout marker of another version, or a manifest that is not a checkpoint's.
    for (key, value, why) in [
        (INCREMENTAL_KEY, "2", "a layout this version does not read"),
        (KIND_KEY, "checkpoint-data", "not a burnpack checkpoint"),
    ] {
        let path = dir.path().join("ckpt-00000000000000000007.bpk");
        Writer::new(Vec::new())
            .with_metadata(KIND_KEY, KIND)
            .with_metadata(INCREMENTAL_KEY, "1")
            .with_metadata(REFS_KEY, good.as_str())
            .with_metadata(key, value)
            .write_to_file(&path)
            .unwrap();
        refused(&path, why);
    }
    // A manifest without checksums verifies its tensors but does not claim to be checked.
    let path = dir.path().join("ckpt-00000000000000000007.bpk");
    Writer::new(Vec::new())
        .with_metadata(KIND_KEY, KIND)
        .with_metadata(INCREMENTAL_KEY, "1")
        .with_metadata(REFS_KEY, good.as_str())
        .options(burnpack::write::WriteOptions::new().checksums(false))
        .write_to_file(&path)
        .unwrap();
    let ckpt = Checkpoint::open(&path).unwrap();
    assert!(!burnpack::source::PackSource::layout(ckpt.chain().unwrap()).has_checksums());
}

#[test]
fn async_saves_are_incremental_too() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(2)
        .incremental(true);
    let base = Lora::new(&device, 16);
    let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
    let mut last = None;
    for step in 1..=4 {
        let model = base.with_new_adapters(&device);
        saver
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
        last = Some(model);
    }
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 4);
    assert_eq!(
        params(&latest.load_model(Lora::new(&device, 16)).unwrap()),
        params(last.as_ref().unwrap())
    );
    saver.wait().unwrap();
    assert_eq!(steps(&manager), [3, 4]);
    assert_eq!(held(&latest).len(), 2, "the adapters only");
    // Step 1's data (the base) and the kept ones' own.
    assert_eq!(data_files(dir.path()).len(), 3);
}

/// Child side of the crash test: incremental saves of a LoRA-shaped model (16 MiB base, new
/// adapters each step) forever, continuing from the latest.
#[test]
fn incremental_crash_child() {
    let Ok(dir) = std::env::var("BURNPACK_INCREMENTAL_CRASH_DIR") else {
        return;
    };
    let device = Device::flex();
    let manager = CheckpointManager::new(&dir)
        .unwrap()
        .keep_last(2)
        .incremental(true);
    let mut step = manager.latest().unwrap().map_or(0, |c| c.progress().step);
    let mut base = Lora::new(&device, 8192);
    loop {
        step += 1;
        if step % 2 == 0 {
            // Every other save writes a new base (16 MiB): kills land in both kinds.
            base = Lora::new(&device, 8192);
        }
        let model = base.with_new_adapters(&device);
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
}

fn spawn(dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "incremental_crash_child",
            "--exact",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("BURNPACK_INCREMENTAL_CRASH_DIR", dir)
        .spawn()
        .unwrap()
}

/// Whether a save is under way in `dir`: a scratch file (a manifest being written), or a data
/// file of a step after the newest checkpoint's (written in place under its own name before
/// the manifest that names it).
fn save_in_flight(dir: &Path) -> bool {
    let step = |name: &str, prefix: &str| -> Option<u64> {
        name.strip_prefix(prefix)?.get(..20)?.parse().ok()
    };
    let (mut data, mut manifests) = (None, None);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        data = data.max(step(&name, "data-"));
        manifests = manifests.max(step(&name, "ckpt-"));
    }
    common::scratch_files(dir) > 0 || data > manifests
}

#[test]
fn killing_an_incremental_save_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let mut last_step = 0;
    let mut mid_save = 0;
    for round in 0..8u64 {
        let mut child = spawn(dir.path());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "the child made no progress");
            let listed = CheckpointManager::new(dir.path()).unwrap().list().unwrap();
            let newest = listed.last().map_or(0, |c| c.step);
            if newest > last_step + 1 && save_in_flight(dir.path()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(round * 3));
        mid_save += usize::from(save_in_flight(dir.path()));
        child.kill().unwrap();
        child.wait().unwrap();

        let manager = CheckpointManager::new(dir.path())
            .unwrap()
            .incremental(true);
        for entry in manager.list().unwrap() {
            // Every visible checkpoint is complete, with everything it names.
            let ckpt = Checkpoint::open(&entry.path)
                .unwrap_or_else(|e| panic!("round {round}: step {}: {e}", entry.step));
            assert_eq!(ckpt.progress().step, entry.step);
            assert_eq!(ckpt.verify().unwrap(), 4);
        }
        let latest = manager.latest().unwrap().expect("a checkpoint survives");
        let step = latest.progress().step;
        assert!(
            step >= last_step,
            "latest went backwards: {step} < {last_step}"
        );
        latest.load_model(Lora::new(&device, 8192)).unwrap();
        last_step = step;
    }
    assert!(mid_save >= 2, "only {mid_save} kills landed mid-save");
    // A later save collects what dead saves left: only named data files remain.
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(2)
        .incremental(true);
    let model = Lora::new(&device, 8192);
    manager
        .save(TrainingState::new(
            &model,
            Progress::new(0, last_step + 100),
        ))
        .unwrap();
    assert_eq!(data_files(dir.path()), common::incremental::named(&manager));
}

/// An incremental checkpoint through `bpk`: `inspect` says what it holds and what it refers
/// to, `verify` checks the chain (and fails on a damaged data file), `convert` writes one
/// self-contained pack that Burn's own reader reads.
#[test]
fn bpk_inspects_verifies_and_converts_a_chain() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .incremental(true);
    let base = Lora::new(&device, 16);
    let mut last = None;
    for step in 1..=2 {
        let model = base.with_new_adapters(&device);
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
        last = Some(model);
    }
    let ckpt = manager.path_for(2);
    let ckpt = ckpt.to_str().unwrap();
    let (code, out, err) = common::bpk(&["inspect", ckpt]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("2 tensors held, 2 referred to"), "{out}");
    assert!(
        out.contains("held data-00000000000000000002-")
            && out.contains("refers to data-00000000000000000001-"),
        "{out}"
    );
    let (code, out, err) = common::bpk(&["verify", ckpt]);
    assert_eq!(code, 0, "{out}{err}");

    let out_path = dir.path().join("whole.bpk");
    let (code, _, err) = common::bpk(&["convert", ckpt, out_path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // Burn's own reader reads every tensor of it, under the checkpoint's names.
    let whole = std::fs::read(&out_path).unwrap();
    let burns: Vec<String> = burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(whole))
        .unwrap()
        .into_tensors()
        .unwrap()
        .into_iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(burns.len(), 4, "{burns:?}");
    let meta = Reader::open(&out_path).unwrap();
    assert!(
        !meta.metadata().contains_key(REFS_KEY) && !meta.metadata().contains_key(INCREMENTAL_KEY)
    );
    let whole = Checkpoint::open(&out_path).unwrap();
    assert!(!whole.is_incremental());
    assert_eq!(
        params(&whole.load_model(Lora::new(&device, 16)).unwrap()),
        params(last.as_ref().unwrap())
    );

    // The base's data file damaged: verify fails (exit 1) naming the tensor.
    let base_file = dir.path().join(data_name_of(dir.path(), 1));
    let reader = Reader::open(&base_file).unwrap();
    let offset = reader.tensor("model.base.weight").unwrap().offset();
    drop(reader);
    let mut bytes = std::fs::read(&base_file).unwrap();
    bytes[usize::try_from(offset).unwrap()] ^= 1;
    std::fs::write(&base_file, &bytes).unwrap();
    let (code, out, err) = common::bpk(&["verify", ckpt]);
    assert_ne!(code, 0);
    assert!(
        format!("{out}{err}").contains("model.base.weight"),
        "{out}{err}"
    );
    // Missing: the open fails naming the data file.
    std::fs::remove_file(&base_file).unwrap();
    let (code, out, err) = common::bpk(&["inspect", ckpt]);
    assert_ne!(code, 0);
    assert!(
        format!("{out}{err}").contains("data-00000000000000000001-"),
        "{out}{err}"
    );
}

/// The same on object storage (`object_store`'s `InMemory`, and a real S3 server when
/// `.ci/run` starts one): the base is uploaded once, retention collects unnamed data objects,
/// a checkpoint loads from the objects it names.
#[cfg(feature = "object-store")]
mod remote {
    use std::sync::Arc;

    use burnpack::checkpoint::Storage;
    use burnpack::interop::object_store::{Bucket, RemoteCheckpointManager};

    use super::*;

    fn data_objects(manager: &RemoteCheckpointManager) -> Vec<u64> {
        let mut steps: Vec<u64> = manager
            .storage()
            .names()
            .unwrap()
            .iter()
            .filter(|n| n.starts_with("data-"))
            .map(|n| n[5..25].parse().unwrap())
            .collect();
        steps.sort_unstable();
        steps
    }

    fn exercise(manager: &RemoteCheckpointManager) {
        let manager = manager.clone().keep_last(2).incremental(true);
        let device = Device::flex();
        let base = Lora::new(&device, 16);
        let mut models = Vec::new();
        for step in 1..=4 {
            let model = base.with_new_adapters(&device);
            manager
                .save(TrainingState::new(&model, Progress::new(0, step)))
                .unwrap();
            models.push(model);
        }
        let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
        assert_eq!(steps, [3, 4]);
        assert_eq!(
            data_objects(&manager),
            [1, 3, 4],
            "the base's, and the kept ones'"
        );
        let latest = manager.latest().unwrap().unwrap();
        let chain = latest.chain().unwrap();
        let held: BTreeSet<&str> = chain.held().map(|(n, _)| n).collect();
        assert_eq!(
            held,
            BTreeSet::from(["model.down.weight", "model.up.weight"])
        );
        assert_eq!(
            params(&latest.load_model(Lora::new(&device, 16)).unwrap()),
            params(&models[3])
        );
        assert_eq!(latest.verify().unwrap(), 4);
        assert_eq!(manager.discard_after(3).unwrap(), 1);
        assert_eq!(data_objects(&manager), [1, 3]);
        let latest = manager.latest().unwrap().unwrap();
        assert_eq!(
            params(&latest.load_model(Lora::new(&device, 16)).unwrap()),
            params(&models[2])
        );
        // The base's object gone: the checkpoint is skipped, as any damaged one.
        let base_object = manager
            .storage()
            .names()
            .unwrap()
            .into_iter()
            .find(|n| n.starts_with("data-00000000000000000001-"))
            .unwrap();
        let storage = manager.storage();
        storage.delete(&storage.location(&base_object)).unwrap();
        // Never silently `None`: the error names the checkpoint passed over and why.
        match manager.latest() {
            Err(CheckpointError::NoneOpens { skipped, .. }) => {
                assert_eq!(skipped.len(), 1);
                assert_eq!(skipped[0].step, 3);
                let why = skipped[0].error.to_string();
                assert!(why.contains(&base_object), "{why}");
            }
            other => panic!("expected NoneOpens, got {other:?}"),
        }
        assert_eq!(manager.discard_after(0).unwrap(), 1);
    }

    #[test]
    fn incremental_checkpoints_in_memory_store() {
        let store: Arc<dyn Bucket> = Arc::new(::object_store::memory::InMemory::new());
        exercise(&RemoteCheckpointManager::new(store, "runs/lora"));
    }

    #[test]
    fn incremental_checkpoints_on_a_real_s3_server() {
        let Some(bucket) = common::s3_bucket() else {
            return;
        };
        let url = format!("s3://{bucket}/{}/incremental/", std::process::id());
        exercise(&RemoteCheckpointManager::parse(&url).unwrap());
    }
}
