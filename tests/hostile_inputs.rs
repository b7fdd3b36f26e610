//! The foreign parsers under attack: hostile and unusual files made here, each refused with an
//! error naming the file (and what was wrong), never read as empty, never a panic or a hang,
//! and never an allocation the input does not pay for. Memory is measured: this binary counts
//! every heap allocation (a counting global allocator) and each case asserts the peak it
//! reached while the file was opened against the bound the crate states (mapped file pages are
//! not heap and are not counted).
// These tests name the errors by their former names too (`PytorchError`, `LegacyError`:
// deprecated aliases of `read::SourceError`), which they keep working.
#![allow(deprecated)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use burnpack::interop::burn_record::LegacySource;
use burnpack::interop::pytorch::{PytorchError, PytorchSource};
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::Reader;
use burnpack::source::OpenOptions;
use burnpack::source::TensorSource;
use common::torch::{
    Pickler, StorageSpec, View, ZipOptions, legacy_file, ordered_dict_of_pairs, save, write_zip,
};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Old and new blocks may both be live while the kernel copies: count the new one
            // before the old one is given back.
            grew(new_size);
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Every test of this binary holds this lock: the counters are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The heap `f` took at its peak, beyond what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

const MIB: usize = 1 << 20;

/// Opening `path` fails, naming the file and saying `what`, with at most `most` bytes of heap.
fn refused_within(path: &Path, what: &str, most: usize) -> String {
    let (result, peak) = peak_of(|| PytorchSource::open(path));
    let err = result
        .expect_err("a hostile file must be refused")
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains(what), "'{err}' does not say '{what}'");
    assert!(
        peak <= most,
        "{}: {peak} bytes of heap at the peak, over the bound of {most}",
        path.display()
    );
    err
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn read_f32(source: &dyn TensorSource, name: &str) -> Vec<f32> {
    let info = source
        .tensors()
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    f32s(&source.read(info).unwrap())
}

fn two_tensors() -> (Vec<StorageSpec>, Vec<View>) {
    (
        vec![
            StorageSpec::f32(&[1., 2., 3., 4., 5., 6.]),
            StorageSpec::f32(&[7., 8.]),
        ],
        vec![
            View::whole("fc.weight", 0, &[2, 3]),
            View::whole("fc.bias", 1, &[2]),
        ],
    )
}

#[test]
fn ordered_dicts_built_from_their_items_read_every_tensor() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (storages, views) = two_tensors();
    // The legacy container, as older PyTorch wrote it: a list of two-item lists.
    let legacy = dir.path().join("old.pth");
    legacy_file(
        &legacy,
        &ordered_dict_of_pairs(&storages, &views, b"l"),
        &storages,
    );
    // The zip container with a list of tuples, and with a dict as the argument.
    let tuples = dir.path().join("tuples.pt");
    write_zip(
        &tuples,
        &ordered_dict_of_pairs(&storages, &views, b"t"),
        &storages,
        ZipOptions::default(),
    );
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b"}(");
    for view in &views {
        let s = &storages[view.storage];
        p.str(&view.name)
            .tensor(view, s.kind, s.bytes.len() as u64 / s.element);
    }
    let from_dict = dir.path().join("from-dict.pt");
    write_zip(
        &from_dict,
        &p.op(b"u\x85R").finish(),
        &storages,
        ZipOptions::default(),
    );
    for path in [&legacy, &tuples, &from_dict] {
        let source = PytorchSource::open(path).unwrap();
        assert_eq!(source.tensors().len(), 2, "{}", path.display());
        assert_eq!(read_f32(&source, "fc.weight"), [1., 2., 3., 4., 5., 6.]);
        assert_eq!(read_f32(&source, "fc.bias"), [7., 8.]);
        assert_eq!(source.tensor("fc.weight").unwrap().shape(), [2, 3]);
    }
    // Arguments it does not understand are errors naming them, never an empty dict.
    let bad = |name: &str, pickle: Vec<u8>| {
        let path = dir.path().join(name);
        write_zip(&path, &pickle, &storages, ZipOptions::default());
        PytorchSource::open(&path).unwrap_err().to_string()
    };
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b"(K\x05tR");
    let err = bad("int-arg.pt", p.finish());
    assert!(err.contains("OrderedDict called with a int"), "{err}");
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict")
        .op(b"(((K\x01K\x02K\x03lltR");
    let err = bad("triple.pt", p.finish());
    assert!(err.contains("item 0 is a list of 3"), "{err}");
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b"(]]tR");
    let err = bad("two-args.pt", p.finish());
    assert!(err.contains("called with 2 arguments"), "{err}");
}

