//! Hostile files through the real `bpk` binary (issue 49, point 2): names that print wider
//! than a format width can pad, GGUF metadata arrays whose text would be many times the file,
//! conversions that hold the whole model or write what `bpk` cannot read or what means
//! something else, and errors that name the wrong file. Memory is bounded with a limit on the
//! child's data segment (`RLIMIT_DATA`: the heap and private mappings, not the mapped input).
#![cfg(feature = "cli")]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use burn::tensor::{Bytes, DType};
use burnpack::read::Reader;
use burnpack::source::TensorSource;
use burnpack::{Entry, Writer};
use common::gguf::{file, key, string};

/// Runs `bpk args`, with its data segment limited to `data_limit` bytes when given and
/// `RAYON_NUM_THREADS` set when `threads` is: (exit code, stdout, stderr). A child killed
/// for want of memory has no exit code: -1, with the signal in stderr.
fn bpk(args: &[&str], data_limit: Option<u64>, threads: Option<usize>) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"));
    command.args(args);
    if let Some(threads) = threads {
        command.env("RAYON_NUM_THREADS", threads.to_string());
    }
    #[cfg(target_os = "linux")]
    if let Some(limit) = data_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: only `setrlimit` runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = data_limit;
    let out = command.output().unwrap();
    let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code().is_none() {
        err.push_str(&format!(" [killed: {:?}]", out.status));
    }
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A name of 14,000 control characters: 70,000 characters once escaped (`\u{1}`), past
/// `u16::MAX`, the widest a format width pads.
fn hostile_name() -> String {
    "\u{1}".repeat(14_000)
}

/// `bpk inspect` of a file whose tensor name prints wider than 65,535 characters, in three
/// formats: no panic, every line bounded, the name cut with a marker; `--json` has it whole.
#[test]
fn names_wider_than_a_format_width_are_cut_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let name = hostile_name();
    let data = 1.0f32.to_le_bytes();
    // safetensors, by the safetensors crate.
    let st = dir.path().join("wide.safetensors");
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &data).unwrap();
    safetensors::serialize_to_file([(name.as_str(), view)], None, &st).unwrap();
    // A pack, with a metadata key as wide.
    let pack = dir.path().join("wide.bpk");
    Writer::new(vec![Entry::resident(
        name.clone(),
        DType::F32,
        vec![1],
        Bytes::from_bytes_vec(data.to_vec()),
    )])
    .metadata(name.clone(), "v")
    .write_to_file(&pack)
    .unwrap();
    // GGUF, with a metadata key as wide.
    let gguf = dir.path().join("wide.gguf");
    let kv = key(&name, 8, &string("llama"));
    std::fs::write(&gguf, file(&[(name.as_str(), &[1], 0, 0)], &data, &kv, 1)).unwrap();
    for path in [&st, &pack, &gguf] {
        let (code, out, err) = bpk(&["inspect", s(path)], None, None);
        assert_eq!(code, 0, "{}: {err}", path.display());
        assert!(!err.contains("panicked"), "{err}");
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(
            widest < 400,
            "{}: a line of {widest} characters",
            path.display()
        );
        assert!(out.contains("... (+"), "{out}");
        assert!(!out.contains('\u{1}'), "control characters printed raw");
        let (code, out, _) = bpk(&["inspect", s(path), "--json"], None, None);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["tensors"][0]["name"], name.as_str());
    }
}

/// A GGUF v3 file (sparse on disk) whose one metadata entry, `big`, is a u8 array of `items`
/// zeros, with one f32 tensor `w` = [1.0].
fn gguf_with_array(path: &Path, items: u64) {
    let mut head = b"GGUF".to_vec();
    head.extend(3u32.to_le_bytes());
    head.extend(1u64.to_le_bytes()); // tensors
    head.extend(1u64.to_le_bytes()); // metadata entries
    head.extend(3u64.to_le_bytes());
    head.extend(b"big");
    head.extend(9u32.to_le_bytes()); // array
    head.extend(0u32.to_le_bytes()); // of u8
    head.extend(items.to_le_bytes());
    let mut tail = 1u64.to_le_bytes().to_vec();
    tail.extend(b"w");
    tail.extend(1u32.to_le_bytes());
    tail.extend(1u64.to_le_bytes());
    tail.extend(0u32.to_le_bytes()); // f32
    tail.extend(0u64.to_le_bytes());
    let end = head.len() as u64 + items + tail.len() as u64;
    tail.resize(tail.len() + (end.next_multiple_of(32) - end) as usize, 0);
    tail.extend(1.0f32.to_le_bytes());
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&head).unwrap();
    f.seek(SeekFrom::Current(items as i64)).unwrap(); // the zeros: a hole
    f.write_all(&tail).unwrap();
}

