//! What an attack from outside found in incremental checkpoints, each kept as a test: a
//! background save and a save on the calling thread racing; a damaged or swapped shared data
//! file blocking every later save; a manifest of the first layout laundering a swapped data
//! file; a run resumed below a newer checkpoint that does not open; the report of a step saved
//! twice.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::Writer;
use burnpack::checkpoint::{
    AsyncSaver, Checkpoint, CheckpointError, CheckpointManager, Progress, REFS_KEY, Storage,
    TrainingState, WhenBusy,
};
use burnpack::read::Reader;

#[derive(Module, Debug)]
struct M {
    base: Linear,
    adapter: Linear,
}

impl M {
    fn new(device: &Device, width: usize) -> Self {
        Self {
            base: LinearConfig::new(width, 32).init(device),
            adapter: LinearConfig::new(width, 32).with_bias(false).init(device),
        }
    }

    fn with_new_adapter(&self, device: &Device) -> Self {
        let width = self.base.weight.dims()[0];
        Self {
            base: self.base.clone(),
            adapter: LinearConfig::new(width, 32).with_bias(false).init(device),
        }
    }
}

fn values(m: &M) -> Vec<Vec<f32>> {
    vec![
        m.base.weight.val().into_data().try_to_vec::<f32>().unwrap(),
        m.base
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        m.adapter
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    ]
}

fn data_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("data-"))
        .collect();
    names.sort();
    names
}

/// Every listed checkpoint opens, verifies, and loads.
fn all_open(manager: &CheckpointManager, device: &Device) {
    for entry in manager.list().unwrap() {
        let ckpt = manager.checkpoint(entry.step).unwrap();
        ckpt.verify().unwrap();
        ckpt.load_model(M::new(device, 16)).unwrap();
    }
}

/// An `AsyncSaver` over a clone of the manager writes step 2 while the manager itself saves
/// step 3: both return `Ok`, and both checkpoints open (step 3's retention used to collect
/// step 2's data file before its manifest was written).
#[test]
fn a_background_save_and_a_save_beside_it_both_open() {
    let device = Device::flex();
    for trial in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let manager = CheckpointManager::new(dir.path())
            .unwrap()
            .keep_last(3)
            .incremental(true);
        manager
            .save(TrainingState::new(
                &M::new(&device, 16),
                Progress::new(0, 1),
            ))
            .unwrap();
        let mut saver = AsyncSaver::new(manager.clone(), WhenBusy::Wait);
        let big = M::new(&device, 65_536); // 16 MiB written in the background
        saver
            .save(TrainingState::new(&big, Progress::new(0, 2)))
            .unwrap();
        // Until step 2's data file appears (or a while), then step 3 on this thread.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20)
            && !data_files(dir.path())
                .iter()
                .any(|n| n.starts_with("data-00000000000000000002-"))
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_micros(trial * 300));
        manager
            .save(TrainingState::new(
                &M::new(&device, 16),
                Progress::new(0, 3),
            ))
            .unwrap();
        saver.wait().unwrap();
        for entry in manager.list().unwrap() {
            let opened = Checkpoint::open(&entry.path).and_then(|c| c.verify());
            assert!(
                opened.is_ok(),
                "trial {trial}, step {}: {opened:?}",
                entry.step
            );
        }
    }
}

/// A shared data file swapped for another run's (same name), or cut short: the checkpoints
/// naming it no longer open, but the run saves on, writing its tensors anew.
#[test]
fn a_damaged_shared_data_file_costs_one_save_never_all() {
    let device = Device::flex();
    for damage in ["swapped", "cut"] {
        let dir = tempfile::tempdir().unwrap();
        let model = M::new(&device, 16);
        let manager = CheckpointManager::new(dir.path())
            .unwrap()
            .keep_last(2)
            .incremental(true);
        manager
            .save(TrainingState::new(&model, Progress::new(0, 1)))
            .unwrap();
        let base = dir.path().join(&data_files(dir.path())[0]);
        if damage == "swapped" {
            let other = tempfile::tempdir().unwrap();
            CheckpointManager::new(other.path())
                .unwrap()
                .incremental(true)
                .save(TrainingState::new(
                    &M::new(&device, 16),
                    Progress::new(0, 1),
                ))
                .unwrap();
            std::fs::copy(other.path().join(&data_files(other.path())[0]), &base).unwrap();
        } else {
            let len = std::fs::metadata(&base).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&base).unwrap();
            file.set_len(len - 100).unwrap();
        }
        match manager.latest() {
            Err(CheckpointError::NoneOpens { skipped, .. }) => assert_eq!(skipped[0].step, 1),
            other => panic!("{damage}: expected NoneOpens, got {other:?}"),
        }
        for step in 2..=3 {
            let next = model.with_new_adapter(&device);
            let saved = manager
                .save(TrainingState::new(&next, Progress::new(0, step)))
                .unwrap_or_else(|e| panic!("{damage}: save {step}: {e}"));
            if step == 2 {
                assert_eq!(saved.tensors_written, 3, "{damage}: {saved:?}");
            } else {
                assert_eq!(saved.tensors_referred, 2, "{damage}: {saved:?}");
            }
            let latest = manager.latest().unwrap().unwrap();
            assert_eq!(latest.progress().step, step);
            assert_eq!(
                values(&latest.load_model(M::new(&device, 16)).unwrap()),
                values(&next)
            );
        }
        all_open(&manager, &device);
    }
}

