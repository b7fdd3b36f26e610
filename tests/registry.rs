//! The container registry (`interop::open_any`) under the inputs an attack through `bpk`
//! found wanting: files cut short, names given twice, shapes past any address, indexes of
//! mixed or unknown shards, JSON that is an index or a record, bytes after a record. Each is an
//! error naming the file (and the tensor), of the right kind, or opens as what it is.

mod common;

use std::path::Path;

use burnpack::interop::open_any;
use burnpack::source::{SourceErrorKind, assert_source_contract};
use common::ours;
use serde_json::json;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A safetensors file of `header` (a JSON object) and `data`, the header padded to 8 bytes.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut header = header.as_bytes().to_vec();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    out
}

/// A JSON record of Burn 0.21 holding `item`.
fn record(item: serde_json::Value) -> Vec<u8> {
    json!({
        "metadata": {"float": "f32", "int": "i64", "format": "burn::record::file::PrettyJsonFileRecorder",
                     "version": "0.21.0", "settings": "x"},
        "item": item
    })
    .to_string()
    .into_bytes()
}

fn param(shape: &[u64], bytes: &[u8]) -> serde_json::Value {
    json!({"id": "abc", "param": {"bytes": bytes, "shape": shape, "dtype": "F32"}})
}

#[test]
fn shapes_past_any_address_are_refused_and_zero_sized_ones_are_empty() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 2^96 elements: the product overflows; 2^62 + 2 elements of 4 bytes wrap to 8 bytes.
    for (name, shape, bytes) in [
        ("overflow.json", vec![1u64 << 32, 1 << 32, 1 << 32], vec![]),
        ("wrap.json", vec![(1u64 << 62) + 2], vec![0u8; 8]),
    ] {
        let path = write(d, name, &record(json!({ "w": param(&shape, &bytes) })));
        let err = open_any(&path).unwrap_err();
        assert_eq!(err.kind(), SourceErrorKind::Tensor, "{name}: {err}");
        assert!(
            err.to_string().contains(name) && err.tensor() == Some("w"),
            "{err}"
        );
    }
    // A zero dimension anywhere makes an empty tensor, but the others must still be
    // addressable: the strides of `[0, 2^32, 2^32, 2^32]` overflow whatever computes them
    // (Burn's shape among them), so it is refused like the shapes above (issue 51's attack).
    for shape in [
        [0u64, 1 << 32, 1 << 32, 1 << 32],
        [1 << 32, 1 << 32, 1 << 32, 0],
    ] {
        let path = write(
            d,
            "huge-empty.json",
            &record(json!({ "w": param(&shape, &[]) })),
        );
        let err = open_any(&path).unwrap_err();
        assert_eq!(err.kind(), SourceErrorKind::Tensor, "{shape:?}: {err}");
        assert!(err.to_string().contains("too large to address"), "{err}");
    }
    for shape in [
        [0u64, 1 << 20, 1 << 20, 1 << 20],
        [1 << 20, 1 << 20, 1 << 20, 0],
    ] {
        let path = write(d, "empty.json", &record(json!({ "w": param(&shape, &[]) })));
        let source = open_any(&path).unwrap();
        let info = source.as_tensor_source().tensor("w").unwrap();
        assert_eq!((info.len(), info.num_elements()), (0, 0), "{shape:?}");
        assert_source_contract(source.as_tensor_source());
    }
}

#[test]
fn files_cut_short_are_truncated_whatever_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A pack of no tensor ends before its data section: cut short, not an empty pack.
    let empty = ours(&[]);
    let path = write(d, "cut.bpk", &empty[..20]);
    let err = open_any(&path).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Truncated, "{err}");
    // A safetensors file cut in its header or its data is still told to be safetensors, and
    // cut (a long header's length could otherwise look like another format's first bytes).
    let metadata = "x".repeat(300);
    let full = safetensors(
        &format!(
            r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},"__metadata__":{{"p":"{metadata}"}}}}"#
        ),
        &[0u8; 8],
    );
    assert!(open_any(write(d, "full.safetensors", &full)).is_ok());
    for cut in [full.len() - 4, full.len() / 2, 12] {
        let path = write(d, "cut.safetensors", &full[..cut]);
        let err = open_any(&path).unwrap_err();
        assert_eq!(
            err.kind(),
            SourceErrorKind::Truncated,
            "cut at {cut}: {err}"
        );
        assert!(
            err.to_string().contains("cut.safetensors: truncated"),
            "{err}"
        );
    }
}

#[test]
fn a_name_given_twice_is_an_error_not_a_choice() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let twice = safetensors(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0u8; 8],
    );
    let err = open_any(write(d, "twice.safetensors", &twice)).unwrap_err();
    assert!(
        err.to_string().contains("'a' is listed twice")
            && err.to_string().contains("twice.safetensors"),
        "{err}"
    );
    // A record whose map gives `item` twice (Burn's reader refuses it; one would be lost).
    let text = String::from_utf8(record(json!({"w": param(&[1], &[0, 0, 128, 63])}))).unwrap();
    let doubled = text.replacen(
        "\"item\":",
        "\"item\":{\"v\":{\"id\":\"x\",\"param\":{\"bytes\":[0,0,128,63],\"shape\":[1],\"dtype\":\"F32\"}}},\"item\":",
        1,
    );
    let err = open_any(write(d, "twice.json", doubled.as_bytes())).unwrap_err();
    assert!(err.to_string().contains("'item' is given twice"), "{err}");
}