/// The data segment a `bpk` command gets in the memory tests: far below what a string per
/// array item took (about 60 bytes per item: 1.2 GB for 20 M items).
const DATA_LIMIT: u64 = 400 << 20;

/// A GGUF metadata array of 20 M items (20 MB in the file) goes through every command under
/// a data limit of 400 MiB (a string per item took 1.2 GB), printed abridged with its length
/// and a hash; a conversion keeps it whole and the pack verifies.
#[cfg(target_os = "linux")]
#[test]
fn long_gguf_arrays_are_bounded_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let items = 20_000_000u64;
    let gguf = dir.path().join("array.gguf");
    gguf_with_array(&gguf, items);
    let limit = Some(DATA_LIMIT);
    for args in [
        vec!["inspect", s(&gguf)],
        vec!["inspect", s(&gguf), "--json"],
        vec!["verify", s(&gguf)],
    ] {
        let (code, out, err) = bpk(&args, limit, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.len() < 8 << 10,
            "{args:?}: {} bytes of output",
            out.len()
        );
        if args[0] == "inspect" {
            assert!(out.contains("20000000 items, xxh3 "), "{out}");
        }
    }
    let pack = dir.path().join("array.bpk");
    let (code, _, err) = bpk(&["convert", s(&gguf), s(&pack)], limit, None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = bpk(&["verify", s(&pack)], limit, None);
    assert_eq!(code, 0, "{out}{err}");
    let reader = Reader::open(&pack).unwrap();
    let text = &reader.metadata()["big"];
    assert_eq!(text.len() as u64, 3 * items - 2 + 2); // "[0, 0, ..., 0]"
    let (code, out, err) = bpk(&["diff", s(&gguf), s(&pack)], limit, None);
    assert!(code == 0 || code == 1, "{out}{err}");
    assert!(out.len() < 8 << 10, "diff: {} bytes of output", out.len());
}

/// A GGUF file of `count` Q8_0 tensors of `elements` values each (`blk.N.weight`), with
/// `kv` (`kv_count` encoded metadata entries).
fn q8_gguf(count: usize, elements: usize, kv: &[u8], kv_count: u64) -> Vec<u8> {
    let blocks = elements / 32;
    let mut tensor = Vec::with_capacity(blocks * 34);
    for b in 0..blocks {
        tensor.extend(0x2c00u16.to_le_bytes()); // scale 1/16
        tensor.extend((0..32).map(|i| ((b * 7 + i * 13) % 251) as u8));
    }
    let stride = tensor.len().next_multiple_of(32);
    let names: Vec<String> = (0..count).map(|i| format!("blk.{i}.weight")).collect();
    let dims = [elements as u64];
    let table: Vec<(&str, &[u64], u32, u64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), &dims[..], 8, (i * stride) as u64))
        .collect();
    let mut data = Vec::with_capacity(count * stride);
    for _ in 0..count {
        data.extend(&tensor);
        data.resize(data.len().next_multiple_of(32), 0);
    }
    file(&table, &data, kv, kv_count)
}