/// Rewrites the manifest at `path` with every reference line passed through `line`.
fn rewrite_references(path: &Path, line: impl Fn(&str) -> String) {
    let reader = Reader::open(path).unwrap();
    let metadata = reader.layout().metadata().clone();
    let scalars = reader.layout().scalars().clone();
    drop(reader);
    let mut writer = Writer::new(Vec::new());
    for (k, v) in &metadata {
        let v = if k == REFS_KEY {
            v.lines().map(|l| line(l) + "\n").collect()
        } else {
            v.clone()
        };
        writer = writer.with_metadata(k.as_str(), v);
    }
    for (k, v) in scalars {
        writer = writer.with_scalar(k, v);
    }
    writer.write_to_file(path).unwrap();
}

/// A manifest of the first layout (seven fields: no data file checksum) beside a data file
/// swapped for another run's: a later save writes the tensors anew rather than record the
/// swapped file's checksums as its own.
#[test]
fn a_first_layout_manifest_does_not_launder_a_swapped_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = M::new(&device, 16);
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true);
    for step in 1..=2 {
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
    rewrite_references(&manager.path_for(2), |l| {
        l.split('\t').take(7).collect::<Vec<_>>().join("\t")
    });
    assert!(
        Checkpoint::open(manager.path_for(2)).is_ok(),
        "seven fields open"
    );
    let other = tempfile::tempdir().unwrap();
    CheckpointManager::new(other.path())
        .unwrap()
        .incremental(true)
        .save(TrainingState::new(
            &M::new(&device, 16),
            Progress::new(0, 1),
        ))
        .unwrap();
    std::fs::copy(
        other.path().join(&data_files(other.path())[0]),
        dir.path().join(&data_files(dir.path())[0]),
    )
    .unwrap();
    let saved = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true)
        .save(TrainingState::new(&model, Progress::new(0, 3)))
        .unwrap();
    assert_eq!(saved.tensors_written, 3, "{saved:?}");
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 3);
    assert_eq!(
        values(&latest.load_model(M::new(&device, 16)).unwrap()),
        values(&model)
    );
    latest.verify().unwrap();
}

/// A run resumed at step 5 below a step 10 that does not open saves step 7: the data files of
/// step 10 are not offered to it (a reference to a later step is refused when opened).
#[test]
fn a_save_below_a_newer_checkpoint_refers_to_nothing_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let (a, b) = (M::new(&device, 16), M::new(&device, 16));
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true);
    manager
        .save(TrainingState::new(&a, Progress::new(0, 5)))
        .unwrap();
    let ten = manager
        .save(TrainingState::new(&b, Progress::new(0, 10)))
        .unwrap();
    // Step 10 also names a tensor in a data file that is not there: it does not open, while
    // its own data file (b's tensors) is still listed.
    rewrite_references(&ten.location, |l| {
        let mut fields: Vec<&str> = l.split('\t').collect();
        if fields[0] != "model.base.weight" {
            return l.to_string();
        }
        fields[0] = "model.ghost";
        fields[1] = "data-00000000000000000010-00000000deadbeef.bpk";
        format!("{l}\n{}", fields.join("\t"))
    });
    let latest = manager.latest().unwrap().unwrap();
    assert_eq!(latest.progress().step, 5);
    assert_eq!(latest.skipped()[0].step, 10);
    let resumed = M {
        base: b.base.clone(),
        adapter: latest.load_model(M::new(&device, 16)).unwrap().adapter,
    };
    let saved = manager
        .save(TrainingState::new(&resumed, Progress::new(0, 7)))
        .unwrap();
    assert_eq!(
        saved.tensors_written, 2,
        "b's base written again: {saved:?}"
    );
    let seven = manager.checkpoint(7).unwrap();
    assert_eq!(
        values(&seven.load_model(M::new(&device, 16)).unwrap()),
        values(&resumed)
    );
}