#[test]
fn a_file_without_tensors_or_with_unnameable_ones_is_an_error() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let storages = vec![StorageSpec::f32(&[1., 2.])];
    let view = View::whole("w", 0, &[2]);
    let write = |name: &str, pickle: Vec<u8>| {
        let path = dir.path().join(name);
        write_zip(&path, &pickle, &storages, ZipOptions::default());
        path
    };
    // No tensor at all: the state dict may be under another key.
    let mut p = Pickler::new();
    p.op(b"}(")
        .str("epoch")
        .op(b"K\x03")
        .str("config")
        .str("x")
        .op(b"u");
    let path = write("no-tensors.pt", p.finish());
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("no tensors found") && err.contains("epoch") && err.contains("--key"),
        "{err}"
    );
    // ... but found under the key the caller names.
    let mut p = Pickler::new();
    p.op(b"}(").str("ema").op(b"}(").str("w");
    p.tensor(&view, "FloatStorage", 2).op(b"uu");
    let path = write("ema.pt", p.finish());
    let nested = PytorchSource::open(&path).unwrap();
    assert_eq!(read_f32(&nested, "ema.w"), [1., 2.]);
    let source = PytorchSource::open_with(&path, &OpenOptions::new().key("ema")).unwrap();
    assert_eq!(read_f32(&source, "w"), [1., 2.]);
    // A tensor under a dict key that is a tuple, or inside a set: no name to give it.
    let mut p = Pickler::new();
    p.op(b"}(K\x01K\x02\x86");
    p.tensor(&view, "FloatStorage", 2).op(b"u");
    let err = PytorchSource::open(write("tuple-key.pt", p.finish()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("a dict key that is a tuple"), "{err}");
    let mut p = Pickler::new();
    p.op(b"}(").str("s").op(b"\x8f(");
    p.tensor(&view, "FloatStorage", 2).op(b"\x90u");
    let err = PytorchSource::open(write("set.pt", p.finish()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("under a set") && err.contains("s.?"), "{err}");
    // A bare storage where a tensor would be.
    let mut p = Pickler::new();
    p.op(b"}(")
        .str("raw")
        .op(b"(")
        .str("storage")
        .global("torch", "FloatStorage");
    p.str("0").str("cpu").int(2).op(b"tQu");
    let err = PytorchSource::open(write("bare-storage.pt", p.finish()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("'raw' is a bare storage"), "{err}");
}

#[test]
fn the_unpickler_holds_at_most_its_stated_bound() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let storages = vec![StorageSpec::f32(&[1.])];
    let zip = |name: &str, pickle: Vec<u8>| {
        let path = dir.path().join(name);
        write_zip(&path, &pickle, &storages, ZipOptions::default());
        path
    };
    // set(L) over a memoized list of 10,000 items, 150,000 times: each call copies L.
    let mut p = Pickler::new();
    p.op(b"]q\x00(");
    for _ in 0..10_000 {
        p.op(b"K\x01");
    }
    p.op(b"e").global("builtins", "set").op(b"q\x01");
    for _ in 0..150_000 {
        p.op(b"h\x01h\x00\x85R0");
    }
    let pickle = p.op(b"}").finish();
    let bound = 33 * pickle.len() + 2 * MIB;
    refused_within(&zip("set-copies.pt", pickle), "object graph", bound);
    // 10 MB of EMPTY_LIST: one node per byte.
    let mut pickle = Pickler::new().0;
    pickle.resize(10 << 20, b']');
    pickle.push(b'.');
    let bound = 33 * pickle.len() + 2 * MIB;
    refused_within(&zip("empty-lists.pt", pickle), "object graph", bound);
    // torch.Size(L) and _rebuild_tensor_v2 with a shape of 64 dims, many times: the size is
    // the tuple itself, the shape copied once per tensor and counted.
    let mut p = Pickler::new();
    p.op(b"(");
    for _ in 0..64 {
        p.op(b"K\x01");
    }
    p.op(b"tq\x00").global("torch", "Size").op(b"q\x01");
    for _ in 0..200_000 {
        p.op(b"h\x01h\x00\x85R0");
    }
    let pickle = p.op(b"}").finish();
    let (result, peak) = peak_of(|| PytorchSource::open(zip("sizes.pt", pickle.clone())));
    assert!(result.is_err());
    assert!(peak <= 33 * pickle.len() + 2 * MIB, "{peak}");
}

#[test]
fn walking_a_shared_graph_is_bounded_by_the_pickle() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let storages = vec![StorageSpec::f32(&[1., 2.])];
    let view = View::whole("w", 0, &[2]);
    let zip = |name: &str, pickle: Vec<u8>| {
        let path = dir.path().join(name);
        write_zip(&path, &pickle, &storages, ZipOptions::default());
        path
    };
    // Dicts of dicts, each level the previous one twice: a 1 KB file of 2^30 named tensors.
    let mut p = Pickler::new();
    p.op(b"}(").str("w");
    p.tensor(&view, "FloatStorage", 2).op(b"uq\x00");
    for _ in 0..30 {
        p.op(b"}(")
            .str("a")
            .op(b"h\x00")
            .str("b")
            .op(b"h\x00uq\x00");
    }
    let pickle = p.finish();
    assert!(pickle.len() < 2048);
    refused_within(&zip("shared.pt", pickle), "more than", 16 * MIB);
    // 100,000 tensors under one 40 KB key: 4 GB of names if each were built.
    let long = "k".repeat(40_000);
    let mut p = Pickler::new();
    p.op(b"}(").str(&long).op(b"}(");
    p.tensor(&view, "FloatStorage", 2).op(b"q\x000");
    for i in 0..100_000u64 {
        p.int(i).op(b"h\x00");
        if i % 1000 == 999 {
            p.op(b"u(");
        }
    }
    let pickle = p.op(b"uu").finish();
    refused_within(&zip("long-names.pt", pickle), "names and shapes", 24 * MIB);
}