/// `convert` streams: 32 Q8_0 tensors that dequantize to 128 MiB convert to a pack and to
/// safetensors with a data segment of 80 MiB and two threads (holding every dequantized
/// tensor before writing took more than 128 MiB), and what they wrote holds the values.
#[cfg(target_os = "linux")]
#[test]
fn convert_streams_tensor_by_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("q8.gguf");
    std::fs::write(&gguf, q8_gguf(32, 1 << 20, &[], 0)).unwrap();
    let source = burnpack::interop::gguf::GgufSource::open(&gguf).unwrap();
    let pack = dir.path().join("q8.bpk");
    let st = dir.path().join("q8.safetensors");
    for out in [&pack, &st] {
        let (code, _, err) = bpk(&["convert", s(&gguf), s(out)], Some(80 << 20), Some(2));
        assert_eq!(code, 0, "{}: {err}", out.display());
    }
    let reader = Reader::open(&pack).unwrap();
    let bytes = std::fs::read(&st).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for name in ["blk.0.weight", "blk.31.weight"] {
        let expected = source.read(source.tensor(name).unwrap()).unwrap();
        let info = reader.tensor(name).unwrap();
        assert_eq!(&reader.read(info).unwrap()[..], &expected[..], "{name}");
        assert_eq!(st.tensor(name).unwrap().data(), &expected[..], "{name}");
    }
}

/// A GGUF file with exactly the limit of 100,000 metadata entries (the reader takes it): a
/// pack of it would hold 100,001 with its `producer`, which no reader opens, so `convert`
/// refuses it before writing, naming the input; and the reader names the count it refuses as
/// the metadata's, not a "tensor count".
#[test]
fn a_conversion_over_the_readers_limits_is_refused_naming_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut kv = Vec::new();
    for i in 0..100_000u32 {
        kv.extend(key(&format!("k{i}"), 4, &i.to_le_bytes()));
    }
    let gguf = dir.path().join("many.gguf");
    std::fs::write(&gguf, q8_gguf(1, 32, &kv, 100_000)).unwrap();
    assert_eq!(bpk(&["inspect", s(&gguf)], None, None).0, 0);
    let out = dir.path().join("many.bpk");
    let (code, _, err) = bpk(&["convert", s(&gguf), s(&out)], None, None);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(s(&gguf)) && err.contains("100001 metadata entries"),
        "{err}"
    );
    assert!(!out.exists());
    // The output's own fault (no such folder) names the output, not the input.
    let good = dir.path().join("good.gguf");
    std::fs::write(&good, q8_gguf(1, 32, &[], 0)).unwrap();
    let nowhere = dir.path().join("no-such-dir").join("out.bpk");
    let (code, _, err) = bpk(&["convert", s(&good), s(&nowhere)], None, None);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(s(&nowhere)) && !err.contains(s(&good)),
        "{err}"
    );
    // A safetensors header over what its readers take (an array of 5.2 M f64 items, 109 MB
    // as text): refused before writing, naming the input and the key.
    let mut array = 12u32.to_le_bytes().to_vec();
    let items = 5_200_000u64;
    array.extend(items.to_le_bytes());
    array.extend(
        std::iter::repeat_n(0.123_456_789_012_345_68f64.to_le_bytes(), items as usize).flatten(),
    );
    let huge = dir.path().join("huge.gguf");
    std::fs::write(&huge, q8_gguf(1, 32, &key("big.array", 9, &array), 1)).unwrap();
    let out = dir.path().join("huge.safetensors");
    let (code, _, err) = bpk(&["convert", s(&huge), s(&out)], None, None);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(s(&huge)) && err.contains("'big.array'") && err.contains("header"),
        "{err}"
    );
    assert!(!out.exists());
    // The reader's word for a metadata map over the limit.
    let pack = Writer::new(vec![])
        .metadata("a", "1")
        .metadata("b", "2")
        .metadata("c", "3")
        .into_bytes()
        .unwrap();
    let limits = burnpack::Limits::default().with_max_tensor_count(2);
    let err = burnpack::format::Layout::from_bytes(&pack, &limits).unwrap_err();
    assert!(
        err.to_string().starts_with("metadata entry count is 4"),
        "{err}"
    );
}