/// A step saved twice: the second save writes no data file, and its report says so.
#[test]
fn the_report_of_a_step_saved_twice_is_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = M::new(&device, 16);
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .incremental(true);
    let first = manager
        .save(TrainingState::new(&model, Progress::new(0, 5)))
        .unwrap();
    assert_eq!(first.data_files_written, data_files(dir.path()));
    let again = manager
        .save(TrainingState::new(&model, Progress::new(0, 5)))
        .unwrap();
    assert!(again.data_files_written.is_empty(), "{again:?}");
    assert_eq!((again.tensors_written, again.tensors_referred), (0, 3));
    assert_eq!(
        again.bytes_written,
        std::fs::metadata(&again.location).unwrap().len()
    );
}

/// A manager keeps what it knew of its directory between saves and reads only what changed:
/// a checkpoint another manager saved there since is offered to the next save (its new
/// tensor is referred to, not written again), one deleted since is not (its tensor is
/// written anew, never referred to in a data file that is gone), a data file rewritten in
/// place is looked at again, and every checkpoint opens after each.
#[test]
fn a_manager_sees_what_others_changed_between_its_saves() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = |keep: usize| {
        CheckpointManager::new(dir.path())
            .unwrap()
            .keep_last(keep)
            .incremental(true)
    };
    let (a, b) = (manager(10), manager(10));
    let model = M::new(&device, 16);
    a.save(TrainingState::new(&model, Progress::new(0, 1)))
        .unwrap();
    // Another manager saves a new adapter at step 2; `a` saves the same model at step 3:
    // every tensor is referred to, the adapter in `b`'s data file.
    let next = model.with_new_adapter(&device);
    let by_b = b
        .save(TrainingState::new(&next, Progress::new(0, 2)))
        .unwrap();
    assert_eq!(by_b.tensors_written, 1);
    let third = a
        .save(TrainingState::new(&next, Progress::new(0, 3)))
        .unwrap();
    assert_eq!((third.tensors_written, third.tensors_referred), (0, 3));
    let adapter = "model.adapter.weight";
    let ckpt = a.checkpoint(3).unwrap();
    assert_eq!(
        ckpt.chain().unwrap().location(adapter),
        Some(by_b.data_files_written[0].as_str())
    );
    // `b` deletes steps 2 and 3 (and collects the adapter's data file); `a` saves the same
    // model again: the adapter is written anew.
    b.discard_after(1).unwrap();
    assert!(!dir.path().join(&by_b.data_files_written[0]).exists());
    let fourth = a
        .save(TrainingState::new(&next, Progress::new(0, 4)))
        .unwrap();
    assert_eq!((fourth.tensors_written, fourth.tensors_referred), (1, 2));
    all_open(&a, &device);
    // The base's data file rewritten in place with other bytes (same name, same length):
    // the next save of `a` looks at it again and writes the base anew.
    let base_file = a
        .checkpoint(1)
        .unwrap()
        .chain()
        .unwrap()
        .location("model.base.weight")
        .unwrap()
        .to_string();
    let other = tempfile::tempdir().unwrap();
    let stranger = M::new(&device, 16);
    CheckpointManager::new(other.path())
        .unwrap()
        .incremental(true)
        .save(TrainingState::new(&stranger, Progress::new(0, 1)))
        .unwrap();
    let theirs = std::fs::read(other.path().join(&data_files(other.path())[0])).unwrap();
    let path = dir.path().join(&base_file);
    assert_eq!(theirs.len() as u64, std::fs::metadata(&path).unwrap().len());
    std::fs::write(&path, theirs).unwrap();
    let fifth = a
        .save(TrainingState::new(&next, Progress::new(0, 5)))
        .unwrap();
    assert_eq!(
        (fifth.tensors_written, fifth.tensors_referred),
        (2, 1),
        "{fifth:?}"
    );
    let latest = a.latest().unwrap().unwrap();
    latest.verify().unwrap();
    assert_eq!(
        values(&latest.load_model(M::new(&device, 16)).unwrap()),
        values(&next)
    );
}