#[test]
fn expanded_views_are_gathered_only_up_to_the_files_size() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // A buffer PyTorch saves as it is: one row expanded to 4 (stride 0). Loads, gathered.
    let storages = vec![StorageSpec::f32(&[1., 2., 3.])];
    let expanded = View {
        name: "mask".into(),
        storage: 0,
        offset: 0,
        shape: vec![4, 3],
        stride: vec![0, 1],
    };
    let path = dir.path().join("expanded.pt");
    save(&path, &storages, &[expanded]);
    let source = PytorchSource::open(&path).unwrap();
    assert_eq!(
        read_f32(&source, "mask"),
        [1., 2., 3., 1., 2., 3., 1., 2., 3., 1., 2., 3.]
    );
    // One element expanded to 1 GiB: refused when the file is opened, before any gathering.
    let storages = vec![StorageSpec::f32(&[1.])];
    let huge = View {
        name: "huge".into(),
        storage: 0,
        offset: 0,
        shape: vec![1 << 28],
        stride: vec![0],
    };
    let path = dir.path().join("expanded-1gib.pt");
    save(&path, &storages, &[huge]);
    assert!(std::fs::metadata(&path).unwrap().len() < 2048);
    let err = refused_within(&path, "non-contiguous view", 4 * MIB);
    assert!(err.contains("huge"), "{err}");
    // 64 tensors of 64 MiB each: the total is bounded, not each one.
    let views: Vec<View> = (0..64)
        .map(|i| View {
            name: format!("t{i}"),
            storage: 0,
            offset: 0,
            shape: vec![1 << 24],
            stride: vec![0],
        })
        .collect();
    let path = dir.path().join("expanded-64.pt");
    save(&path, &storages, &views);
    refused_within(&path, "non-contiguous view", 8 * MIB);
}

/// Writes `shards` (`name` -> its views of one storage of `values`) and an index routing each
/// view to its shard; returns the index's path.
fn torch_shards(dir: &Path, shards: &[(&str, Vec<f32>, Vec<View>)]) -> PathBuf {
    let mut map = serde_json::Map::new();
    for (name, values, views) in shards {
        save(&dir.join(name), &[StorageSpec::f32(values)], views);
        for view in views {
            map.insert(view.name.clone(), (*name).into());
        }
    }
    let index = dir.join("pytorch_model.bin.index.json");
    std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap();
    index
}

#[test]
fn gathered_views_of_all_shards_together_are_bounded_once() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // Three tiny shards, each one element expanded to 12 MiB: each within its own file's
    // bound (its size plus 16 MiB), 36 MiB together. The bound is the shards' sizes plus 16
    // MiB once, so the index is refused when it is opened, before anything is gathered.
    let expanded = |name: &str| View {
        name: name.into(),
        storage: 0,
        offset: 0,
        shape: vec![3 << 20],
        stride: vec![0],
    };
    let shards: Vec<(&str, Vec<f32>, Vec<View>)> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let file = ["a.bin", "b.bin", "c.bin"][i];
            (file, vec![1.0], vec![expanded(n)])
        })
        .collect();
    let index = torch_shards(dir.path(), &shards);
    for (file, ..) in &shards {
        PytorchSource::open(dir.path().join(file)).expect("each shard alone is within bounds");
    }
    let (result, peak) = peak_of(|| PytorchSource::open(&index));
    let err = result.expect_err("refused").to_string();
    assert!(
        err.contains("non-contiguous view") && err.contains("'b'"),
        "{err}"
    );
    assert!(err.contains("pytorch_model.bin.index.json"), "{err}");
    assert!(peak < 4 * MIB, "{peak} bytes of heap to refuse it");
    // One such shard beside a plain one is within the bound, and loads.
    let shards = vec![
        ("a.bin", vec![1.0], vec![expanded("a")]),
        ("b.bin", vec![2.0, 3.0], vec![View::whole("b", 0, &[2])]),
    ];
    let index = torch_shards(dir.path(), &shards);
    let source = PytorchSource::open(&index).unwrap();
    assert_eq!(read_f32(&source, "b"), [2.0, 3.0]);
    assert!(read_f32(&source, "a").iter().all(|&v| v == 1.0));
}

#[test]
fn a_shard_holding_a_tensor_its_index_does_not_list_is_refused_naming_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let views = vec![
        View::whole("a", 0, &[1]),
        View::whole("b", 0, &[1]),
        View::whole("c", 0, &[1]),
    ];
    save(
        &dir.path().join("a.bin"),
        &[StorageSpec::f32(&[1.0])],
        &views,
    );
    let index = dir.path().join("pytorch_model.bin.index.json");
    std::fs::write(&index, r#"{"weight_map": {"a": "a.bin", "b": "a.bin"}}"#).unwrap();
    let err = PytorchSource::open(&index).unwrap_err().to_string();
    assert!(
        err.contains("'c'") && err.contains("not in the index's weight_map"),
        "{err}"
    );
    assert!(!err.contains("tensor-count limit"), "{err}");
}

#[test]
fn views_gathered_by_a_prefetch_are_not_gathered_again() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // Four transposed 512 x 256 views (512 KiB each, gathered on the heap).
    let values: Vec<f32> = (0..4 * 512 * 256).map(|i| i as f32).collect();
    let views: Vec<View> = (0..4u64)
        .map(|i| View {
            name: format!("w{i}"),
            storage: 0,
            offset: i * 512 * 256,
            shape: vec![256, 512],
            stride: vec![1, 256],
        })
        .collect();
    let path = dir.path().join("transposed.pt");
    save(&path, &[StorageSpec::f32(&values)], &views);
    let source = PytorchSource::open(&path).unwrap();
    let all: Vec<_> = source.tensors().iter().collect();
    let (first, once) = peak_of(|| source.prefetch(&all));
    first.unwrap();
    assert!(
        once >= 2 * MIB,
        "the first prefetch gathers the views: {once} bytes"
    );
    let (again, twice) = peak_of(|| source.prefetch(&all));
    again.unwrap();
    assert!(
        twice < MIB / 2,
        "a second prefetch gathered again: {twice} bytes"
    );
    let w1 = read_f32(&source, "w1");
    assert_eq!(
        w1[..3],
        [
            (512 * 256) as f32,
            (512 * 256 + 256) as f32,
            (512 * 256 + 512) as f32
        ]
    );
}

