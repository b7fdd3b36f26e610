//! What an attack on `bpk` from outside found, each kept as a test: `diff` taking differing
//! infinities and 64-bit integers for equal; a safetensors `__metadata__` of millions of entries
//! read whole; a panic when standard output cannot be written; a failed sharded conversion
//! leaving shards behind; a failed migration replacing a user's checkpoint; `verify --json`
//! printing nothing when a file does not open.
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};

use burn::tensor::{Bytes, DType};
use burnpack::read::Reader;
use burnpack::{Entry, Writer};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

fn bpk() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("bpk").unwrap()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bpk().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A safetensors file of one tensor `a` of `dtype` and `bytes`.
fn one(dir: &Path, name: &str, dtype: Dtype, shape: Vec<usize>, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let view = TensorView::new(dtype, shape, bytes).unwrap();
    safetensors::serialize_to_file([("a", view)], None, &path).unwrap();
    path
}

#[test]
fn diff_never_takes_differing_infinities_or_large_integers_for_equal() {
    let dir = tempfile::tempdir().unwrap();
    let f32s = |name: &str, v: f32| one(dir.path(), name, Dtype::F32, vec![1], &v.to_le_bytes());
    let (plus, minus, unit) = (
        f32s("plus.safetensors", f32::INFINITY),
        f32s("minus.safetensors", f32::NEG_INFINITY),
        f32s("unit.safetensors", 1.0),
    );
    for (a, b) in [
        (&plus, &minus),
        (&unit, &plus),
        (&plus, &unit),
        (&minus, &unit),
    ] {
        let (code, out, err) = run(&["diff", s(a), s(b)]);
        assert_eq!(code, 1, "{} vs {}: {out}{err}", a.display(), b.display());
        assert!(!out.contains("within the tolerance"), "{out}");
        // Not even with a tolerance.
        let (code, out, _) = run(&["diff", s(a), s(b), "--atol", "1", "--rtol", "1"]);
        assert_eq!(code, 1, "{out}");
    }
    let (code, out, _) = run(&["diff", s(&plus), s(&plus)]);
    assert_eq!(code, 0, "{out}");
    // 64-bit integers an f64 cannot tell apart.
    let i64s = |name: &str, v: i64| one(dir.path(), name, Dtype::I64, vec![1], &v.to_le_bytes());
    let (x, y) = (
        i64s("x.safetensors", (1 << 62) + 1),
        i64s("y.safetensors", 1 << 62),
    );
    let (code, out, err) = run(&["diff", s(&x), s(&y)]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("max abs 1e0"), "{out}");
    let u64s = |name: &str, v: u64| one(dir.path(), name, Dtype::U64, vec![1], &v.to_le_bytes());
    let (x, y) = (
        u64s("ux.safetensors", (1 << 63) + 1),
        u64s("uy.safetensors", 1 << 63),
    );
    let (code, out, err) = run(&["diff", s(&x), s(&y)]);
    assert_eq!(code, 1, "{out}{err}");
}

#[test]
fn a_safetensors_metadata_of_more_entries_than_the_limit_is_refused_before_it_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flood.safetensors");
    let mut metadata = std::collections::HashMap::new();
    for i in 0..100_001 {
        metadata.insert(format!("k{i}"), String::new());
    }
    let a = [0u8; 4];
    let view = TensorView::new(Dtype::F32, vec![1], &a).unwrap();
    safetensors::serialize_to_file([("a", view)], Some(metadata), &path).unwrap();
    for command in ["inspect", "verify", "convert"] {
        let mut args = vec![command, s(&path)];
        let out = dir.path().join("out.bpk");
        if command == "convert" {
            args.push(s(&out));
        }
        let (code, stdout, err) = run(&args);
        assert_eq!(code, 3, "{command}: {stdout}{err}");
        assert!(
            err.contains("__metadata__ has more than 100000 entries") && err.contains("flood"),
            "{command}: {err}"
        );
        assert!(!out.exists());
    }
    // At the limit, it reads.
    let mut metadata = std::collections::HashMap::new();
    for i in 0..100_000 {
        metadata.insert(format!("k{i}"), String::new());
    }
    let view = TensorView::new(Dtype::F32, vec![1], &a).unwrap();
    safetensors::serialize_to_file([("a", view)], Some(metadata), &path).unwrap();
    let (code, out, err) = run(&["verify", s(&path)]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A pack of two f32 tensors, `a` then `b`, the second's bytes damaged after its checksum.
fn damaged_pack(dir: &Path) -> PathBuf {
    let path = dir.join("damaged.bpk");
    let entry = |name: &str| {
        Entry::resident(
            name,
            DType::F32,
            vec![256],
            Bytes::from_elems(vec![1.0f32; 256]),
        )
    };
    Writer::new(vec![entry("a"), entry("b")])
        .write_to_file(&path)
        .unwrap();
    let offset = Reader::open(&path).unwrap().tensor("b").unwrap().offset();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[usize::try_from(offset).unwrap() + 3] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_failed_sharded_conversion_leaves_no_shard() {
    let dir = tempfile::tempdir().unwrap();
    let input = damaged_pack(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let target = out.join("model.safetensors");
    let (code, stdout, err) = run(&["convert", s(&input), s(&target), "--shard-size", "1000"]);
    assert_eq!(code, 1, "{stdout}{err}");
    // The line names the input, where the damage is, first.
    assert!(
        err.starts_with(&format!("bpk: {}: tensor 'b'", input.display())),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn standard_output_that_cannot_be_written_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = one(dir.path(), "one.safetensors", Dtype::F32, vec![1], &[0; 4]);
    for args in [
        vec!["inspect", s(&path)],
        vec!["verify", s(&path)],
        vec!["verify", "--json", s(&path)],
        vec!["diff", s(&path), s(&path)],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"))
            .args(&args)
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(
            err.contains("standard output") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_migration_never_replaces_a_checkpoint_already_there() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/train-adam");
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("ckpts");
    std::fs::create_dir(&new).unwrap();
    let mine = new.join("ckpt-00000000000000000001.bpk");
    std::fs::write(&mine, b"precious").unwrap();
    let (code, out, err) = run(&["migrate", s(&old), s(&new), "--scheduler", "exponential"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&mine).unwrap(), b"precious");
    let left: Vec<_> = std::fs::read_dir(&new).unwrap().collect();
    assert_eq!(left.len(), 1);
    assert!(out.is_empty(), "{out}");
}

#[test]
fn verify_json_reports_a_file_that_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.safetensors");
    let path = one(dir.path(), "one.safetensors", Dtype::F32, vec![4], &[0; 16]);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let (code, out, err) = run(&["verify", "--json", s(&cut)]);
    assert_eq!(code, 3, "{out}{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(json["exit_code"], 3);
    assert!(
        json["problems"][0]
            .as_str()
            .unwrap()
            .contains("cut.safetensors")
    );
    // A damaged pack: the report says how many checksums matched, not "all".
    let damaged = damaged_pack(dir.path());
    let (code, out, _) = run(&["verify", "--json", s(&damaged)]);
    assert_eq!(code, 1, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["ok"], false);
    assert!(!json["checked"].as_str().unwrap().contains("all"), "{out}");
}