/// Where a manifest records a tensor (its offset, the data file's header checksum) lets an open
/// skip decoding the data file; a record that lies is caught: a wrong offset by the tensor's
/// checksum when it is verified (`verify`, a load with `verify_checksums`: a manifest whose own
/// checksum was made anew over a lie is trusted by a plain load, as its names are), a header
/// checksum of another file by decoding the data file instead (which then opens it as
/// before); lines of the earlier layout (8 fields) open as they did.
#[test]
fn a_recorded_place_that_lies_is_caught() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .keep_last(5)
        .incremental(true);
    let model = M::new(&device, 16);
    manager
        .save(TrainingState::new(&model, Progress::new(0, 1)))
        .unwrap();
    let path = manager.path_for(1);
    let text = Reader::open(&path).unwrap().layout().metadata()[REFS_KEY].clone();
    let fields: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    assert!(fields.iter().all(|f| f.len() == 10), "{text}");
    let field = |name: &str, i: usize| fields.iter().find(|f| f[0] == name).unwrap()[i].clone();
    let good = values(
        &Checkpoint::open(&path)
            .unwrap()
            .load_model(M::new(&device, 16))
            .unwrap(),
    );
    assert_eq!(good, values(&model));

    // The adapter recorded at the base weight's offset (both 16 x 32 f32: same length).
    let (adapter, base) = ("model.adapter.weight", "model.base.weight");
    let base_offset = field(base, 8);
    let original = std::fs::read(&path).unwrap();
    rewrite_references(&path, |l| {
        let mut f: Vec<&str> = l.split('\t').collect();
        if f[0] == adapter {
            f[8] = &base_offset;
        }
        f.join("\t")
    });
    let lying = Checkpoint::open(&path).unwrap();
    let verified = burnpack::LoadOptions::new().verify_checksums(true);
    let err = lying
        .load_model_with(M::new(&device, 16), &verified)
        .unwrap_err()
        .to_string();
    assert!(err.contains(adapter) && err.contains("record"), "{err}");
    let err = lying.verify().unwrap_err().to_string();
    assert!(err.contains(adapter), "{err}");
    // Every path that checks checksums checks the record first (attack: `bpk convert` wrote
    // the lie into a clean pack; `PackStore::verify_checksums` loaded it).
    #[cfg(feature = "cli")]
    {
        let out = dir.path().join("converted.bpk");
        let converted = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"))
            .arg("convert")
            .arg(&path)
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&converted.stderr);
        assert_eq!(converted.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(adapter) && stderr.contains("record"),
            "{stderr}"
        );
        assert!(!out.exists());
    }
    #[cfg(feature = "store")]
    {
        use burn::store::ModuleSnapshot;
        let mut store = burnpack::store::PackStore::from_file(&path).verify_checksums(true);
        let err = M::new(&device, 16)
            .load_from(&mut store)
            .unwrap_err()
            .to_string();
        assert!(err.contains(adapter) && err.contains("record"), "{err}");
    }

    // Another file's header checksum: the data file is decoded instead, and all is well.
    std::fs::write(&path, &original).unwrap();
    rewrite_references(&path, |l| {
        let mut f: Vec<&str> = l.split('\t').collect();
        f[9] = "0123456789abcdef";
        f.join("\t")
    });
    let decoded = Checkpoint::open(&path).unwrap();
    decoded.verify().unwrap();
    assert_eq!(
        values(&decoded.load_model(M::new(&device, 16)).unwrap()),
        good
    );

    // Lines of the earlier layout (eight fields).
    std::fs::write(&path, &original).unwrap();
    rewrite_references(&path, |l| {
        l.split('\t').take(8).collect::<Vec<_>>().join("\t")
    });
    let earlier = Checkpoint::open(&path).unwrap();
    earlier.verify().unwrap();
    assert_eq!(
        values(&earlier.load_model(M::new(&device, 16)).unwrap()),
        good
    );

    // A tenth field that is not a checksum, an offset that is not a number: refused by name.
    for (i, bad, why) in [(9, "xyz", "header checksum"), (8, "-3", "offset")] {
        std::fs::write(&path, &original).unwrap();
        rewrite_references(&path, |l| {
            let mut f: Vec<&str> = l.split('\t').collect();
            f[i] = bad;
            f.join("\t")
        });
        let err = Checkpoint::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(why) && err.contains("ckpt-00000000000000000001.bpk"),
            "{err}"
        );
    }
}

