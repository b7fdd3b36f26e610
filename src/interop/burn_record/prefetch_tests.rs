//! A mapped record's prefetch: the zero-copy tensors are read ahead through the mapping, and
//! stay readable with the source gone; the copied ones are left to the load's own reads.

use serde::Serialize;

use super::LegacySource;
use crate::platform::ColdFile;
use crate::read::TensorSource;

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

#[test]
fn a_mapped_records_aligned_tensors_are_read_ahead_through_the_mapping() {
    let len = 2 << 20; // 8 MiB of f32 per tensor
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.mpk");
    // The id's length moves the first tensor's bytes until they are aligned for f32.
    let (source, cold) = (0..4)
        .find_map(|pad| {
            std::fs::write(&path, record(len, pad)).unwrap();
            // Cold before it is opened: a page the walk maps while cached stays cached.
            let cold = ColdFile::new(&path);
            let source = LegacySource::open(&path).unwrap();
            let a = source.tensor("a").unwrap();
            let b = source.tensor("b").unwrap();
            let shown = source.copy_reason(a).is_none() && source.copy_reason(b).is_some();
            shown.then_some((source, cold))
        })
        .expect("one of four shifts aligns the first tensor and not the second");
    assert!(source.wants_prefetch(), "a mapped record reads ahead");
    let a = source.tensor("a").unwrap().clone();
    let b = source.tensor("b").unwrap().clone();
    // Pages 1 MiB inside each tensor (the walk read, and dropped, the pages of their heads).
    let (first, last) = (a.offset() + (1 << 20), a.offset() + a.len() - (1 << 20));
    let copied = b.offset() + (1 << 20);
    if [first, last, copied].iter().any(|&at| cold.cached(at)) {
        return; // tmpfs: its pages cannot be dropped, nothing to show
    }
    let all: Vec<_> = source.tensors().iter().collect();
    source.prefetch(&all).unwrap();
    let bytes = source.read(&a).unwrap();
    // The hints go on after the source is dropped (where the kernel populates mappings; where
    // it does not, they stop with the source, kept then).
    let _held = if cold.populates() {
        drop(source);
        None
    } else {
        Some(source)
    };
    assert!(cold.wait_cached(&[first, first.midpoint(last), last]));
    // The unaligned tensor, before `a` in the file, is not asked of the disk: the load's
    // positional reads copy it, with their own readahead. (Checked where the page lies
    // farther before `a` than the kernel's read-around of `a`'s first fault.)
    if cold.beyond_readahead(a.offset() - copied) {
        assert!(!cold.cached(copied), "the copied tensor was read ahead too");
    }
    // The window outlives the source, with the values written.
    let values: &[u32] = bytemuck::cast_slice(&bytes);
    assert_eq!((values[0], values[len - 1] as usize), (0, len - 1));
}