#[test]
fn an_index_is_checked_shard_by_shard_before_the_next_is_opened() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // One file of 20,000 tensors, and an index naming it under 60 names (links) with one
    // tensor routed to each.
    let storages = vec![StorageSpec::f32(&[1., 2.])];
    let views: Vec<View> = (0..20_000)
        .map(|i| View::whole(&format!("t{i}"), 0, &[2]))
        .collect();
    let big = dir.path().join("big.bin");
    save(&big, &storages, &views);
    let mut map = serde_json::Map::new();
    for i in 0..60 {
        let name = format!("pytorch_model-{i:05}-of-00060.bin");
        std::os::unix::fs::symlink(&big, dir.path().join(&name)).unwrap();
        map.insert(format!("t{i}"), name.into());
    }
    let index = dir.path().join("pytorch_model.bin.index.json");
    std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap();
    let (result, peak) = peak_of(|| PytorchSource::open(&index));
    let err = result.unwrap_err().to_string();
    assert!(err.contains("00000-of-00060"), "{err}");
    // One shard's pickle at most: the 60 would take sixty times as much.
    let one = std::fs::metadata(&big).unwrap().len() as usize;
    assert!(
        peak <= 33 * one + 2 * MIB,
        "{peak} bytes for a shard of {one}"
    );
    // An index that routes nothing is an error, not a panic or an empty source.
    let empty = dir.path().join("empty.bin.index.json");
    std::fs::write(&empty, r#"{"weight_map": {}}"#).unwrap();
    let err = PytorchSource::open(&empty).unwrap_err().to_string();
    assert!(
        err.contains("empty.bin.index.json") && err.contains("weight_map is empty"),
        "{err}"
    );
    let empty = dir.path().join("model.safetensors.index.json");
    std::fs::write(&empty, r#"{"weight_map": {}}"#).unwrap();
    let err = SafetensorsSource::open(&empty).unwrap_err().to_string();
    assert!(err.contains("weight_map is empty"), "{err}");
}

/// Runs `open` on another thread: a hang (a FIFO opened for reading) fails the test after 20 s
/// instead of blocking it.
fn within_seconds<T: Send + 'static>(open: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(open());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("opening hung (a FIFO must be refused before it is opened)")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn fifos_and_devices_are_refused_before_they_are_opened() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let fifo = |name: &str| {
        let path = d.join(name);
        mkfifo(&path);
        path
    };
    let says = |err: String, path: &Path| {
        assert!(
            err.contains(&path.display().to_string()) && err.contains("named pipe"),
            "{err}"
        );
    };
    type Open = fn(PathBuf) -> String;
    let opens: [(&str, Open); 5] = [
        ("model.pt", |p| {
            PytorchSource::open(p).unwrap_err().to_string()
        }),
        ("model.mpk", |p| {
            LegacySource::open(p).unwrap_err().to_string()
        }),
        ("model.safetensors", |p| {
            SafetensorsSource::open(p).unwrap_err().to_string()
        }),
        ("model.bpk", |p| Reader::open(p).unwrap_err().to_string()),
        ("index.json", |p| {
            SafetensorsSource::open(p).unwrap_err().to_string()
        }),
    ];
    for (name, open) in opens {
        let p = fifo(name);
        let q = p.clone();
        says(within_seconds(move || open(q)), &p);
    }
    // A shard an index names.
    let shard = fifo("pytorch_model-00001-of-00001.bin");
    let index = d.join("pytorch_model.bin.index.json");
    std::fs::write(
        &index,
        r#"{"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}"#,
    )
    .unwrap();
    says(
        within_seconds(move || PytorchSource::open(index).unwrap_err().to_string()),
        &shard,
    );
    // A device.
    let err = PytorchSource::open("/dev/zero").unwrap_err().to_string();
    assert!(
        err.contains("/dev/zero") && err.contains("a device"),
        "{err}"
    );
    // A record of a burn-train checkpoint directory.
    let run = d.join("run");
    std::fs::create_dir(&run).unwrap();
    let record = run.join("model-1.mpk.gz");
    mkfifo(&record);
    let out = d.join("ckpt.bpk");
    let err = within_seconds(move || {
        burnpack::interop::burn_record::import_legacy_burn_train(
            run,
            1,
            burnpack::interop::burn_record::SchedulerKind::Constant,
            out,
        )
        .unwrap_err()
        .to_string()
    });
    says(err, &record);
}

/// The bytes of a zip `torch.save` file of one tensor `w`, with the names of its entries.
fn one_tensor_zip(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let path = dir.join(name);
    save(
        &path,
        &[StorageSpec::f32(&[1., 2.])],
        &[View::whole("w", 0, &[2])],
    );
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    n
}