/// A tensor named `__metadata__` cannot go to safetensors (the header would not parse): the
/// conversion is refused by name, naming the input, before anything is written.
#[test]
fn a_tensor_named_like_safetensors_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("meta.gguf");
    let data = [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    let table: [(&str, &[u64], u32, u64); 2] = [("__metadata__", &[1], 0, 0), ("w", &[1], 0, 32)];
    let mut padded = data[..4].to_vec();
    padded.resize(32, 0);
    padded.extend(&data[4..]);
    std::fs::write(&gguf, file(&table, &padded, &[], 0)).unwrap();
    let out = dir.path().join("meta.safetensors");
    let (code, _, err) = bpk(&["convert", s(&gguf), s(&out)], None, None);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(s(&gguf)) && err.contains("'__metadata__'"),
        "{err}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "scratch left"
    );
    // A pack has no such name of its own: that conversion goes through.
    let pack = dir.path().join("meta.bpk");
    assert_eq!(bpk(&["convert", s(&gguf), s(&pack)], None, None).0, 0);
}

/// Metadata keys of another format never take a meaning in a pack: a GGUF file whose keys
/// say `burnpack.kind = checkpoint`, `burnpack.incremental`, `burnpack.refs`,
/// `burnpack.namespace` and `producer` converts to a plain pack that keeps them under `gguf.`
/// (its `producer` this crate's); safetensors' `__metadata__` likewise under `safetensors.`;
/// a key whose prefixed form is taken too is refused by name.
#[test]
fn foreign_metadata_never_takes_a_reserved_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let reserved = [
        ("burnpack.kind", "checkpoint"),
        ("burnpack.incremental", "1"),
        ("burnpack.refs", "w data-1.bpk 0 0 0 0 0"),
        ("burnpack.namespace", "model."),
        ("producer", "burnpack 0.1.0"),
    ];
    let mut kv = key("general.architecture", 8, &string("llama"));
    for (k, v) in reserved {
        kv.extend(key(k, 8, &string(v)));
    }
    let gguf = dir.path().join("sly.gguf");
    std::fs::write(&gguf, q8_gguf(1, 32, &kv, 6)).unwrap();
    let pack = dir.path().join("sly.bpk");
    let (code, _, err) = bpk(&["convert", s(&gguf), s(&pack)], None, None);
    assert_eq!(code, 0, "{err}");
    let reader = Reader::open(&pack).unwrap();
    let metadata = reader.metadata();
    for (k, v) in &reserved[..4] {
        assert!(!metadata.contains_key(*k), "{k} kept: {metadata:?}");
        assert_eq!(metadata[&format!("gguf.{k}")], *v);
    }
    assert_eq!(metadata["general.architecture"], "llama");
    assert_eq!(metadata["producer"], burnpack::format::PRODUCER);
    assert_eq!(reader.namespace(), None);
    let (code, out, err) = bpk(&["inspect", s(&pack)], None, None);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("incremental checkpoint"), "{out}");
    assert_eq!(bpk(&["verify", s(&pack)], None, None).0, 0);
    // safetensors `__metadata__`.
    let st = dir.path().join("sly.safetensors");
    let data = 1.0f32.to_le_bytes();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &data).unwrap();
    let meta = std::collections::HashMap::from([
        ("burnpack.namespace".to_string(), "model.".to_string()),
        ("format".to_string(), "pt".to_string()),
    ]);
    safetensors::serialize_to_file([("w", view)], Some(meta), &st).unwrap();
    let from_st = dir.path().join("from-st.bpk");
    let (code, _, err) = bpk(&["convert", s(&st), s(&from_st)], None, None);
    assert_eq!(code, 0, "{err}");
    let reader = Reader::open(&from_st).unwrap();
    assert_eq!(
        reader.metadata()["safetensors.burnpack.namespace"],
        "model."
    );
    assert_eq!(reader.metadata()["format"], "pt");
    assert_eq!(reader.namespace(), None);
    // The prefixed name taken too: refused, naming both keys and the input.
    let mut kv = key("burnpack.kind", 8, &string("checkpoint"));
    kv.extend(key("gguf.burnpack.kind", 8, &string("x")));
    let clash = dir.path().join("clash.gguf");
    std::fs::write(&clash, q8_gguf(1, 32, &kv, 2)).unwrap();
    let out = dir.path().join("clash.bpk");
    let (code, _, err) = bpk(&["convert", s(&clash), s(&out)], None, None);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(s(&clash))
            && err.contains("'burnpack.kind'")
            && err.contains("'gguf.burnpack.kind'"),
        "{err}"
    );
    assert!(!out.exists());
}