/// A directory whose `fingerprint` of one path first runs a hook: another process acting at
/// that instant.
#[derive(Clone)]
struct Hooked {
    inner: burnpack::checkpoint::Directory,
    hook: std::sync::Arc<std::sync::Mutex<Option<(PathBuf, Box<dyn FnOnce() + Send>)>>>,
}

impl Storage for Hooked {
    type Location = PathBuf;
    type Source = Reader;
    type Entry = burnpack::checkpoint::CheckpointEntry;
    fn location(&self, name: &str) -> PathBuf {
        self.inner.location(name)
    }
    fn names(&self) -> Result<Vec<String>, CheckpointError> {
        self.inner.names()
    }
    fn open(&self, at: &PathBuf) -> Result<Reader, CheckpointError> {
        self.inner.open(at)
    }
    fn open_data(&self, at: &PathBuf) -> Result<Reader, CheckpointError> {
        self.inner.open_data(at)
    }
    fn open_data_shared(&self, at: &PathBuf) -> Result<std::sync::Arc<Reader>, CheckpointError> {
        self.inner.open_data_shared(at)
    }
    fn open_data_recorded(
        &self,
        at: &PathBuf,
        head: u64,
        tensors: Vec<burnpack::format::TensorInfo>,
    ) -> Option<Result<std::sync::Arc<Reader>, CheckpointError>> {
        self.inner.open_data_recorded(at, head, tensors)
    }
    fn fingerprint(&self, at: &PathBuf) -> Option<u128> {
        let hook = {
            let mut hook = self.hook.lock().unwrap();
            if hook.as_ref().is_some_and(|(path, _)| path == at) {
                hook.take()
            } else {
                None
            }
        };
        if let Some((_, hook)) = hook {
            hook();
        }
        self.inner.fingerprint(at)
    }
    fn write(&self, at: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
        self.inner.write(at, writer)
    }
    fn write_data(&self, at: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
        self.inner.write_data(at, writer)
    }
    fn sync_data(&self, at: &PathBuf) -> Result<(), CheckpointError> {
        self.inner.sync_data(at)
    }
    fn write_when(
        &self,
        at: &PathBuf,
        writer: Writer,
        ready: impl FnOnce() -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        self.inner.write_when(at, writer, ready)
    }
    fn delete(&self, at: &PathBuf) -> Result<(), CheckpointError> {
        self.inner.delete(at)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn describe_location(&self, at: &PathBuf) -> String {
        self.inner.describe_location(at)
    }
    fn entry(step: u64, at: PathBuf) -> Self::Entry {
        burnpack::checkpoint::Directory::entry(step, at)
    }
}

/// Another manager saves the same step just after this one committed it (the attack's
/// interleaving: before this manager takes the manifest's fingerprint): this manager's next
/// save must not take the other's manifest for its own and collect the other's data file.
#[test]
fn a_step_saved_by_another_manager_at_once_keeps_its_data() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let hooked = Hooked {
        inner: burnpack::checkpoint::Directory::new(dir.path()),
        hook: std::sync::Arc::default(),
    };
    let mine = burnpack::checkpoint::Manager::with_storage(hooked.clone())
        .keep_last(10)
        .incremental(true);
    let model = M::new(&device, 16);
    for step in 1..=2 {
        mine.save(TrainingState::new(&model, Progress::new(0, step)))
            .unwrap();
    }
    let theirs = model.with_new_adapter(&device);
    let (at, other) = (dir.path().to_path_buf(), theirs.clone());
    *hooked.hook.lock().unwrap() = Some((
        dir.path().join("ckpt-00000000000000000003.bpk"),
        Box::new(move || {
            CheckpointManager::new(&at)
                .unwrap()
                .keep_last(10)
                .incremental(true)
                .save(TrainingState::new(&other, Progress::new(0, 3)))
                .unwrap();
        }),
    ));
    mine.save(TrainingState::new(&model, Progress::new(0, 3)))
        .unwrap();
    mine.save(TrainingState::new(&model, Progress::new(0, 4)))
        .unwrap();
    let fresh = CheckpointManager::new(dir.path()).unwrap();
    for (step, expected) in [(3, values(&theirs)), (4, values(&model))] {
        let ckpt = fresh
            .checkpoint(step)
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        ckpt.verify().unwrap();
        assert_eq!(
            values(&ckpt.load_model(M::new(&device, 16)).unwrap()),
            expected
        );
    }
}