#[test]
fn zip_archives_other_readers_would_read_differently_are_refused() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // Two storages `data/0` (the second written as `data/1` and renamed in both headers).
    let path = dir.path().join("duplicate.pt");
    write_zip(
        &path,
        &Pickler::new()
            .state_dict(&[StorageSpec::f32(&[1., 2.])], &[View::whole("w", 0, &[2])])
            .finish(),
        &[StorageSpec::f32(&[1., 2.]), StorageSpec::f32(&[9., 9.])],
        ZipOptions::default(),
    );
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        replace_all(&mut bytes, b"archive/data/1", b"archive/data/0"),
        2
    );
    std::fs::write(&path, &bytes).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("duplicate.pt") && err.contains("same name"),
        "{err}"
    );
    // An archive after 16 KiB of other bytes, its offsets written as if it began the file
    // (the bytes start with a local header whose name would run past them). PyTorch's reader
    // takes the end record's offsets as written and finds no central directory there; a
    // reader that looks for the directory elsewhere and shifts every offset reads the archive
    // (or, in a crafted file, another one hidden in a storage). Refused.
    let (path, inner) = one_tensor_zip(dir.path(), "shifted.pt");
    let mut bytes = b"PK\x03\x04".to_vec();
    bytes.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend([0; 12]);
    bytes.extend([0xff, 0xff, 0xff, 0xff]);
    bytes.resize(16 << 10, 0);
    bytes.extend(&inner);
    std::fs::write(&path, &bytes).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(err.contains("shifted.pt") && err.contains("zip"), "{err}");
    // An entry flagged as encrypted (general purpose bit 0, in both headers).
    let (path, mut bytes) = one_tensor_zip(dir.path(), "encrypted.pt");
    let name = b"archive/data/0";
    for (signature, flags_at, name_at) in [(b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)] {
        let mut i = 0;
        while i + 4 <= bytes.len() {
            if &bytes[i..i + 4] == signature && bytes[i + name_at..].starts_with(name) {
                bytes[i + flags_at] |= 1;
            }
            i += 1;
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("encrypted.pt") && err.contains("encrypted"),
        "{err}"
    );
    // A pickle that does not match its CRC-32: a tensor renamed after the archive was written.
    let (path, mut bytes) = one_tensor_zip(dir.path(), "crc.pt");
    assert_eq!(
        replace_all(&mut bytes, b"X\x01\x00\x00\x00w", b"X\x01\x00\x00\x00v"),
        1
    );
    std::fs::write(&path, &bytes).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("crc.pt") && err.contains("data.pkl does not match"),
        "{err}"
    );
}

fn zoo_json() -> serde_json::Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/zoo.json"),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_burn_record_tensor_that_is_not_understood_is_an_error_naming_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 4] = [
        (
            "negative.json",
            |v| v["item"]["linear"]["weight"]["param"]["shape"][0] = (-2).into(),
            "shape",
        ),
        (
            "fraction.json",
            |v| v["item"]["linear"]["weight"]["param"]["shape"][0] = 2.5.into(),
            "shape",
        ),
        (
            "big.json",
            |v| v["item"]["linear"]["weight"]["param"]["bytes"][0] = 300.into(),
            "bytes",
        ),
        (
            "string.json",
            |v| v["item"]["linear"]["weight"]["param"]["bytes"] = "AAAA".into(),
            "bytes",
        ),
    ];
    for (name, edit, what) in cases {
        let mut record = zoo_json();
        edit(&mut record);
        let path = dir.path().join(name);
        std::fs::write(&path, record.to_string()).unwrap();
        let err = LegacySource::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains("linear.weight") && err.contains(what),
            "{name}: {err}"
        );
    }
    // The unedited record still reads.
    let path = dir.path().join("zoo.json");
    std::fs::write(&path, zoo_json().to_string()).unwrap();
    assert!(LegacySource::open(&path).is_ok());
}

#[test]
fn burn_records_are_bounded_by_their_size() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // 64 MiB of zeros gzipped into 64 KiB: refused as it decompresses, past 32x its size.
    let gz = dir.path().join("bomb.mpk.gz");
    {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::best(),
        );
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            enc.write_all(&zeros).unwrap();
        }
        enc.finish().unwrap();
    }
    let len = std::fs::metadata(&gz).unwrap().len() as usize;
    let (result, peak) = peak_of(|| LegacySource::open(&gz));
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("bomb.mpk.gz") && err.contains("max_inflation"),
        "{err}"
    );
    assert!(peak <= 2 * (32 * len + MIB) + MIB, "{peak}");
    // Keys of 2 KB nested 50 deep over 10,000 numbers: each number's path would be 100 KB.
    let key = "k".repeat(2000);
    let mut numbers = serde_json::Map::new();
    for i in 0..10_000 {
        numbers.insert(format!("n{i}"), i.into());
    }
    let mut item = serde_json::Value::Object(numbers);
    for _ in 0..50 {
        let mut m = serde_json::Map::new();
        m.insert(key.clone(), item);
        item = m.into();
    }
    let record = serde_json::json!({"metadata": zoo_json()["metadata"], "item": item});
    let path = dir.path().join("deep-keys.json");
    std::fs::write(&path, record.to_string()).unwrap();
    let (result, peak) = peak_of(|| LegacySource::open(&path));
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("deep-keys.json") && err.contains("a path longer than"),
        "{err}"
    );
    assert!(peak <= 16 * MIB, "{peak}");
    // Keys of 500 bytes nested 100 deep (50 KB paths, under the cap) over 10,000 numbers:
    // the paths together are bounded by the record's size.
    let key = "k".repeat(500);
    let mut numbers = serde_json::Map::new();
    for i in 0..10_000 {
        numbers.insert(format!("n{i}"), i.into());
    }
    let mut item = serde_json::Value::Object(numbers);
    for _ in 0..100 {
        let mut m = serde_json::Map::new();
        m.insert(key.clone(), item);
        item = m.into();
    }
    let record = serde_json::json!({"metadata": zoo_json()["metadata"], "item": item});
    let path = dir.path().join("many-paths.json");
    std::fs::write(&path, record.to_string()).unwrap();
    let (result, peak) = peak_of(|| LegacySource::open(&path));
    let err = result.unwrap_err().to_string();
    assert!(err.contains("would take more than"), "{err}");
    assert!(peak <= 32 * MIB, "{peak}");
}

