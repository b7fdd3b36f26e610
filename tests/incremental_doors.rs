//! Incremental checkpoints through every door: a rebuilt model (new parameter ids) saving into
//! the same directory (the usual LoRA resume); `save`'s report; the manager opening any kept
//! step from any storage; and a manifest whose tensors all live in earlier data files given to
//! every public function that takes a checkpoint or a pack: each loads its values or refuses
//! it by name, never `Ok` with nothing.

use std::path::{Path, PathBuf};

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::checkpoint::{Checkpoint, CheckpointManager, Manager, Progress, TrainingState};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::read::Reader;
use burnpack::source::ReadError;

#[derive(Module, Debug)]
struct Lora {
    base: Linear,
    adapter: Linear,
}

impl Lora {
    fn new(device: &Device) -> Self {
        Self {
            base: LinearConfig::new(16, 32).init(device),
            adapter: LinearConfig::new(16, 32).with_bias(false).init(device),
        }
    }
}

/// Every parameter's values, in the module's order (ids left out).
fn values(model: &Lora) -> Vec<Vec<f32>> {
    let mut out = vec![
        model
            .base
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        model
            .adapter
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    ];
    out.push(
        model
            .base
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    );
    out
}

/// A directory with two incremental checkpoints of one model, the second changing nothing:
/// its manifest (returned) refers only to the data file of step 1.
fn referring_manifest(dir: &Path, model: &Lora) -> PathBuf {
    let manager = CheckpointManager::new(dir).unwrap().incremental(true);
    let first = manager
        .save(TrainingState::new(model, Progress::new(0, 1)))
        .unwrap();
    assert_eq!(first.tensors_referred, 0);
    let second = manager
        .save(TrainingState::new(model, Progress::new(0, 2)))
        .unwrap();
    assert_eq!((second.tensors_written, second.tensors_referred), (0, 3));
    assert!(second.data_files_written.is_empty());
    let chain = Checkpoint::open(&second.location).unwrap();
    assert_eq!(
        chain.chain().unwrap().held().count(),
        0,
        "all in step 1's file"
    );
    second.location
}

/// The usual LoRA resume: a new process builds its model again (new parameter ids), loads the
/// frozen base from the pretrained file, and saves into the same directory. Every checkpoint
/// it saves opens and loads, with the ids of the model that saved it.
#[test]
fn a_rebuilt_model_saves_checkpoints_that_open() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let pretrained = dir.path().join("pretrained.bpk");
    let first = Lora::new(&device);
    first.save_pack(&pretrained).unwrap();
    let ckpts = dir.path().join("ckpts");
    let manager = CheckpointManager::new(&ckpts).unwrap().incremental(true);
    manager
        .save(TrainingState::new(&first, Progress::new(0, 1)))
        .unwrap();

    // A new run: the same values under new ids (the base from the pretrained file, a new
    // adapter).
    let rebuilt = Lora::new(&device);
    assert_ne!(rebuilt.base.weight.id, first.base.weight.id);
    let base = Lora::new(&device).load_pack(&pretrained).unwrap().base;
    // The base's values under new ids (loaded by a path that does not keep ids: a
    // safetensors file, a remapped store...).
    let base = Linear {
        weight: Param::from_tensor(base.weight.val()),
        bias: base.bias.map(|b| Param::from_tensor(b.val())),
    };
    let rebuilt = Lora {
        base,
        adapter: rebuilt.adapter,
    };
    assert_ne!(rebuilt.base.weight.id, first.base.weight.id);
    let manager = CheckpointManager::new(&ckpts).unwrap().incremental(true);
    let saved = manager
        .save(TrainingState::new(&rebuilt, Progress::new(0, 2)))
        .unwrap();
    // The base's bytes are step 1's; the new adapter is written.
    assert_eq!(saved.tensors_referred, 2, "{saved:?}");
    assert_eq!(saved.tensors_written, 1, "{saved:?}");
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 2, "not the one before it");
    assert!(latest.skipped().is_empty());
    let chain = latest.chain().unwrap();
    let id = |name: &str| {
        burnpack::source::TensorSource::tensor(chain, name)
            .unwrap()
            .param_id()
    };
    assert_eq!(id("model.base.weight"), Some(rebuilt.base.weight.id.val()));
    let loaded = latest.load_model(Lora::new(&device)).unwrap();
    assert_eq!(values(&loaded), values(&rebuilt));
    assert_eq!(loaded.base.weight.id, rebuilt.base.weight.id);
    assert_eq!(latest.verify().unwrap(), 3);
    // Step 1 still opens with its own ids.
    let one = manager.checkpoint(1).unwrap();
    let loaded = one.load_model(Lora::new(&device)).unwrap();
    assert_eq!(loaded.base.weight.id, first.base.weight.id);
}