#[test]
fn bytes_after_a_record_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy");
    let mut mpk = std::fs::read(data.join("zoo.mpk")).unwrap();
    mpk.extend(b"\xff\xff trailing");
    let err = open_any(write(d, "trail.mpk", &mpk)).unwrap_err();
    assert!(err.to_string().contains("bytes after the record"), "{err}");
    let mut gz = std::fs::read(data.join("zoo.json.gz")).unwrap();
    gz.extend(b"garbage");
    assert!(open_any(write(d, "trail.json.gz", &gz)).is_err());
}

#[test]
fn json_is_an_index_or_a_record_by_its_first_deciding_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy");
    // A record with a module named `weight_map` is a record.
    let zoo = std::fs::read_to_string(data.join("zoo.json")).unwrap();
    let renamed = zoo.replacen("\"linear\"", "\"weight_map\"", 1);
    assert_ne!(renamed, zoo);
    let source = open_any(write(d, "renamed.json", renamed.as_bytes())).unwrap();
    assert_eq!(source.describe().format, "burn-record");
    // So is one that starts with more than 64 bytes of white space.
    let padded = format!("{}{zoo}", " ".repeat(200));
    let source = open_any(write(d, "padded.json", padded.as_bytes())).unwrap();
    assert_eq!(source.describe().format, "burn-record");
    // An index whose `metadata` (first) is long is an index.
    write(
        d,
        "s1.safetensors",
        &safetensors(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &[0u8; 4],
        ),
    );
    let index =
        json!({"metadata": {"x": "y".repeat(70_000)}, "weight_map": {"a": "s1.safetensors"}});
    let source = open_any(write(d, "late.json", index.to_string().as_bytes())).unwrap();
    assert_eq!(source.describe().format, "safetensors");
}

#[test]
fn every_shard_of_an_index_is_told_by_its_content() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "s1.safetensors",
        &safetensors(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &[0u8; 4],
        ),
    );
    let pt = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch/linear__linear.pt");
    std::fs::copy(pt, d.join("p2.pt")).unwrap();
    write(d, "notes.dat", b"hello world");
    let index = |name: &str, map: serde_json::Value| {
        write(d, name, json!({ "weight_map": map }).to_string().as_bytes())
    };
    let err = open_any(index(
        "mixed.json",
        json!({"a": "s1.safetensors", "b": "p2.pt"}),
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("shards of two formats") && err.to_string().contains("p2.pt"),
        "{err}"
    );
    let err = open_any(index(
        "unknown.json",
        json!({"a": "s1.safetensors", "b": "notes.dat"}),
    ))
    .unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::UnknownFormat, "{err}");
    assert!(err.to_string().contains("notes.dat"), "{err}");
    let err = open_any(index(
        "self.json",
        json!({"a": "s1.safetensors", "b": "self.json"}),
    ))
    .unwrap_err();
    assert!(err.to_string().contains("is itself an index"), "{err}");
}

#[test]
fn opened_for_a_verification_files_are_read_not_mapped_and_a_cut_one_is_an_error() {
    use burnpack::interop::{OpenOptions, open_any_with};
    use burnpack::source::CopyReason;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Two tensors of 1 MiB each, so the second lies well past where the file is cut.
    let data: Vec<u8> = (0..2u32 << 18)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let files = [
        write(
            d,
            "w.safetensors",
            &safetensors(
                r#"{"a":{"dtype":"F32","shape":[262144],"data_offsets":[0,1048576]},"b":{"dtype":"F32","shape":[262144],"data_offsets":[1048576,2097152]}}"#,
                &data,
            ),
        ),
        write(
            d,
            "w.gguf",
            &common::gguf::file(
                &[("a", &[1 << 18], 0, 0), ("b", &[1 << 18], 0, 1 << 20)],
                &data,
                &[],
                0,
            ),
        ),
    ];
    for path in files {
        let verify = OpenOptions::new().verify(true);
        let source = open_any_with(&path, &verify).unwrap();
        let tensors = source.as_tensor_source();
        let (a, b) = (&tensors.tensors()[0], &tensors.tensors()[1]);
        assert_eq!(
            tensors.copy_reason(a),
            Some(CopyReason::Buffered),
            "{path:?}"
        );
        assert_eq!(&tensors.read(a).unwrap()[..], &data[..1 << 20], "{path:?}");
        // Cut while open: a mapped read of `b` would fault (SIGBUS) and end this process.
        let whole = std::fs::read(&path).unwrap();
        common::cut(&path, 4096);
        let err = tensors.read(b).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("tensor 'b'"),
            "{err}"
        );
        // Opened to load, the whole file again is mapped, not read.
        drop(source);
        std::fs::write(&path, whole).unwrap();
        let source = open_any_with(&path, &OpenOptions::new()).unwrap();
        let tensors = source.as_tensor_source();
        let reason = tensors.copy_reason(&tensors.tensors()[0]);
        assert_ne!(reason, Some(CopyReason::Buffered), "{path:?}");
    }
}