#[test]
fn safetensors_through_a_pack_come_back_byte_for_byte() {
    let _g = serial();
    use safetensors::tensor::{Dtype, TensorView};
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = (0..6u8).collect();
    let tensors = vec![
        ("a", TensorView::new(Dtype::F32, vec![2, 3], &a).unwrap()),
        ("b", TensorView::new(Dtype::U8, vec![6], &b).unwrap()),
    ];
    for metadata in [
        None,
        Some([("note".to_string(), "kept".to_string())].into()),
    ] {
        let original = safetensors::serialize(tensors.clone(), metadata).unwrap();
        let st = dir.path().join("in.safetensors");
        std::fs::write(&st, &original).unwrap();
        let pack = dir.path().join("m.bpk");
        burnpack::interop::safetensors::safetensors_to_burnpack(&st, &pack).unwrap();
        // The pack names its own writer ...
        let reader = Reader::open(&pack).unwrap();
        assert!(reader.metadata().get("producer").is_some());
        drop(reader);
        // ... which is not the safetensors file's.
        let back = dir.path().join("back.safetensors");
        burnpack::interop::safetensors::burnpack_to_safetensors(&pack, &back).unwrap();
        assert_eq!(std::fs::read(&back).unwrap(), original);
    }
    // A safetensors file naming a producer: not carried into the pack as if it were ours.
    let original = safetensors::serialize(
        tensors,
        Some([("producer".to_string(), "burnpack 0.0.1".to_string())].into()),
    )
    .unwrap();
    let st = dir.path().join("claims.safetensors");
    std::fs::write(&st, &original).unwrap();
    let pack = dir.path().join("claims.bpk");
    burnpack::interop::safetensors::safetensors_to_burnpack(&st, &pack).unwrap();
    let reader = Reader::open(&pack).unwrap();
    assert_eq!(
        reader.metadata().get("producer").map(String::as_str),
        Some(burnpack::format::PRODUCER)
    );
}

#[test]
fn errors_of_an_input_name_the_input() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    // A Burn 0.21 checkpoint directory whose model record holds a module twice (`linear`
    // repeated in the JSON text): migrating names that record, not the output.
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let text = zoo_json().to_string();
    let linear = zoo_json()["item"]["linear"].to_string();
    let twice = text.replacen(
        "\"linear\":",
        &format!("\"linear\":{linear},\"linear\":"),
        1,
    );
    std::fs::write(run.join("model-1.json"), twice).unwrap();
    let out = dir.path().join("ckpt.bpk");
    let err = burnpack::interop::burn_record::import_legacy_burn_train(
        &run,
        1,
        burnpack::interop::burn_record::SchedulerKind::Constant,
        &out,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("model-1.json") && !err.contains("ckpt.bpk"),
        "{err}"
    );
    assert!(!out.exists());
    // A tensor safetensors cannot hold (a bool of the pack) names the input pack.
    let pack = dir.path().join("bools.bpk");
    burnpack::Writer::new(vec![burnpack::Entry::resident(
        "mask",
        burn::tensor::DType::Bool(burn::tensor::BoolStore::U32),
        vec![1],
        burn::tensor::Bytes::from_bytes_vec(vec![1, 0, 0, 0]),
    )])
    .write_to_file(&pack)
    .unwrap();
    let st = dir.path().join("bools.safetensors");
    let err = burnpack::interop::safetensors::burnpack_to_safetensors(&pack, &st)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bools.bpk") && err.contains("mask"), "{err}");
    assert!(!st.exists());
    let _ = PytorchError::Invalid {
        path: PathBuf::new(),
        reason: String::new(),
    };
}

/// `_rebuild_tensor_v2(storage(key, numel), 0, shape, stride, False, <hooks>, ...)` where
/// `rest` writes the arguments from the hooks on.
fn tensor_with(p: &mut Pickler, key: &str, shape: &[u64], rest: impl FnOnce(&mut Pickler)) {
    let view = View::whole("_", 0, shape);
    p.global("torch._utils", "_rebuild_tensor_v2").op(b"((");
    p.str("storage").global("torch", "FloatStorage");
    p.str(key).str("cpu").int(4).op(b"tQ");
    p.int(0)
        .tuple_of(&view.shape)
        .tuple_of(&view.stride)
        .op(b"\x89");
    rest(p);
    p.op(b"tR");
}

/// A plain tensor over storage `key` (4 floats).
fn plain(p: &mut Pickler, key: &str) {
    tensor_with(p, key, &[4], |p| {
        p.global("collections", "OrderedDict").op(b")R");
    });
}

/// `{'h': tensor over storage '1'}`: a tensor hidden where a state dict keeps none.
fn hidden(p: &mut Pickler) {
    p.op(b"}").str("h");
    plain(p, "1");
    p.op(b"s");
}