/// An incremental manager of `dir` keeping five checkpoints.
fn keeping_five(dir: &Path) -> CheckpointManager {
    CheckpointManager::new(dir)
        .unwrap()
        .keep_last(5)
        .incremental(true)
}

/// A tensor damaged in place in a data file (a byte of it flipped, the file's header intact)
/// is not referred to by the next save, of the same manager or of another: a save reads the
/// bytes of what it refers to once while the data file is unchanged, and writes the tensor
/// anew from the model (outside attack: the save returned `Ok` with a checkpoint that failed
/// `verify`).
#[test]
fn a_tensor_damaged_in_place_is_written_anew() {
    let device = Device::flex();
    for who in ["the same manager", "another manager"] {
        let dir = tempfile::tempdir().unwrap();
        let manager = || keeping_five(dir.path());
        let first = manager();
        let model = M::new(&device, 16);
        first
            .save(TrainingState::new(&model, Progress::new(0, 1)))
            .unwrap();
        // A byte of the base's weight flipped where its data file holds it.
        let (path, at) = {
            let ckpt = first.latest().unwrap().unwrap();
            let chain = ckpt.chain().unwrap();
            let file = chain.location("model.base.weight").unwrap().to_string();
            let (_, source) = chain.data_files().find(|(n, _)| *n == file).unwrap();
            let stored = chain.stored_as("model.base.weight").unwrap();
            let at = source.layout().tensor(stored).unwrap().offset();
            (dir.path().join(file), at)
        };
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x40;
        // Past a tick of the filesystem's clock since the save wrote the file: a rewrite in
        // place within the same tick leaves its times as they were (documented).
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(&path, &bytes).unwrap();
        assert!(first.latest().unwrap().unwrap().verify().is_err());
        let saver = if who == "the same manager" {
            first
        } else {
            manager()
        };
        let report = saver
            .save(TrainingState::new(&model, Progress::new(0, 2)))
            .unwrap();
        assert_eq!(report.tensors_written, 1, "{who}: {report:?}");
        let latest = saver.latest().unwrap().unwrap();
        assert_eq!(latest.progress().step, 2);
        latest.verify().unwrap_or_else(|e| panic!("{who}: {e}"));
        assert_eq!(
            values(&latest.load_model(M::new(&device, 16)).unwrap()),
            values(&model)
        );
    }
}

#[derive(Module, Debug)]
struct WithEmpty {
    a: burn::module::Param<burn::tensor::Tensor<1>>,
    w: burn::module::Param<burn::tensor::Tensor<2>>,
}

/// An empty tensor laid out where the next one starts: its (trivially good) bytes do not vouch
/// for the next one's (outside review: the bytes checked were keyed by offset alone).
#[test]
fn an_empty_tensor_does_not_vouch_for_the_one_at_its_offset() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = || keeping_five(dir.path());
    let model = WithEmpty {
        a: burn::module::Param::from_data(
            burn::tensor::TensorData::new(Vec::<f32>::new(), [0]),
            &device,
        ),
        w: burn::module::Param::from_data([[1.0f32, 2.0], [3.0, 4.0]], &device),
    };
    manager()
        .save(TrainingState::new(&model, Progress::new(0, 1)))
        .unwrap();
    let (path, at) = {
        let ckpt = manager().latest().unwrap().unwrap();
        let chain = ckpt.chain().unwrap();
        let file = chain.location("model.w").unwrap().to_string();
        let (_, source) = chain.data_files().find(|(n, _)| *n == file).unwrap();
        let layout = source.layout();
        let (a, w) = (
            layout.tensor(chain.stored_as("model.a").unwrap()).unwrap(),
            layout.tensor(chain.stored_as("model.w").unwrap()).unwrap(),
        );
        assert_eq!(
            (a.len(), a.offset()),
            (0, w.offset()),
            "the case this test is about"
        );
        (dir.path().join(file), w.offset())
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at as usize] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    // A manager that did not write the file reads what it refers to.
    let other = manager();
    let report = other
        .save(TrainingState::new(&model, Progress::new(0, 2)))
        .unwrap();
    assert_eq!(report.tensors_written, 1, "{report:?}");
    other.latest().unwrap().unwrap().verify().unwrap();
}