/// `save` refuses to return `Ok` for a checkpoint that does not open: here, a storage whose
/// data files vanish as soon as they are written.
#[test]
fn a_save_that_does_not_open_is_an_error() {
    use burnpack::checkpoint::{CheckpointError, Directory, Storage};
    use burnpack::write::Writer;

    #[derive(Clone)]
    struct Forgetful(Directory);
    impl Storage for Forgetful {
        type Location = PathBuf;
        type Source = Reader;
        type Entry = <Directory as Storage>::Entry;
        fn location(&self, name: &str) -> PathBuf {
            self.0.location(name)
        }
        fn names(&self) -> Result<Vec<String>, CheckpointError> {
            self.0.names()
        }
        fn open(&self, at: &PathBuf) -> Result<Reader, CheckpointError> {
            self.0.open(at)
        }
        fn write(&self, at: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
            self.0.write(at, writer)?;
            // A data file "lost" by the storage right after it was written (after its
            // checksums were read back: the second open finds nothing).
            let name = at.file_name().unwrap().to_str().unwrap();
            if name.starts_with("ckpt-") {
                for entry in std::fs::read_dir(at.parent().unwrap()).unwrap() {
                    let path = entry.unwrap().path();
                    if path
                        .file_name()
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .starts_with("data-")
                    {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
            Ok(())
        }
        fn delete(&self, at: &PathBuf) -> Result<(), CheckpointError> {
            self.0.delete(at)
        }
        fn describe(&self) -> String {
            self.0.describe()
        }
        fn describe_location(&self, at: &PathBuf) -> String {
            self.0.describe_location(at)
        }
        fn entry(step: u64, at: PathBuf) -> Self::Entry {
            Directory::entry(step, at)
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let manager = Manager::with_storage(Forgetful(Directory::new(dir.path()))).incremental(true);
    let err = manager
        .save(TrainingState::new(&Lora::new(&device), Progress::new(0, 1)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not open") && err.contains("ckpt-00000000000000000001.bpk"),
        "{err}"
    );
    // `latest` says so too, rather than `None`.
    let err = manager.latest().unwrap_err().to_string();
    assert!(
        err.contains("no checkpoint opens") && err.contains("step 1"),
        "{err}"
    );
}

/// The manager opens any listed step, from a storage that is not a directory (an in-memory
/// bucket), with keep-best: the best checkpoint is kept and reachable.
#[cfg(feature = "object-store")]
#[test]
fn any_kept_step_opens_from_object_storage() {
    use std::sync::Arc;

    use burnpack::interop::object_store::{Bucket, RemoteCheckpointManager};

    let store: Arc<dyn Bucket> = Arc::new(::object_store::memory::InMemory::new());
    let manager = RemoteCheckpointManager::new(store, "runs/best")
        .keep_last(1)
        .keep_best("loss", true)
        .incremental(true);
    let device = Device::flex();
    let mut models = Vec::new();
    for (step, loss) in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.7)] {
        let model = Lora::new(&device);
        let progress = Progress::new(0, step).with("loss", loss);
        manager.save(TrainingState::new(&model, progress)).unwrap();
        models.push(model);
    }
    let steps: Vec<u64> = manager.list().unwrap().iter().map(|e| e.step).collect();
    assert_eq!(steps, [2, 4]);
    let best = manager.checkpoint(2).unwrap();
    assert!(best.is_incremental());
    assert_eq!(
        values(&best.load_model(Lora::new(&device)).unwrap()),
        values(&models[1])
    );
    let err = manager.checkpoint(3).unwrap_err().to_string();
    assert!(err.contains("no checkpoint of step 3"), "{err}");
}

/// Doors that load one pack refuse a manifest by name, saying what to call instead.
#[test]
fn plain_pack_loaders_refuse_a_manifest_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = referring_manifest(dir.path(), &Lora::new(&device));
    let named = |e: &dyn std::fmt::Display| {
        let text = e.to_string();
        assert!(
            text.contains("ckpt-00000000000000000002.bpk")
                && text.contains("incremental checkpoint")
                && text.contains("Checkpoint::open"),
            "{text}"
        );
    };
    for result in [
        Lora::new(&device).load_pack(&path),
        Lora::new(&device).load_pack_with(&path, &LoadOptions::new().allow_partial(true)),
    ] {
        match result {
            Err(e @ ModuleError::Read(ReadError::IncrementalManifest { .. })) => named(&e),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    let bytes = burn::tensor::Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
    match Lora::new(&device).load_pack_bytes(bytes, &LoadOptions::new()) {
        Err(ModuleError::Read(ReadError::IncrementalManifest { .. })) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Doors that can open the data files beside a manifest load its values: the registry,
/// `Checkpoint::open`, `export_burn_train`, `PackStore`, `PackCheckpointer`'s restore.
#[test]
fn doors_with_a_directory_load_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Lora::new(&device);
    let path = referring_manifest(dir.path(), &model);

    // The registry.
    let any = burnpack::interop::open_any(&path).unwrap();
    let loaded = Lora::new(&device)
        .load_from_source(&*any, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), values(&model));

    // Checkpoint::open, then burn-train's layout.
    let ckpt = Checkpoint::open(&path).unwrap();
    let out = tempfile::tempdir().unwrap();
    ckpt.export_burn_train(out.path(), 7).unwrap();
    let exported = out.path().join("model-7.bpk");
    assert_eq!(Reader::open(&exported).unwrap().tensors().len(), 3);
    assert_eq!(
        values(&Lora::new(&device).load_pack(&exported).unwrap()),
        values(&model)
    );
    // Burn's own reader reads the export.
    let burn_loaded = Lora::new(&device).try_load_file(&exported).unwrap();
    assert_eq!(values(&burn_loaded), values(&model));
    // Opened without its directory: export refuses, naming it.
    let alone = Checkpoint::from_reader(Reader::open(&path).unwrap()).unwrap();
    let err = alone
        .export_burn_train(out.path(), 8)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("incremental") && err.contains("ckpt-00000000000000000002.bpk"),
        "{err}"
    );
    assert!(!out.path().join("model-8.bpk").exists());

    // PackStore over the manifest's file: the chain's values; over its bytes: refused.
    #[cfg(feature = "store")]
    {
        use burn::store::ModuleSnapshot;
        use burnpack::store::{PackStore, StoreError};
        let mut fresh = Lora::new(&device);
        let result = fresh.load_from(&mut PackStore::from_file(&path)).unwrap();
        assert_eq!(result.applied.len(), 3);
        assert_eq!(values(&fresh), values(&model));
        let bytes = burn::tensor::Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
        let mut fresh = Lora::new(&device);
        match fresh.load_from(&mut PackStore::from_bytes(Some(bytes))) {
            Err(e @ StoreError::Read(ReadError::IncrementalManifest { .. })) => {
                assert!(e.to_string().contains("incremental checkpoint"), "{e}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    // PackCheckpointer: a manifest at an epoch's path restores the model from its chain.
    #[cfg(feature = "train")]
    {
        use burn::train::checkpoint::Checkpointer;
        let pack = burnpack::train::PackCheckpointer::new(dir.path()).unwrap();
        assert_eq!(pack.path_for(2), path);
        let record = Checkpointer::<burn::store::ModuleRecord>::restore(&pack, 2).unwrap();
        let restored = Lora::new(&device).load_record(record);
        assert_eq!(values(&restored), values(&model));
    }
}

/// A manifest naming 1,500 data files: `bpk verify` (which reads each data file through a
/// descriptor of its own) passes under the common soft limit of 1,024 open files, and
/// `inspect` lists every tensor.
#[cfg(all(feature = "cli", target_os = "linux"))]
#[test]
fn bpk_verifies_a_chain_of_more_data_files_than_the_soft_limit() {
    use burn::tensor::{Bytes, DType};
    use burnpack::checkpoint::{INCREMENTAL_KEY, KIND, KIND_KEY, REFS_KEY};
    use burnpack::{Entry, Writer};

    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no prlimit (util-linux)");
        assert!(std::env::var("CI").is_err(), "CI has util-linux");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = Writer::new(vec![Entry::resident(
        "model.w",
        DType::U8,
        vec![2],
        Bytes::from_bytes_vec(vec![1, 2]),
    )])
    .with_metadata(KIND_KEY, "checkpoint-data")
    .into_bytes()
    .unwrap();
    let hash = burnpack::checkpoint::content_hash(&[1, 2]);
    let mut refs = String::new();
    for i in 0..1500u64 {
        let file = format!("data-{:020}-{i:016x}.bpk", 1);
        std::fs::write(dir.path().join(&file), &data[..]).unwrap();
        refs.push_str(&format!(
            "m.{i:04}\t{file}\tmodel.w\t\tU8\t2\t{hash:032x}\n"
        ));
    }
    let manifest = dir.path().join("ckpt-00000000000000000007.bpk");
    Writer::new(Vec::new())
        .with_metadata(KIND_KEY, KIND)
        .with_metadata(INCREMENTAL_KEY, "1")
        .with_metadata(REFS_KEY, refs)
        .write_to_file(&manifest)
        .unwrap();
    // Under a soft limit bpk raises, and under a hard limit it cannot (the data files are then
    // mapped, which holds no descriptor).
    let bpk = |command: &str, limit: &str| {
        std::process::Command::new("prlimit")
            .arg(format!("--nofile={limit}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_bpk"))
            .arg(command)
            .arg(&manifest)
            .output()
            .unwrap()
    };
    for limit in ["1024:8192", "1024:1024"] {
        let verified = bpk("verify", limit);
        assert!(
            verified.status.success(),
            "{limit}: {}",
            String::from_utf8_lossy(&verified.stderr)
        );
    }
    let inspected = bpk("inspect", "1024:1024");
    assert!(inspected.status.success());
    let text = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        text.contains("m.1499") && text.contains("1500 data files"),
        "{text}"
    );
}

/// `bpk` on a manifest whose tensors all live in an earlier data file: `inspect` lists them,
/// `verify` reads them, `convert` writes a pack with their values, and `diff` of the manifest
/// against that pack finds the same tensors.
#[cfg(feature = "cli")]
#[test]
fn bpk_reads_a_manifest_that_holds_nothing_itself() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Lora::new(&device);
    let path = referring_manifest(dir.path(), &model);
    let bpk = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bpk"))
            .args(args)
            .output()
            .unwrap()
    };
    let inspected = bpk(&["inspect".as_ref(), path.as_os_str()]);
    assert!(inspected.status.success());
    let text = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        text.contains("0 tensors held, 3 referred to") && text.contains("model.base.weight"),
        "{text}"
    );
    assert!(bpk(&["verify".as_ref(), path.as_os_str()]).status.success());
    let whole = dir.path().join("whole.bpk");
    let converted = bpk(&["convert".as_ref(), path.as_os_str(), whole.as_os_str()]);
    assert!(
        converted.status.success(),
        "{}",
        String::from_utf8_lossy(&converted.stderr)
    );
    let reader = Reader::open(&whole).unwrap();
    assert_eq!(reader.tensors().len(), 3);
    let loaded = Checkpoint::open(&whole)
        .unwrap()
        .load_model(Lora::new(&device))
        .unwrap();
    assert_eq!(values(&loaded), values(&model));
    let diffed = bpk(&["diff".as_ref(), path.as_os_str(), whole.as_os_str()]);
    let out = String::from_utf8_lossy(&diffed.stdout);
    assert!(
        out.contains("3 tensors with identical values, 0 differ in values, 0 in dtype or shape, 0 only in A, 0 only in B"),
        "{out}"
    );
}

/// A link to a manifest (a `latest.bpk` kept elsewhere) opens with the data files beside the
/// manifest it points to, through the library and `bpk`.
#[cfg(unix)]
#[test]
fn a_link_to_a_manifest_finds_its_data_files() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = Lora::new(&device);
    let path = referring_manifest(&dir.path().join("ckpts"), &model);
    let link = dir.path().join("latest.bpk");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let ckpt = Checkpoint::open(&link).unwrap();
    assert_eq!(
        values(&ckpt.load_model(Lora::new(&device)).unwrap()),
        values(&model)
    );
    let any = burnpack::interop::open_any(&link).unwrap();
    assert_eq!(any.as_tensor_source().tensors().len(), 3);
    #[cfg(feature = "cli")]
    {
        let verified = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"))
            .arg("verify")
            .arg(&link)
            .output()
            .unwrap();
        assert!(
            verified.status.success(),
            "{}",
            String::from_utf8_lossy(&verified.stderr)
        );
    }
}