#[test]
fn constructs_the_reader_does_not_use_cannot_hide_a_tensor() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let storages = vec![
        StorageSpec::f32(&[1., 2., 3., 4.]),
        StorageSpec::f32(&[5., 6., 7., 8.]),
    ];
    // Each pickle holds `w` (storage 0) and, somewhere the reader does not read, a tensor of
    // storage 1: every one must be an error, never `w` alone.
    type Build = fn(&mut Pickler);
    let cases: Vec<(&str, Build, &str)> = vec![
        (
            "build-on-dict",
            |p| {
                p.op(b"}(").str("w");
                plain(p, "0");
                p.op(b"u");
                hidden(p);
                p.op(b"b");
            },
            "BUILD state",
        ),
        (
            "build-on-tensor",
            |p| {
                p.op(b"}").str("w");
                plain(p, "0");
                hidden(p);
                p.op(b"bs");
            },
            "BUILD state",
        ),
        (
            "tensor-hooks",
            |p| {
                p.op(b"}").str("w");
                tensor_with(p, "0", &[4], hidden);
                p.op(b"s");
            },
            "hooks",
        ),
        (
            "tensor-metadata",
            |p| {
                p.op(b"}").str("w");
                tensor_with(p, "0", &[4], |p| {
                    p.global("collections", "OrderedDict").op(b")R");
                    hidden(p);
                });
                p.op(b"s");
            },
            "metadata",
        ),
        (
            "parameter-hooks",
            |p| {
                p.op(b"}").str("w");
                p.global("torch._utils", "_rebuild_parameter").op(b"(");
                plain(p, "0");
                p.op(b"\x88");
                hidden(p);
                p.op(b"tRs");
            },
            "parameter's state",
        ),
        (
            "parameter-state",
            |p| {
                p.op(b"}").str("w");
                p.global("torch._utils", "_rebuild_parameter_with_state")
                    .op(b"(");
                plain(p, "0");
                p.op(b"\x88");
                p.global("collections", "OrderedDict").op(b")R");
                hidden(p);
                p.op(b"tRs");
            },
            "parameter's state",
        ),
        (
            "from-type-state",
            |p| {
                p.op(b"}").str("w");
                p.global("torch._tensor", "_rebuild_from_type_v2");
                p.op(b"(").global("torch._utils", "_rebuild_tensor_v2");
                p.global("torch", "Tensor").op(b"((");
                p.str("storage").global("torch", "FloatStorage");
                p.str("0").str("cpu").int(4).op(b"tQ");
                p.int(0).tuple_of(&[4]).tuple_of(&[1]).op(b"\x89");
                p.global("collections", "OrderedDict").op(b")Rt");
                hidden(p);
                p.op(b"tRs");
            },
            "state or extra arguments",
        ),
    ];
    for (name, build, what) in cases {
        let mut p = Pickler::new();
        build(&mut p);
        let path = dir.path().join(format!("{name}.pt"));
        write_zip(&path, &p.finish(), &storages, ZipOptions::default());
        let err = PytorchSource::open(&path).map(|s| s.tensors().len());
        let err = err.expect_err(name).to_string();
        assert!(
            err.contains(&format!("{name}.pt")) && err.contains("tensor '") && err.contains(what),
            "{name}: {err}"
        );
    }
    // Arguments a call of the table does not take.
    let calls: Vec<(&str, Build, &str)> = vec![
        (
            "size-extra",
            |p| {
                p.op(b"}").str("s").global("torch", "Size").op(b"((K\x04t");
                plain(p, "1");
                p.op(b"tRs");
            },
            "torch.Size called with 2 arguments",
        ),
        (
            "set-extra",
            |p| {
                p.op(b"}").str("s").global("builtins", "set").op(b"(]");
                plain(p, "1");
                p.op(b"tRs");
            },
            "set() called with 2 arguments",
        ),
        (
            "codecs-extra",
            |p| {
                p.op(b"}")
                    .str("s")
                    .global("_codecs", "encode")
                    .op(b"(")
                    .str("abc");
                plain(p, "1");
                p.op(b"tRs");
            },
            "_codecs.encode called with other arguments",
        ),
        (
            "pid-sixth",
            |p| {
                p.op(b"}").str("w");
                p.global("torch._utils", "_rebuild_tensor_v2").op(b"((");
                p.str("storage").global("torch", "FloatStorage");
                p.str("0").str("cpu").int(4);
                plain(p, "1");
                p.op(b"tQ").int(0).tuple_of(&[4]).tuple_of(&[1]).op(b"\x89");
                p.global("collections", "OrderedDict").op(b")RtRs");
            },
            "a storage's view that is a tensor",
        ),
        (
            "punning",
            |p| {
                p.op(b"}").str("w");
                plain(p, "0");
                p.op(b"s").str("d");
                p.global("torch._utils", "_rebuild_tensor_v2").op(b"((");
                p.str("storage").global("torch", "DoubleStorage");
                p.str("0").str("cpu").int(2).op(b"tQ");
                p.int(0).tuple_of(&[2]).tuple_of(&[1]).op(b"\x89");
                p.global("collections", "OrderedDict").op(b")RtRs");
            },
            "named as torch.FloatStorage and as torch.DoubleStorage",
        ),
    ];
    for (name, build, what) in calls {
        let mut p = Pickler::new();
        build(&mut p);
        let path = dir.path().join(format!("{name}.pt"));
        write_zip(&path, &p.finish(), &storages, ZipOptions::default());
        let err = PytorchSource::open(&path).map(|s| s.tensors().len());
        let err = err.expect_err(name).to_string();
        assert!(
            err.contains(&format!("{name}.pt")) && err.contains(what),
            "{name}: {err}"
        );
    }
    // Boolean keys are named as Python writes them.
    let mut p = Pickler::new();
    p.op(b"}\x88");
    plain(&mut p, "0");
    p.op(b"s");
    let path = dir.path().join("bool-key.pt");
    write_zip(&path, &p.finish(), &storages, ZipOptions::default());
    assert!(PytorchSource::open(&path).unwrap().tensor("True").is_some());
    // A state dict under a well-known key: what else holds tensors is said.
    let mut p = Pickler::new();
    p.op(b"}(").str("state_dict").op(b"}").str("w");
    plain(&mut p, "0");
    p.op(b"s").str("ema").op(b"}").str("w");
    plain(&mut p, "1");
    p.op(b"su");
    let path = dir.path().join("lightning.pt");
    write_zip(&path, &p.finish(), &storages, ZipOptions::default());
    let source = PytorchSource::open(&path).unwrap();
    assert_eq!(source.key(), Some("state_dict"));
    assert_eq!(source.unread_keys(), ["ema"]);
}