/// What a file that is not weights at all is, said by its content under any name: a Git LFS
/// pointer, an HTML page; a `.bin` is a bincode record only when its bytes fit one, and one
/// whose bytes fit is one under any name.
#[test]
fn lfs_pointers_html_pages_and_bincode_records_are_told_by_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lfs = b"version https://git-lfs.github.com/spec/v1\n\
                oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
                size 440473133\n";
    for name in ["pytorch_model.bin", "model.safetensors", "model.bpk"] {
        let err = open_any(write(d, name, lfs)).unwrap_err();
        assert_eq!(err.kind(), SourceErrorKind::UnknownFormat, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(name)
                && text.contains("a Git LFS pointer, not the file (420.1 MiB in the repository): run `git lfs pull`")
                && !text.contains("bincode"),
            "{text}"
        );
    }
    let html = b"\n<!DOCTYPE html>\n<html><head><title>404</title></head></html>\n";
    for name in ["pytorch_model.bin", "model.gguf"] {
        let text = open_any(write(d, name, html)).unwrap_err().to_string();
        assert!(
            text.contains("an HTML page, not weights: the download failed?")
                && !text.contains("bincode"),
            "{text}"
        );
    }
    // Random bytes named .bin: not a file bpk reads, not "a bincode record".
    let noise = common::pattern(7, 256);
    let err = open_any(write(d, "weights.bin", &noise)).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::UnknownFormat, "{err}");
    assert!(!err.to_string().contains("bincode"), "{err}");
    // A bincode record of Burn 0.21, under its name and under another.
    let record =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/zoo.bin"))
            .unwrap();
    for name in ["zoo.bin", "weights"] {
        let err = open_any(write(d, name, &record)).unwrap_err();
        assert_eq!(err.kind(), SourceErrorKind::Unsupported, "{name}: {err}");
        assert!(err.to_string().contains("bincode record"), "{err}");
    }
}

/// The line between "cannot read" and "read, but damaged", whatever the format:
/// `SourceErrorKind::Damaged` for what a file's own checks find (a pack's metadata checksum, a
/// `.pt` archive's pickle CRC-32, a gzip stream's CRC-32, a tensor's checksum as it is read),
/// every other kind `is_unreadable`.
#[test]
fn damage_a_file_finds_itself_is_one_kind_for_every_format() {
    use burnpack::source::ReadError;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A pack with a flipped bit in a parameter id (9, one byte): its metadata checksum.
    use burn::tensor::{Bytes, DType};
    let pack = burnpack::Writer::new(vec![
        burnpack::Entry::resident("w", DType::F32, vec![2], Bytes::from_elems(vec![1f32, 2.0]))
            .with_param_id(9),
    ])
    .into_bytes()
    .unwrap()
    .to_vec();
    let at = pack.windows(8).position(|w| w == b"param_id").unwrap() + 8;
    let mut flipped = pack.clone();
    flipped[at] ^= 0x02;
    let err = open_any(write(d, "meta.bpk", &flipped)).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Damaged, "{err}");
    assert!(!err.kind().is_unreadable());
    // A tensor's bytes: found when read, the same kind.
    let source = open_any(write(d, "m.bpk", &pack)).unwrap();
    let tensors = source.as_tensor_source();
    let info = tensors.tensors().iter().find(|t| !t.is_empty()).unwrap();
    let mut bytes = tensors.read(info).unwrap().to_vec();
    bytes[0] ^= 1;
    let err = tensors.check(info, &bytes).unwrap_err();
    assert!(matches!(err, ReadError::Checksum { .. }));
    assert_eq!(err.kind(), SourceErrorKind::Damaged);
    let err = burnpack::source::SourceError::from(err);
    assert_eq!(err.kind(), SourceErrorKind::Damaged);
    assert_eq!(err.tensor(), Some(info.name()));
    // A torch.save archive whose pickle does not match its CRC-32.
    let pt = d.join("crc.pt");
    let storages = [common::torch::StorageSpec::f32(&[1.0, 2.0])];
    common::torch::save(&pt, &storages, &[common::torch::View::whole("w", 0, &[2])]);
    let mut bytes = std::fs::read(&pt).unwrap();
    let at = bytes
        .windows(6)
        .position(|w| w == b"X\x01\x00\x00\x00w")
        .unwrap();
    bytes[at + 5] = b'v';
    std::fs::write(&pt, &bytes).unwrap();
    let err = open_any(&pt).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Damaged, "{err}");
    assert!(err.to_string().contains("CRC-32"), "{err}");
    // Cut short, or of no format: cannot be read.
    let err = open_any(write(d, "cut.bpk", &pack[..pack.len() / 2])).unwrap_err();
    assert!(err.kind().is_unreadable(), "{err}");
}
