//! A mapped record's zero-copy windows are read in when they are read (the kernel's readahead
//! through the mapping), and a file cut meanwhile is an error naming the tensor, not a
//! `SIGBUS`.

use serde::Serialize;

use super::LegacySource;
use crate::platform::ColdFile;
use crate::source::TensorSource;

/// Bytes serialized as `MessagePack` `bin` (what `serde_bytes` does).
struct Bin(Vec<u8>);

impl Serialize for Bin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

#[derive(Serialize)]
struct Data {
    bytes: Bin,
    shape: Vec<usize>,
    dtype: &'static str,
}

#[derive(Serialize)]
struct Param {
    id: String,
    param: Data,
}

#[derive(Serialize)]
struct Item {
    b: Param,
    a: Param,
}

#[derive(Serialize)]
struct Record {
    metadata: std::collections::BTreeMap<&'static str, &'static str>,
    item: Item,
}

/// A `NamedMpkFileRecorder` record of two f32 tensors (their bits counting up), `b` of
/// `3 * len` values then `a` of `len`, `a`'s bytes shifted by `pad` (the length of its id).
fn record(len: usize, pad: usize) -> Vec<u8> {
    let param = |id: String, first: u32, len: usize| Param {
        id,
        param: Data {
            bytes: Bin((0..len)
                .flat_map(|i| (first + u32::try_from(i).unwrap()).to_le_bytes())
                .collect()),
            shape: vec![len],
            dtype: "F32",
        },
    };
    let metadata = [
        ("float", "f32"),
        ("int", "i32"),
        (
            "format",
            "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
        ),
        ("version", "0.21.0"),
        ("settings", "FullPrecisionSettings"),
    ]
    .into_iter()
    .collect();
    let item = Item {
        b: param("b".into(), 1 << 30, 3 * len),
        a: param("a".repeat(pad + 1), 0, len),
    };
    rmp_serde::to_vec_named(&Record { metadata, item }).unwrap()
}

/// `record(len, pad)` at `path` for the first `pad` that leaves `a` aligned (a window of the
/// mapping) and `b` not (a copy), the file dropped from the page cache before it is opened.
fn cold_record(path: &std::path::Path, len: usize) -> (LegacySource, ColdFile) {
    (0..4)
        .find_map(|pad| {
            std::fs::write(path, record(len, pad)).unwrap();
            // Cold before it is opened: a page the walk maps while cached stays cached.
            let cold = ColdFile::new(path);
            let source = LegacySource::open(path).unwrap();
            let a = source.tensor("a").unwrap();
            let b = source.tensor("b").unwrap();
            let shown = source.copy_reason(a).is_none() && source.copy_reason(b).is_some();
            shown.then_some((source, cold))
        })
        .expect("one of four shifts aligns the first tensor and not the second")
}

#[test]
fn a_window_of_a_cold_record_is_in_memory_when_its_read_returns() {
    let len = 2 << 20; // 8 MiB of f32 in `a`
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.mpk");
    let (source, cold) = cold_record(&path, len);
    let a = source.tensor("a").unwrap().clone();
    // Pages 1 MiB inside (the walk read, and dropped, the page of the tensor's head).
    let (first, last) = (a.offset() + (1 << 20), a.offset() + a.len() - (1 << 20));
    if cold.cached(first) || cold.cached(last) || !cold.populates() {
        return; // tmpfs (its pages cannot be dropped), or a kernel before 5.14: nothing to show
    }
    let bytes = source.read(&a).unwrap();
    let at = [first, first.midpoint(last), last];
    assert!(at.iter().all(|&at| cold.cached(at)), "read in by the read");
    drop(source);
    let values: &[u32] = bytemuck::cast_slice(&bytes);
    assert_eq!((values[0], values[len - 1] as usize), (0, len - 1));
}

#[test]
fn a_record_cut_while_open_is_an_error_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.mpk");
    let (source, cold) = cold_record(&path, 1 << 20);
    if !cold.populates() {
        return; // a kernel before 5.14: a read through the mapping would fault
    }
    let a = source.tensor("a").unwrap().clone();
    // Cut in the middle of `a`, the last tensor (another process rewriting the file).
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(a.offset() + a.len() / 2).unwrap();
    let err = source.read(&a).unwrap_err().to_string();
    assert!(
        err.contains("model.mpk") && err.contains("'a'") && err.contains("cut"),
        "{err}"
    );
}