#[test]
fn legacy_torch_files_are_read_whole_and_exactly() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let storages = vec![StorageSpec::f32(&[1., 2., 3., 4.])];
    let object = |view: &[u8]| {
        let mut p = Pickler::new();
        p.op(b"}").str("w");
        p.global("torch._utils", "_rebuild_tensor_v2").op(b"((");
        p.str("storage").global("torch", "FloatStorage");
        p.str("0").str("cpu").int(4).op(view).op(b"tQ");
        p.int(0).tuple_of(&[2]).tuple_of(&[1]).op(b"\x89");
        p.global("collections", "OrderedDict").op(b")RtRs");
        p.finish()
    };
    // A legacy storage view of 1 element at offset 1, viewed as 2: past the view.
    let mut view = Pickler::new();
    view.op(b"(").str("v").int(1).int(1).op(b"t");
    let view = &view.0[2..];
    let path = dir.path().join("view.pth");
    legacy_file(&path, &object(view), &storages);
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("view.pth") && err.contains("past the end"),
        "{err}"
    );
    // The same view as a list: not what torch.save writes.
    let path = dir.path().join("view-list.pth");
    legacy_file(&path, &object(b"]"), &storages);
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(err.contains("a storage's view that is a list"), "{err}");
    // Sound, then with junk after the last storage.
    let path = dir.path().join("sound.pth");
    legacy_file(&path, &object(b""), &storages);
    let source = PytorchSource::open(&path).unwrap();
    assert_eq!(read_f32(&source, "w"), [1., 2.]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"junk");
    std::fs::write(&path, &bytes).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(err.contains("4 bytes after the last storage"), "{err}");
    // A storage listed twice; a system information that is not little-endian.
    let mut out = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    out.extend_from_slice(b"\x80\x02M\xe9\x03.\x80\x02}.");
    out.extend(object(b""));
    out.extend(Pickler::new().op(b"(").str("0").str("0").op(b"l").finish());
    for _ in 0..2 {
        out.extend_from_slice(&4u64.to_le_bytes());
        out.extend_from_slice(&storages[0].bytes);
    }
    let path = dir.path().join("twice.pth");
    std::fs::write(&path, &out).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(err.contains("listed twice"), "{err}");
    let mut out = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    out.extend_from_slice(b"\x80\x02M\xe9\x03.");
    out.extend(
        Pickler::new()
            .op(b"}")
            .str("little_endian")
            .op(b"K\x00s")
            .finish(),
    );
    out.extend(object(b""));
    out.extend(Pickler::new().op(b"(").str("0").op(b"l").finish());
    out.extend_from_slice(&4u64.to_le_bytes());
    out.extend_from_slice(&storages[0].bytes);
    let path = dir.path().join("endian.pth");
    std::fs::write(&path, &out).unwrap();
    let err = PytorchSource::open(&path).unwrap_err().to_string();
    assert!(err.contains("big-endian"), "{err}");
}

#[test]
fn burn_record_maps_that_are_almost_tensors_are_errors() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mpk = |name: &str, record: &serde_json::Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, rmp_serde::to_vec_named(record).unwrap()).unwrap();
        path
    };
    let mut extra = zoo_json();
    extra["item"]["linear"]["bias"]["param"]["extra"] = 1.into();
    let err = LegacySource::open(mpk("extra.mpk", &extra))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("linear.bias") && err.contains("exactly bytes, shape and dtype"),
        "{err}"
    );
    let mut no_dtype = zoo_json();
    no_dtype["item"]["linear"]["bias"]["param"]
        .as_object_mut()
        .unwrap()
        .remove("dtype");
    let err = LegacySource::open(mpk("no-dtype.mpk", &no_dtype))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("linear.bias") && err.contains("without its dtype"),
        "{err}"
    );
    // `bytes` twice (JSON text: serde_json's own maps would keep one).
    let text = zoo_json().to_string();
    let twice = text.replacen("\"shape\":", "\"bytes\":[1,2,3,4],\"shape\":", 1);
    let path = dir.path().join("twice.json");
    std::fs::write(&path, twice).unwrap();
    let err = LegacySource::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("twice.json") && err.contains("exactly bytes"),
        "{err}"
    );
    // A `param` tensor in a map of more than 64 entries is found, not dropped.
    let mut big = zoo_json();
    let mut map = serde_json::Map::new();
    for i in 0..70 {
        map.insert(format!("k{i}"), i.into());
    }
    map.insert(
        "param".into(),
        zoo_json()["item"]["linear"]["bias"]["param"].clone(),
    );
    big["item"]["big"] = map.into();
    let source = LegacySource::open(mpk("big.mpk", &big)).unwrap();
    assert!(source.tensors().iter().any(|t| t.name() == "big.param"));
    let plain = LegacySource::open(mpk("zoo.mpk", &zoo_json())).unwrap();
    assert_eq!(source.tensors().len(), plain.tensors().len() + 1);
}
